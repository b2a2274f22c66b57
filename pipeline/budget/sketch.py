"""Bottom-k sketches (KMV: Bar-Yossef et al. 2002; Beyer et al. 2007) and the containment of one
set in another estimated from two of them.

A sketch of a multiset of 64-bit hashes keeps the k smallest DISTINCT values with their
multiplicities; it holds every distinct value up to its k-th (``bound``), so membership below it is
exact, and the merge of the sketches of parts is the sketch of the whole. Containment (Broder 1997):
with U the k smallest values of the union, read off the two sketches, containment of A in B is
estimated by |U & A & B| / |U & A|. Treating the hash as a random function, U & A is a uniform
sample of A's distinct values of size m, so the estimate is within +-t of the truth except with
probability 2 exp(-2 m t^2) (Hoeffding's bound holds for sampling without replacement): +-0.05 at
m = k = 4096 except with probability 2.5e-9. It never reports overlap that is not there, and a set
wholly inside the other is estimated at exactly 1. :mod:`pcqr.pipeline.budget.overlap` uses it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

SKETCH_SIZE = 4096
OVERLAP_FRACTION = 0.5


@dataclass(frozen=True)
class Sketch:
    """Bottom-k of a multiset of 64-bit hashes: the ``size`` smallest distinct values (sorted)
    and how often each occurs. Not ``full``: it holds every distinct value (exact)."""

    values: np.ndarray
    counts: np.ndarray
    size: int = SKETCH_SIZE

    @property
    def full(self) -> bool:
        return len(self.values) >= self.size

    @property
    def bound(self) -> int:
        """tau: every distinct hash <= tau of the multiset is in the sketch."""
        return int(self.values[-1]) if self.full else (1 << 64) - 1

    @staticmethod
    def of(hashes: np.ndarray, size: int = SKETCH_SIZE) -> Sketch:
        ordered = np.sort(np.asarray(hashes, dtype=np.uint64))
        starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]]) if ordered.size else np.zeros(0, np.int64)
        counts = np.diff(np.r_[starts, ordered.size]).astype(np.uint64)
        return Sketch(ordered[starts][:size], counts[:size], size)

    @staticmethod
    def merge(sketches: Sequence[Sketch], size: int = SKETCH_SIZE) -> Sketch:
        values = np.concatenate([s.values for s in sketches]) if sketches else np.zeros(0, np.uint64)
        counts = np.concatenate([s.counts for s in sketches]) if sketches else np.zeros(0, np.uint64)
        order = np.argsort(values, kind="stable")
        values, counts = values[order], counts[order]
        if not values.size:
            return Sketch(values, counts, size)
        starts = np.flatnonzero(np.r_[True, values[1:] != values[:-1]])
        return Sketch(values[starts][:size], np.add.reduceat(counts, starts)[:size].astype(np.uint64), size)

    def to_bytes(self) -> bytes:
        return np.stack([self.values, self.counts], axis=1).astype("<u8").tobytes()

    @staticmethod
    def from_bytes(data: bytes, size: int = SKETCH_SIZE) -> Sketch:
        pairs = np.frombuffer(data, dtype="<u8").reshape(-1, 2).astype(np.uint64)
        return Sketch(pairs[:, 0].copy(), pairs[:, 1].copy(), size)


@dataclass(frozen=True)
class Containment:
    """Estimated containment of A in B and of B in A (None: no sampled row of that set)."""

    a_in_b: float | None
    b_in_a: float | None
    sampled_a: int
    sampled_b: int

    @property
    def related(self) -> bool:
        """Either containment estimated at >= OVERLAP_FRACTION."""
        return max(self.a_in_b or 0.0, self.b_in_a or 0.0) >= OVERLAP_FRACTION


def containment(a: Sketch, b: Sketch) -> Containment:
    """Both containments from two bottom-k sketches, through their union's bottom-k."""
    union = Sketch.merge([a, b], min(a.size, b.size))
    in_a, in_b = np.isin(union.values, a.values), np.isin(union.values, b.values)
    common, sampled_a, sampled_b = int(np.sum(in_a & in_b)), int(np.sum(in_a)), int(np.sum(in_b))
    return Containment(common / sampled_a if sampled_a else None, common / sampled_b if sampled_b else None,
                       sampled_a, sampled_b)
