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
import re
import sys
import tempfile
from typing import Any

import click
import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from pcqr.jobs.common import (
    TRUTH_HELP, allow_overlap_option, check_writable_file, cluster_option, emit_summary, json_option, ledger_option,
    note, wait_option,
)
from pcqr.pipeline.budget.overlap import guard_public_inputs
from pcqr.pipeline.data.datasets import scan_dataset
from pcqr.pipeline.data.atomic import write_atomic
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.report.evaluation import check_one_query_per_id, load_truth, score
from pcqr.pipeline.session.state import check_private_location, has_session
from pcqr.pipeline.session.state_lock import LOCK_FILE, lock_state
from pcqr.pipeline.public_log.batches import LOG_WRITE_OPTIONS, PROVENANCE_KEY, batch_files
from pcqr.pipeline.public_log.replay import LogReport, read_answers, read_queries, status_counts, verify_log
from pcqr.pipeline.data.parquet_opener import metadata_of, read_parquet

REPLAY_KEY = b"pcqr.replay"
CSV_COLUMNS = ["query_id", "answer", "status", "source"]


def _inside(path: str, directory: str) -> bool:
    path, directory = os.path.abspath(path), os.path.abspath(directory)
    return os.path.commonpath([path, directory]) == directory


def check_options(log: str, out: str | None, into: str | None, new_log: str | None) -> None:
    """Refuse option combinations that make no sense, before anything is read."""
    if new_log is not None and into is None:
        raise PcqrError("--log is the log of the --into session: it needs --into STATE")
    if out is not None:
        if os.path.isdir(out):
            raise PcqrError(f"--out {out}: is a directory; give a Parquet file path")
        if _inside(out, log):
            raise PcqrError(f"--out {out}: is inside the log {log}; write the replay elsewhere")
        check_writable_file(out, "--out")
    if into is not None:
        check_private_location(into, [log])
        if new_log is not None and os.path.abspath(new_log) == os.path.abspath(log):
            raise PcqrError(f"--log {new_log}: is the log being replayed; the --into session writes its own log")


def check_into(into: str) -> None:
    """``--into`` must hold a session."""
    if not has_session(into):
        raise PcqrError(f"--into {into}: no session here (run 'pcqr train' first)")


def verified(log: str, last_hash: str | None) -> LogReport:
    """The log's report, or a one-line PcqrError naming the log and the first bad batch."""
    if last_hash is not None and not re.fullmatch(r"[0-9a-f]{64}", last_hash):
        raise PcqrError(f"--last-hash {last_hash!r}: expected the 64 hex digits of a SHA-256 "
                        "(last_hash in the session's session.json)")
    report = verify_log(log, expected_last_hash=last_hash)
    if not report.ok:
        more = len(report.problems) - 1
        tail = f" ({more} more problem{'s' if more > 1 else ''})" if more > 0 else ""
        raise PcqrError(f"log {log}: {report.problem}{tail}")
    return report


def accuracy(answers: pa.Table, truth_uri: str) -> tuple[float | None, int, int]:
    """Accuracy of the answered queries against a truth file, as ``pcqr answer --truth`` counts it:
    over the answered queries the truth covers. Returns (accuracy, evaluated, missing)."""
    lookup = load_truth(truth_uri)
    answered = answers.column("status").to_numpy(zero_copy_only=False) == "answered"
    ids = answers.column("query_id").to_numpy()[answered]
    labels = answers.column("answer").to_numpy(zero_copy_only=False)[answered]
    correct, evaluated, missing = score(lookup(ids), labels)
    return (correct / evaluated if evaluated else None), evaluated, missing


def print_csv(answers: pa.Table, rows: int = 100_000) -> None:
    """The answers as CSV on stdout (header first), a slice at a time."""
    table = answers.select(CSV_COLUMNS)
    click.echo(",".join(CSV_COLUMNS))  # pyarrow quotes header names whatever the quoting style
    options = pacsv.WriteOptions(include_header=False, quoting_style="none")
    for start in range(0, table.num_rows, rows):
        sink = io.BytesIO()
        pacsv.write_csv(table.slice(start, rows), sink, options)
        click.echo(sink.getvalue().decode(), nl=False)


def write_out(path: str, answers: pa.Table, report: LogReport) -> None:
    """One Parquet file of the answers, with batch 0's provenance and the replay's record."""
    record = {"log": os.path.abspath(report.log), "batches": report.batches, "queries": report.queries,
              "verified": True, "last_sha256": report.last_sha256, "last_vouched": report.last_vouched}
    metadata = {
        PROVENANCE_KEY: json.dumps(report.provenance, sort_keys=True, default=str).encode(),
        REPLAY_KEY: json.dumps(record, sort_keys=True).encode(),
    }
    sink = io.BytesIO()
    pq.write_table(answers.replace_schema_metadata(metadata), sink, **LOG_WRITE_OPTIONS)
    write_atomic(path, sink.getvalue())


def run_into(log: str, report: LogReport, answers: pa.Table, into: str, new_log: str | None,
             cluster: str | None, ledger: str | None = None) -> dict[str, Any]:
    """Run the logged queries through the session in ``into`` (its budget, its log); compare."""
    features = (report.provenance or {}).get("features")
    if not isinstance(features, list) or not features:
        raise PcqrError(f"log {log}: its provenance lists no features; cannot build the queries to replay")
    batch_rows = max(1, *(metadata_of(path).num_rows for _, path in batch_files(log)))
    with tempfile.TemporaryDirectory(prefix="pcqr-replay-") as tmp:
        queries = os.path.join(tmp, "queries", "part-00000.parquet")
        os.makedirs(os.path.dirname(queries))
        writer: pq.ParquetWriter | None = None
        try:
            for table in read_queries(log, [str(f) for f in features]):
                if writer is None:
                    writer = pq.ParquetWriter(queries, table.schema, write_page_checksum=True)
                writer.write_table(table)
        finally:
            if writer is not None:
                writer.close()
        args = ["--state", into, "--queries", os.path.dirname(queries), "--batch-size", str(batch_rows), "--json"]
        if new_log is not None:
            args += ["--log", new_log]
        if cluster is not None:
            args += ["--cluster", cluster]
        if ledger is not None:
            args += ["--ledger", ledger]
        note(f"replaying {report.queries} queries of {log} into the session in {into} (spends its budget)")
        from pcqr.jobs.answer import command as answer_command

        captured = io.StringIO()
        with contextlib.redirect_stdout(captured):
            answer_command.main(args, prog_name="pcqr answer", standalone_mode=False)
    lines = captured.getvalue().strip().splitlines()
    summary: dict[str, Any] = json.loads(lines[-1]) if lines else {}
    other_log = str(summary.get("log") or new_log or "")
    written = int(summary.get("batches", 0))
    files = batch_files(other_log)[-written:] if written else []
    theirs = pa.concat_tables(
        [read_parquet(path, ["query_id", "answer", "status"]).replace_schema_metadata(None)
         for _, path in files]) if files else None
    if theirs is None or theirs.num_rows != answers.num_rows or not theirs.column("query_id").equals(
            answers.column("query_id")):
        raise PcqrError(f"--into {into}: its log {other_log} does not hold the replayed queries in order "
                        "(was it written to concurrently?)")
    mine_status = answers.column("status").to_numpy(zero_copy_only=False)
    their_status = theirs.column("status").to_numpy(zero_copy_only=False)
    both = (mine_status == "answered") & (their_status == "answered")
    mine_answer = answers.column("answer").to_numpy(zero_copy_only=False)
    their_answer = theirs.column("answer").to_numpy(zero_copy_only=False)
    equal = int(np.count_nonzero(mine_answer[both] == their_answer[both]))
    n_both = int(np.count_nonzero(both))
    other = verify_log(other_log)
    return {
        "into": into,
        "into_log": other_log,
        "into_batches": written,
        "into_log_verified": other.ok if other.ok else f"no: {other.problem}",
        "both_answered": n_both,
        "equal_answers": equal,
        "agreement": equal / n_both if n_both else None,
        "statuses": {"log": status_counts(answers), "into": status_counts(theirs)},
        "into_summary": {key: summary[key] for key in (
            "budget_used", "budget_spent", "epsilon", "delta", "cutoff", "subsamples", "threshold", "privacy")
            if key in summary},
    }


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
@ledger_option
@cluster_option
@wait_option
@json_option
def command(log: str, out: str | None, truth: str | None, into: str | None, new_log: str | None,
            last_hash: str | None, allow_private_overlap: bool, ledger: str | None, cluster: str | None, wait: bool,
            as_json: bool) -> None:
    """Verify the public log LOG and re-serve its answers (no private data, no budget).

    LOG: a session's answered-query log directory (public)."""
    check_options(log, out, into, new_log)
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
    report = verified(log, last_hash)
    answers = read_answers(log)
    if answers.num_rows != report.queries or len(batch_files(log)) != report.batches:
        raise PcqrError(f"log {log}: changed while it was being replayed; replay it again")
    summary: dict[str, Any] = {
        "log": log,
        "batches": report.batches,
        "queries": report.queries,
        **status_counts(answers),
        "verified": True,
        "last_batch_vouched": report.last_vouched,
        "last_sha256": report.last_sha256,
        "session_id": (report.provenance or {}).get("session_id"),
        "privacy": (report.provenance or {}).get("privacy"),
    }
    sources = answers.column("source").to_numpy(zero_copy_only=False)
    summary["sources"] = {str(s): int(np.count_nonzero(sources == s)) for s in sorted(set(sources))}
    if report.other_files:
        summary["other_files"] = ",".join(report.other_files)
    if truth is not None:  # the misuse guard first (as in pcqr answer): a --truth of private rows is refused
        guard_public_inputs([("--truth", scan_dataset(truth, "truth"))], allow_private_overlap, ledger, echo=note)
        check_one_query_per_id(log, report.provenance)
        summary["accuracy"], summary["evaluated"], missing = accuracy(answers, truth)
        if allow_private_overlap:
            summary["allow_private_overlap"] = True
        if missing:
            summary["truth_missing"] = missing
    for remark in report.notes:  # after the inputs are read: a refused command prints its error alone
        note(remark)
    if into is not None:
        summary.update(run_into(log, report, answers, into, new_log, cluster, ledger))
    if out is not None:
        write_out(out, answers, report)
        summary["out"] = out
    elif into is None:
        print_csv(answers)
    if out is None and into is None and not as_json:
        with contextlib.redirect_stdout(sys.stderr):  # stdout stays pure CSV
            emit_summary(summary, as_json)
    else:
        emit_summary(summary, as_json)
