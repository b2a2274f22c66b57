"""The stability-based histogram: every point query of an integer feature answered from noisy counts
of the values seen, a value released only when its noisy count clears a threshold (``pcqr sanitize
--algorithm histogram``; issue 31). The practitioner's sanitizer for point queries, beside
Beimel-Nissim-Stemmer's SanPoints (:mod:`.san_points`), which needs far more rows for far less
accuracy.

For a database S of m rows (m public) and the public integer domain X (``--domain lo:hi``), let
c(v) be the copies of v in S for every v of X seen in S. Release {v: c(v) + Z_v : c(v) + Z_v >= tau},
Z_v ~ DLap(s) i.i.d. (exact discrete Laplace), for the values seen only; a value not seen is never
released, whatever its noise. That is the law of OpenDP's ``make_count_by`` (the counting; here done
by the workers, :func:`shard_counts`) followed by ``make_laplace_threshold(scale=s, threshold=tau)``
(the measurement, on the driver). A point query's answer is the released count over m, clipped to
[0, 1]; an unreleased value answers 0.

How it is drawn (:func:`stable_histogram`). OpenDP's ``make_laplace_threshold`` draws a full exact
discrete Laplace for every value seen, about 10 us each on this machine: 17 minutes for the 10^8
values of a 10^8-row table. pcqr draws the same law in two steps: the bit "released", Z_v >= tau -
c(v), for every value from :class:`pcqr.pipeline.privacy.noise.DiscreteLaplaceTail` (the sparse
vector's tail sampler: a 128-bit comparison, within TAIL_SAMPLER_ERROR = 3e-39 of the exact
probability), then, for the released values only, c(v) + Z_v given c(v) + Z_v >= tau, exactly, by
rejection from OpenDP's Laplace mechanism (:func:`conditional_release`). The two laws are within total
variation m x 3e-39, charged as ``delta_sampler``; ``test_stable_histogram`` checks both samplers
against the exact law on the same tiny input.

Privacy (replace-one neighbours, m public). One replaced row moves two counts by one each: c(a) down,
c(b) up (L0 = 2, Linf = 1). Every key's output is a function of its own count and noise:

* a key whose count is positive on both sides: its output laws differ by at most a factor e^(1/s)
  (a shift of one in c(v) + Z, and the event c + Z < tau, whose probability ratio under a shift of
  one is in [e^(-1/s), e^(1/s)] by the monotone likelihood ratio of DLap);
* a key seen on one side only (c(a) = 1 in S, absent in S'): it is released under S with probability
  P(1 + Z >= tau) = P(Z >= tau - 1) and never under S'.

So, for any output set O, P[M(S) in O] <= e^(2/s) P[M(S') in O] + P(Z >= tau - 1): (eps, delta)-DP
with eps = 2/s and delta = P(Z >= tau - 1) (one key can appear in each direction: the removed row's
in one, the added row's in the other). Rogers (2023, arXiv 2309.09170) is the general analysis;
``test_stable_histogram`` checks the exact output law on every neighbour pair of tiny databases: the
hockey-stick divergence at eps is at most this delta and reaches it.

What OpenDP certifies against what pcqr charges. ``make_laplace_threshold``'s own privacy map at
d_in = (L0 2, L1 2, Linf 1) reports delta = 2 P(Z >= tau): it counts the tail from tau, while the
sampler releases a count EQUAL to tau, so a count of 1 is released with P(Z >= tau - 1) (OpenDP issue
#2922, open, measured here: 0.098 released against a reported 0.036 at scale 1, tau 3). pcqr
charges its own delta, P(Z >= tau - 1) rounded up (:func:`pcqr.pipeline.privacy.stability.laplace_tail`),
and reports OpenDP's map beside it (``delta_opendp_map``), never charged. The randomness is the
noise source's: os.urandom words and OpenDP's exact sampler when private; with a test seed, numpy
(:class:`pcqr.pipeline.privacy.noise.SeededNoise`), and the table is marked not private.

Utility (:meth:`HistogramParameters.error_bound`): with probability at least 1 - beta every point
query is within (tau + t) / m of its true share, t the least integer with m P(|Z| >= t) <= beta: a
released value is off by its |Z| < t; an unreleased one has c(v) < tau - Z_v <= tau + |Z_v|; an
unseen one answers 0 exactly (at most m values are seen, hence the union bound over m).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.mechanisms.adist import noise_scale
from pcqr.pipeline.mechanisms.integer_domain import Domain, value_counts
from pcqr.pipeline.privacy.limits import MAX_TAIL_ENTRIES
from pcqr.pipeline.privacy.noise import DiscreteLaplaceTail, NoiseSource
from pcqr.pipeline.privacy.opendp_constructors import dp_names
from pcqr.pipeline.privacy.stability import laplace_tail
from pcqr.pipeline.privacy.tail_window import SCALE_BITS, tail_span
from pcqr.pipeline.privacy.subsamp import (
    TAIL_SAMPLER_ERROR, check_epsilon_delta, check_fraction, delta_certificate, round_up,
)

#: Replace-one moves two counts by one each: the counts' L1 (and L0) sensitivity.
SENSITIVITY = 2
#: Rows per shard: the driver thresholds one shard's counts at a time (at most this many values).
SHARD_VALUES = 1 << 22
#: The largest database :meth:`HistogramParameters.least_rows` searches.
MAX_ROWS = 10**18
#: 2^64 / golden ratio: the multiplier of the public hash that spreads values over shards.
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@dataclass(frozen=True)
class HistogramParameters:
    """The request (eps, delta, alpha, beta), m (public), the noise scale s and the threshold tau."""

    epsilon: float
    delta: float
    alpha: float
    beta: float
    rows: int
    scale: float
    threshold: int

    @classmethod
    def create(cls, epsilon: float, delta: float, alpha: float, beta: float, rows: int) -> HistogramParameters:
        """s = 2/eps (rounded up so that 2/s <= eps exactly) and the least tau whose delta fits; refused
        in one line when m rows cannot answer every point query within alpha (with the least m that can)."""
        params = cls.calibrated(epsilon, delta, alpha, beta, rows)
        proven = params.certificate()["proven_delta"]
        if proven > delta:  # cannot happen: tau fits delta less the sampler's term; kept as the last word
            raise PcqrError(f"--algorithm histogram at eps {epsilon:g}, delta {delta:g}: proves only delta {proven:.3g}")
        if rows < 1 or params.error_bound() > alpha:
            least = params.least_rows()
            raise PcqrError(f"--algorithm histogram at eps {epsilon:g}, delta {delta:g}: {rows:,} rows answer every "
                            f"point query within {params.error_bound():.3g}, above --alpha {alpha:g}; it needs at "
                            f"least {least:,} rows (or a larger --alpha)")
        return params

    @classmethod
    def calibrated(cls, epsilon: float, delta: float, alpha: float, beta: float, rows: int) -> HistogramParameters:
        """The request checked and calibrated (s, tau), without :meth:`create`'s check of the rows."""
        check_epsilon_delta(epsilon, delta)
        check_fraction(alpha, "--alpha")
        check_fraction(beta, "--beta")
        scale = noise_scale(epsilon, SENSITIVITY)
        if tail_span(scale) + 2 > MAX_TAIL_ENTRIES:  # the release bits' table (DiscreteLaplaceTail)
            least = SENSITIVITY * (SCALE_BITS + 2) * math.log(2) / (MAX_TAIL_ENTRIES - 4)
            raise PcqrError(f"--epsilon {epsilon:g}: the histogram's noise table at scale {scale:.4g} would exceed "
                            f"{MAX_TAIL_ENTRIES:,} entries; --epsilon must be at least {least * 1.001:.3g}")
        room = delta - sampler_delta(epsilon, rows)
        if not room > 0:
            raise PcqrError(f"--delta {delta:g}: the tail sampler's error over {rows:,} values ((1 + e^eps) m 3e-39) "
                            "leaves no room for the threshold; use a larger --delta")
        return cls(epsilon, delta, alpha, beta, rows, scale, least_threshold(scale, room))

    def tail_bound(self) -> int:
        """t: the least integer with m P(|Z| >= t) <= beta (P(|Z| >= t) = 2 P(Z >= t), t >= 1)."""
        bound = self.beta / (2 * self.rows)
        if not bound > 0:
            raise PcqrError(f"--beta {self.beta:g} over {self.rows:,} rows: beta / 2m is below a float's range")
        return least_tail(self.scale, bound)

    def error_bound(self) -> float:
        """(tau + t) / m: with probability 1 - beta every point query's error is below it (module docstring)."""
        return (self.threshold + self.tail_bound()) / self.rows if self.rows else math.inf

    def least_rows(self) -> int:
        """The least m whose :meth:`error_bound` is within alpha (it decreases in m): doubling, then bisection."""
        def fits(m: int) -> bool:
            return self.calibrated(self.epsilon, self.delta, self.alpha, self.beta, m).error_bound() <= self.alpha

        high = max(1, math.ceil(min(self.threshold / self.alpha, 2.0 * MAX_ROWS)))
        while high > MAX_ROWS or not fits(high):
            if high > MAX_ROWS:
                raise PcqrError(f"--alpha {self.alpha:g}: no number of rows up to {MAX_ROWS:.0e} answers every point "
                                "query within it")
            high *= 2
        low = high // 2
        while low + 1 < high:
            mid = (low + high) // 2
            low, high = (low, mid) if fits(mid) else (mid, high)
        return high

    def certificate(self) -> dict[str, float]:
        """proven_epsilon (2/s <= eps); delta_threshold = P(Z >= tau - 1) rounded up (module docstring);
        delta_sampler = (1 + e^eps) m TAIL_SAMPLER_ERROR: the release bits of at most m values seen,
        each within TAIL_SAMPLER_ERROR of exact (:class:`DiscreteLaplaceTail`)."""
        return delta_certificate(self.epsilon, {"threshold": round_up(laplace_tail(self.threshold - 1, self.scale)),
                                                "sampler": sampler_delta(self.epsilon, self.rows)})

    def opendp_delta(self) -> float:
        """OpenDP 0.16's own map of ``make_laplace_threshold`` at (L0 2, L1 2, Linf 1): reported, not charged."""
        measurement = _opendp_threshold(self.scale, self.threshold)
        return float(measurement.map((SENSITIVITY, SENSITIVITY, 1))[1])

    def to_dict(self) -> dict[str, Any]:
        return {"noise_scale": self.scale, "threshold": self.threshold, "error_bound": self.error_bound(),
                "delta_opendp_map": self.opendp_delta()}


def sampler_delta(epsilon: float, rows: int) -> float:
    """(1 + e^eps) m TAIL_SAMPLER_ERROR, rounded up: the release bits of at most m values seen."""
    return math.nextafter((1 + math.exp(epsilon)) * rows * TAIL_SAMPLER_ERROR, math.inf)


def least_threshold(scale: float, delta: float) -> int:
    """The least integer tau >= 2 with P(Z >= tau - 1) <= delta (tau = 1 would release every value seen
    with probability 1/2 or more)."""
    return least_tail(scale, delta) + 1


def least_tail(scale: float, bound: float) -> int:
    """The least integer a >= 1 with P(Z >= a) <= ``bound``, Z ~ DLap(scale) (:func:`laplace_tail`, an
    upper bound, so the answer never errs low): from the closed form q^a / (1 + q), then exact steps."""
    q = math.exp(-1 / scale)
    a = max(1, math.floor(math.log(bound * (1 + q)) / math.log(q)))
    while a > 1 and laplace_tail(a - 1, scale) <= bound:
        a -= 1
    while laplace_tail(a, scale) > bound:
        a += 1
    return a


def _opendp_threshold(scale: float, threshold: int) -> Any:
    dp = dp_names()
    return dp.m.make_laplace_threshold(
        dp.map_domain(dp.atom_domain(T=dp.i64), dp.atom_domain(T=dp.i64)),
        dp.l01inf_distance(dp.absolute_distance(T=dp.i64)), scale=float(scale), threshold=int(threshold))


def shard_of(values: np.ndarray, shards: int) -> np.ndarray:
    """A public hash of each value into [0, shards): the same value lands in the same shard in every
    part, whatever the data (Fibonacci hashing of the 64-bit pattern)."""
    mixed = np.asarray(values, dtype=np.int64).view(np.uint64) * _GOLDEN
    return (mixed >> np.uint64(32)) % np.uint64(shards)


def shard_counts(X: np.ndarray, domain: Domain, shards: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Worker task: the part's (values, counts) of the integers of ``domain`` (:func:`value_counts`),
    split into ``shards`` by :func:`shard_of`, each sorted."""
    values, counts = value_counts(X, domain)
    where = shard_of(values, shards)
    order = np.argsort(where, kind="stable")  # by shard, each shard's values still sorted
    edges = np.searchsorted(where[order], np.arange(1, shards, dtype=where.dtype))
    return list(zip(np.split(values[order], edges), np.split(counts[order], edges)))


def stable_histogram(values: np.ndarray, counts: np.ndarray, params: HistogramParameters,
                     noise: NoiseSource) -> tuple[np.ndarray, np.ndarray]:
    """The released (values, noisy counts) of the values seen: c + Z kept where c + Z >= tau.

    ``values`` distinct, ``counts`` their positive copies. Drawn in two steps with the law of
    ``make_laplace_threshold`` (module docstring): whether each value is released, the bit
    Z >= tau - c (:class:`DiscreteLaplaceTail`, within TAIL_SAMPLER_ERROR of exact, in time that
    does not depend on c); then, for the released ones only, c + Z given c + Z >= tau, exactly
    (:func:`conditional_release`)."""
    values = np.asarray(values, dtype=np.int64)
    exact = np.asarray(counts, dtype=np.int64)
    if values.shape != exact.shape or (exact.size and exact.min() < 1):
        raise ValueError("counts must be positive, one per value")
    if not values.size:
        return values, exact
    released = DiscreteLaplaceTail(params.scale).draw_at_least(params.threshold - exact, noise)
    return values[released], conditional_release(exact[released], params.threshold, params.scale, noise)


def conditional_release(counts: np.ndarray, threshold: int, scale: float, noise: NoiseSource) -> np.ndarray:
    """Independent draws of c + Z given c + Z >= tau, Z ~ DLap(scale), one for each c, exact.

    For c < tau the tail of DLap is geometric and memoryless: c + Z given c + Z >= tau has the law of
    tau + Z given tau + Z >= tau. So each draw is base + Z given base + Z >= tau, base = max(c, tau),
    by rejection from the noise source's mechanism on the bases (OpenDP's, adding the noise inside
    it), each accepted with probability P(Z >= min(tau - c, 0)) >= 1/2."""
    base = np.maximum(np.asarray(counts, dtype=np.int64), threshold)
    drawn = np.zeros(base.size, dtype=np.int64)
    pending = np.arange(base.size)
    while pending.size:
        y = noise.laplace_mechanism(base[pending], scale)
        accepted = y >= threshold
        drawn[pending[accepted]] = y[accepted]
        pending = pending[~accepted]
    return drawn


def release_shards(shards: Iterable[tuple[np.ndarray, np.ndarray]], params: HistogramParameters,
                   noise: NoiseSource) -> list[tuple[int, float]]:
    """The whole release, one shard's merged counts at a time: (value, share) pairs sorted by value,
    each share the noisy count over m clipped to [0, 1] (post-processing). The shards partition the
    values seen, so thresholding them one by one has the law of thresholding them all at once."""
    released: list[tuple[np.ndarray, np.ndarray]] = [stable_histogram(v, c, params, noise) for v, c in shards]
    values = np.concatenate([v for v, _ in released]) if released else np.zeros(0, np.int64)
    noisy = np.concatenate([c for _, c in released]) if released else np.zeros(0, np.int64)
    order = np.argsort(values, kind="stable")
    shares = np.clip(noisy[order], 0, params.rows) / params.rows
    return list(zip(values[order].tolist(), shares.tolist()))


def shard_number(rows: int) -> int:
    """Shards for m rows: about SHARD_VALUES values seen each at most (a public function of m)."""
    return max(1, math.ceil(rows / SHARD_VALUES))


def release_on_cluster(client: Any, part_counts: list[Any], params: HistogramParameters,
                       noise: NoiseSource, shards: int) -> list[tuple[int, float]]:
    """The driver's side: each shard's pieces picked from the parts (so a worker fetches only the
    shard it merges), merged by a worker, then thresholded here, one shard at a time."""
    from operator import getitem

    from pcqr.pipeline.mechanisms.integer_domain import merge_counts

    def merged() -> Iterable[tuple[np.ndarray, np.ndarray]]:
        futures = [client.submit(merge_counts, *[client.submit(getitem, part, s, pure=False) for part in part_counts],
                                 pure=False) for s in range(shards)]
        for future in futures:
            yield future.result()
            future.release()

    return release_shards(merged(), params, noise)
