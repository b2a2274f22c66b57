"""Subsample-and-aggregate, answering side: votes on the workers, the coordinator in the driver.

Algorithm 5, steps 6-11 of papers/001. Query batches are read and voted on by
Dask tasks, pipelined a few batches ahead; their vote counts come back to the
driver and pass, strictly in query order, through the one
:class:`~pipeline.sparse_vector.SparseVector` coordinator. Each batch's
released answers are appended to the public log, after the session's private
state has been saved (so c never goes backwards and a threshold is never
reused, whatever instant the process dies).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import pyarrow as pa
from distributed import Client, Future

from pipeline.data import Dataset, Part, feature_matrix, read_part
from pipeline.errors import PcqrError
from pipeline.log import append_batch, batch_table, encode_batch, sha256
from pipeline.noise import NoiseSource
from pipeline.sparse_vector import ABSTAINED, ANSWERED, REFUSED, SparseVector
from pipeline.state import Session, save_session
from pipeline.votes import Ensemble

QUERY_ID = "query_id"


def query_table(part: Part, features: Sequence[str], id_column: str | None) -> pa.Table:
    """Worker: read a query part, check its features, give it a query_id column."""
    columns = [*features] + ([id_column] if id_column else [])
    table = read_part(part, columns)
    feature_matrix(table, features, part.file)  # raises on NaN / inf / null
    if id_column is None:
        ids = pa.array(np.arange(part.start, part.start + table.num_rows, dtype=np.int64))
        table = table.append_column(QUERY_ID, ids)
    elif table.column(id_column).null_count:
        raise PcqrError(f"{part.file}: query id column {id_column!r} has missing values")
    return table


def check_queries(part: Part, features: Sequence[str], id_column: str | None) -> int:
    """Worker: the validation pass over queries before any answer is released."""
    return query_table(part, features, id_column).num_rows


def vote_batch(
    part: Part, features: Sequence[str], id_column: str | None, ensemble: Ensemble
) -> tuple[pa.Table, np.ndarray]:
    """Worker: a query batch and its private vote counts ct(1)."""
    table = query_table(part, features, id_column)
    X = feature_matrix(table, features, part.file)
    return table, ensemble.count_ones(X)


def refused_batch(part: Part, features: Sequence[str], id_column: str | None) -> tuple[pa.Table, np.ndarray]:
    """Worker: a query batch of a halted session: no votes are needed, every query is refused."""
    table = query_table(part, features, id_column)
    return table, np.zeros(table.num_rows, dtype=np.int32)


@dataclass
class ReleaseCounts:
    answered: int = 0
    abstained: int = 0
    refused: int = 0
    batches: int = 0
    correct: int = 0
    evaluated: int = 0
    halted: bool = False

    def add(self, status: np.ndarray) -> None:
        self.answered += int(np.count_nonzero(status == ANSWERED))
        self.abstained += int(np.count_nonzero(status == ABSTAINED))
        self.refused += int(np.count_nonzero(status == REFUSED))
        self.batches += 1


def validate_queries(client: Client, queries: Dataset, parts: list[Part]) -> None:
    """Check every query batch's values on the workers before anything is released."""
    futures = client.map(check_queries, parts, features=queries.features, id_column=queries.id_column, pure=False)
    for future in futures:
        future.result()


def release_answers(
    client: Client,
    session: Session,
    state_dir: str,
    ensemble: Ensemble,
    queries: Dataset,
    batch_rows: int,
    noise: NoiseSource,
    fallback_label: int | None = None,
    truth: Callable[[np.ndarray], np.ndarray] | None = None,
    on_batch: Callable[[int], None] | None = None,
) -> ReleaseCounts:
    """Answer every query of ``queries`` in order; append the log; keep the session's state."""
    assert session.log_dir is not None
    log_dir: str = session.log_dir
    parts = queries.parts(batch_rows)  # the caller has run validate_queries on them
    coordinator = SparseVector(session.params, noise, session.sparse_vector)
    shared = client.scatter(ensemble, broadcast=True)
    window = 2 * max(1, sum(client.nthreads().values())) + 2
    pending: list[Future] = []
    counts = ReleaseCounts()
    provenance = session.provenance()
    provenance["fallback_label"] = fallback_label
    id_column = queries.id_column or QUERY_ID

    def submit(i: int) -> None:
        if coordinator.halted:  # refused whatever the votes: do not compute them
            task = client.submit(refused_batch, parts[i], queries.features, queries.id_column, pure=False)
        else:
            task = client.submit(vote_batch, parts[i], queries.features, queries.id_column, shared, pure=False)
        pending.append(task)

    for i in range(min(window, len(parts))):
        submit(i)
    def release(table: pa.Table, ones: np.ndarray) -> None:
        """One log batch: test, save the private state, then append the public file."""
        status, label = coordinator.process(ones, ensemble.size)
        log = batch_table(
            table, id_column, list(queries.features), status, label, session.next_batch, fallback_label
        )
        data = encode_batch(log, provenance, session.last_hash)
        counts.add(status)
        _advance(session, status, sha256(data), noise)
        save_session(state_dir, session)  # private state first: c never goes backwards
        append_batch(log_dir, session.next_batch - 1, data)
        if truth is not None:
            answered = status == ANSWERED
            expected = truth(log.column("query_id").to_numpy())
            counts.correct += int(np.count_nonzero(expected[answered] == label[answered]))
            counts.evaluated += int(np.count_nonzero(answered))
        if on_batch is not None:
            on_batch(len(status))

    for i in range(len(parts)):
        table, ones = pending.pop(0).result()
        if i + window < len(parts):
            submit(i + window)
        # a task reads whole row groups; log batches are --batch-size queries
        for start in range(0, table.num_rows, batch_rows):
            release(table.slice(start, batch_rows), ones[start : start + batch_rows])
    counts.halted = coordinator.halted
    return counts


def _advance(session: Session, status: np.ndarray, batch_hash: str, noise: NoiseSource) -> None:
    session.next_batch += 1
    session.last_hash = batch_hash
    session.noise_state = getattr(noise, "state", lambda: None)()
    for code, name in ((ANSWERED, "answered"), (ABSTAINED, "abstained"), (REFUSED, "refused")):
        session.totals[name] += int(np.count_nonzero(status == code))
