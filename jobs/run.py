"""``pcqr run SPEC.yaml``: run any job from a YAML file whose keys are the command's option names.

    job: answer
    private: data/private
    state: st
    epsilon: 4
    ...

Keys are option names without the leading dashes (``queries-max`` or
``queries_max``); a flag is ``true``/``false``; a repeatable option takes a
list. ``--set KEY=VALUE`` overrides a key from the command line.
"""
from __future__ import annotations

from typing import Any

import click
import yaml

from pipeline.errors import PcqrError


def _jobs() -> dict[str, click.Command]:
    from jobs import answer, demo, generate, learn, plan, release, train

    return {m.command.name: m.command for m in (generate, train, answer, demo, plan, learn, release) if m.command.name}


def spec_arguments(spec: dict[str, Any], command: click.Command, source: str) -> list[str]:
    """Turn a spec's keys into the command's argument list, refusing unknown keys."""
    options = {
        name.lstrip("-"): param
        for param in command.params
        if isinstance(param, click.Option)
        for name in param.opts
    }
    args: list[str] = []
    for key, value in spec.items():
        name = str(key).replace("_", "-")
        param = options.get(name)
        if param is None:
            known = ", ".join(sorted(options))
            raise PcqrError(f"{source}: unknown key {key!r} for job {command.name!r} (known: {known})")
        if param.is_flag:
            if not isinstance(value, bool):
                raise PcqrError(f"{source}: key {key!r} is a flag: use true or false")
            if value:
                args.append(f"--{name}")
            continue
        for item in value if isinstance(value, list) else [value]:
            args += [f"--{name}", str(item)]
    return args


def load_spec(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as handle:
            spec = yaml.safe_load(handle)
    except OSError as exc:
        raise PcqrError(f"{path}: cannot read the spec ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise PcqrError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(spec, dict):
        raise PcqrError(f"{path}: a spec is a mapping of option names to values")
    return spec


@click.command("run")
@click.argument("spec_path", metavar="SPEC.yaml", type=click.Path(dir_okay=False))
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a key of the spec.")
@click.option("--cluster", default=None, help="cluster.yaml (overrides the spec's 'cluster' key).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object (last line).")
def command(spec_path: str, overrides: tuple[str, ...], cluster: str | None, as_json: bool) -> None:
    """Run the job a YAML spec describes (`job:` plus the command's options)."""
    job, args = job_arguments(spec_path, overrides, cluster, as_json)
    job.main(args=args, prog_name=f"pcqr {job.name}", standalone_mode=False)


def job_arguments(
    spec_path: str, overrides: tuple[str, ...], cluster: str | None, as_json: bool
) -> tuple[click.Command, list[str]]:
    """The job command a spec names and its argument list, every key checked (nothing runs)."""
    spec = load_spec(spec_path)
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise PcqrError(f"--set {item!r}: expected KEY=VALUE")
        spec[key] = yaml.safe_load(value)
    if cluster is not None:
        spec["cluster"] = cluster
    if as_json:
        spec["json"] = True
    job = spec.pop("job", None)
    jobs = _jobs()
    if job not in jobs:
        raise PcqrError(f"{spec_path}: key 'job' must be one of {', '.join(sorted(jobs))}, got {job!r}")
    if cluster is not None and not any("--cluster" in p.opts for p in jobs[job].params if isinstance(p, click.Option)):
        raise PcqrError(f"{spec_path}: job {job!r} does not use a cluster; run it with pcqr run")
    return jobs[job], spec_arguments(spec, jobs[job], spec_path)
