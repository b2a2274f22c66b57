"""The sparse-vector coordinator: A_SubSamp's answer loop with the A_stab stability test.

Algorithm 5 (steps 6-11) and Algorithm 6 of papers/001 (BTT18; ALGORITHMS.md
section 2). For each query, in order, given the k votes:

* ``y_hat`` = the majority label, ``gap`` = |ct(1) - ct(0)| = |2 ct(1) - k|;
* A_stab: answer ``y_hat`` iff dist + Lap(2 lambda) > w_hat, where
  dist = gap / 2 is the distance to instability and w_hat = w + Lap(lambda);
  otherwise answer bottom (abstain), count it (c += 1) and draw a fresh w_hat;
* after T bottoms the session halts: every later query is refused.

Sensitivity, where the noise is added (:meth:`SparseVector.process`): replacing
one private record changes one subsample, hence at most one of the k models,
hence at most one vote. Since ct(0) + ct(1) = k, that vote moving from one
label to the other changes ``gap`` by exactly 0 or 2, so dist = gap / 2 has
sensitivity 1 -- the sensitivity the paper's Lap(2 lambda) / Lap(lambda) are
calibrated for (each stretch between bottoms is an eps0 = 2/lambda AboveThreshold
instance, see :mod:`pipeline.privacy`).

Integer arithmetic: we compare in gap units, which are integers. Multiplying
the test by 2 gives ``gap + Z1 > 2w + Z2`` with Z1 ~ DLap(4 lambda) and
Z2 ~ DLap(2 lambda), *discrete* Laplace. The AboveThreshold proof only uses
the ratio bound P(Z = z) <= e^(s/b) P(Z = z + s) for shifts s equal to the
sensitivity (2 in gap units) and twice it (4), which the discrete Laplace meets
exactly for integer shifts; no floating-point artefact is involved.

Per query only the bit ``Z1 > 2w + Z2 - gap`` is needed, i.e.
``Z1 >= floor(2w + Z2) + 1 - gap``: it is drawn by
:class:`pipeline.noise.DiscreteLaplaceTail` (error <= 3e-39 per query). The
threshold Z2 is drawn in full by the noise source (OpenDP). Between two
bottoms the threshold is fixed, so a whole stretch of queries is tested in one
vectorised call; bits drawn after the first bottom of a stretch are discarded
unused and those queries are tested again with the fresh threshold.

Nothing here is released except the answer (label / bottom / refused): not the
votes, not the gap, not the noisy values, not c's intermediate noise.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline.noise import DiscreteLaplaceTail, NoiseSource
from pipeline.privacy import SubSampParameters

ANSWERED, ABSTAINED, REFUSED = 0, 1, 2
STATUS_NAMES = ("answered", "abstained", "refused")

_FIRST_STRETCH = 65536
_MIN_STRETCH = 64
_DENSE = 16  # a bottom this close to the previous one: switch to the query-by-query loop
_SPARSE = 512  # this many answers in a row in that loop: back to vectorised stretches
_SCALAR_CHUNK = 8192


@dataclass
class SparseVectorState:
    """The private state of a session: never logged, lives in the private state directory."""

    bottoms: int  # c
    threshold_noise: int  # Z2: the current noisy threshold is 2w + Z2 (gap units)
    queries_seen: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "bottoms": self.bottoms,
            "threshold_noise": self.threshold_noise,
            "queries_seen": self.queries_seen,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SparseVectorState:
        return cls(int(data["bottoms"]), int(data["threshold_noise"]), int(data["queries_seen"]))


class SparseVector:
    """One session's sequential coordinator. Runs in the driver process only.

    Never run this inside a Dask task or Actor: a task may be re-run, and
    re-running with fresh noise would answer the same queries twice.
    """

    def __init__(
        self,
        params: SubSampParameters,
        noise: NoiseSource,
        state: SparseVectorState | None = None,
    ) -> None:
        self.params = params
        self.noise = noise
        self._tail = DiscreteLaplaceTail(params.query_noise_scale)
        self._twice_w = 2.0 * params.threshold
        if state is None:
            state = SparseVectorState(0, self._fresh_threshold_noise(), 0)
        self.state = state

    def _fresh_threshold_noise(self) -> int:
        # w_hat = w + Lap(lambda) on dist; in gap units 2w + DLap(2 lambda).
        return self.noise.discrete_laplace(self.params.threshold_noise_scale)

    @property
    def halted(self) -> bool:
        return self.state.bottoms >= self.params.cutoff

    def process(self, ones: np.ndarray, subsamples: int) -> tuple[np.ndarray, np.ndarray]:
        """Run the stability test on one batch of queries, in order.

        Parameters
        ----------
        ones : array of int
            ct(1) for each query: how many of the k models vote 1 (private).
        subsamples : int
            k, the number of models.

        Returns
        -------
        status : int8 array (ANSWERED, ABSTAINED, REFUSED)
        label : int8 array, the majority label where answered (else 0)
        """
        ones = np.asarray(ones, dtype=np.int64)
        n = ones.shape[0]
        label = (2 * ones > subsamples).astype(np.int8)
        gap = np.abs(2 * ones - subsamples)  # sensitivity 2: one record moves one vote
        status = np.full(n, REFUSED, dtype=np.int8)
        state = self.state
        allowed = max(0, min(n, self.params.queries_max - state.queries_seen))
        pos, stretch, dense = 0, _FIRST_STRETCH, False
        while pos < allowed and not self.halted:
            if dense:  # bottoms every few queries: numpy's per-call cost would dominate
                pos, dense = self._query_by_query(gap, status, pos, min(allowed, pos + _SCALAR_CHUNK))
                stretch = _MIN_STRETCH
                continue
            end = min(allowed, pos + stretch)
            # Answer iff gap + Z1 > 2w + Z2  <=>  Z1 >= floor(2w + Z2) + 1 - gap.
            first_above = math.floor(self._twice_w + state.threshold_noise) + 1
            above = self._tail.draw_at_least(first_above - gap[pos:end], self.noise)
            below = np.flatnonzero(~above)
            if below.size == 0:
                status[pos:end] = ANSWERED
                pos, stretch = end, stretch * 2
                continue
            bottom = pos + int(below[0])
            status[pos:bottom] = ANSWERED
            status[bottom] = ABSTAINED
            self._bottom()
            stretch = max(_MIN_STRETCH, 4 * (bottom - pos))
            dense = bottom - pos < _DENSE
            pos = bottom + 1
        state.queries_seen += pos  # queries tested (answered or abstained); refused ones are not
        label[status != ANSWERED] = 0
        return status, label

    def _bottom(self) -> None:
        """Count a bottom and draw a fresh threshold (sparse vector: only ever after a bottom)."""
        self.state.bottoms += 1
        self.state.threshold_noise = self._fresh_threshold_noise()

    def _query_by_query(self, gap: np.ndarray, status: np.ndarray, pos: int, end: int) -> tuple[int, bool]:
        """The same test as the vectorised stretch, one query at a time, for dense bottoms.

        Each query compares a fresh uniform 32-bit word with word 0 of F(a), and
        breaks a tie with fresh lower words (DiscreteLaplaceTail.tie_break): the
        same distribution as draw_at_least. Returns (next position, still dense).
        """
        tail, noise = self._tail, self.noise
        gaps = gap[pos:end].tolist()
        g_lo, g_hi = min(gaps), max(gaps)
        words: list[int] = []
        used, streak, i = 0, 0, pos
        first_above = math.floor(self._twice_w + self.state.threshold_noise) + 1
        lo, first = tail.first_words(first_above - g_hi, first_above - g_lo)
        while i < end and not self.halted:
            if used == len(words):
                words, used = noise.uniform_words(4096).tolist(), 0
            a = tail.clip(first_above - gaps[i - pos])
            p, u = first[a - lo], words[used]
            used += 1
            if u < p or (u == p and tail.tie_break(a, noise)):
                status[i] = ANSWERED
                streak += 1
                i += 1
                if streak >= _SPARSE:
                    return i, False
                continue
            status[i] = ABSTAINED
            self._bottom()
            streak, i = 0, i + 1
            first_above = math.floor(self._twice_w + self.state.threshold_noise) + 1
            lo, first = tail.first_words(first_above - g_hi, first_above - g_lo)
        return i, True
