"""The Gaussian noisy argmax coordinator (``--gate gnmax``): every query gets the noisy majority.

PATE's aggregator (Papernot et al. 2018, GNMax; ALGORITHMS.md section 10) over two labels. For each
query, in order, given ct(1) of the k votes:

    release 1  iff  ct(1) + Z > k / 2,   Z ~ N_Z(0, sigma^2 / 2) a discrete Gaussian (ties: 0),

until m answers have been released; every later query is refused (or answered by the student of
the log, ``--after-halt student``). PATE adds N(0, sigma^2) to each label's count and releases the
argmax; for two labels that is the sign of ct(1) - ct(0) + N1 - N0, and one discrete Gaussian of
scale sigma / sqrt(2) on ct(1) alone has the same guarantee and the same spread.

Sensitivity and guarantee: one person is in one subsample, so moves one vote: ct(1) by at most 1.
The discrete Gaussian with sensitivity 1 and scale sigma_c = sigma / sqrt(2) is
rho = 1 / (2 sigma_c^2) = 1/sigma^2 -zCDP (Canonne-Kamath-Steinke 2020, Theorem 4); the released
bit is post-processing; m answers compose adaptively to m rho -zCDP (Bun-Steinke 2016, Lemma 2.3),
converted to (eps, delta) by :mod:`pcqr.pipeline.privacy.gnmax`. Nothing else is released: not the
votes, not the noisy count.

Sampling, as the sparse vector's (:mod:`pcqr.pipeline.gates.sparse_vector`): the answer is the
bit ``Z >= k//2 + 1 - ct(1)``, i.e. ``U_i < F(a)`` with F the 128-bit tail table of
:class:`pcqr.pipeline.privacy.noise.DiscreteGaussianTail` (per-bit error <= 3e-39, counted in
``delta_sampler``) and U_i the keyed ChaCha20 number of stream position i: the session's secret key
is drawn when it is created, before any private value exists, so a batch killed before its commit
and run again releases the same answers; retrying redraws nothing. Position i is the i-th answer
(``queries_seen``, which equals the answers spent, ``bottoms``).

No timing channel: the work of a batch is the table lookups of its first min(n, m - spent) queries,
whatever the votes.

More than two classes (issue 49; docs/privacy.md, "gnmax over c classes"), given the count vector
ct = (ct(0), ..., ct(c-1)) of each query (sum k):

    release  argmax_j (ct(j) + Z_j),  Z_0, ..., Z_{c-1} independent N_Z(0, sigma_c^2), ties to the smallest j,

sigma_c = count_sigma(lam) (lam calibrated for 2m unit shifts: gnmax.dominating_noises). Sensitivity:
one person moves one model's vote from a class a to a class b, so ct(a) - 1 and ct(b) + 1 (L2
sqrt 2). Guarantee: the vector ct + Z is the product of c discrete Gaussians, of which two shift by 1:
dominated by the 2-fold product of (N_Z(0, sigma_c^2), N_Z(1, sigma_c^2)) (CKS20 Theorem 4 per
coordinate; products compose, Zhu-Dong-Wang 2022 Theorem 10), rho = 1/sigma_c^2 per answer, the
argmax post-processing, m answers the 2m-fold product certified by :mod:`pcqr.pipeline.privacy.gnmax`.
Sampling: Z_{i,j} is the inverse-CDF value (DiscreteGaussianTail.values, within (2J + 3) 3e-39 in
total variation of exact, counted in ``delta_sampler``) of the keyed number U at stream position
c i + j. No timing channel: c fixed-step binary searches per answer, whatever the votes.
"""
from __future__ import annotations

import numpy as np

from pcqr.pipeline.gates.gate import (
    Features, PublicRecord, Released, SparseVectorState, checked_class_votes, checked_votes, source_codes,
)
from pcqr.pipeline.privacy.gnmax import count_sigma
from pcqr.pipeline.privacy.noise import DiscreteGaussianTail, KeyedStream, NoiseSource, session_key
from pcqr.pipeline.privacy.subsamp import SubSampParameters
from pcqr.pipeline.public_log.batches import ANSWERED, GNMAX_CODE, REFUSED


class NoisyArgmax:
    """One gnmax session's coordinator, the gnmax gate (a :class:`pcqr.pipeline.gates.gate.Gate`), in
    the driver only (as the sparse vector's: its state must advance once per committed batch).
    ``state.bottoms`` counts the answers spent (each is one of the m "instances"), ``state.thresholds``
    is empty."""

    def __init__(self, params: SubSampParameters, state: SparseVectorState) -> None:
        if params.gate != "gnmax":
            raise ValueError(f"NoisyArgmax runs the gnmax gate, not {params.gate!r}")
        if state.thresholds.shape != (0,) or len(state.key) != 32:
            raise ValueError(f"state has {state.thresholds.shape} thresholds and a {len(state.key)}-byte key; "
                             "expected (0,) and 32")
        self.params = params
        self.state = state
        self._tail = DiscreteGaussianTail(count_sigma(params.lam))
        self._stream = KeyedStream(state.key)

    @classmethod
    def create(cls, params: SubSampParameters, noise: NoiseSource) -> NoisyArgmax:
        """A fresh session: its secret key is drawn now, before any private value exists."""
        return cls(params, SparseVectorState(0, 0, session_key(noise), np.zeros(0, dtype=np.int64)))

    @classmethod
    def resume(cls, params: SubSampParameters, state: SparseVectorState, record: PublicRecord | None) -> NoisyArgmax:
        """The gnmax gate of a saved session (it reads nothing of the public record)."""
        return cls(params, state)

    @property
    def halted(self) -> bool:
        return self.state.bottoms >= self.params.cutoff

    @property
    def capacity(self) -> int:
        """Fresh queries it may still test (pcqr.pipeline.gates.gate.Gate.capacity)."""
        return 0 if self.halted else max(0, self.params.cutoff - self.state.bottoms)

    @property
    def stream(self) -> KeyedStream:
        return self._stream

    @property
    def tail(self) -> DiscreteGaussianTail:
        return self._tail

    def process(self, ones: np.ndarray, subsamples: int) -> tuple[np.ndarray, np.ndarray]:
        """The noisy majority of each query, in order, until m answers are spent.

        Parameters
        ----------
        ones : array of int
            ct(1) for each query (private).
        subsamples : int
            k.

        Returns
        -------
        status : int8 array, ANSWERED for the first m - spent queries, REFUSED after
        label : int8 array, the released label where answered (else 0)
        """
        ones = checked_votes(ones, subsamples)
        n = ones.shape[0]
        state = self.state
        allowed = 0 if self.halted else min(n, self.params.cutoff - state.bottoms)
        u_hi, u_lo = self._stream.uniforms(state.queries_seen, allowed)
        released = self._tail.at_least(subsamples // 2 + 1 - ones[:allowed], u_hi, u_lo)
        status = np.full(n, REFUSED, dtype=np.int8)
        label = np.zeros(n, dtype=np.int8)
        status[:allowed] = ANSWERED
        label[:allowed] = released
        state.bottoms += allowed
        state.queries_seen += allowed
        return status, label

    def process_classes(self, counts: np.ndarray, subsamples: int) -> tuple[np.ndarray, np.ndarray]:
        """The noisy plurality of each query over c > 2 classes, in order, until m answers are spent.

        Parameters
        ----------
        counts : int array (n, c)
            ct(j) for each query and class j (private); each row the gate reads (the first m - spent)
            sums to k.
        subsamples : int
            k.

        Returns
        -------
        status : int8 array, ANSWERED for the first m - spent queries, REFUSED after
        label : int8 array, the released class index where answered (else 0)
        """
        classes = self.params.classes
        n = np.shape(counts)[0]
        state = self.state
        allowed = 0 if self.halted else min(n, self.params.cutoff - state.bottoms)
        # the rows past the m answers are refused unread (their votes were not counted: zeros)
        counts = checked_class_votes(np.asarray(counts)[:allowed], subsamples, classes)
        u_hi, u_lo = self._stream.uniforms(classes * state.queries_seen, classes * allowed)
        noise = self._tail.values(u_hi, u_lo).reshape(allowed, classes)
        status = np.full(n, REFUSED, dtype=np.int8)
        label = np.zeros(n, dtype=np.int8)
        status[:allowed] = ANSWERED
        label[:allowed] = np.argmax(counts[:allowed] + noise, axis=1)  # ties: the first, the smallest index
        state.bottoms += allowed
        state.queries_seen += allowed
        return status, label

    def release(self, ones: np.ndarray, subsamples: int, features: Features) -> Released:
        """The gnmax gate on one batch (:meth:`process`; the features are not read): every query's
        source is ``gnmax``, each answer spends one of the m."""
        before = self.state.bottoms
        if self.params.classes > 2:
            status, label = self.process_classes(ones, subsamples)
        else:
            status, label = self.process(ones, subsamples)
        return Released(status, label, source_codes(GNMAX_CODE, status.shape[0]), self.state.bottoms - before)
