"""The gate interface: one batch of vote counts in, the released labels and the instances spent out.

A gate is where the k models' private votes become public answers; it is the only code that reads
them. The answer loop (:mod:`pcqr.pipeline.session.query_release`) drives whichever gate the
session's parameters name (``params.gate``), through :mod:`pcqr.pipeline.gates.registry`, and
knows nothing else of it: it hands each gate the fresh queries of a batch, in order, and writes
what comes back to the public log. The gates:

* ``stability`` -- :class:`pcqr.pipeline.gates.sparse_vector.SparseVector` (A_SubSamp with A_stab);
* ``guess`` -- :class:`pcqr.pipeline.gates.public_guess.GuessGate` (the sparse vector on the margin
  toward a public guess g(x));
* ``gnmax`` -- :class:`pcqr.pipeline.gates.noisy_argmax.NoisyArgmax` (the Gaussian noisy argmax).

What every gate promises (docs/privacy.md states each one's guarantee):

* its randomness is fixed when the session is created (:meth:`GateKind.create`, before any private
  value exists) and held in its :class:`SparseVectorState`, saved in the private state directory;
  so a batch killed before its commit and run again releases the same answers;
* :meth:`Gate.release` runs in the driver only, once per committed batch (its state advances);
* what it returns is all it releases: not the votes, not a noisy value;
* its work on a batch depends on public things only (the batch's size, the positions of what it
  released, the public parameters), never on the votes themselves.

Adding a gate: one module here with a class that has ``create``, ``resume``, ``halted``, ``state``
and ``release``, and one entry in :data:`pcqr.pipeline.gates.registry.GATES`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol

import numpy as np

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.privacy.noise import NoiseSource
from pcqr.pipeline.privacy.subsamp import SubSampParameters

#: The public feature matrix of a batch's fresh queries (one row per query, in order), computed
#: when first called: a gate that does not need the features (all but the guess gate) never
#: converts them.
Features = Callable[[], np.ndarray]


@dataclass
class SparseVectorState:
    """The private state of a session's gate: never logged, lives in the private state directory.

    ``key`` and ``thresholds`` are fixed at creation; only ``bottoms`` and ``queries_seen``
    change. ``bottoms`` counts the instances spent, whatever the gate (the sparse vector's
    bottoms, the guess gate's flips, the gnmax gate's answers: each is one of T); the gnmax gate
    holds no thresholds. :meth:`to_dict` holds the key (for session.json) but not the thresholds,
    which pcqr.pipeline.session.state keeps in their own file.
    """

    bottoms: int  # c: instance c uses thresholds[c]
    queries_seen: int  # the next query's position in the gate's stream
    key: bytes  # 256-bit secret: U_i = ChaCha20 keystream at position i
    thresholds: np.ndarray  # Z2[0..T-1], int64: instance j's noisy threshold is 2w + Z2[j]

    def to_dict(self) -> dict[str, Any]:
        return {"bottoms": self.bottoms, "queries_seen": self.queries_seen, "key": self.key.hex()}

    @classmethod
    def from_dict(cls, data: dict[str, Any], thresholds: np.ndarray) -> SparseVectorState:
        if "key" not in data:
            raise PcqrError(
                "the session's state predates fixed per-query randomness (no session key); "
                "train a new session"
            )
        key = bytes.fromhex(data["key"])
        if len(key) != 32:
            raise PcqrError(f"the session key holds {len(key)} bytes, expected 32 (edited state?)")
        return cls(int(data["bottoms"]), int(data["queries_seen"]), key, np.asarray(thresholds, dtype=np.int64))


@dataclass(frozen=True)
class PublicRecord:
    """What a resumed gate may read besides its private state: the session's public record.

    All of it is public (session.json's public fields and the verified log); the guess gate's
    student is rebuilt from it (:meth:`pcqr.pipeline.gates.public_guess.Student.from_log`).
    """

    log_dir: str  # the session's public log
    features: tuple[str, ...]  # the query features, in the log's order
    batches: int  # log batches committed before this run
    guess: dict[str, Any] | None = None  # the guess gate's public guess (GuessSpec.to_dict)
    modules: tuple[str, ...] = ()  # the operator's allowed learner modules (the guess gate's student)


@dataclass(frozen=True)
class Released:
    """What a gate released for one batch of fresh queries, one entry per query, in order."""

    status: np.ndarray  # int8: ANSWERED / ABSTAINED / REFUSED (pcqr.pipeline.public_log.batches)
    label: np.ndarray  # int8: the released label where answered, else 0
    source: np.ndarray  # int8: the log's source code (an index of public_log.batches.SOURCE_NAMES)
    spent: int  # instances spent by this batch (state.bottoms after minus before)


class Gate(Protocol):
    """A session's gate, in the driver only: its state must advance once per committed batch."""

    params: SubSampParameters

    @property
    def state(self) -> SparseVectorState: ...

    @property
    def halted(self) -> bool:
        """All T instances are spent: every later query is refused whatever its votes."""
        ...

    @property
    def capacity(self) -> int:
        """How many more fresh queries the gate may test (0 once halted): a :meth:`release` reads
        the votes of at most this many of its first queries and refuses the rest whatever their
        votes, so the answer loop computes no others (issue 47)."""
        ...

    def release(self, ones: np.ndarray, subsamples: int, features: Features) -> Released:
        """Decide one batch of fresh queries, in order.

        ``ones``: ct(1) of each query, how many of the ``subsamples`` = k models vote 1 (private); over
        c > 2 classes (``params.classes``, gnmax only) the (n, c) counts ct(j) of each query.
        ``features``: the queries' public features, for a gate whose release depends on them.
        """
        ...


class GateKind(Protocol):
    """What the registry holds for each gate name: how to make a session's gate."""

    def create(self, params: SubSampParameters, noise: NoiseSource) -> Gate:
        """A new session's gate: its secret randomness drawn now, before any private value exists."""
        ...

    def resume(self, params: SubSampParameters, state: SparseVectorState, record: PublicRecord | None) -> Gate:
        """A session's gate from its saved state (and, for a gate that learns from its releases,
        the session's public record)."""
        ...


def checked_class_votes(counts: np.ndarray, subsamples: int, classes: int) -> np.ndarray:
    """ct(j) per query and class as an int64 (n, c) array, refused unless every count is non-negative and
    every row sums to k."""
    counts = np.asarray(counts, dtype=np.int64)
    if counts.ndim != 2 or counts.shape[1] != classes:
        raise ValueError(f"class vote counts must be an (n, {classes}) array, got shape {counts.shape}")
    if counts.size and (int(counts.min()) < 0 or not np.all(counts.sum(axis=1) == subsamples)):
        raise ValueError(f"class vote counts must be non-negative and sum to {subsamples} for each query")
    return counts


def checked_votes(ones: np.ndarray, subsamples: int) -> np.ndarray:
    """ct(1) per query as int64, refused unless every count lies in [0, k]."""
    ones = np.asarray(ones, dtype=np.int64)
    if ones.size and not (0 <= int(ones.min()) and int(ones.max()) <= subsamples):
        raise ValueError(f"vote counts must lie in [0, {subsamples}]")
    return ones


def source_codes(code: int, n: int) -> np.ndarray:
    """``n`` queries' source column, every one ``code``."""
    return np.full(n, code, dtype=np.int8)
