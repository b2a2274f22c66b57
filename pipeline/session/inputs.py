"""The query inputs a session has answered: resuming one after a crash, and recognising one answered
in full, so that re-running a finished ``pcqr answer`` asks nothing again.

An input is recognised by its **content identity**, computed on the workers during the validation
pass that precedes every answer (:func:`pcqr.pipeline.session.query_batches.check_queries`): the row
count and the sum mod 2^64 of a keyed 64-bit hash of every row as pcqr asks it -- the session's
feature values (as float64, -0.0 as 0.0), the query id the log records and the row's position in the
dataset (files sorted by name, then row groups). It does not depend on file names, row groups,
compression or ``--batch-size``: a copy of the file, or the same rows re-encoded, is the same input.
Any changed value, an added, removed or reordered row, or other query ids make another input.
Columns that are not features or ids are not part of it (pcqr never reads them). Two different
inputs share an identity with probability about 2^-64; what that would cost is the later one's
answers, never privacy (see below).

The session's state (private, in session.json and in the ledger's record of each commit) holds the
current input -- its identity, rows, the rows committed so far (``done``) and its first log batch --
and the identities of the last :data:`KEPT` inputs answered in full, with their log batches. Then:

* the current input, part answered (a crash, a kill): the run resumes after its last committed row
  (:mod:`pcqr.pipeline.session.commit`);
* an input answered in full before (the current one or a kept one): nothing is asked; the summary
  says how many queries were already answered, and in which log batches;
* any other input: asked from its first row, as a new part of the session's stream (a query equal
  to an answered one gets its logged answer at no cost; the others are tested).

Nothing here can gain budget or change an answer: recognising an input only ever asks *fewer*
queries, and what is asked goes through the coordinator and the commit as always. An edited
session.json can at most make pcqr skip queries or ask them again, as a new input.
"""
from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import dataclass
from typing import Any

from pcqr.pipeline.data.datasets import Dataset
from pcqr.pipeline.session.progress import LOGGING, Reporter
from pcqr.pipeline.session.query_batches import check_queries
from pcqr.pipeline.session.state import SessionState

#: Inputs answered in full that a session remembers (the most recent): a bound on session.json,
#: which is rewritten at every commit, for sessions answering many small inputs (Session.answer).
KEPT = 100
#: The most rows whose content identity the driver computes itself, before any cluster starts or any
#: model is loaded, to recognise a re-run of an input answered in full (about a second on one core).
DRIVER_IDENTITY_ROWS = 2**21
_FORMAT = "queries-v1"


def content_identity(rows: int, total: int) -> str:
    """An input's identity from its row count and the workers' summed row hashes (mod 2^64)."""
    return f"{_FORMAT}:{rows}:{total % 2**64:016x}"


@dataclass(frozen=True)
class Answered:
    """An input answered in full: its rows, the log batches that hold them and the path it was read
    from then (in session.json; a copy elsewhere is the same input)."""

    rows: int
    first_batch: int
    last_batch: int
    uri: str

    def describe(self, queries: Dataset, log_dir: str) -> str:
        """The one line a re-run prints: ``all 10,000 queries of Q were already answered in LOG ...``."""
        batches = (f"batch {self.first_batch}" if self.first_batch == self.last_batch else
                   f"batches {self.first_batch}-{self.last_batch}")
        return (f"all {self.rows:,} queries of {shlex.quote(queries.uri)} were already answered in "
                f"{shlex.quote(log_dir)} ({batches}); nothing asked")


@dataclass(frozen=True)
class Start:
    """Where a run starts in its input: after ``skip`` committed rows, or nowhere (``answered``)."""

    skip: int = 0
    answered: Answered | None = None


def legacy_fingerprint(queries: Dataset) -> str:
    """How states written before the content identity named their input: its metadata (files, row
    groups, schema). Used only to resume such a state's interrupted input."""
    described = json.dumps([list(queries.files), [list(g) for g in queries.row_groups], str(queries.schema)])
    return hashlib.sha256(described.encode()).hexdigest()


def start_point(session: SessionState | None, queries: Dataset, identity: str,
                reporter: Reporter = LOGGING) -> Start:
    """Where this run starts in ``queries`` (whose content identity is ``identity``)."""
    current = None if session is None else session.input
    if session is None:
        return Start()
    if current is not None and _same(current, queries, identity):
        done, rows = int(current["done"]), int(current["rows"])
        if done < rows:
            if done:
                reporter.note(f"resuming {shlex.quote(queries.uri)}: {done:,} of {rows:,} queries were committed "
                              "by an earlier run")
            return Start(skip=done)
        if rows and "identity" in current:
            return Start(rows, _answered(current, session.next_batch - 1))
        return Start()
    for entry in reversed(session.answered_inputs):
        if entry["identity"] == identity:
            return Start(int(entry["rows"]), _answered(entry, int(entry["last_batch"])))
    return Start()


def answered_before(session: SessionState, queries: Dataset, rows: int) -> Answered | None:
    """An input answered in full before, recognised in the driver before any cluster starts or any
    model is loaded (issue 47: a finished stream's re-run costs its read and nothing more): only for
    an input whose row count is that of an input the session answered in full, of at most
    :data:`DRIVER_IDENTITY_ROWS` rows; None otherwise, and the validation pass decides as always. The
    read is the validation pass's own check (:func:`pcqr.pipeline.session.query_batches.check_queries`,
    in chunks of ``rows``), so a bad file is refused with the same line."""
    finished = {int(entry["rows"]) for entry in session.answered_inputs}
    current = session.input
    if current is not None and "identity" in current and int(current["done"]) >= int(current["rows"]):
        finished.add(int(current["rows"]))
    if queries.rows not in finished or queries.rows > DRIVER_IDENTITY_ROWS:
        return None
    counted = [check_queries(part, queries.features, queries.id_column, rows) for part in queries.parts(rows)]
    identity = content_identity(sum(c[0] for c in counted), sum(c[1] for c in counted))
    return start_point(session, queries, identity).answered


def begin_input(session: SessionState, queries: Dataset, identity: str) -> None:
    """A new input becomes the session's current one (saved before its first batch); the input it
    replaces, if answered in full, joins the kept ones."""
    finished = session.input
    if finished is not None and "identity" in finished and int(finished["rows"]) and \
            int(finished["done"]) >= int(finished["rows"]):
        kept = [e for e in session.answered_inputs if e["identity"] != finished["identity"]]
        kept.append({"identity": finished["identity"], "uri": finished["uri"], "rows": int(finished["rows"]),
                     "first_batch": int(finished["first_batch"]), "last_batch": session.next_batch - 1})
        session.answered_inputs = kept[-KEPT:]
    session.input = {"uri": queries.uri, "identity": identity, "rows": queries.rows, "done": 0,
                     "first_batch": session.next_batch}


def _same(current: dict[str, Any], queries: Dataset, identity: str) -> bool:
    if "identity" in current:
        return bool(current["identity"] == identity)
    return bool(current.get("fingerprint") == legacy_fingerprint(queries))  # a state from before identities


def _answered(entry: dict[str, Any], last_batch: int) -> Answered:
    return Answered(int(entry["rows"]), int(entry["first_batch"]), last_batch, str(entry["uri"]))
