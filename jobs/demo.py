"""``pcqr demo``: the whole product on the embedded default, in one command.

Generates synthetic data (a threshold on one of 5 features), trains k
subsample models on a local Dask cluster, answers the queries through the
sparse-vector coordinator into a public log, and prints what happened in plain
sentences, then the summary table, with the accuracy against the generated truth.

Everything lives in a temporary folder with its own privacy ledger: the demo never
charges the user's ledger, and the folder is removed at the end unless ``--keep``.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import shutil
import tempfile
from typing import Any

import click

from pcqr.jobs import answer, generate
from pcqr.jobs.common import cluster_option, emit_summary, json_option, note
from pcqr.pipeline.data.object_store import is_uri
from pcqr.pipeline.data.outputs import Output, check_outputs
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.report.sentences import count, plain_sentences, summary_table
from pcqr.pipeline.session.demo import (
    FEATURES, REMOVED_NOTE, check_options, data_kind, delta_for, kept_note, own_ledger, removed_summary,
)


def _run(command: click.Command, args: list[str], name: str) -> str:
    """Run a pcqr command in this process; its stdout, captured (its notes stay on stderr)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        command.main(args=args, prog_name=name, standalone_mode=False)
    return out.getvalue()


def temporary_folder() -> str:
    """A new folder for the demo's data, state, log and ledger."""
    return tempfile.mkdtemp(prefix="pcqr-demo-")


def _workspace(out: str | None, keep: bool, cluster: str | None) -> tuple[str, bool]:
    """The demo's folder and whether it stays: --out (kept; new or empty, never holding --cluster), else a
    new temporary one."""
    if out is None:
        return temporary_folder(), keep
    if is_uri(out):  # os.makedirs would make a local folder named "s3:" (issue 47's note)
        raise PcqrError(f"--out {out}: the demo's folder holds its private state and ledger beside the data, which "
                        "stay on a local disk the owner controls; give a local path")
    check_outputs([Output("--out", out, folder=True)], [("--cluster", cluster)], overwrite=None)
    os.makedirs(out, exist_ok=True)
    return out, True


@click.command("demo")
@click.option("--out", default=None, type=click.Path(file_okay=False),
              help="Work in this new or empty folder and keep it (default: a temporary folder, removed at the end). "
              "It holds private files (data, state, ledger) beside the public log: keep it private.")
@click.option("--keep", is_flag=True, help="Keep the temporary folder (private: data, state, ledger; public: the log) "
              "and say where it is.")
@click.option("--rows", type=int, default=3_000_000, show_default=True, help="Private rows to generate.")
@click.option("--queries", type=int, default=10_000, show_default=True, help="Queries to generate and answer.")
@click.option("--noise", type=float, default=0.0, show_default=True, help="Label noise (0 = realizable).")
@click.option("--epsilon", type=float, default=4.0, show_default=True, help="Privacy parameter eps.")
@click.option("--subsamples", type=int, default=2500, show_default=True, help="k, the number of subsample models.")
@click.option("--cutoff", type=int, default=20, show_default=True, help="T, abstentions allowed before the session halts.")
@click.option("--threshold", type=float, default=None,
              help="w, the stability threshold (a privacy parameter; default: the smallest certifiable).")
@cluster_option
@json_option
def command(out: str | None, keep: bool, rows: int, queries: int, noise: float, epsilon: float,
            subsamples: int, cutoff: int, threshold: float | None, cluster: str | None, as_json: bool) -> None:
    """Generate data, train, answer and summarise, on a local cluster by default, in a temporary
    folder with its own ledger (your privacy ledger is never charged)."""
    check_options(rows, queries, noise, epsilon, subsamples, cutoff, threshold)  # one line, before anything
    work, kept = _workspace(out, keep, cluster)
    where = "kept at the end" if kept else "removed at the end (--keep keeps it)"
    note(f"demo: working in {shlex.quote(work)} with its own privacy ledger (yours is not charged); {where}")
    try:
        summary = _demo(work, rows, queries, noise, epsilon, subsamples, cutoff, threshold, cluster)
    finally:
        if not kept:
            shutil.rmtree(work, ignore_errors=True)
    if kept:  # on stderr, --json or not: stdout keeps the summary alone
        note(kept_note(work))
    else:  # nothing of the folder is left to look at: none of its paths is printed
        summary = removed_summary(summary, work)
        note(REMOVED_NOTE)
    if as_json:
        click.echo(json.dumps(summary, sort_keys=True, default=str))
        return
    for line in plain_sentences(summary, queries):
        click.echo(line)
    click.echo("")
    table = summary_table(summary)  # the --json line is sorted by key: lead with what matters
    if "ledger" in table:  # the demo's own ledger: no advice to set a budget on a folder about to go
        table["ledger"] = own_ledger(summary)
    emit_summary(table, as_json=False)


def _demo(work: str, rows: int, queries: int, noise: float, epsilon: float, subsamples: int, cutoff: int,
          threshold: float | None, cluster: str | None) -> dict[str, Any]:
    """Generate, then one-shot answer (train + answer) against the demo's own ledger; the summary.
    The demo walks through Algorithm 5's stability gate (its sentences speak of abstentions), so it
    names it: without --gate, pcqr would choose another from the public parameters."""
    data = os.path.join(work, "data")
    common = ["--cluster", cluster] if cluster else []
    _run(generate.command, ["--kind", data_kind(noise), "--rows", str(rows), "--features", str(FEATURES),
                            "--queries", str(queries), "--noise", str(noise), "--seed", "0", "--out", data, *common],
         "pcqr generate")
    note(f"demo: generated {count(rows)} private rows and {count(queries)} queries")  # where: kept_note, if kept
    args = [
        "--private", os.path.join(data, "private"), "--queries", os.path.join(data, "queries"),
        "--truth", os.path.join(data, "truth"), "--state", os.path.join(work, "state"),
        "--log", os.path.join(work, "log"), "--ledger", os.path.join(work, "ledger.sqlite"),
        "--epsilon", str(epsilon), "--delta", str(delta_for(rows)), "--cutoff", str(cutoff), "--queries-max", str(queries),
        "--subsamples", str(subsamples), "--learner", "stump", "--gate", "stability", "--json", *common,
        *(["--threshold", str(threshold)] if threshold is not None else []),
    ]
    printed = _run(answer.command, args, "pcqr answer")
    summary: dict[str, Any] = json.loads(printed.strip().splitlines()[-1])
    return summary
