"""The ``pcqr`` command: one subcommand per job kind (jobs/*.py)."""
from __future__ import annotations

import sys

import click
from distributed.scheduler import KilledWorker

from jobs import answer, budget, demo, generate, learn, plan, release, replay, run, submit, train
from pipeline import __version__
from pipeline.errors import PcqrError


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="pcqr")
def pcqr() -> None:
    """pcqr: answer classification queries from models trained on private data,
    with a proof of differential privacy, as a distributed batch pipeline on Dask.

    \b
    Typical session:
      pcqr generate --out data                       # synthetic data to try it on
      pcqr train  --private data/private --state st  # k subsample models (private)
      pcqr answer --state st --queries data/queries --log answers   # public log
      pcqr run jobs/examples/answer.yaml             # the same from a YAML spec
      pcqr submit job.yaml --cluster cluster.yaml    # the same on an existing cluster
      pcqr demo                                      # all of it on a local cluster
      pcqr plan --hypothesis interval --alpha 0.05 --epsilon 1 --queries-max 10000
                                                     # the sample sizes the papers require
      pcqr learn --private data/private --public pub --hypothesis threshold --out model.json
      pcqr release --private data/private --public pub --hypothesis threshold --out table.parquet
      pcqr release-answer table.parquet --query threshold=0.3
      pcqr replay answers --out replayed.parquet     # verify a log, re-serve its answers
      pcqr budget set data/private --epsilon 8 --delta 1e-5   # the dataset's total budget
    """


for _module in (generate, train, answer, run, submit, demo, plan, learn, release, budget, replay):
    pcqr.add_command(_module.command)
pcqr.add_command(learn.predict_command)
pcqr.add_command(release.release_answer_command)


def main(argv: list[str] | None = None) -> int:
    """Console entry point: user errors are one line on stderr and a non-zero exit."""
    try:
        pcqr.main(args=argv, prog_name="pcqr", standalone_mode=False)
    except PcqrError as exc:
        click.echo(f"pcqr: error: {exc}", err=True)
        return exc.exit_code
    except KilledWorker as exc:
        click.echo(f"pcqr: error: a task kept killing its workers and was given up ({exc}); "
                   "nothing uncommitted was released; re-running the command retries (pcqr answer resumes)", err=True)
        return 3
    except click.exceptions.Abort:
        click.echo("pcqr: aborted", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
