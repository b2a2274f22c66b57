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
instance, see :mod:`pcqr.pipeline.privacy.subsamp`).

Integer arithmetic: we compare in gap units, which are integers. Multiplying
the test by 2 gives ``gap + Z1 > 2w + Z2`` with Z1 ~ DLap(4 lambda) and
Z2 ~ DLap(2 lambda), *discrete* Laplace. The AboveThreshold proof only uses
the ratio bound P(Z = z) <= e^(s/b) P(Z = z + s) for shifts s equal to the
sensitivity (2 in gap units) and twice it (4), which the discrete Laplace meets
exactly for integer shifts; no floating-point artefact is involved. (Those are
Algorithm 5's scales, the ``equal`` split of eps0; the tight profile's Lyu-Su-Li
split uses DLap(3.26 lambda) and DLap(2.59 lambda), the same eps0: the scales
always come from ``params.query_noise_scale`` / ``params.threshold_noise_scale``.)

Per query only the bit ``Z1 > 2w + Z2 - gap`` is needed, i.e.
``Z1 >= floor(2w + Z2) + 1 - gap``: it is ``U_i < F(a)`` with F the 128-bit tail table of
:class:`pcqr.pipeline.privacy.noise.DiscreteLaplaceTail` (error <= 3e-39 per query).

All randomness is fixed when the session is created (:meth:`SparseVector.create`), before
any private value touches it (issue 10):

* the T thresholds Z2[0..T-1] ~ DLap(2 lambda), drawn in one vector call (OpenDP through
  SecureNoise); instance j -- the stretch after j bottoms -- uses Z2[j]. At most T
  instances run (the session halts at c = T), so T values suffice;
* a secret 256-bit key; U_i, the uniform 128-bit number of the query at position i of the
  coordinator's stream (``queries_seen`` before it), is ChaCha20 keystream under that key
  (:class:`pcqr.pipeline.privacy.noise.KeyedStream`).

Both live in the private state directory (pcqr.pipeline.session.state: the key in session.json, the
thresholds in thresholds.npy). So **the transcript is a deterministic function of (key,
thresholds, data, query sequence)**: a batch killed before its commit and run again releases
exactly what an uninterrupted run would; retrying redraws nothing. Every released test of
query i uses U_i once. Between two bottoms the threshold is fixed, so a stretch of queries is
tested in one vectorised call; tests after the first bottom of a stretch are discarded
unreleased, and those queries are tested again under the next threshold with their own U_i
-- the same bit the query-by-query path computes, so both paths, and any batching, give
identical transcripts. (Reusing U_i in a discarded test is sound: only one test of each query
ever influences the output, and the U_i are independent across positions.)

No timing channel: the per-batch work depends only on public things -- the batch size,
``queries_seen``, the positions of the released bottoms, and the public parameters. The
stream produces U_i for every position the batch may test, whatever the votes; the tail
table covers its whole window from construction; each comparison uses both 64-bit words; the
stretch sizes and the switch between the vectorised and query-by-query paths depend on bottom
positions only. :attr:`SparseVector.work` counts what was done (tests compare two runs).

Nothing here is released except the answer (label / bottom / refused): not the
votes, not the gap, not the noisy values, not c's intermediate noise.

More than two classes (issue 49; docs/privacy.md, "the gates for c > 2 classes"): ``y_hat`` is the
plurality class (ties: the smallest index) and ``gap`` = ct(1st) - ct(2nd), the margin between the
largest and the second-largest count (:func:`plurality_gap`). One moved vote changes each order
statistic of the counts by at most 1, so gap moves by at most 2: the sensitivity above, the same
noise, eps0 and composition. The plurality can change between neighbours only where gap <= 2 (a
vote from the first to the second class turns 2 into a tie), the binary gate's worst unstable gap:
the same delta_stab = T p1, p1 the pass probability at gap 2.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pcqr.pipeline.gates.gate import (
    Features, PublicRecord, Released, SparseVectorState, checked_class_votes, checked_votes, source_codes,
)
from pcqr.pipeline.privacy.noise import DiscreteLaplaceTail, KeyedStream, NoiseSource, below, session_key
from pcqr.pipeline.privacy.subsamp import SubSampParameters
from pcqr.pipeline.public_log.batches import ABSTAINED, ANSWERED, REFUSED, SPARSE_VECTOR_CODE

_FIRST_STRETCH = 65536
_MIN_STRETCH = 64
_DENSE = 16  # a bottom this close to the previous one: switch to the query-by-query loop
_SPARSE = 512  # this many answers in a row in that loop: back to vectorised stretches
_SCALAR_CHUNK = 8192


@dataclass
class Work:
    """What the coordinator did: each count must depend on public things only (tests compare)."""

    stretches: int = 0  # vectorised stretch tests
    stretch_queries: int = 0  # queries compared in them (discarded tests included)
    scalar_steps: int = 0  # iterations of the query-by-query loop
    windows: int = 0  # tail windows of k + 1 entries taken (at most one per instance)
    window_entries: int = 0


class SparseVector:
    """One session's sequential coordinator, and the stability gate (``--gate stability``: a
    :class:`pcqr.pipeline.gates.gate.Gate`). Runs in the driver process only.

    Never run this inside a Dask task or Actor: its state (c, the stream position)
    must advance exactly once per released batch, in the process that commits it.
    Build a new session with :meth:`create`; resume one with ``SparseVector(params, state)``.
    :meth:`process` is the stability test; :meth:`process_guess` the same sparse vector on the
    margin toward a public guess, which the guess gate (pcqr.pipeline.gates.public_guess) drives.
    """

    def __init__(self, params: SubSampParameters, state: SparseVectorState) -> None:
        if not isinstance(state, SparseVectorState):
            raise TypeError("SparseVector(params, state): use SparseVector.create(params, noise) for a new session")
        if state.thresholds.shape != (params.cutoff,) or len(state.key) != 32:
            raise ValueError(f"state has {state.thresholds.shape} thresholds and a {len(state.key)}-byte key; "
                             f"expected ({params.cutoff},) and 32")
        self.params = params
        self.state = state
        self._tail = DiscreteLaplaceTail(params.query_noise_scale)
        self._stream = KeyedStream(state.key)
        self._twice_w = 2.0 * params.threshold
        self.work = Work()
        self._window_cache: tuple[tuple[int, int, int], tuple[np.ndarray, np.ndarray]] | None = None

    @classmethod
    def create(cls, params: SubSampParameters, noise: NoiseSource) -> SparseVector:
        """A fresh session: draws its key and all T thresholds now, before any private value exists.

        w_hat = w + Lap(lambda) on dist; in gap units 2w + DLap(2 lambda), one per instance.
        """
        key = session_key(noise)
        thresholds = np.asarray(noise.discrete_laplace_vector(params.threshold_noise_scale, params.cutoff),
                                dtype=np.int64)
        return cls(params, SparseVectorState(0, 0, key, thresholds))

    @classmethod
    def resume(cls, params: SubSampParameters, state: SparseVectorState, record: PublicRecord | None) -> SparseVector:
        """The stability gate of a saved session (it reads nothing of the public record)."""
        return cls(params, state)

    @property
    def halted(self) -> bool:
        return self.state.bottoms >= self.params.cutoff

    @property
    def capacity(self) -> int:
        """Fresh queries it may still test (pcqr.pipeline.gates.gate.Gate.capacity)."""
        return 0 if self.halted else max(0, self.params.queries_max - self.state.queries_seen)

    def release(self, ones: np.ndarray, subsamples: int, features: Features) -> Released:
        """The stability gate on one batch (:meth:`process`; the features are not read): every
        query's source is ``sparse_vector``, each abstention spends one of the T instances."""
        before = self.state.bottoms
        status, label = self.process(ones, subsamples)
        return Released(status, label, source_codes(SPARSE_VECTOR_CODE, status.shape[0]), self.state.bottoms - before)

    @property
    def stream(self) -> KeyedStream:
        return self._stream

    @property
    def tail(self) -> DiscreteLaplaceTail:
        return self._tail

    def process(self, ones: np.ndarray, subsamples: int) -> tuple[np.ndarray, np.ndarray]:
        """Run the stability test on one batch of queries, in order.

        Parameters
        ----------
        ones : array of int
            ct(1) for each query: how many of the k models vote 1 (private); over c > 2 classes
            (``params.classes``) the (n, c) counts ct(j), each row the gate may test summing to k.
        subsamples : int
            k, the number of models.

        Returns
        -------
        status : int8 array (ANSWERED, ABSTAINED, REFUSED)
        label : int8 array, the majority label where answered (else 0)
        """
        if self.params.classes > 2:
            label, gap = self._plurality(ones, subsamples)
        else:
            ones = checked_votes(ones, subsamples)
            label = (2 * ones > subsamples).astype(np.int8)
            gap = np.abs(2 * ones - subsamples)  # sensitivity 2: one record moves one vote
        status, _ = self._run(gap, 0, subsamples, stop_at_bottom=False)
        label[status != ANSWERED] = 0
        return status, label

    def _plurality(self, counts: np.ndarray, subsamples: int) -> tuple[np.ndarray, np.ndarray]:
        """(plurality, gap) of each query's c counts; the rows past the gate's capacity (their votes
        not counted: zeros) get gap 0 unread, and are refused before any is tested."""
        counts = np.asarray(counts)
        readable = min(counts.shape[0], self.capacity)
        checked = checked_class_votes(counts[:readable], subsamples, self.params.classes)
        label = np.zeros(counts.shape[0], dtype=np.int8)
        gap = np.zeros(counts.shape[0], dtype=np.int64)
        label[:readable], gap[:readable] = plurality_gap(checked)
        return label, gap

    def process_guess(self, ones: np.ndarray, guess: np.ndarray, subsamples: int,
                      stop_at_bottom: bool = False) -> tuple[np.ndarray, np.ndarray, int]:
        """The public-guess gate (pcqr.pipeline.gates.public_guess) on queries in order.

        The same test as :meth:`process`, on the signed margin toward the public guess,
        ``margin = ct(g) - ct(1 - g) = 2 ct(g) - k`` in [-k, k] (sensitivity 2, like the gap: one
        record moves one vote). Passing (margin + Z1 > 2w + Z2) releases g(x) and costs nothing;
        a bottom spends one of the T instances and releases 1 - g(x).

        Guarantee: between two bottoms this is one AboveThreshold instance (Dwork-Roth Thm 3.23,
        negated statistic) with threshold noise DLap(b_t) and query noise DLap(b_q) in gap units
        (params.noise_split), i.e. eps0 = 2/b_t + 4/b_q = 2/lambda -DP for g fixed by public information before each query is
        tested; the released label is post-processing of its output and g, so no stability term
        (docs/privacy.md, Mechanism 1b; tests/test_public_guess.py checks the exact ratio). With ``stop_at_bottom`` the
        run stops after the first bottom (the caller updates its guess from the released answer and
        calls again with the rest): only ``consumed`` queries are decided.

        Returns
        -------
        status : int8 array: ANSWERED for both releases (g and 1 - g), REFUSED after the halt or m
        label : int8 array, the released label where answered (else 0)
        consumed : int, the queries decided (all of them unless ``stop_at_bottom`` stopped early)

        The charged queries are those with ``status == ANSWERED`` and ``label != guess``.
        """
        ones = checked_votes(ones, subsamples)
        guess = np.asarray(guess)
        if guess.shape != ones.shape or (guess.size and not np.isin(guess, (0, 1)).all()):
            raise ValueError("guess must hold one 0/1 label per query")
        guess = guess.astype(np.int64)
        agree = np.where(guess == 1, ones, subsamples - ones)
        status, consumed = self._run(2 * agree - subsamples, -subsamples, subsamples, stop_at_bottom)
        status = status[:consumed]
        flipped = status == ABSTAINED
        label = np.where(flipped, 1 - guess[:consumed], guess[:consumed]).astype(np.int8)
        status[flipped] = ANSWERED
        label[status != ANSWERED] = 0
        return status, label, consumed

    def _run(self, margin: np.ndarray, lowest: int, highest: int, stop_at_bottom: bool) -> tuple[np.ndarray, int]:
        """The sparse vector on integer margins in [lowest, highest] (gap units): status per query
        and how many were decided (all, unless ``stop_at_bottom``)."""
        n = margin.shape[0]
        # a query with margin g is tested against F(first_above - g): entry highest - g of the window
        offset = highest - margin
        width = highest - lowest
        status = np.full(n, REFUSED, dtype=np.int8)
        state = self.state
        allowed = 0 if self.halted else max(0, min(n, self.params.queries_max - state.queries_seen))
        u_hi, u_lo = self._stream.uniforms(state.queries_seen, allowed)  # every position it may test
        pos, stretch, dense = 0, _FIRST_STRETCH, False
        while pos < allowed and not self.halted:
            if dense:  # bottoms every few queries: numpy's per-call cost would dominate
                end = min(allowed, pos + _SCALAR_CHUNK)
                pos, dense = self._query_by_query(margin, u_hi, u_lo, status, pos, end, stop_at_bottom)
                stretch = _MIN_STRETCH
                if stop_at_bottom and status[pos - 1] == ABSTAINED:
                    break
                continue
            end = min(allowed, pos + stretch)
            # Answer iff margin + Z1 > 2w + Z2  <=>  Z1 >= floor(2w + Z2) + 1 - margin  <=>  U_i < F(...)
            if end - pos >= width:  # a long stretch: gather from the instance's width + 1 entries
                f_hi, f_lo = self._window(lowest, highest)
                f_hi, f_lo = f_hi[offset[pos:end]], f_lo[offset[pos:end]]
            else:  # a short one: look each query up in the whole table (no O(k) window)
                f_hi, f_lo = self._tail.lookup(self._first_above() - margin[pos:end])
            above = below(u_hi[pos:end], u_lo[pos:end], f_hi, f_lo)
            self.work.stretches += 1
            self.work.stretch_queries += end - pos
            first_below = int(np.argmin(above))
            if above[first_below]:
                status[pos:end] = ANSWERED
                pos, stretch = end, stretch * 2
                continue
            bottom = pos + first_below
            status[pos:bottom] = ANSWERED
            status[bottom] = ABSTAINED
            state.bottoms += 1  # the next instance uses the next fixed threshold
            stretch = max(_MIN_STRETCH, 4 * (bottom - pos))
            dense = bottom - pos < _DENSE
            pos = bottom + 1
            if stop_at_bottom:
                break
        state.queries_seen += pos  # queries tested (answered or abstained); refused ones are not
        return status, (pos if stop_at_bottom and pos < allowed and not self.halted else n)

    def _first_above(self) -> int:
        """floor(2w + Z2[c]) + 1: the current instance's test is Z1 >= this - gap."""
        return math.floor(self._twice_w + int(self.state.thresholds[self.state.bottoms])) + 1

    def _window(self, lowest: int, highest: int) -> tuple[np.ndarray, np.ndarray]:
        """F(first_above - highest .. first_above - lowest) for the current instance: one entry per
        margin whatever the threshold's value, taken once per instance (and margin range)."""
        key = (self.state.bottoms, lowest, highest)
        if self._window_cache is None or self._window_cache[0] != key:
            self.work.windows += 1
            self.work.window_entries += highest - lowest + 1
            self._window_cache = (key, self._tail.window(self._first_above() - lowest, highest - lowest))
        return self._window_cache[1]

    def _query_by_query(
        self, margin: np.ndarray, u_hi: np.ndarray, u_lo: np.ndarray, status: np.ndarray, pos: int, end: int,
        stop_at_bottom: bool = False,
    ) -> tuple[int, bool]:
        """The same test as the vectorised stretch, one query at a time, for dense bottoms.

        Query i is answered iff U_i < F(first_above - margin_i), compared as whole 128-bit
        integers: the same bit as the vectorised path. Each query costs one table lookup
        (DiscreteLaplaceTail.fixed), each bottom O(1). Returns (next position, still dense);
        with ``stop_at_bottom`` it returns just after the first bottom.
        """
        gaps = margin[pos:end].tolist()
        u = [(h << 64) | l for h, l in zip(u_hi[pos:end].tolist(), u_lo[pos:end].tolist())]
        fixed = self._tail.fixed
        first_above = self._first_above()
        streak, i = 0, pos
        while i < end and not self.halted:
            self.work.scalar_steps += 1
            answered = u[i - pos] < fixed(first_above - gaps[i - pos])
            i += 1
            if answered:
                status[i - 1] = ANSWERED
                streak += 1
                if streak >= _SPARSE:
                    return i, False
                continue
            status[i - 1] = ABSTAINED
            self.state.bottoms += 1
            streak = 0
            if stop_at_bottom:
                return i, True
            if not self.halted:
                first_above = self._first_above()
        return i, True


def plurality_gap(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The plurality class of each row of (n, c) counts (ties: the smallest index, int8) and the gap
    ct(1st) - ct(2nd) (int64): the stability gate's label and statistic over c > 2 classes."""
    counts = np.asarray(counts, dtype=np.int64)
    top_two = np.sort(counts, axis=1)[:, -2:]
    return np.argmax(counts, axis=1).astype(np.int8), top_two[:, 1] - top_two[:, 0]
