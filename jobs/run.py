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

from pcqr.pipeline.budget.ledger import ledger_setting
from pcqr.pipeline.data.user_files import CONFIG_LIMIT, parse_yaml, read_yaml
from pcqr.pipeline.errors import PcqrError


def _jobs() -> dict[str, click.Command]:
    from pcqr.jobs import answer, demo, generate, learn, plan, release, sanitize, train

    return {m.command.name: m.command
            for m in (generate, train, answer, demo, plan, learn, release, sanitize) if m.command.name}


#: Keys that name a file or directory: a relative value is relative to the spec file's folder.
PATH_KEYS = frozenset({"private", "public", "queries", "truth", "state", "log", "out", "into", "new-log", "model"})
#: Keys only the operator sets (on the command line: --cluster, --set): a spec may come from someone
#: else, and these choose which code may run (the cluster's learner allow-list, a `spec` backend's
#: class) and which budget is charged.
OPERATOR_KEYS = frozenset({"cluster", "ledger"})


def spec_arguments(spec: dict[str, Any], command: click.Command, source: str,
                   base: str | None = None, operator: frozenset[str] = frozenset()) -> list[str]:
    """Turn a spec's keys into the command's argument list, refusing unknown keys and values whose
    type is not the option's (a list only for a repeatable option).

    ``base``: the spec file's folder, against which relative paths resolve (None: leave them).
    ``operator``: keys that came from the operator's command line, allowed among OPERATOR_KEYS.
    """
    options = {
        name.lstrip("-"): param
        for param in command.params
        if isinstance(param, click.Option)
        for name in param.opts
    }
    args: list[str] = []
    names: dict[str, Any] = {}
    for key, value in spec.items():
        name = str(key).replace("_", "-")
        if name in names:
            raise PcqrError(f"{source}: keys {names[name]!r} and {key!r} are the same option: give it once")
        names[name] = key
        param = options.get(name)
        if param is None:
            known = ", ".join(sorted(options))
            raise PcqrError(f"{source}: unknown key {key!r} for job {command.name!r} (known: {known})")
        if name in OPERATOR_KEYS and name not in operator:
            raise PcqrError(f"{source}: key {key!r} cannot be set in a spec (it chooses the cluster's code or the "
                            f"budget): pass --{name} on the command line")
        if param.is_flag:
            if not isinstance(value, bool):
                raise PcqrError(f"{source}: key {key!r} is a flag: use true or false")
            if value:
                args.append(f"--{name}")
            continue
        if isinstance(value, list):
            if not param.multiple:
                raise PcqrError(f"{source}: key {key!r} takes one value, not a list")
            items = value
        else:
            items = [value]
        for item in items:
            text = _scalar(item, param, f"{source}: key {key!r}")
            if name in PATH_KEYS and base is not None and "://" not in text and not os.path.isabs(text):
                text = os.path.normpath(os.path.join(base, os.path.expanduser(text)))
            args += [f"--{name}", text]
    return args


def _scalar(value: Any, param: click.Option, where: str) -> str:
    """One YAML value as the option's text, if it has the option's type."""
    kind = param.type
    if value is None:
        raise PcqrError(f"{where} has no value")
    if isinstance(value, (list, dict)):
        raise PcqrError(f"{where}: expected one value, got a {'list' if isinstance(value, list) else 'mapping'}")
    if isinstance(kind, click.types.IntParamType):
        if isinstance(value, bool) or not isinstance(value, int):
            raise PcqrError(f"{where}: expected an integer, got {value!r}")
    elif isinstance(kind, click.types.FloatParamType):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise PcqrError(f"{where}: expected a number, got {value!r}")
    elif isinstance(kind, click.Choice):
        if not isinstance(value, str) or value not in kind.choices:
            raise PcqrError(f"{where}: expected one of {', '.join(map(str, kind.choices))}, got {value!r}")
    elif isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise PcqrError(f"{where}: expected text, got {value!r}")
    return str(value)


def load_spec(path: str) -> dict[str, Any]:
    """The spec file's mapping, read strictly (pcqr.pipeline.data.user_files: a regular file, UTF-8,
    no key given twice: ``epsilon: 1`` then ``epsilon: 650`` is refused, not run at 650)."""
    spec = read_yaml(path, "the job spec", CONFIG_LIMIT)
    if not isinstance(spec, dict):
        raise PcqrError(f"{path}: a spec is a mapping of option names to values")
    return spec


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
    operator: set[str] = set()
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise PcqrError(f"--set {item!r}: expected KEY=VALUE")
        name = key.replace("_", "-")
        if name in operator:
            raise PcqrError(f"--set {key}: given twice")
        for same in [k for k in spec if str(k).replace("_", "-") == name]:
            del spec[same]  # the override replaces the spec's key however it is spelled
        spec[key] = parse_yaml(value, f"--set {item!r}: the value is not valid YAML")
        operator.add(name)
        if name in PATH_KEYS and isinstance(spec[key], str) and "://" not in spec[key]:
            spec[key] = os.path.abspath(os.path.expanduser(spec[key]))  # typed here: relative to this directory
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
