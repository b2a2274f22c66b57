"""Subsample-and-aggregate, answering side: votes on the workers, the coordinator in the driver.

Algorithm 5, steps 6-11 of papers/001. The driver reads the query batches (public) a few ahead;
a query equal to an earlier one of the session's stream, in an earlier batch or its own, gets that
query's outcome (:mod:`pcqr.pipeline.public_log.answered`: no test, no budget); of the rest, the
ones the gate can still test (:attr:`pcqr.pipeline.gates.gate.Gate.capacity`, less the fresh
queries of the batches ahead of them) are voted on by Dask tasks (:func:`plan_votes`: a query
the gate will not use costs no model evaluation, issue 47). Vote counts come back to the driver and
pass, strictly in query order, through the session's one gate (whichever ``params.gate`` names:
:mod:`pcqr.pipeline.gates.registry`). Each
batch is committed in the order of :mod:`pcqr.pipeline.session.commit` (pending copy, state,
public log), so whatever instant the process dies nothing released is ever
re-answered differently, c never goes backwards and a threshold is never reused.
"""
from __future__ import annotations

import collections
import contextlib
import copy
import functools
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pyarrow as pa
from distributed import Client, as_completed

from pcqr.pipeline.data import locations
from pcqr.pipeline.data.allocators import TRIM_EVERY, trim_free_memory
from pcqr.pipeline.public_log.answered import AnsweredIndex, index_from_log
from pcqr.pipeline.data.cluster import hold
from pcqr.pipeline.session.committer import Committer, Handover
from pcqr.pipeline.data.datasets import QUERY_ID, Dataset, Part
from pcqr.pipeline.budget.overlap import Found, Reach
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.report.evaluation import score
from pcqr.pipeline.session.inputs import content_identity
from pcqr.pipeline.public_log.batches import (
    ABSTAINED,
    ANSWERED,
    DUPLICATE_CODE,
    FLIPPED,
    FLIPPED_CODE,
    GATED_SOURCES,
    REFUSED,
    RELEASED_MODEL,
    RELEASED_MODEL_CODE,
    SOURCE_NAMES,
    STUDENT,
    STUDENT_CODE,
    batch_table,
    sha256,
)
from pcqr.pipeline.privacy.keyed_draws import SSPP, KeyedWords
from pcqr.pipeline.privacy.noise import NoiseSource
from pcqr.pipeline.session.query_batches import Batch, check_queries, overlapping_groups, part_ids, read_ahead, repeated_id
from pcqr.pipeline.session.vote_demand import Planned, VoteDemand
from pcqr.pipeline.session.book import SessionBook
from pcqr.pipeline.session.progress import LOGGING, Reporter
from pcqr.pipeline.gates.gate import Gate, PublicRecord
from pcqr.pipeline.gates.registry import open_gate
from pcqr.pipeline.session.state import SessionState, save_session
from pcqr.pipeline.models.votes import Ensemble

#: The crash-safe commit of pcqr.pipeline.session.commit. Only the overhead benchmark turns it off.
DURABLE = True
#: The most query rows of the batches in flight (read ahead, voted on, not yet released; at least two
#: batches): the driver holds their tables and feature matrices. Two batches of the default 10^5 rows:
#: one released while the next one's votes are counted (a batch's votes are split among the threads).
WINDOW_ROWS = 2**18
_GATED = tuple(SOURCE_NAMES.index(name) for name in GATED_SOURCES)  # the codes of the teacher's answers


@dataclass
class ReleaseCounts:
    answered: int = 0
    abstained: int = 0
    refused: int = 0
    released_model: int = 0  # of the answered: by h_priv (universal mode), at no privacy cost
    duplicates: int = 0  # of the answered: the logged answer of an earlier identical query
    flipped: int = 0  # of the answered (guess gate): 1 - g(x), each one of the T instances
    student: int = 0  # of the answered: by the student after the halt (--after-halt student), free
    student_taught: int | None = None  # the teacher answers the student learnt from (None: not fitted)
    batches: int = 0
    correct: int = 0
    evaluated: int = 0  # answered queries the truth covers
    truth_missing: int = 0  # answered queries the truth does not cover
    halted: bool = False
    voted: int = 0  # queries whose votes the workers counted (fresh ones the gate could still test)

    def add(self, status: np.ndarray, source: np.ndarray) -> None:
        self.answered += int(np.count_nonzero(status == ANSWERED))
        self.abstained += int(np.count_nonzero(status == ABSTAINED))
        self.refused += int(np.count_nonzero(status == REFUSED))
        self.released_model += int(np.count_nonzero(source == RELEASED_MODEL_CODE))
        self.duplicates += int(np.count_nonzero(source == DUPLICATE_CODE))
        self.flipped += int(np.count_nonzero(source == FLIPPED_CODE))
        self.student += int(np.count_nonzero(source == STUDENT_CODE))
        self.batches += 1


@dataclass(frozen=True)
class Validated:
    """What the validation pass found: the queries' content identity
    (:func:`pcqr.pipeline.session.inputs.content_identity`), the misuse guard's findings (None
    without a guard) and each part's chunk read checks by its start (the answer loop's read is
    checked against them: :func:`pcqr.pipeline.session.query_batches.query_chunks`)."""

    identity: str
    found: list[Found] | None
    shares: dict[int, np.ndarray]


def validate_queries(client: Client, queries: Dataset, parts: list[Part], rows: int, seed: int,
                     reach: Reach | None = None, on_part: Callable[[int], None] | None = None) -> Validated:
    """Check every query part's values on the workers (in chunks of ``rows``) before anything is
    released: the queries' content identity, each chunk's read check under the session's row-key
    ``seed`` and, with ``reach``, the
    misuse guard's findings per chunk, from the same read
    (:meth:`pcqr.pipeline.budget.overlap.OverlapCheck.verdict` takes them). ``on_part(1)`` as each
    part is checked (the progress of a long pass)."""
    futures = [client.submit(check_queries, part, queries.features, queries.id_column, rows, reach, seed, pure=False)
               for part in parts]
    done = {}
    for future, result in as_completed(futures, with_results=True):
        done[future.key] = result
        if on_part is not None:
            on_part(1)
    counted = [done[future.key] for future in futures]
    # an id can repeat across parts only where their id ranges overlap: only those parts' ids are read
    # again and come to the driver (none when the ids ascend through the files), so neither the
    # workers' memory nor the driver's grows with the queries
    for group in overlapping_groups([(c[2], c[3]) for c in counted]):
        assert queries.id_column is not None  # row positions never overlap
        ids = np.sort(np.concatenate(client.gather(client.map(part_ids, [parts[i] for i in group],
                                                              id_column=queries.id_column, rows=rows, pure=False))))
        if (repeated := repeated_id(ids)) is not None:
            raise PcqrError(f"--queries {queries.uri}: --id-column {queries.id_column!r} repeats query id {repeated} "
                            "across files or parts; each query needs its own id (the log and --truth join answers by it)")
    identity = content_identity(sum(c[0] for c in counted), sum(c[1] for c in counted))
    return Validated(identity, None if reach is None else [found for c in counted for found in c[4]],
                     {part.start: c[5] for part, c in zip(parts, counted)})


class UniversalSwitch:
    """Step 3 of A_UnvPrivCl inside the answer loop: when the session has passed m_o queries
    through the coordinator, release h_priv and answer with it from then on.

    Order of writes (each atomic): the head batch up to query m_o is in the log; the
    session (with h_priv's record) is saved; then the public model file is written;
    only then does any answer of h_priv reach the log. A crash before the session
    save discards an h_priv nobody has seen, and the next run draws the same one again (its
    randomness comes from the session key); after it, the next run reuses the saved h_priv and
    rewrites the model file if missing.
    """

    def __init__(self, client: Client, session: SessionState, state_dir: str, private: Dataset | None, noise: NoiseSource):
        universal = session.plan().universal
        assert universal is not None
        self.client, self.session, self.state_dir, self.private, self.noise = client, session, state_dir, private, noise
        self.params = universal
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
        from pcqr.pipeline.mechanisms.universal import release_classifier
        from pcqr.pipeline.public_log.batches import public_sample

        session = self.session
        assert session.log_dir is not None and self.private is not None
        public = public_sample(session.log_dir, session.features, self.params.public_queries)
        # the selection's randomness is the session key's (drawn at training): a run killed before
        # the save below draws the same h_priv again (privacy/keyed_draws.py)
        selection = KeyedWords(session.sparse_vector.key, SSPP, self.noise.private)
        _, record = release_classifier(
            self.client, self.params, session.learner["hypothesis"], self.private, public, selection
        )
        session.released = record
        session.noise_state = getattr(self.noise, "state", lambda: None)()
        save_session(self.state_dir, session)  # h_priv is fixed before anyone can see it
        self._load()

    def _load(self) -> None:
        from pcqr.pipeline.hypotheses import hypothesis_from_dict
        from pcqr.pipeline.mechanisms.universal import RELEASED_MODEL_FILE
        from pcqr.pipeline.models.released import encode_model, write_model

        record = self.session.released
        assert record is not None and self.session.log_dir is not None
        path = locations.join(self.session.log_dir, RELEASED_MODEL_FILE)
        if not locations.exists(path):
            write_model(path, record)
        self.hypothesis = hypothesis_from_dict(record["hypothesis"])
        self.provenance = {"file": RELEASED_MODEL_FILE, "sha256": sha256(encode_model(record))}

    def rows_before(self) -> int | None:
        """How many of the next queries still go through the coordinator (None: all)."""
        return None if self.at is None else max(0, self.at - self.session.processed)


class AfterHalt:
    """``--after-halt student``: the student distilled from the log answers the queries a halted
    session would refuse (pcqr.pipeline.session.distillation: post-processing, free).

    Fitted once, at the first query that needs it, on the teacher's answers of the committed log
    plus those of the batch in hand before that query: all the teacher ever released, since it
    releases nothing after the halt. A resumed run fits it again on the same rows, in the same order.
    """

    def __init__(self, learner: dict[str, Any], log_dir: str, features: list[str], modules: tuple[str, ...],
                 reporter: Reporter = LOGGING):
        self.learner, self.log_dir, self.features, self.modules = learner, log_dir, features, modules
        self.reporter = reporter
        self.model: Any = None
        self.taught = 0  # teacher answers it learnt from (0: none to learn from, queries stay refused)
        self.provenance: dict[str, Any] = {}

    def fit(self, batches: int, X: np.ndarray, y: np.ndarray) -> None:
        """Fit on the first ``batches`` log batches' teacher answers, then (X, y) from the batch in hand."""
        from pcqr.pipeline.session.distillation import TeacherAnswers, fit_on_teacher, teacher_answers
        from pcqr.pipeline.gates.public_guess import STUDENT_ROWS

        logged = teacher_answers(self.log_dir, self.features, batches)
        room = max(0, STUDENT_ROWS - logged.y.size)
        answers = TeacherAnswers(np.concatenate([logged.X, X[:room]]), np.concatenate([logged.y, y[:room]]),
                                 logged.total + y.size)
        self.taught = int(answers.y.size)
        self.provenance = {"learner": self.learner, "teacher_answers": self.taught}
        if self.taught:
            try:
                chosen, self.model = fit_on_teacher(answers, self.learner, self.modules, self.reporter)
            except PcqrError:
                raise
            except Exception as exc:  # noqa: BLE001 -- a continuing session's default student is first checked here
                raise PcqrError(
                    f"the after-halt student {self.learner['name']} failed to fit on the released answers "
                    f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); nothing of this "
                    "batch was released: run again with --after-halt refuse, or name another --student-learner"
                ) from None
            if chosen != self.learner:  # cross-validated: the learner the answers chose
                self.provenance["chosen"] = chosen

    def predict(self, X: np.ndarray) -> np.ndarray:
        return np.asarray(self.model.predict(X), dtype=np.int8)


def refuses_every_query(gate: Gate) -> bool:
    """Whether the gate refuses every later fresh query whatever its votes: its T instances are
    spent (halted), or it has tested its m = queries_max queries (``--labels M``: after the first M;
    each gate's test caps its queries at m: pcqr.pipeline.gates.sparse_vector.SparseVector._run)."""
    return gate.capacity == 0


def release_answers(
    client: Client,
    session: SessionState,
    state_dir: str,
    ensemble: Ensemble,
    queries: Dataset,
    batch_rows: int,
    noise: NoiseSource,
    fallback_label: int | None = None,
    truth: Callable[[np.ndarray], np.ndarray] | None = None,
    on_batch: Callable[[int], None] | None = None,
    private: Dataset | None = None,
    skip: int = 0,
    extra_provenance: dict[str, Any] | None = None,
    *,
    book: SessionBook,
    validated: Validated,
    index: AnsweredIndex | None = None,
    modules: tuple[str, ...] = (),
    after_halt: dict[str, Any] | None = None,
    reporter: Reporter = LOGGING,
) -> ReleaseCounts:
    """Answer the queries of ``queries`` after its first ``skip`` rows (already committed by an
    earlier run), in order; commit each log batch (to ``book``, the session's ledger row, first);
    keep the session's state. ``validated``: the validation pass's findings (every batch read here
    is checked against its chunk shares). ``index``: the answered queries of the session's verified
    log (:func:`pcqr.pipeline.public_log.answered.index_from_log`; built here if not given).
    ``after_halt``: the learner ({"name", "params"}) of the student that answers what the halted
    session would refuse (:class:`AfterHalt`, its fit a phase of ``reporter``); None: refused.

    In universal mode ``private`` is the session's private dataset (read by the
    workers for A_SSPP when the switch comes). ``modules``: the operator's allowed learner modules
    (the guess gate's student).
    """
    assert session.log_dir is not None
    log_dir: str = session.log_dir
    parts = [p for p in queries.parts(batch_rows) if p.start + p.rows > skip]  # validated by the caller
    gate = session_gate(session, modules)
    switch = UniversalSwitch(client, session, state_dir, private, noise) if session.universal else None
    late = AfterHalt(after_halt, log_dir, session.features, modules, reporter) if after_halt is not None else None
    if switch is not None and switch.due():
        switch.run()  # the previous run stopped between the last coordinator batch and the switch
    if index is None:
        index = index_from_log(log_dir, session.features, session.dedupe_seed, session.next_batch, session.last_hash,
                               spill=state_dir, classes=session.params.classes)
    if index.classes != session.params.classes:  # its layout packs the session's classes and abstention
        raise RuntimeError(f"internal error: an answered-query index of {index.classes} classes for a session "
                           f"of {session.params.classes}")
    abstained = index.abstained  # the outcome the index holds for an abstention (c; 2 for two classes)
    # a task, not scatter: Dask can recompute it if every worker holding the models dies
    shared = hold(client, ensemble) if switch is None or not switch.done else None
    # Batches in flight (read, their votes asked for, not yet released): enough that no worker
    # thread idles, few enough that the driver holds a bounded number of batches.
    threads = max(1, sum(client.nthreads().values()))
    demand = VoteDemand(client, shared, threads, index)
    window: collections.deque[Planned] = collections.deque()
    depth = min(threads + 2, max(2, WINDOW_ROWS // batch_rows))
    counts = ReleaseCounts()
    provenance = session.provenance()
    provenance["fallback_label"] = fallback_label
    provenance.update(extra_provenance or {})  # e.g. allow_private_overlap (jobs/answer.py)
    id_column = queries.id_column or QUERY_ID
    features = list(queries.features)
    seed = session.dedupe_seed

    def plan(batch: Batch) -> Planned:
        if switch is not None and switch.done:
            return demand.plan(batch, 0)
        before = switch.rows_before() if switch is not None else None
        return demand.plan(batch, gate.capacity, before)

    def emit(table: pa.Table, status: np.ndarray, label: np.ndarray, source: np.ndarray, keys: np.ndarray) -> None:
        """One log batch, handed to the committer (pcqr.pipeline.session.committer: the steps of
        pcqr.pipeline.session.commit, in order, while the coordinator tests the next batches)."""
        batch_provenance = provenance
        if switch is not None and switch.done and np.any(source == RELEASED_MODEL_CODE):
            batch_provenance = {**provenance, "released_model": switch.provenance}
        if late is not None and np.any(source == STUDENT_CODE):
            batch_provenance = {**batch_provenance, "student": late.provenance}
        if session.next_batch % TRIM_EVERY == 0:  # the free heap handed back (flat memory over long streams)
            trim_free_memory()
        log = batch_table(table, id_column, features, status, label, session.next_batch, fallback_label, source)
        counts.add(status, source)
        _advance(session, status, label, source, noise)
        # committed in the committer's thread, from a copy of the session as this batch leaves it
        committer.put(Handover(log, batch_provenance, copy.deepcopy(session)))
        if keys.shape[0]:  # the batch's fresh outcomes (test() found none of them in the index)
            kept = np.flatnonzero(((status == ANSWERED) | (status == ABSTAINED)) & (source != DUPLICATE_CODE))
            index.add(keys[kept], np.where(status[kept] == ABSTAINED, abstained, label[kept]), absent=True)
        if truth is not None:
            answered = status == ANSWERED
            expected = truth(log.column("query_id").to_numpy())
            correct, covered, missing = score(expected[answered], label[answered])
            counts.correct += correct
            counts.evaluated += covered
            counts.truth_missing += missing
        if on_batch is not None:
            on_batch(len(status))

    def test(X: Callable[[], np.ndarray], values: np.ndarray, voted: np.ndarray, found: np.ndarray,
             outcome: np.ndarray, origin: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A query equal to an earlier one of the stream gets its outcome; every other one goes
        through the session's gate (its copies later in the batch, ``origin``, get what it got)."""
        n = values.shape[0]
        status = np.where(found & (outcome == abstained), ABSTAINED, ANSWERED).astype(np.int8)
        label = np.where(found & (outcome != abstained), outcome, 0).astype(np.int8)
        source = np.full(n, DUPLICATE_CODE, dtype=np.int8)
        rest = np.flatnonzero(~found)
        if not rest.size:
            return status, label, source
        first = origin[rest] == rest
        tested = rest[first]
        capacity = gate.capacity
        if not voted[tested[:capacity]].all():  # pcqr.pipeline.session.vote_demand's promise
            raise RuntimeError("internal error: the gate would test a query whose votes were not counted; "
                               "nothing of this batch was released")
        released = gate.release(values[tested], ensemble.size, lambda: X()[tested])
        if np.any((released.status != REFUSED) & ~voted[tested]):
            raise RuntimeError("internal error: the gate tested a query whose votes were not counted; "
                               "nothing of this batch was released")
        status[tested], label[tested], source[tested] = released.status, released.label, released.source
        if late is not None and np.any(released.status == REFUSED):
            student_answers(X(), status, label, source)
        copies = rest[~first]
        if copies.size:  # the same query again in this batch (a row before it): what its first row got
            of = origin[copies]
            status[copies], label[copies] = status[of], label[of]
            source[copies] = np.where(status[of] == REFUSED, source[of], DUPLICATE_CODE)
        return status, label, source

    def student_answers(X: np.ndarray, status: np.ndarray, label: np.ndarray, source: np.ndarray) -> None:
        """After the halt: the student answers what the session refuses (fitted at the first refusal)."""
        assert late is not None
        refused = np.flatnonzero(status == REFUSED)
        if not late.provenance:  # not fitted yet (fitted once; on no teacher answers it stays None)
            settle()  # it reads the committed log's batches
            before = np.arange(refused[0])
            taught = before[(status[before] == ANSWERED) & np.isin(source[before], _GATED)]
            late.fit(session.next_batch, X[taught], label[taught])
        if late.model is not None:
            status[refused], label[refused], source[refused] = ANSWERED, late.predict(X[refused]), STUDENT_CODE

    def release(planned: Planned) -> None:
        """A planned batch's queries in order: through the coordinator until the switch, by h_priv after it."""
        demand.released(planned)
        batch = planned.batch
        table, keys = batch.table, batch.keys
        matrix = functools.cache(batch.matrix)  # made once, if a gate, the student or h_priv reads it
        values, voted = planned.votes(session.params.classes)
        found, outcome = planned.settled(index)
        start = 0
        while start < table.num_rows:
            if switch is not None and switch.done:
                n = table.num_rows - start
                labels = switch.hypothesis.predict(matrix()[start:])
                emit(table.slice(start), np.full(n, ANSWERED, dtype=np.int8), np.asarray(labels, dtype=np.int8),
                     np.full(n, RELEASED_MODEL_CODE, dtype=np.int8), np.zeros(0, dtype=np.uint64))
                return
            before = switch.rows_before() if switch is not None else None
            take = table.num_rows - start if before is None else min(table.num_rows - start, before)
            rows = slice(start, start + take)
            # (only a batch's first slice reaches the coordinator: a copy's first row is in it too)
            status, label, source = test(lambda: matrix()[rows], values[rows], voted[rows], found[rows],
                                         outcome[rows], planned.origin[rows])
            emit(table.slice(start, take), status, label, source, keys[rows])
            start += take
            if switch is not None and switch.due():
                settle()  # the switch reads T_pub from the log and saves the session
                switch.run()
        if gate.capacity == 0:  # halted (or m tested): the votes of the batches ahead will not be read
            for later in window:
                demand.cancel(later)

    def settle() -> None:
        """Every batch handed over committed; the session's hash chain as the log holds it."""
        committer.drain()
        session.last_hash = committer.last_hash

    trim_free_memory()  # what the validation pass freed
    committer = Committer(state_dir, log_dir, book, session.last_hash, DURABLE)
    with contextlib.closing(committer), contextlib.closing(
            read_ahead(parts, features, queries.id_column, batch_rows, skip, seed, validated.shares)) as batches:
        for batch in batches:
            window.append(plan(batch))
            while len(window) >= depth:
                release(window.popleft())
        while window:
            release(window.popleft())
        settle()
    counts.halted = gate.halted and (switch is None or not switch.done)
    counts.student_taught = late.taught if late is not None and late.provenance else None
    counts.voted = demand.voted
    return counts


def session_gate(session: SessionState, modules: tuple[str, ...] = ()) -> Gate:
    """The session's gate (whichever its parameters name), from its private state and its public
    record: the guess gate's student learns from the log, with the operator's allowed ``modules``."""
    record = None if session.log_dir is None else PublicRecord(
        session.log_dir, tuple(session.features), session.next_batch, session.guess, modules)
    return open_gate(session.params, session.sparse_vector, record)


def _advance(session: SessionState, status: np.ndarray, label: np.ndarray, source: np.ndarray,
             noise: NoiseSource) -> None:
    """The session as one more batch leaves it, but for the batch's hash (set at its commit)."""
    session.pending_batch = session.next_batch
    session.next_batch += 1
    session.noise_state = getattr(noise, "state", lambda: None)()
    for code, name in ((ANSWERED, "answered"), (ABSTAINED, "abstained"), (REFUSED, "refused")):
        session.totals[name] += int(np.count_nonzero(status == code))
    if session.released_ones is not None:
        session.released_ones += int(np.count_nonzero((status == ANSWERED) & (label == 1)))
    for code, name in ((RELEASED_MODEL_CODE, RELEASED_MODEL), (DUPLICATE_CODE, "duplicates"), (FLIPPED_CODE, FLIPPED)):
        session.totals[name] = session.totals.get(name, 0) + int(np.count_nonzero(source == code))
    students = int(np.count_nonzero(source == STUDENT_CODE))
    if students or STUDENT in session.totals:  # only sessions whose student has answered show the key
        session.totals[STUDENT] = session.totals.get(STUDENT, 0) + students
    if session.input is not None:
        session.input["done"] += len(status)
