"""The ``pcqr`` command: one subcommand per job kind (jobs/*.py)."""
from __future__ import annotations

import atexit
import importlib
import os
import sys
import threading
from typing import Any, NoReturn

import click

from pcqr.pipeline import __version__
from pcqr.pipeline.errors import PcqrError, cluster_failure, os_error_line


#: Each subcommand: (its module under pcqr.jobs, the click command's name there), in --help's order.
#: A module is imported when its command runs (or --help lists them): ``pcqr answer`` does not
#: import scikit-learn and the modules of every other command.
COMMANDS = {
    "generate": ("generate", "command"), "train": ("train", "command"), "answer": ("answer", "command"),
    "run": ("run", "command"), "submit": ("submit", "command"), "demo": ("demo", "command"),
    "plan": ("plan", "command"), "learn": ("learn", "command"), "release": ("release", "command"),
    "budget": ("budget", "command"), "ledger": ("ledger", "command"), "replay": ("replay", "command"), "report": ("report", "command"),
    "status": ("status", "command"), "distill": ("distill", "command"), "sanitize": ("sanitize", "command"),
    "predict": ("learn", "predict_command"), "release-answer": ("release", "release_answer_command"),
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported when first asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module, name = COMMANDS[cmd_name]
        command: click.Command = getattr(importlib.import_module(f"pcqr.jobs.{module}"), name)
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="pcqr")
def pcqr() -> None:
    """pcqr: answer classification queries from models trained on private data,
    with a proof of differential privacy, as a distributed batch pipeline on Dask.

    \b
    Typical session (each line runs as written, in order, in an empty folder):
      pcqr generate --out data                       # synthetic data to try it on
      pcqr train  --private data/private --state st  # k subsample models (private)
      pcqr answer --state st --queries data/queries --log answers   # public log
      pcqr demo                                      # all of it on a local cluster
      pcqr plan --hypothesis interval --alpha 0.05 --epsilon 1 --queries-max 10000
                                                     # the sample sizes the papers require
      pcqr generate --rows 5000 --queries 0 --seed 7 --out pub   # public points
      pcqr learn --private data/private --public pub/private --features x0 --hypothesis threshold --out model.json
      pcqr release --private data/private --public pub/private --features x0 --hypothesis threshold --out table.parquet
      pcqr release-answer table.parquet --query threshold=0.3
      pcqr generate --integer-scale 100 --queries 0 --seed 3 --out counts   # integer values of x0
      pcqr sanitize --private counts/private --features x0 --domain -1000:1000 --out points.parquet
                                                     # a synthetic database, no public data
      pcqr release-answer points.parquet --query value=0   # the share of rows with x0 = 0
      pcqr replay answers --out replayed.parquet     # verify a log, re-serve its answers
      pcqr report --log answers --state st --out report.html   # look at a session (pip install 'pcqr[report]')
      pcqr status --state st                         # the session's privacy odometer (read-only)
      pcqr distill --log answers --state st --out student.json   # a student of the log's answers (no budget)
      pcqr budget set data/private --epsilon 8 --delta 1e-5   # the dataset's total budget

    \b
    From a YAML spec (SPEC.yaml: job: and the command's options; examples in pcqr's jobs/examples/):
      pcqr run SPEC.yaml                             # any job, as its command would run it
      pcqr submit SPEC.yaml --cluster CLUSTER.yaml   # the same on an existing Dask cluster

    Each command's --help says which of its files are private (the private dataset, the state
    directory, the ledger: keep them where the private data lives) and which are public (queries,
    logs, released models, tables and reports: safe to publish).
    """


_NO_ARGS_IS_HELP: Any = getattr(click.exceptions, "NoArgsIsHelpError", ())


def error(message: str) -> None:
    """Print a user error: one line, the one prefix every pcqr error has."""
    click.echo(f"pcqr: error: {' '.join(message.split())}", err=True)


def usage_error(exc: click.ClickException, argv: list[str]) -> str:
    """click's own errors (unknown option, bad value, missing argument) as one line with the help hint."""
    message = exc.format_message().rstrip()
    if not isinstance(exc, click.UsageError):
        return message
    ctx = getattr(exc, "ctx", None)
    if ctx is not None:
        path = ctx.command_path
    else:  # raised while parsing, before a context exists: the command is the first word
        path = f"pcqr {argv[0]}" if argv and argv[0] in COMMANDS else "pcqr"
    return f"{message} (see {path} --help)"


def main(argv: list[str] | None = None) -> int:
    """Console entry point: user errors are one line on stderr, ``pcqr: error: ...``, and a non-zero exit."""
    try:
        pcqr.main(args=argv, prog_name="pcqr", standalone_mode=False)
    except PcqrError as exc:
        error(str(exc))
        return exc.exit_code
    except OSError as exc:
        if (line := os_error_line(exc)) is None:
            raise
        error(line)
        return 2
    except click.exceptions.Abort:
        error("interrupted")
        return 130
    except _NO_ARGS_IS_HELP as exc:  # `pcqr`, `pcqr budget`: the help, as --help would (click >= 8.2)
        click.echo(exc.ctx.get_help())
        return 0
    except click.ClickException as exc:
        error(usage_error(exc, sys.argv[1:] if argv is None else argv))
        return 2
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except Exception as exc:
        if (message := cluster_failure(exc)) is None:
            raise
        error(message)
        return 3
    return 0


def run() -> NoReturn:
    """The ``pcqr`` script: Arrow's system allocator (pcqr.pipeline.data.allocators), :func:`main`,
    then :func:`finish`."""
    from pcqr.pipeline.data.allocators import prefer_system_pool

    prefer_system_pool()
    finish(main())


def finish(code: int) -> NoReturn:
    """Exit with ``code`` as a finished command needs, and no more.

    A normal interpreter exit then frees every module one by one: with scikit-learn and Dask loaded
    that took about 0.5 s of each command's wall time (of ~5 s for a 10^6-query ``pcqr answer``).
    Everything pcqr writes is closed and fsynced before :func:`main` returns, so this exits at once
    after what a normal exit runs first: the atexit functions (weakref finalizers, logging's
    shutdown), then the standard streams flushed. With a non-daemon thread still running, it exits the
    normal way, which waits for it."""
    if any(not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        sys.exit(code)
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (BrokenPipeError, ValueError):  # a closed pipe: as the normal exit, code 120 if none was set
        code = code or 120
    os._exit(code)


if __name__ == "__main__":
    run()
