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
import os
from typing import Any, Callable, Sequence

import numpy as np
import pyarrow as pa
from distributed import Client, Future

from pipeline.data import Dataset, Part, feature_matrix, read_part
from pipeline.errors import PcqrError
from pipeline.log import RELEASED_MODEL, SPARSE_VECTOR, append_batch, batch_table, encode_batch, sha256
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
    released_model: int = 0  # of the answered: by h_priv (universal mode), at no privacy cost
    batches: int = 0
    correct: int = 0
    evaluated: int = 0
    halted: bool = False

    def add(self, status: np.ndarray, source: str) -> None:
        self.answered += int(np.count_nonzero(status == ANSWERED))
        self.abstained += int(np.count_nonzero(status == ABSTAINED))
        self.refused += int(np.count_nonzero(status == REFUSED))
        if source == RELEASED_MODEL:
            self.released_model += len(status)
        self.batches += 1


def validate_queries(client: Client, queries: Dataset, parts: list[Part]) -> None:
    """Check every query batch's values on the workers before anything is released."""
    futures = client.map(check_queries, parts, features=queries.features, id_column=queries.id_column, pure=False)
    for future in futures:
        future.result()


def model_batch(part: Part, features: Sequence[str], id_column: str | None, hypothesis: Any) -> tuple[pa.Table, np.ndarray]:
    """Worker: a query batch and h_priv's labels (universal mode after the switch: post-processing)."""
    table = query_table(part, features, id_column)
    return table, np.asarray(hypothesis.predict(feature_matrix(table, features, part.file)), dtype=np.int8)


VOTES, REFUSED_ALL, LABELS = "votes", "refused", "labels"


class UniversalSwitch:
    """Step 3 of A_UnvPrivCl inside the answer loop: when the session has passed m_o queries
    through the coordinator, release h_priv and answer with it from then on.

    Order of writes (each atomic): the head batch up to query m_o is in the log; the
    session (with h_priv's record) is saved; then the public model file is written;
    only then does any answer of h_priv reach the log. A crash before the session
    save discards an h_priv nobody has seen (the next run draws again); after it,
    the next run reuses the saved h_priv and rewrites the model file if missing.
    """

    def __init__(self, client: Client, session: Session, state_dir: str, private: Dataset | None, noise: NoiseSource):
        from pipeline.mechanisms.universal import UniversalParameters

        assert session.universal is not None
        self.client, self.session, self.state_dir, self.private, self.noise = client, session, state_dir, private, noise
        self.params = UniversalParameters.from_dict(session.universal)
        self.hypothesis: Any = None
        if session.released is not None:
            self._load()

    @property
    def at(self) -> int | None:
        """The query count at which the switch happens (None: never, m < m_o)."""
        return self.params.public_queries if self.params.switches else None

    @property
    def done(self) -> bool:
        return self.hypothesis is not None

    def due(self) -> bool:
        return not self.done and self.at is not None and self.session.processed >= self.at

    def run(self) -> None:
        from pipeline.mechanisms.universal import public_sample, release_classifier

        session = self.session
        assert session.log_dir is not None and self.private is not None
        public = public_sample(session.log_dir, session.features, self.params.public_queries)
        _, record = release_classifier(
            self.client, self.params, session.learner["hypothesis"], self.private, public, self.noise
        )
        session.released = record
        session.noise_state = getattr(self.noise, "state", lambda: None)()
        save_session(self.state_dir, session)  # h_priv is fixed before anyone can see it
        self._load()

    def _load(self) -> None:
        from pipeline.hypotheses import hypothesis_from_dict
        from pipeline.mechanisms.universal import RELEASED_MODEL_FILE
        from pipeline.released_model import encode_model, write_model

        record = self.session.released
        assert record is not None and self.session.log_dir is not None
        path = os.path.join(self.session.log_dir, RELEASED_MODEL_FILE)
        if not os.path.exists(path):
            write_model(path, record)
        self.hypothesis = hypothesis_from_dict(record["hypothesis"])
        self.provenance = {"file": RELEASED_MODEL_FILE, "sha256": sha256(encode_model(record))}

    def rows_before(self) -> int | None:
        """How many of the next queries still go through the coordinator (None: all)."""
        return None if self.at is None else max(0, self.at - self.session.processed)


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
    private: Dataset | None = None,
) -> ReleaseCounts:
    """Answer every query of ``queries`` in order; append the log; keep the session's state.

    In universal mode ``private`` is the session's private dataset (read by the
    workers for A_SSPP when the switch comes).
    """
    assert session.log_dir is not None
    log_dir: str = session.log_dir
    parts = queries.parts(batch_rows)  # the caller has run validate_queries on them
    coordinator = SparseVector(session.params, noise, session.sparse_vector)
    switch = UniversalSwitch(client, session, state_dir, private, noise) if session.universal else None
    if switch is not None and switch.due():
        switch.run()  # the previous run stopped between the last coordinator batch and the switch
    shared = client.scatter(ensemble, broadcast=True) if switch is None or not switch.done else None
    window = 2 * max(1, sum(client.nthreads().values())) + 2
    pending: list[tuple[Future, str]] = []
    counts = ReleaseCounts()
    provenance = session.provenance()
    provenance["fallback_label"] = fallback_label
    id_column = queries.id_column or QUERY_ID
    features = list(queries.features)

    def submit(i: int) -> None:
        args = (parts[i], queries.features, queries.id_column)
        if switch is not None and switch.done:
            pending.append((client.submit(model_batch, *args, switch.hypothesis, pure=False), LABELS))
        elif coordinator.halted:  # refused whatever the votes: do not compute them
            pending.append((client.submit(refused_batch, *args, pure=False), REFUSED_ALL))
        else:
            pending.append((client.submit(vote_batch, *args, shared, pure=False), VOTES))

    def emit(table: pa.Table, status: np.ndarray, label: np.ndarray, source: str) -> None:
        """One log batch: save the private state, then append the public file."""
        batch_provenance = provenance
        if source == RELEASED_MODEL:
            assert switch is not None
            batch_provenance = {**provenance, "released_model": switch.provenance}
        log = batch_table(table, id_column, features, status, label, session.next_batch, fallback_label, source)
        data = encode_batch(log, batch_provenance, session.last_hash)
        counts.add(status, source)
        _advance(session, status, sha256(data), noise, source)
        save_session(state_dir, session)  # private state first: c never goes backwards
        append_batch(log_dir, session.next_batch - 1, data)
        if truth is not None:
            answered = status == ANSWERED
            expected = truth(log.column("query_id").to_numpy())
            counts.correct += int(np.count_nonzero(expected[answered] == label[answered]))
            counts.evaluated += int(np.count_nonzero(answered))
        if on_batch is not None:
            on_batch(len(status))

    def release(table: pa.Table, values: np.ndarray, kind: str) -> None:
        """Queries in order: through the coordinator until the switch, by h_priv after it."""
        start = 0
        while start < table.num_rows:
            if switch is not None and switch.done:
                rest = table.slice(start)
                labels = values[start:] if kind == LABELS else switch.hypothesis.predict(
                    feature_matrix(rest, features, "query batch"))
                emit(rest, np.full(rest.num_rows, ANSWERED, dtype=np.int8), np.asarray(labels, dtype=np.int8),
                     RELEASED_MODEL)
                return
            before = switch.rows_before() if switch is not None else None
            take = table.num_rows - start if before is None else min(table.num_rows - start, before)
            status, label = coordinator.process(values[start : start + take], ensemble.size)
            emit(table.slice(start, take), status, label, SPARSE_VECTOR)
            start += take
            if switch is not None and switch.due():
                switch.run()

    for i in range(min(window, len(parts))):
        submit(i)
    for i in range(len(parts)):
        future, kind = pending.pop(0)
        table, values = future.result()
        if i + window < len(parts):
            submit(i + window)
        # a task reads whole row groups; log batches are --batch-size queries
        for start in range(0, table.num_rows, batch_rows):
            release(table.slice(start, batch_rows), values[start : start + batch_rows], kind)
    counts.halted = coordinator.halted and (switch is None or not switch.done)
    return counts


def _advance(session: Session, status: np.ndarray, batch_hash: str, noise: NoiseSource, source: str) -> None:
    session.next_batch += 1
    session.last_hash = batch_hash
    session.noise_state = getattr(noise, "state", lambda: None)()
    for code, name in ((ANSWERED, "answered"), (ABSTAINED, "abstained"), (REFUSED, "refused")):
        session.totals[name] += int(np.count_nonzero(status == code))
    if source == RELEASED_MODEL:
        session.totals["released_model"] = session.totals.get("released_model", 0) + len(status)
