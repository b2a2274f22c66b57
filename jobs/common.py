"""Options and output shared by every job command: the cluster, ledger, JSON and overlap options,
the summary, notes and progress on the terminal, the cluster connection. A private session's own
options (train, answer) are :mod:`pcqr.jobs.options`'s."""
from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
from typing import TYPE_CHECKING, Any, Callable, ContextManager, TypeVar

import click

from pcqr.pipeline.session.progress import Console, Phase, Reporter

if TYPE_CHECKING:
    from pcqr.pipeline.data.cluster import Connect

F = TypeVar("F", bound=Callable[..., Any])


def cluster_option(func: F) -> F:
    """``--cluster PATH``: the cluster.yaml to use (default ./cluster.yaml, else built-in local)."""
    return click.option(
        "--cluster",
        "cluster",
        type=click.Path(dir_okay=False),
        default=None,
        help="cluster.yaml choosing the Dask backend (default: ./cluster.yaml if present, "
        "else a local cluster on 127.0.0.1).",
    )(func)


def flag_option(option: str, dest: str, help: str) -> Callable[[F], F]:
    """A command's boolean flag (``option``, stored as ``dest``) as a decorator."""
    def decorate(func: F) -> F:
        return click.option(option, dest, is_flag=True, help=help)(func)
    return decorate


#: ``--json``: print the summary as one JSON object on the last line.
json_option = flag_option("--json", "as_json", "Print the summary as one JSON object (last line).")


def ledger_option(func: F) -> F:
    """``--ledger PATH|URL``: the ledger (default $PCQR_LEDGER, else the cluster.yaml's ``pcqr: ledger:``,
    else ~/.local/share/pcqr/ledger.sqlite); an empty one, or an empty $PCQR_LEDGER, is refused while
    the options are parsed (before anything is read)."""

    @functools.wraps(func)
    def resolved(*args: Any, **kwargs: Any) -> Any:
        from pcqr.pipeline.budget.timeouts import configured_by
        from pcqr.pipeline.data.cluster import cluster_ledger, cluster_ledger_timeouts

        if kwargs.get("ledger") is None and os.environ.get("PCQR_LEDGER") is None:
            from pcqr.pipeline.budget.location import checked_setting

            named = cluster_ledger(kwargs.get("cluster"))  # checked here, naming the file, before it acts as --ledger
            kwargs["ledger"] = None if named is None else checked_setting(*named)
        timeouts = cluster_ledger_timeouts(kwargs.get("cluster"))  # a server ledger's time limits, for this command
        with configured_by(*timeouts) if timeouts is not None else contextlib.nullcontext():
            return func(*args, **kwargs)

    return click.option(
        "--ledger", "ledger", type=click.Path(dir_okay=False), default=None, callback=_checked_ledger,
        help="Privacy-budget ledger: a SQLite file, or a team's postgresql:// URL (private: the operator's record "
        "of every charge; default: $PCQR_LEDGER, else the cluster.yaml's pcqr: ledger: key, else "
        "~/.local/share/pcqr/ledger.sqlite; an empty $PCQR_LEDGER is an error).",
    )(resolved)  # type: ignore[return-value]


def _checked_ledger(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    from pcqr.pipeline.budget.location import ledger_setting

    if not ctx.resilient_parsing:  # not while completing or listing help
        ledger_setting(value)
    return value


#: ``--truth`` of answer, replay and report: the user's labels of the queries.
TRUTH_HELP = ("Public input: your true labels of the queries (Parquet of query_id + label), checked like --queries "
              "for private rows and used only to score the answers: {what}. Never copied into the log.")


#: ``--allow-private-overlap``: run although a public input holds rows of a private dataset.
allow_overlap_option = flag_option(
    "--allow-private-overlap", "allow_private_overlap",
    "Run although a public input (--public, --queries, --truth) holds rows of a registered private "
    "dataset (refused otherwise: that would publish them); recorded in the output's provenance.")
#: ``--overwrite``: replace an existing ``--out`` (pcqr.pipeline.data.outputs: never one of the inputs).
overwrite_option = flag_option(
    "--overwrite", "overwrite",
    "Replace --out if it exists (refused otherwise). An --out that is, lies inside or holds one of the "
    "command's inputs is refused with or without it.")
#: ``--wait``: wait for another pcqr process using the state directory instead of refusing.
wait_option = flag_option(
    "--wait", "wait",
    "If another pcqr process is using the state directory, wait for it to finish (default: refuse at once).")


def emit_summary(summary: dict[str, Any], as_json: bool) -> None:
    """Print a job summary: human-readable lines, or one JSON object as the last line."""
    if as_json:
        click.echo(json.dumps(summary, sort_keys=True, default=str))
        return
    width = max((len(k) for k in summary), default=0)
    for key, value in summary.items():
        if isinstance(value, float):
            value = f"{value:.6g}"
        elif isinstance(value, dict):
            value = " ".join(f"{k}={v}" for k, v in value.items())
        click.echo(f"{key:<{width}}  {value}")


CONSOLE = Console()
"""stderr: notes, and each long phase as a live line on a terminal, else a line every 15 s."""


def note(message: str) -> None:
    """A progress or status line for the user, on stderr so stdout stays machine-readable."""
    CONSOLE.note(message)


def progress_enabled() -> bool:
    """Progress bars only on a terminal."""
    return sys.stderr.isatty()


CLI_REPORTER = Reporter(note=note, shows=CONSOLE.shows)
"""The command line's reporter: notes on stderr, long phases as a bar or a spinner on a terminal, else a
line every 15 s (``training models: 37 of 120 models, 45 s``)."""


def progress(length: int, label: str) -> ContextManager[Phase]:
    """A counted phase of the command line's reporter (a bar on a terminal, else a line every 15 s)."""
    return CLI_REPORTER.phase(label, length)


def connect_to(cluster: str | None) -> Connect:
    """The command's cluster: ``--cluster`` (or ./cluster.yaml, or the built-in local cluster),
    validated and started when the library first needs it, closed when its block ends."""
    from pcqr.pipeline.data.cluster import load_cluster_config, open_client

    def connect(array_work: bool = False) -> ContextManager[Any]:
        load_cluster_config(cluster)
        return open_client(cluster, echo=note, array_work=array_work)
    return connect
