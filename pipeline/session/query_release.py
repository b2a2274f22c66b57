"""Subsample-and-aggregate, answering side: votes on the workers, the coordinator in the driver.

Algorithm 5, steps 6-11 of papers/001. Query batches are read and voted on by
Dask tasks, pipelined a few batches ahead; their vote counts come back to the
driver and pass, strictly in query order, through the session's one gate (whichever
``params.gate`` names: :mod:`pcqr.pipeline.gates.registry`). A query equal to one
already answered gets the logged answer instead (:mod:`pcqr.pipeline.public_log.answered`). Each
batch is committed in the order of :mod:`pcqr.pipeline.session.commit` (pending copy, state,
public log), so whatever instant the process dies nothing released is ever
re-answered differently, c never goes backwards and a threshold is never reused.
"""
from __future__ import annotations

import contextlib
import copy
import functools
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pyarrow as pa
from distributed import Client, Future

from pcqr.pipeline.data import locations
from pcqr.pipeline.data.allocators import TRIM_EVERY, trim_free_memory
from pcqr.pipeline.public_log.answered import AnsweredIndex, index_from_log
from pcqr.pipeline.data.cluster import hold
from pcqr.pipeline.session.committer import Committer, Handover
from pcqr.pipeline.data.datasets import QUERY_ID, Dataset, Part, feature_matrix
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
from pcqr.pipeline.session.query_batches import (
    LABELS, REFUSED_ALL, VOTES, Values, check_and_vote, check_queries, check_same_rows, model_batch,
    overlapping_groups, part_ids, read_ahead, refused_batch, repeated_id, vote_batch,
)
from pcqr.pipeline.session.book import SessionBook
from pcqr.pipeline.gates.gate import Gate, PublicRecord
from pcqr.pipeline.gates.registry import open_gate
from pcqr.pipeline.session.state import SessionState, save_session
from pcqr.pipeline.models.votes import Ensemble

#: The crash-safe commit of pcqr.pipeline.session.commit. Only the overhead benchmark turns it off.
DURABLE = True
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

    def add(self, status: np.ndarray, source: np.ndarray) -> None:
        self.answered += int(np.count_nonzero(status == ANSWERED))
        self.abstained += int(np.count_nonzero(status == ABSTAINED))
        self.refused += int(np.count_nonzero(status == REFUSED))
        self.released_model += int(np.count_nonzero(source == RELEASED_MODEL_CODE))
        self.duplicates += int(np.count_nonzero(source == DUPLICATE_CODE))
        self.flipped += int(np.count_nonzero(source == FLIPPED_CODE))
        self.student += int(np.count_nonzero(source == STUDENT_CODE))
        self.batches += 1


#: Queries of a stream's first parts whose votes are counted on the validation pass's read (12 bytes a
#: query held until the loop takes them: at most 24 MiB; the rest are read again by the loop's tasks).
EARLY_ROWS = 2**21


class EarlyVotes:
    """The votes and row keys of a continuing session's first query parts (up to EARLY_ROWS queries),
    counted on the validation pass's own read (:func:`pcqr.pipeline.session.query_batches.check_and_vote`),
    so that a stream of about 10^6 queries is read once on the workers (issue 32). They are private and
    reach the coordinator only, in the answer loop, after the whole pass, the misuse guard and every
    other check: nothing is released earlier than before. ``shared`` is the ensemble held on the
    cluster, which the loop's own vote tasks use too."""

    def __init__(self, client: Client, ensemble: Ensemble, seed: int) -> None:
        self.shared, self.seed = hold(client, ensemble), seed
        self._by_start: dict[int, Values] = {}

    def parts(self, parts: list[Part]) -> set[int]:
        """The indices of ``parts`` voted on the validation pass: the first ones, up to EARLY_ROWS queries."""
        chosen, rows = set(), 0
        for i, part in enumerate(parts):
            rows += part.rows
            if rows > EARLY_ROWS:
                break
            chosen.add(i)
        return chosen

    def keep(self, part: Part, values: Values) -> None:
        self._by_start[part.start] = values

    def take(self, part: Part) -> Values | None:
        """The part's votes and keys if the validation pass counted them (once: then forgotten)."""
        return self._by_start.pop(part.start, None)


class _Ready:
    """A task result already in hand, in place of its future."""

    def __init__(self, values: Values) -> None:
        self.values = values

    def result(self) -> Values:
        return self.values


def validate_queries(client: Client, queries: Dataset, parts: list[Part], rows: int,
                     reach: Reach | None = None, early: EarlyVotes | None = None) -> tuple[str, list[Found] | None]:
    """Check every query part's values on the workers (in chunks of ``rows``) before anything is
    released; the queries' content identity (:func:`pcqr.pipeline.session.inputs.content_identity`)
    and, with ``reach``, the misuse guard's findings per chunk, from the same read
    (:meth:`pcqr.pipeline.budget.overlap.OverlapCheck.verdict` takes them). With ``early``, the first
    parts' votes are counted on that read too and kept there for the answer loop."""
    args = (queries.features, queries.id_column, rows, reach)
    voted = early.parts(parts) if early is not None else set()
    futures = [client.submit(check_and_vote, part, *args, early.shared, early.seed, pure=False)  # type: ignore[union-attr]
               if i in voted else client.submit(check_queries, part, *args, pure=False) for i, part in enumerate(parts)]
    counted = []
    for i, result in enumerate(client.gather(futures)):
        if i in voted:  # (checked, the part's votes and keys)
            early.keep(parts[i], result[1])  # type: ignore[union-attr]
            result = result[0]
        counted.append(result)
    # an id can repeat across parts only where their id ranges overlap: only those parts' ids are read
    # again and come to the driver (none when the ids ascend through the files), so neither the
    # workers' memory nor the driver's grows with the queries
    for group in overlapping_groups([(lo, hi) for _, _, lo, hi, _ in counted]):
        assert queries.id_column is not None  # row positions never overlap
        ids = np.sort(np.concatenate(client.gather(client.map(part_ids, [parts[i] for i in group],
                                                              id_column=queries.id_column, rows=rows, pure=False))))
        if (repeated := repeated_id(ids)) is not None:
            raise PcqrError(f"--queries {queries.uri}: --id-column {queries.id_column!r} repeats query id {repeated} "
                            "across files or parts; each query needs its own id (the log and --truth join answers by it)")
    identity = content_identity(sum(c[0] for c in counted), sum(c[1] for c in counted))
    return identity, (None if reach is None else [found for c in counted for found in c[4]])


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

    def __init__(self, learner: dict[str, Any], log_dir: str, features: list[str], modules: tuple[str, ...]):
        self.learner, self.log_dir, self.features, self.modules = learner, log_dir, features, modules
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
                chosen, self.model = fit_on_teacher(answers, self.learner, self.modules)
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
    each gate's test caps its queries at m: pcqr.pipeline.gates.sparse_vector.SparseVector._run).
    The votes of such a part are then not computed: only its repeats get (logged) answers."""
    return gate.halted or gate.state.queries_seen >= gate.params.queries_max


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
    index: AnsweredIndex | None = None,
    modules: tuple[str, ...] = (),
    after_halt: dict[str, Any] | None = None,
    early: EarlyVotes | None = None,
) -> ReleaseCounts:
    """Answer the queries of ``queries`` after its first ``skip`` rows (already committed by an
    earlier run), in order; commit each log batch (to ``book``, the session's ledger row, first);
    keep the session's state. ``index``: the answered queries of the session's verified log
    (:func:`pcqr.pipeline.public_log.answered.index_from_log`; built here if not given).
    ``after_halt``: the learner ({"name", "params"}) of the student that answers what the halted
    session would refuse (:class:`AfterHalt`); None: refused. ``early``: the first parts' votes,
    counted on the validation pass's read (:class:`EarlyVotes`).

    In universal mode ``private`` is the session's private dataset (read by the
    workers for A_SSPP when the switch comes). ``modules``: the operator's allowed learner modules
    (the guess gate's student).
    """
    assert session.log_dir is not None
    log_dir: str = session.log_dir
    parts = [p for p in queries.parts(batch_rows) if p.start + p.rows > skip]  # validated by the caller
    gate = session_gate(session, modules)
    switch = UniversalSwitch(client, session, state_dir, private, noise) if session.universal else None
    late = AfterHalt(after_halt, log_dir, session.features, modules) if after_halt is not None else None
    if switch is not None and switch.due():
        switch.run()  # the previous run stopped between the last coordinator batch and the switch
    if index is None:
        index = index_from_log(log_dir, session.features, session.dedupe_seed, session.next_batch, session.last_hash,
                               spill=state_dir)
    # a task, not scatter: Dask can recompute it if every worker holding the models dies
    assert early is None or switch is None  # early votes are for the coordinator's own stream (not universal mode)
    shared = (early.shared if early is not None else hold(client, ensemble)) if switch is None or not switch.done else None
    # Parts in flight: at least one more than the workers' threads (none idles), at most 2 per
    # thread + 2, and beyond the first ones no more rows than that many log batches: the vote
    # counts waiting in the driver stay bounded however large the files' row groups are.
    threads = max(1, sum(client.nthreads().values()))
    most_parts, most_rows = 2 * threads + 2, (2 * threads + 2) * batch_rows
    pending: list[tuple[Future | _Ready, str, int]] = []
    ahead = 0  # parts submitted so far
    counts = ReleaseCounts()
    provenance = session.provenance()
    provenance["fallback_label"] = fallback_label
    provenance.update(extra_provenance or {})  # e.g. allow_private_overlap (jobs/answer.py)
    id_column = queries.id_column or QUERY_ID
    features = list(queries.features)
    seed = session.dedupe_seed

    def fill() -> None:
        nonlocal ahead
        while ahead < len(parts) and (len(pending) <= threads or (
                len(pending) < most_parts and sum(p[2] for p in pending) + parts[ahead].rows <= most_rows)):
            submit(ahead)
            ahead += 1

    def submit(i: int) -> None:
        part, rows = parts[i], dict(seed=seed, rows=batch_rows, pure=False)
        if switch is not None and switch.done:
            pending.append((client.submit(model_batch, part, features, switch.hypothesis, **rows), LABELS, part.rows))
        elif refuses_every_query(gate):  # refused whatever the votes: do not compute them
            pending.append((client.submit(refused_batch, part, features, **rows), REFUSED_ALL, part.rows))
        elif early is not None and (counted := early.take(part)) is not None:  # on the validation pass's read
            pending.append((_Ready(counted), VOTES, part.rows))
        else:
            pending.append((client.submit(vote_batch, part, features, shared, **rows), VOTES, part.rows))

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
        if keys.shape[0]:
            fresh = (status == ANSWERED) & (source != DUPLICATE_CODE)  # test() found none of them in the index
            index.add(keys[fresh], label[fresh], absent=True)
        if truth is not None:
            answered = status == ANSWERED
            expected = truth(log.column("query_id").to_numpy())
            correct, covered, missing = score(expected[answered], label[answered])
            counts.correct += correct
            counts.evaluated += covered
            counts.truth_missing += missing
        if on_batch is not None:
            on_batch(len(status))

    def test(table: pa.Table, values: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Repeats get their logged answer; every other query goes through the session's gate."""
        found, logged = index.lookup(keys)
        status = np.full(values.shape[0], ANSWERED, dtype=np.int8)
        label = logged.copy()
        source = np.full(values.shape[0], DUPLICATE_CODE, dtype=np.int8)
        X = functools.cache(lambda: feature_matrix(table, features, "query batch"))  # converted once, if needed
        fresh = np.flatnonzero(~found)
        if fresh.size:
            released = gate.release(values[fresh], ensemble.size, lambda: X()[fresh])
            status[fresh], label[fresh], source[fresh] = released.status, released.label, released.source
        if late is not None and np.any(status == REFUSED):
            student_answers(X(), status, label, source)
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

    def release(table: pa.Table, values: np.ndarray, kind: str, keys: np.ndarray) -> None:
        """Queries in order: through the coordinator until the switch, by h_priv after it."""
        start = 0
        while start < table.num_rows:
            if switch is not None and switch.done:
                rest = table.slice(start)
                labels = values[start:] if kind == LABELS else switch.hypothesis.predict(
                    feature_matrix(rest, features, "query batch"))
                n = rest.num_rows
                emit(rest, np.full(n, ANSWERED, dtype=np.int8), np.asarray(labels, dtype=np.int8),
                     np.full(n, RELEASED_MODEL_CODE, dtype=np.int8), np.zeros(0, dtype=np.uint64))
                return
            before = switch.rows_before() if switch is not None else None
            take = table.num_rows - start if before is None else min(table.num_rows - start, before)
            status, label, source = test(table.slice(start, take), values[start : start + take],
                                         keys[start : start + take])
            emit(table.slice(start, take), status, label, source, keys[start : start + take])
            start += take
            if switch is not None and switch.due():
                settle()  # the switch reads T_pub from the log and saves the session
                switch.run()

    def settle() -> None:
        """Every batch handed over committed; the session's hash chain as the log holds it."""
        committer.drain()
        session.last_hash = committer.last_hash

    trim_free_memory()  # what the validation pass freed
    fill()
    at, start = -1, 0  # the part whose task results are in hand; its next row
    committer = Committer(state_dir, log_dir, book, session.last_hash, DURABLE)
    # a task reads whole row groups; log batches are --batch-size queries, read here again (ahead)
    with contextlib.closing(committer), \
            contextlib.closing(read_ahead(parts, features, queries.id_column, batch_rows, skip, seed)) as batches:
        for i, table, own in batches:
            while at < i:  # the first batch of part i: its task's results, in submission order
                future, kind, _ = pending.pop(0)
                values, keys = future.result()
                fill()
                at += 1
                start = max(0, skip - parts[at].start)  # the first rows were committed by an earlier run
            end = start + table.num_rows
            check_same_rows(own, keys[start:end], parts[i].file)
            release(table, values[start:end], kind, keys[start:end])
            start = end
        settle()
    counts.halted = gate.halted and (switch is None or not switch.done)
    counts.student_taught = late.taught if late is not None and late.provenance else None
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
