"""``pcqr replay``'s options checked before anything is read, and replaying a log into another session
(``--into STATE``): the queries fed to that session and how its answers agree with the log's.

The log and the replayed answers are public. The ``--into`` session is private: its state is checked
to hold a session and, like ``--out`` and that session's ``--log``, to lie outside the log and the other
inputs (:func:`pcqr.pipeline.data.outputs.check_outputs`); answering the queries (which spends that session's
budget and appends to its log) is ``pcqr answer``'s work, run by the caller between
:func:`write_replay_queries` and :func:`into_agreement`.
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pcqr.pipeline.data.outputs import Output, check_outputs
from pcqr.pipeline.data.parquet_opener import metadata_of, read_parquet
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.public_log.batches import batch_files
from pcqr.pipeline.public_log.replay import LogReport, read_queries, status_counts, verify_log
from pcqr.pipeline.session.state import has_session

#: The --into session's summary keys a replay reports (its budget and certificate).
INTO_SUMMARY_KEYS = ("budget_used", "budget_spent", "epsilon", "delta", "cutoff", "subsamples", "threshold", "privacy")


def check_replay_options(log: str, out: str | None, into: str | None, new_log: str | None, *,
                         truth: str | None = None, overwrite: bool = False, ledger: str | None = None,
                         cluster: str | None = None) -> None:
    """Refuse option combinations that make no sense, and outputs on inputs, before anything is read:
    ``--into`` (a session's state, answered into), its ``--log`` and ``--out`` apart from each other, the
    log and the other inputs; an existing ``--out`` replaced only with ``overwrite``."""
    if new_log is not None and into is None:
        raise PcqrError("--log is the log of the --into session: it needs --into STATE")
    check_outputs([Output("--into", into, folder=True, appended=True),
                   Output("--log", new_log, folder=True, appended=True), Output("--out", out)],
                  [("the log", log), ("--truth", truth), ("--ledger", ledger), ("--cluster", cluster)], overwrite)


def check_into(into: str) -> None:
    """``--into`` must hold a session."""
    if not has_session(into):
        raise PcqrError(f"--into {into}: no session here (run 'pcqr train' first)")


def write_replay_queries(log: str, report: LogReport, folder: str) -> tuple[str, int]:
    """The log's queries (query_id and its provenance's features) as one Parquet file in a new folder
    ``folder``/queries; that folder and the largest batch of the log (the batch size to answer them in)."""
    features = (report.provenance or {}).get("features")
    if not isinstance(features, list) or not features:
        raise PcqrError(f"log {log}: its provenance lists no features; cannot build the queries to replay")
    batch_rows = max(1, *(metadata_of(path).num_rows for _, path in batch_files(log)))
    queries = os.path.join(folder, "queries", "part-00000.parquet")
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
    return os.path.dirname(queries), batch_rows


def into_agreement(answers: pa.Table, into: str, summary: dict[str, Any], new_log: str | None) -> dict[str, Any]:
    """How the --into session's answers (the batches its ``pcqr answer`` ``summary`` says it wrote) agree
    with the log's ``answers``: both answered, equal answers, each side's statuses, its log verified."""
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
        "into_summary": {key: summary[key] for key in INTO_SUMMARY_KEYS if key in summary},
    }
