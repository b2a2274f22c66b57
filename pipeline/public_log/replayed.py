"""A verified log, replayed (``pcqr replay``): its answers read once verified, the replay's summary,
and the answers re-served as CSV text or as one Parquet file carrying the replay's record.

Everything here reads the public log only (through :mod:`pcqr.pipeline.public_log.replay`): no
private row, no private state, no budget.
"""
from __future__ import annotations

import io
import json
import re
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from pcqr.pipeline.data import locations
from pcqr.pipeline.data.atomic import write_atomic
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.public_log.batches import LOG_WRITE_OPTIONS, PROVENANCE_KEY, batch_files
from pcqr.pipeline.public_log.replay import LogReport, read_answers, status_counts, verify_log

#: The schema metadata key of a replayed answers file: which log, how many batches, verified how.
REPLAY_KEY = b"pcqr.replay"
#: The columns of the CSV a replay prints (an empty answer is null).
CSV_COLUMNS = ["query_id", "answer", "status", "source"]


def verified(log: str, last_hash: str | None, named: str | None = None, vouching: str = "--last-hash") -> LogReport:
    """The log's report, or a one-line PcqrError naming the log (``named``, default ``log LOG``) and the
    first bad batch.

    ``last_hash`` (from ``vouching``: ``--last-hash``, or a state's session.json) is the session's record
    of its last batch: a log whose chain does not end there is refused. None: the log is checked against
    itself only, and the report's notes say so in the one line every command prints (``pcqr replay``,
    ``pcqr report``, ``pcqr distill``): an altered last batch, or lost batches after it, cannot be seen.
    A session that has logged no batch has the empty last hash: no log is its log.
    """
    named = named or f"log {log}"
    if last_hash == "" and vouching != "--last-hash":
        raise PcqrError(f"{named}: the session of {vouching} has logged no batch yet, so this is not its log")
    if last_hash is not None and not re.fullmatch(r"[0-9a-f]{64}", last_hash):
        raise PcqrError(f"{vouching} {last_hash!r}: expected the 64 hex digits of a SHA-256 "
                        "(last_hash in the session's session.json)")
    report = verify_log(log, expected_last_hash=last_hash)
    if not report.ok:
        more = len(report.problems) - 1
        tail = f" ({more} more problem{'s' if more > 1 else ''})" if more > 0 else ""
        raise PcqrError(f"{named}: {report.problem}{tail}")
    return report


def verified_answers(log: str, last_hash: str | None) -> tuple[LogReport, pa.Table]:
    """The log verified (:func:`verified`), then its answers, refused if the log changed in between."""
    report = verified(log, last_hash)
    answers = read_answers(log)
    if answers.num_rows != report.queries or len(batch_files(log)) != report.batches:
        raise PcqrError(f"log {log}: changed while it was being replayed; replay it again")
    return report, answers


def replay_summary(log: str, report: LogReport, answers: pa.Table) -> dict[str, Any]:
    """What a replay reports of the log: its batches and queries, the statuses and sources of its
    answers, how far it was verified, and its session's id and privacy certificate."""
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
    return summary


def csv_text(answers: pa.Table, rows: int = 100_000) -> Iterator[str]:
    """The answers as CSV text: the header line, then a slice of ``rows`` rows at a time."""
    table = answers.select(CSV_COLUMNS)
    yield ",".join(CSV_COLUMNS) + "\n"  # pyarrow quotes header names whatever the quoting style
    options = pacsv.WriteOptions(include_header=False, quoting_style="none")
    for start in range(0, table.num_rows, rows):
        sink = io.BytesIO()
        pacsv.write_csv(table.slice(start, rows), sink, options)
        yield sink.getvalue().decode()


def write_replayed(path: str, answers: pa.Table, report: LogReport) -> None:
    """One Parquet file of the answers, with batch 0's provenance and the replay's record."""
    record = {"log": locations.absolute(report.log), "batches": report.batches, "queries": report.queries,
              "verified": True, "last_sha256": report.last_sha256, "last_vouched": report.last_vouched}
    metadata = {
        PROVENANCE_KEY: json.dumps(report.provenance, sort_keys=True, default=str).encode(),
        REPLAY_KEY: json.dumps(record, sort_keys=True).encode(),
    }
    sink = io.BytesIO()
    pq.write_table(answers.replace_schema_metadata(metadata), sink, **LOG_WRITE_OPTIONS)
    write_atomic(path, sink.getvalue())
