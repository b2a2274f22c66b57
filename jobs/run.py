"""``pcqr run SPEC.yaml``: run any job from a YAML file whose keys are the command's option names.

    job: answer
    private: data/private
    state: st
    epsilon: 4
    ...

Keys are option names without the leading dashes (``queries-max`` or
``queries_max``); each value has the option's type (a number for a number, a
flag is ``true``/``false``); only a repeatable option takes a list. Relative
paths (private, public, queries, truth, state, log, out) are relative to the
spec file's folder. ``cluster`` and ``ledger`` are the operator's: they come from
the command line (``--cluster``, ``--set ledger=PATH``), never from the spec file.
``--set KEY=VALUE`` overrides a key from the command line.
"""
from __future__ import annotations

import os
from typing import Any

import click

from pcqr.pipeline.budget.location import ledger_setting
from pcqr.pipeline.data.job_spec import Kind, SpecOption, apply_overrides, command_line, load_spec
from pcqr.pipeline.errors import PcqrError


def _jobs() -> dict[str, click.Command]:
    from pcqr.jobs import answer, demo, generate, learn, plan, release, sanitize, train

    return {m.command.name: m.command
            for m in (generate, train, answer, demo, plan, learn, release, sanitize) if m.command.name}


#: click's value types as a spec's kinds (a type not listed, a path or a string, is text).
KINDS: tuple[tuple[type[click.ParamType], Kind], ...] = (
    (click.types.IntParamType, "int"), (click.types.FloatParamType, "float"), (click.Choice, "choice"))


def spec_options(command: click.Command) -> dict[str, SpecOption]:
    """The command's options by name (without the dashes), as a spec key may give them."""
    options = {}
    for param in command.params:
        if isinstance(param, click.Option):
            kind: Kind = next((k for cls, k in KINDS if isinstance(param.type, cls)), "text")
            choices = tuple(getattr(param.type, "choices", ()))
            options.update({name.lstrip("-"): SpecOption(kind, param.is_flag, param.multiple, choices)
                            for name in param.opts})
    return options


def spec_arguments(spec: dict[str, Any], command: click.Command, source: str,
                   base: str | None = None, operator: frozenset[str] = frozenset()) -> list[str]:
    """The command's argument list for a spec's keys (pcqr.pipeline.data.job_spec.command_line)."""
    return command_line(spec, spec_options(command), command.name, source, base, operator)


@click.command("run")
@click.argument("spec_path", metavar="SPEC.yaml", type=click.Path(dir_okay=False))
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a key of the spec.")
@click.option("--cluster", default=None, help="cluster.yaml (overrides the spec's 'cluster' key).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object (last line).")
def command(spec_path: str, overrides: tuple[str, ...], cluster: str | None, as_json: bool) -> None:
    """Run the job a YAML spec describes (`job:` plus the command's options).

    SPEC.yaml: the job's options; its files are public or private as that command's --help says
    (private, state: private; queries, log, public, out: public)."""
    job, args = job_arguments(spec_path, overrides, cluster, as_json)
    job.main(args=args, prog_name=f"pcqr {job.name}", standalone_mode=False)


def job_arguments(
    spec_path: str, overrides: tuple[str, ...], cluster: str | None, as_json: bool
) -> tuple[click.Command, list[str]]:
    """The job command a spec names and its argument list, every key checked (nothing runs)."""
    spec = load_spec(spec_path)
    operator = apply_overrides(spec, overrides)
    if cluster is not None:
        spec["cluster"] = cluster
        operator.add("cluster")
    if as_json:
        spec["json"] = True
    job = spec.pop("job", None)
    jobs = _jobs()
    if job not in jobs:
        raise PcqrError(f"{spec_path}: key 'job' must be one of {', '.join(sorted(jobs))}, got {job!r}")
    if cluster is not None and not any("--cluster" in p.opts for p in jobs[job].params if isinstance(p, click.Option)):
        raise PcqrError(f"{spec_path}: job {job!r} does not use a cluster; run it with pcqr run")
    if any("--ledger" in p.opts for p in jobs[job].params) and isinstance(spec.get("ledger"), (str, type(None))):
        ledger_setting(spec.get("ledger"))  # an empty $PCQR_LEDGER: refused before pcqr submit contacts anything
    base = os.path.dirname(os.path.abspath(spec_path))
    return jobs[job], spec_arguments(spec, jobs[job], spec_path, base, frozenset(operator))
