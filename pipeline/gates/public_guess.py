"""The guess gate (``--gate guess``; ALGORITHMS.md section 10, issue 13) and its public guess g(x).

The guess gate (:class:`GuessGate`) runs the session's sparse vector
(pcqr.pipeline.gates.sparse_vector.SparseVector.process_guess) on the k votes' margin toward g(x)
and releases g(x) (free) or, spending one of the T instances, 1 - g(x). Its proof needs only that g
is fixed by PUBLIC information before the query is tested: then the released label is a function of
the sparse vector's output and of public values (docs/privacy.md, "The public-guess gate"). The
guesses here are:

* ``prior``: the more frequent label among the answers already released (0 until one is, and on
  ties);
* ``student``: a learner (the session's, by default) refitted on the queries already answered and
  their released labels -- post-processing of the public log (BTT18 Theorem 4.3, PATE's student);
* ``model``: a released classifier file (``pcqr.released-classifier/1``: from ``pcqr learn`` or a
  universal session), fixed for the whole session. It must not have been fitted on the private
  data outside a charged mechanism: that is the user's statement, recorded in the provenance.

Determinism (the log and a kill/resume): the guess for the j-th released answer of the session is
a function of the released answers before it only. The student is refitted when the count of
released labels reaches a point of :func:`refit_points` and, while it is young (at most
YOUNG labels), after every charged answer (a flip: the student was wrong, and the budget pays for
each mistake, so a cold student must learn at once). Batch boundaries play no part, so a resumed
run, which rebuilds the student from the log (:meth:`Student.from_log`), guesses what an
uninterrupted one would. Fits are deterministic (``random_state`` fixed where a learner has one).
Nothing here reads private data.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import numpy as np

from pcqr.pipeline.background import Background
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.gates.gate import Features, PublicRecord, Released, SparseVectorState, source_codes
from pcqr.pipeline.gates.sparse_vector import SparseVector
from pcqr.pipeline.privacy.noise import NoiseSource
from pcqr.pipeline.privacy.subsamp import SubSampParameters
from pcqr.pipeline.public_log.batches import ANSWERED, FLIPPED, FLIPPED_CODE, GUESS, GUESS_CODE, REFUSED, released_rows

#: The guess kinds of ``--guess`` (or a path to a released model file).
GUESS_KINDS = ("prior", "student")
#: While the student has at most this many labels it is refitted after every charged answer.
YOUNG = 1000
#: The student learns from at most this many released answers (the first ones): memory and fit time.
STUDENT_ROWS = 200_000
#: How a refit's student takes over (GuessSpec.refits). IN_PLACE: at the point it is fitted at, the
#: coordinator waiting for the fit; points :func:`refit_points` (sessions created before issue 32).
#: LAGGED: points :func:`lagged_points`; a refit at a point p > YOUNG is fitted in a thread while the
#: coordinator goes on with the student before it, and takes over at the next point (after the last
#: one, a quarter later): the fits leave the coordinator's critical path.
IN_PLACE, LAGGED = "in-place", "lagged"
#: LAGGED: from here the points double (a refit of p rows is then used for the next p to 3p labels).
DOUBLING_FROM = 16_384


def refit_points() -> Iterator[int]:
    """Counts of released labels at which the student is refitted: 1, 2, 3, ... 16, then growing by
    a quarter each time (so refits cost O(n log n) in all), up to STUDENT_ROWS."""
    point = 1
    while point <= STUDENT_ROWS:
        yield point
        point = point + 1 if point < 16 else min(STUDENT_ROWS + 1, -(-point * 5 // 4))
    return


def lagged_points() -> Iterator[int]:
    """LAGGED's refit points: :func:`refit_points` below DOUBLING_FROM, then doubling, and
    STUDENT_ROWS (all the labels the student keeps). A fit's cost grows with its rows, so the large
    ones are spaced: the fits of a session add up to about 2.7 x STUDENT_ROWS rows instead of 5 x,
    on a machine whose cores the answer loop already keeps busy."""
    point = 0
    for point in refit_points():
        if point >= DOUBLING_FROM:
            break
        yield point
    while point < STUDENT_ROWS:
        yield point
        point *= 2
    yield STUDENT_ROWS


_POINTS = tuple(refit_points())
LAGGED_POINTS = tuple(lagged_points())


@dataclass(frozen=True)
class GuessSpec:
    """What g is (public: stored in session.json and in every log batch's provenance)."""

    kind: str  # "prior", "student" or "model"
    learner: dict[str, Any] | None = None  # student: {"name": ..., "params": {...}}
    model: dict[str, Any] | None = None  # model: the released classifier's record
    refits: str = IN_PLACE  # when a refit's student takes over: IN_PLACE or LAGGED (see Student)

    def to_dict(self) -> dict[str, Any]:
        found = {"kind": self.kind, "learner": self.learner, "model": self.model}
        return found if self.refits == IN_PLACE else {**found, "refits": self.refits}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GuessSpec:
        kind = data.get("kind") if isinstance(data, dict) else None
        if kind not in (*GUESS_KINDS, "model"):
            raise PcqrError(f"the session's guess kind is {kind!r}, expected prior, student or model (edited state?)")
        learner, model = data.get("learner"), data.get("model")
        if kind == "student" and not (isinstance(learner, dict) and isinstance(learner.get("name"), str)):
            raise PcqrError("the session's student guess names no learner (edited state?)")
        if kind == "model" and not (isinstance(model, dict) and isinstance(model.get("hypothesis"), dict)):
            raise PcqrError("the session's model guess holds no released model (edited state?)")
        refits = data.get("refits", IN_PLACE)
        if refits not in (IN_PLACE, LAGGED):
            raise PcqrError(f"the session's guess refits {refits!r}, expected {IN_PLACE} or {LAGGED} (edited state?)")
        return cls(kind, learner, model, refits)

    @classmethod
    def parse(cls, guess: str, learner: str, learner_params: dict[str, Any], features: Sequence[str]) -> GuessSpec:
        """``--guess prior|student|MODEL.json``: checked now, before anything private is read."""
        if guess == "prior":
            return cls("prior")
        if guess == "student":
            return cls("student", {"name": learner, "params": dict(learner_params)}, refits=LAGGED)
        if not os.path.lexists(guess):  # a FIFO or a folder: refused by name when read
            raise PcqrError(f"--guess {guess}: expected prior, student or a released model file (not found)")
        from pcqr.pipeline.models.released import load_model

        _, model_features, record = load_model(guess, "--guess")
        if list(model_features) != list(features):
            raise PcqrError(f"--guess {guess}: the model reads features {model_features}, the session's are "
                            f"{list(features)}")
        return cls("model", model=record)


@dataclass
class Student:
    """The guess of one session as it learns: the released labels so far and the current g."""

    spec: GuessSpec
    modules: tuple[str, ...] = ()
    size: int = 0  # released labels seen (the student keeps the first STUDENT_ROWS)
    fits: int = 0  # refits done (reports; tests)
    _rows: np.ndarray | None = None  # the kept answers' features; rows below size never change again
    _labels: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int8))
    _held: int = 0  # rows of _rows and _labels in use
    _model: Any = None
    _next: int = 0  # index into the schedule (:attr:`points`) of the next refit
    _coming: Background[Any] | None = None  # LAGGED: the fit that takes over at the next point

    def __post_init__(self) -> None:
        if self.spec.kind == "model":
            from pcqr.pipeline.hypotheses import hypothesis_from_dict

            assert self.spec.model is not None
            self._model = hypothesis_from_dict(self.spec.model["hypothesis"])

    @property
    def young(self) -> bool:
        """Refitted after every charged answer (and chunks never cross YOUNG: see :meth:`room`)."""
        return self.spec.kind != "model" and self.size < YOUNG

    @property
    def lagged(self) -> bool:
        return self.spec.refits == LAGGED

    @property
    def points(self) -> tuple[int, ...]:
        """The counts of released labels at which this student is refitted."""
        return LAGGED_POINTS if self.lagged else _POINTS

    @property
    def last_takeover(self) -> int:
        """LAGGED: where the last point's student takes over (a quarter after it)."""
        return -(-self.points[-1] * 5 // 4)

    def room(self) -> int | None:
        """How many more labels may be released under the current g (None: no limit)."""
        if self.spec.kind == "model":
            return None
        points = self.points
        if self._next >= len(points):  # LAGGED: the last point's student is still to take over
            return self.last_takeover - self.size if self._coming is not None else None
        room = points[self._next] - self.size
        return min(room, YOUNG - self.size) if self.young else room

    def guess(self, X: np.ndarray) -> np.ndarray:
        """g(x) for each row of X (int8 labels)."""
        if self._model is None:
            return np.zeros(X.shape[0], dtype=np.int8)
        return np.asarray(self._model.predict(X), dtype=np.int8)

    def learn(self, X: np.ndarray, labels: np.ndarray, charged_last: bool) -> None:
        """Take the next released labels (in release order); refit where the schedule says."""
        if self.spec.kind == "model" or labels.size == 0:
            return
        keep = max(0, min(labels.size, STUDENT_ROWS - self.size))
        if keep:
            self._hold(np.asarray(X[:keep], dtype=np.float64), np.asarray(labels[:keep], dtype=np.int8))
        before = self.size
        self.size += int(labels.size)
        passed = False
        points = self.points
        while self._next < len(points) and points[self._next] <= self.size:
            passed, self._next = True, self._next + 1
        if self.lagged and self._coming is not None and (passed or self.size >= self.last_takeover):
            self._model, self._coming = self._coming.result(), None  # fitted at the point before
        if passed and self.lagged and self.size > YOUNG:
            self._coming = self._fit_later()
        elif passed or (charged_last and before < YOUNG and self.size <= YOUNG):
            self._refit()

    def _hold(self, X: np.ndarray, y: np.ndarray) -> None:
        """Append kept answers: in place, in arrays that double when full (up to STUDENT_ROWS rows)."""
        end = self._held + y.size
        if self._rows is None or end > self._rows.shape[0]:
            size = min(STUDENT_ROWS, max(end, 2 * (0 if self._rows is None else self._rows.shape[0]), 1024))
            rows, labels = np.empty((size, X.shape[1])), np.empty(size, dtype=np.int8)
            if self._rows is not None:  # a new array: views a fit in flight holds keep the old one
                rows[:self._held], labels[:self._held] = self._rows[:self._held], self._labels[:self._held]
            self._rows, self._labels = rows, labels
        self._rows[self._held:end], self._labels[self._held:end] = X, y
        self._held = end

    def _kept(self) -> tuple[np.ndarray, np.ndarray]:
        """The released answers the student learns from: views of rows that are never written again,
        so a fit in a thread sees the same rows whatever is learnt meanwhile."""
        if self._rows is None:
            return np.zeros((0, 0)), np.zeros(0, dtype=np.int8)
        return self._rows[:self._held], self._labels[:self._held]

    def _refit(self) -> None:
        X, y = self._kept()
        if self.spec.kind == "prior":
            from pcqr.pipeline.models.constant import ConstantModel

            ones = int(np.count_nonzero(y == 1))
            self._model = ConstantModel(1 if 2 * ones > y.size else 0)
        else:
            assert self.spec.learner is not None
            self._model = fit_student(self.spec.learner, X, y, self.modules)
        self.fits += 1

    def _fit_later(self) -> Background[Any]:
        """LAGGED: the student of the answers released so far, fitted in a thread (the same fit,
        deterministic, on the same rows: a resumed run that waits for it gets the same model)."""
        assert self.spec.learner is not None
        X, y = self._kept()
        learner, modules = self.spec.learner, self.modules
        self.fits += 1
        return Background(lambda: fit_student(learner, X, y, modules), "pcqr-student-fit")

    @classmethod
    def from_log(cls, spec: GuessSpec, log_dir: str, features: Sequence[str], batches: int,
                 modules: tuple[str, ...] = ()) -> Student:
        """The student as it stood after the first ``batches`` batches of the session's (verified) log:
        the same labels learnt in the same order, the same refits."""
        student = cls(spec, modules)
        if spec.kind == "model":
            return student
        for X, labels, source in released_rows(log_dir, list(features), (GUESS, FLIPPED), batches):
            flips = source == FLIPPED
            start = 0  # replay the live loop's chunks: each ends at a refit point or a young flip
            while start < labels.size:
                room = student.room()
                end = labels.size if room is None else min(labels.size, start + room)
                if student.young:
                    hit = np.flatnonzero(flips[start:end])
                    if hit.size:
                        end = start + int(hit[0]) + 1
                student.learn(X[start:end], labels[start:end], bool(flips[end - 1]))
                start = end
        return student


def _import_learner(named: dict[str, Any], modules: tuple[str, ...]) -> None:
    """Import the module of a student's learner (scikit-learn's take about a second), so that its
    first fit does not wait for it; a learner that cannot be imported is refused at that fit."""
    from pcqr.pipeline.models.learners import named_learner

    try:
        named_learner(named, STUDENT_ROWS, modules).estimator_class()
    except Exception:  # noqa: BLE001 -- the fit says why, in one line, where it is needed
        pass


def fit_student(named: dict[str, Any], X: np.ndarray, y: np.ndarray, modules: tuple[str, ...] = ()) -> Any:
    """The learner ``named`` ({"name", "params"}; 'auto': the rule's tree at len(y) rows;
    'cross-validated': the candidate cross-validation picks, pcqr.pipeline.models.student_selection)
    fitted on (X, y), deterministically: one class gives a constant model, a learner with a
    ``random_state`` gets 0. Public data only (a log's answers)."""
    from pcqr.pipeline.models.learners import deterministic, fit_subsample, named_learner
    from pcqr.pipeline.models.student_selection import select_student

    chosen, _ = select_student(named, X, y, modules)
    learner = deterministic(named_learner(chosen, y.size, modules))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fit_subsample(learner, X, y)


class GuessGate:
    """The guess gate of one session (a :class:`pcqr.pipeline.gates.gate.Gate`), in the driver only:
    the session's sparse vector asked, query by query, whether the votes agree with the student's
    guess.

    A batch is decided in chunks that end where the student is refitted (a point of
    :func:`refit_points`, or a charged answer while it is young): the guess for each query is fixed
    by the labels released before it, whatever the batch boundaries. The student is rebuilt from the
    session's public record (:meth:`Student.from_log`) when a batch first needs it.
    """

    def __init__(self, sparse_vector: SparseVector, record: PublicRecord | None) -> None:
        self.sparse_vector = sparse_vector
        self.params = sparse_vector.params
        self._record = record
        self._student: Student | None = None
        learner = (record.guess or {}).get("learner") if record is not None else None
        if isinstance(learner, dict) and isinstance(learner.get("name"), str):  # its module, imported meanwhile
            Background(lambda: _import_learner(learner, record.modules), "pcqr-import-student")  # type: ignore[union-attr]

    @classmethod
    def create(cls, params: SubSampParameters, noise: NoiseSource) -> GuessGate:
        """A new session's gate: the sparse vector's key and T thresholds drawn now. It has no public
        record yet: it releases once resumed from the saved session (:meth:`resume`)."""
        return cls(SparseVector.create(params, noise), None)

    @classmethod
    def resume(cls, params: SubSampParameters, state: SparseVectorState, record: PublicRecord | None) -> GuessGate:
        """The guess gate of a saved session; ``record`` (its guess, log and allowed learner modules)
        rebuilds the student."""
        return cls(SparseVector(params, state), record)

    @property
    def state(self) -> SparseVectorState:
        return self.sparse_vector.state

    @property
    def halted(self) -> bool:
        return self.sparse_vector.halted

    @property
    def capacity(self) -> int:
        """Fresh queries it may still test (pcqr.pipeline.gates.gate.Gate.capacity)."""
        return self.sparse_vector.capacity

    @property
    def student(self) -> Student:
        """g as it stands: the student rebuilt from the log's first ``record.batches`` batches, then
        taught every label this gate releases."""
        if self._student is None:
            record = self._record
            if record is None:
                raise ValueError("the guess gate releases with its session's public record: resume it")
            spec = GuessSpec.from_dict(record.guess or {})
            self._student = Student.from_log(spec, record.log_dir, record.features, record.batches, record.modules)
        return self._student

    def release(self, ones: np.ndarray, subsamples: int, features: Features) -> Released:
        """The fresh queries of one batch, in order: g(x) released free (source ``guess``) or, spending
        an instance, 1 - g(x) (source ``flipped``); refused after the halt (or m)."""
        n = ones.shape[0]
        status = np.full(n, REFUSED, dtype=np.int8)
        label = np.zeros(n, dtype=np.int8)
        source = source_codes(GUESS_CODE, n)
        before = self.state.bottoms
        X = features() if n and not self.halted else None
        pos = 0
        while pos < n and not self.halted:  # after the halt: refused whatever the votes and the guess
            assert X is not None
            student = self.student
            room = student.room()
            end = n if room is None else min(n, pos + room)
            guess = student.guess(X[pos:end])
            got, released, used = self.sparse_vector.process_guess(ones[pos:end], guess, subsamples, student.young)
            rows = slice(pos, pos + used)
            status[rows], label[rows] = got, released
            answered = got == ANSWERED
            charged = answered & (released != guess[:used])
            source[rows][charged] = FLIPPED_CODE
            student.learn(X[rows][answered], released[answered], bool(charged[-1]) if used else False)
            pos += used
        return Released(status, label, source, self.state.bottoms - before)
