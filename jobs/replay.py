"""``pcqr replay LOG``: verify a public answered-query log and re-serve its answers.

Reads the log only: no private data, no private state, no budget. The log is
verified first (:func:`pcqr.pipeline.public_log.replay.verify_log`: contiguous batches, Parquet,
hash chain, batch numbers, provenance); on any problem the command stops with
one line naming the log and the first bad batch, and writes nothing. Then

* the answers go to stdout as CSV (``query_id,answer,status,source``; an empty
  answer is null) or, with ``--out``, to one Parquet file whose answer columns
  are the log's, value for value and type for type;
* ``--truth`` adds the accuracy of the answered queries;
* ``--into STATE`` runs the logged queries through another, existing session
  with ``pcqr answer`` (spending THAT session's budget, appending to its log)
  and reports how its answers agree with the log's.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import tempfile
from typing import Any

import click
import pyarrow as pa

from pcqr.jobs.common import (
    TRUTH_HELP, allow_overlap_option, cluster_option, emit_summary, json_option, ledger_option, note, overwrite_option,
    wait_option,
)
from pcqr.pipeline.budget.overlap import guard_public_inputs
from pcqr.pipeline.data.datasets import scan_dataset
from pcqr.pipeline.public_log.replay import LogReport, class_names_of, classes_of
from pcqr.pipeline.public_log.replayed import csv_text, replay_summary, verified_answers, write_replayed
from pcqr.pipeline.report.evaluation import answered_accuracy, check_one_query_per_id
from pcqr.pipeline.session.replay_into import check_into, check_replay_options, into_agreement, write_replay_queries
from pcqr.pipeline.session.state_lock import LOCK_FILE, lock_state


def run_into(log: str, report: LogReport, answers: pa.Table, into: str, new_log: str | None,
             cluster: str | None, ledger: str | None = None) -> dict[str, Any]:
    """Run the logged queries through the session in ``into`` with ``pcqr answer`` (its budget, its log);
    how its answers agree with the log's."""
    with tempfile.TemporaryDirectory(prefix="pcqr-replay-") as tmp:
        queries, batch_rows = write_replay_queries(log, report, tmp)
        args = ["--state", into, "--queries", queries, "--batch-size", str(batch_rows), "--json"]
        for option, value in (("--log", new_log), ("--cluster", cluster), ("--ledger", ledger)):
            args += [option, value] if value is not None else []
        note(f"replaying {report.queries} queries of {log} into the session in {into} (spends its budget)")
        from pcqr.jobs.answer import command as answer_command

        captured = io.StringIO()
        with contextlib.redirect_stdout(captured):
            answer_command.main(args, prog_name="pcqr answer", standalone_mode=False)
    lines = captured.getvalue().strip().splitlines()
    return into_agreement(answers, into, json.loads(lines[-1]) if lines else {}, new_log)


@click.command("replay")
@click.argument("log", type=click.Path(file_okay=False))
@click.option("--out", default=None, type=click.Path(dir_okay=False),
              help="Public: write the re-served answers to this Parquet file (default: CSV on stdout).")
@click.option("--truth", default=None, help=TRUTH_HELP.format(what="the accuracy of the answered queries"))
@click.option("--into", "into", default=None, type=click.Path(file_okay=False),
              help="Private: run the logged queries through the existing session in this state directory "
              "(spends ITS budget, appends to ITS log) and report agreement with the log.")
@click.option("--log", "new_log", default=None, type=click.Path(file_okay=False),
              help="Public: with --into, that session's log (default: the one it records).")
@click.option("--last-hash", default=None,
              help="The session's last batch hash (last_hash in its session.json): vouches for the last batch, "
              "which no later batch does.")
@allow_overlap_option
@overwrite_option
@ledger_option
@cluster_option
@wait_option
@json_option
def command(log: str, out: str | None, truth: str | None, into: str | None, new_log: str | None,
            last_hash: str | None, allow_private_overlap: bool, overwrite: bool, ledger: str | None,
            cluster: str | None, wait: bool, as_json: bool) -> None:
    """Verify the public log LOG and re-serve its answers (no private data, no budget).

    LOG: a session's answered-query log directory (public)."""
    check_replay_options(log, out, into, new_log, truth=truth, overwrite=overwrite, ledger=ledger, cluster=cluster)
    if into is not None and not os.path.exists(os.path.join(into, LOCK_FILE)):
        check_into(into)  # no lock file made in a folder that holds no session
    locked = contextlib.nullcontext() if into is None else lock_state(
        into, wait, command="pcqr replay --into", option="--into")
    with locked:  # --into: that session's state is ours until the comparison is done
        replay(log, out, truth, into, new_log, last_hash, cluster, as_json, ledger, allow_private_overlap)


def replay(log: str, out: str | None, truth: str | None, into: str | None, new_log: str | None,
           last_hash: str | None, cluster: str | None, as_json: bool, ledger: str | None = None,
           allow_private_overlap: bool = False) -> None:
    """The command's work (with the --into state locked)."""
    if into is not None:  # again with the lock held, before the log's notes: a refusal is one line
        check_into(into)
    report, answers = verified_answers(log, last_hash)
    summary = replay_summary(log, report, answers)
    if truth is not None:  # the misuse guard first (as in pcqr answer): a --truth of private rows is refused
        guard_public_inputs([("--truth", scan_dataset(truth, "truth"))], allow_private_overlap, ledger, echo=note)
        check_one_query_per_id(log, report.provenance)
        summary["accuracy"], summary["evaluated"], missing = answered_accuracy(
            answers, truth, classes_of(report.provenance), class_names_of(report.provenance))
        if allow_private_overlap:
            summary["allow_private_overlap"] = True
        if missing:
            summary["truth_missing"] = missing
    for remark in report.notes:  # after the inputs are read: a refused command prints its error alone
        note(remark)
    if into is not None:
        summary.update(run_into(log, report, answers, into, new_log, cluster, ledger))
    if out is not None:
        write_replayed(out, answers, report)
        summary["out"] = out
    elif into is None:
        for text in csv_text(answers):
            click.echo(text, nl=False)
    if out is None and into is None and not as_json:
        with contextlib.redirect_stdout(sys.stderr):  # stdout stays pure CSV
            emit_summary(summary, as_json)
    else:
        emit_summary(summary, as_json)
