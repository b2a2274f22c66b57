"""SanThresholds: a sanitizer for threshold counting queries (Beimel-Nissim-Stemmer, papers/002
section 4.3, Figure 11, Lemma 4.8, Claims 4.9-4.11, Lemma 4.12; ALGORITHMS.md section 8).

For a database S of m rows and a public integer domain X = [lo, hi] (``--domain lo:hi``), every
threshold query Q_j(S) = |{i : x_i < j}| / m (the paper's c_j(x) = 1 iff x < j) is answered within
alpha, with probability 1 - 3 c beta, by the released table {b: weight}: Q_j's answer is the weight
of the points b < j. pcqr states it in its threshold hypotheses' convention: ``pcqr release-answer
TABLE --query threshold=theta,direction=down`` is 'x <= theta' (the weight of the points b <=
theta), and 'x > theta' (``direction=up``) its complement; for integer rows 'x <= j - 1' is c_j.

A global ``calls`` starts at c = :func:`call_bound` (alpha) = ceil(77 / alpha); the calls run on
ranges [k, l] of X depth first, the left range before the right (an explicit stack, the paper's
order). One call, Fig. 11's steps with # = the rows in a range, r = alpha m / 32:

1. if calls = 0, halt (every later call halts too); else calls -= 1;
2. #^[k, l] = #[k, l] + Z, Z ~ DLap(1/eps0) exact (OpenDP);
3. if #^[k, l] < alpha m / 8: [a, b] = [k, l], add the point l with weight #^/m, end the call;
4-6. T = the least power of 2 >= l - k + 1; for j = 0..log T, I(S, j) = the most rows in a window
   of at most 2^j consecutive integers inside [k, l] (:func:`window_counts`: two pointers over the
   distinct values seen, never the domain) and Q(S, j) = floor(min(I(S, j) - r, 3r - I(S, j - 1))),
   I(S, -1) = 0 (:func:`scale_quality`; the floor is ours: RecConcave takes integer qualities);
8. z = RecConcave (:mod:`pcqr.pipeline.mechanisms.rec_concave`) on [0, log T] with Q, promise r,
   approximation 1/4; Z = 2^z (a range of one value has the one solution z = 0: no mechanism);
9-10. the choosing mechanism (:mod:`pcqr.pipeline.mechanisms.choosing`, growth 2, approximation
   alpha/64) with quality #[.] over the single points of [k, l] (z = 0) or over the windows
   A_i = [k + 2Z(i - 1), k + 2Zi - 1] and B_i = [k + Z + 2Z(i - 1), k + Z + 2Zi - 1], trimmed at
   l (z >= 1) (:func:`candidates`: the ones holding a row; the others have quality 0 and the
   mechanism never picks them); the choice is [a, b] (a range of one value: [k, k], no mechanism);
11. #^[a, b] = #[a, b] + Z, Z ~ DLap(1/eps0); add the point b with weight #^[a, b] / m;
12-13. push [b + 1, l] if b < l, then [k, a - 1] if a > k (popped first).

Weights are clipped to [0, 1] (post-processing). When RecConcave or the choosing mechanism returns
bottom (the paper's analysis assumes they do not: that is its failure event), [a, b] = [k, l]:
step 11 counts the whole range and the call ends, so the ranges still partition X.

The workers take each row at ceil(x) clipped to [lo, hi]
(:func:`pcqr.pipeline.mechanisms.integer_domain.ceiling_counts`): every query 'x <= theta' with
theta an integer of [lo, hi - 1] counts the same rows before and after the map (fractional rows
too; a row beyond the domain is below or above every such theta).

Privacy (Lemma 4.8's argument under replace-one neighbours, with KOV's composition;
:class:`SanThresholdsParameters`):

* #[R] for a range R moves by at most 1 when one row is replaced: steps 2 and 11 are the Laplace
  mechanism on a sensitivity-1 count, (eps0, 0)-DP (b = 1/eps0 rounded up);
* I(S, j) is a max of such counts, so it moves by at most 1 (Observation 3.11); I(S, j) and
  I(S, j - 1) may both move, but each of Q's two terms holds only one of them, so Q = min of two
  sensitivity-1 functions minus public constants, floored, has sensitivity 1: RecConcave on it is
  its 3N - 2 mechanisms at eps0 (N = the depth of the root range's [0, log T], a public function
  of the domain; a smaller range needs no more), N exponential mechanisms (eps0, plus the sampler's
  delta_EM) and 2(N - 1) A_dist's (eps0, delta_A) (Lemma 3.12);
* #[.] over single points is 1-bounded growth, over the A's and B's 2-bounded (a row lies in one
  A and at most one B): the choosing mechanism is (eps0, delta0)-DP by Lemma 4.4 with k = 2
  (delta0: cases (a)/(b) and the sampler's term, certified at m; refused below the least m);
* every range, z, and [a, b] is a function of earlier outputs; alpha, m and X are public, so c
  and N are fixed before any row is read. S is touched by at most M = c (3N + 1) mechanisms (2
  counts, RecConcave's 3N - 2, one choosing), each eps0-DP or (eps0, delta_l)-DP, composed
  adaptively: by Kairouz-Oh-Viswanath Theorem 3.5, (eps, delta_pure + sum delta_l)-DP, delta_pure
  the M-fold pure composition's delta at eps. eps0 is the largest with delta_pure <= delta/2
  (:func:`pcqr.pipeline.privacy.composition.largest_eps0`); each call's delta carriers (one
  choosing, 2(N - 1) A_dist's) get delta / (2c(2N - 1)) each, less 2^-20 of it (room for the
  samplers' terms). The theorem fixes each place's (eps_l, delta_l) while which mechanism runs
  depends on earlier outputs: every call has the same template of 3N + 1 places, and a place whose
  mechanism does not run (a halt, a bottom, a shallower range) holds a constant output, (0, 0)-DP,
  so every run is one fixed sequence of M places. M above EXACT_MAX_COUNT is refused with the
  smallest alpha that fits. The
  paper's Lemma 4.8 composes 4c (eps, delta) mechanisms by advanced composition, RecConcave
  counted as one.

Utility (Claims 4.10-4.11, Lemma 4.12; :func:`paper_rows` as stated, reported, not enforced).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.mechanisms.adist import noise_scale
from pcqr.pipeline.mechanisms.choosing import ChoosingParameters, choose_solution
from pcqr.pipeline.mechanisms.integer_domain import Domain
from pcqr.pipeline.mechanisms.rec_concave import (
    ADIST_MARGIN, RecConcaveParameters, StepQuality, rec_concave, recursion_depth,
)
from pcqr.pipeline.mechanisms.san_points import certified_choosing, clipped_share, noisy_count
from pcqr.pipeline.privacy.composition import EXACT_MAX_COUNT, largest_eps0, optimal_delta
from pcqr.pipeline.privacy.noise import NoiseSource
from pcqr.pipeline.privacy.subsamp import check_epsilon_delta, check_fraction, delta_certificate, round_up

#: Fig. 11's global calls is initialised to c = ceil(CALLS_NUMERATOR / alpha) (Claim 4.11: 384/(5 alpha) < 77/alpha).
CALLS_NUMERATOR = 77
#: The choosing mechanism's quality is 2-bounded growth (a row lies in one A_i and at most one B_i).
GROWTH = 2


def call_bound(alpha: float) -> int:
    """c = ceil(77 / alpha): the calls Fig. 11 may make (public: a function of alpha alone)."""
    return math.ceil(CALLS_NUMERATOR / alpha)


def log_top(size: int) -> int:
    """log2 T for T the least power of 2 >= ``size`` (>= 1)."""
    return (size - 1).bit_length()


def _count(n: int) -> str:
    """A count for a message: 3,080, or 7.7e+301 when it is too long to read."""
    return f"{n:,}" if n < 10**12 else f"{n:.2g}"


def mechanisms_per_call(depth: int) -> int:
    """2 counts + one choosing mechanism + RecConcave's 3N - 2 at depth N."""
    return 3 * depth + 1


def smallest_alpha(depth: int) -> float:
    """The smallest alpha whose c (3N + 1) mechanisms fit the exact composition (EXACT_MAX_COUNT)."""
    most = EXACT_MAX_COUNT // mechanisms_per_call(depth)
    alpha = CALLS_NUMERATOR / most
    while call_bound(alpha) > most:
        alpha = math.nextafter(alpha, math.inf)
    return alpha


@dataclass(frozen=True)
class SanThresholdsParameters:
    """The request, the public domain and m, c, eps0 of every mechanism, the counts' noise scale,
    the choosing mechanism's parameters and RecConcave's (for the root range)."""

    epsilon: float
    delta: float
    alpha: float
    beta: float
    rows: int
    domain: Domain
    calls: int
    eps0: float
    count_scale: float
    choosing: ChoosingParameters
    rec: RecConcaveParameters

    @staticmethod
    def budget(epsilon: float, delta: float, alpha: float, domain: Domain) -> tuple[int, int, float, float]:
        """(c, N, eps0, each delta carrier's share): refused in one line naming --alpha when the
        c (3N + 1) mechanisms are beyond the exact composition."""
        calls, depth = call_bound(alpha), recursion_depth(log_top(domain.size))
        count = calls * mechanisms_per_call(depth)
        if count > EXACT_MAX_COUNT:
            raise PcqrError(f"--alpha {alpha:g}: SanThresholds over --domain {domain.describe()} makes up to "
                            f"ceil(77/alpha) = {_count(calls)} calls of {mechanisms_per_call(depth)} mechanisms "
                            f"({_count(count)}); their optimal composition is certified for at most {EXACT_MAX_COUNT:,}: "
                            f"--alpha must be at least {smallest_alpha(depth):.4g}")
        carriers = calls * (2 * depth - 1)
        return calls, depth, largest_eps0(count, epsilon, delta / 2), delta / (2 * carriers) * ADIST_MARGIN

    @classmethod
    def create(cls, epsilon: float, delta: float, alpha: float, beta: float, rows: int,
               domain: Domain) -> SanThresholdsParameters:
        """Refused in one line unless every mechanism is certified at m = ``rows`` (the message
        gives the least m that is)."""
        check_epsilon_delta(epsilon, delta)
        check_fraction(alpha, "--alpha")
        check_fraction(beta, "--beta")
        calls, _, eps0, share = cls.budget(epsilon, delta, alpha, domain)
        choosing = certified_choosing(f"SanThresholds at eps {epsilon:g}, delta {delta:g}, alpha {alpha:g}",
                                      f"{calls} choosing mechanisms", eps0, share, alpha / 64, beta, GROWTH, rows)
        rec = RecConcaveParameters.within(eps0, share, log_top(domain.size), rows)
        params = cls(epsilon, delta, alpha, beta, rows, domain, calls, eps0, noise_scale(eps0), choosing, rec)
        proven = params.certificate()["proven_delta"]
        if proven > delta:  # cannot happen: delta/2 + c (2N - 1) shares; kept as the last word
            raise PcqrError(f"SanThresholds at eps {epsilon:g}, delta {delta:g}: proves only delta {proven:.3g}")
        return params

    @classmethod
    def least_rows(cls, epsilon: float, delta: float, alpha: float, beta: float, domain: Domain) -> int:
        """The least m at which :meth:`create` certifies these values."""
        check_epsilon_delta(epsilon, delta)
        check_fraction(alpha, "--alpha")
        check_fraction(beta, "--beta")
        _, _, eps0, share = cls.budget(epsilon, delta, alpha, domain)
        return ChoosingParameters.least_rows(eps0, share, alpha / 64, beta, GROWTH)

    @property
    def mechanisms(self) -> int:
        """M = c (3N + 1)."""
        return self.calls * mechanisms_per_call(self.rec.depth)

    def certificate(self) -> dict[str, float]:
        """proven_epsilon, delta_composition (the M-fold pure part), delta_stability (c x the choosing
        mechanism's case (a)/(b) bound and RecConcave's A_dist tails), delta_sampler (c x their
        samplers' terms), proven_delta: KOV's bound, rounded up."""
        choosing, rec = self.choosing.delta_terms(), self.rec.delta_terms()
        return delta_certificate(self.epsilon, {
            "composition": optimal_delta(self.eps0, self.mechanisms, self.epsilon),
            "stability": round_up(self.calls * (max(choosing["case_a"], choosing["case_b"]) + rec["stability"])),
            "sampler": round_up(self.calls * (choosing["sampler"] + rec["sampler"])),
        })

    def to_dict(self) -> dict[str, Any]:
        return {"calls": self.calls, "recursion_depth": self.rec.depth, "mechanisms": self.mechanisms,
                "eps0": self.eps0, "count_noise_scale": self.count_scale, "choosing_noise_scale": self.choosing.scale,
                "choosing_delta0": self.choosing.certificate()["proven_delta"],
                "adist_threshold": self.rec.adist.threshold if self.rec.adist is not None else None}


def paper_rows(epsilon: float, delta: float, alpha: float, beta: float, domain: Domain) -> int | float:
    """Claims 4.10-4.11's m as stated: 8^(log* d) 60 c / (alpha eps) log* d log2(12 log* d / (beta eps
    delta)), c = ceil(77/alpha), d = log2 T of the domain (its bits), log* d the times log2 is applied
    to d until it is at most 1 (inf beyond a float)."""
    bits, star = float(max(1, log_top(domain.size))), 0
    while bits > 1:
        bits, star = math.log2(bits), star + 1
    star = max(star, 1)
    value = (8.0**star * 60 * call_bound(alpha) / (alpha * epsilon) * star
             * math.log2(12 * star / (beta * epsilon * delta)))
    return math.ceil(value) if math.isfinite(value) else math.inf


# --- one call's pieces, on the distinct values seen (never the domain) ---------------------------------


class RangeCounts:
    """The exact counts of the distinct values seen (sorted, private), with prefix sums: #[a, b]."""

    def __init__(self, values: np.ndarray, counts: np.ndarray) -> None:
        self.values = np.asarray(values, dtype=np.int64)
        self.counts = np.asarray(counts, dtype=np.int64)
        self.prefix = np.concatenate([[0], np.cumsum(self.counts)])

    def span(self, first: int, last: int) -> tuple[int, int]:
        """The slice of the values inside [first, last]."""
        return (int(np.searchsorted(self.values, first, "left")), int(np.searchsorted(self.values, last, "right")))

    def count(self, first: int, last: int) -> int:
        """#S[first, last]."""
        i, j = self.span(first, last)
        return int(self.prefix[j] - self.prefix[i])


def window_counts(rows: RangeCounts, first: int, last: int) -> list[int]:
    """Fig. 11 step 5: I(S, j) for j = 0..log T, the most rows in a window of at most 2^j consecutive
    integers inside [first, last]. A best window can be taken to start at a value seen (slide it
    right until it does; one that then passes ``last`` slides back left, losing nothing), so each
    width is one pass of two pointers (searchsorted) over the values in the range."""
    i, j = rows.span(first, last)
    values, prefix = rows.values[i:j], rows.prefix[i:j + 1]
    total = int(prefix[-1] - prefix[0])
    out: list[int] = []
    for power in range(log_top(last - first + 1) + 1):
        width = 1 << power
        if width >= last - first + 1 or (out and out[-1] == total):
            out.append(total)  # the whole range fits (I never falls as j grows)
            continue
        ends = np.searchsorted(values, values + width, "left")  # first value outside [v, v + width - 1]
        out.append(int((prefix[ends] - prefix[:-1]).max()) if values.size else 0)
    return out


def scale_quality(windows: list[int], rows: int, alpha: float) -> StepQuality:
    """Fig. 11 step 6 over [0, log T]: Q(S, j) = floor(min(I(S, j) - r, 3r - I(S, j - 1))), r = alpha
    m / 32, I(S, -1) = 0 (I an integer: I - ceil(r) and floor(3r) - I)."""
    r = Fraction(alpha) * rows / 32
    low, high = math.ceil(r), math.floor(3 * r)
    return StepQuality.of_points([min(w - low, high - (windows[j - 1] if j else 0)) for j, w in enumerate(windows)])


def candidates(rows: RangeCounts, first: int, last: int, z: int) -> tuple[list[tuple[int, int]], np.ndarray]:
    """Fig. 11 steps 9-10: the candidates holding at least one row and their qualities #[.]: the
    single points of [first, last] (z = 0), or the A_i's then the B_i's (z >= 1, Z = 2^z, length 2Z
    trimmed at ``last``). The others have quality 0 (never picked: the mechanism picks from q >= 1)."""
    i, j = rows.span(first, last)
    values, counts = rows.values[i:j], rows.counts[i:j]
    if z == 0:
        return [(int(v), int(v)) for v in values], counts.copy()
    half = 1 << z
    out: list[tuple[int, int]] = []
    qualities: list[np.ndarray] = []
    for offset, keep in ((0, values >= first), (half, values >= first + half)):
        start = first + offset
        index = (values[keep] - start) // (2 * half)
        if index.size == 0:
            continue
        seen, at = np.unique(index, return_index=True)
        qualities.append(np.add.reduceat(counts[keep], at))
        out.extend((start + 2 * half * int(k), min(last, start + 2 * half * (int(k) + 1) - 1)) for k in seen)
    return out, (np.concatenate(qualities) if qualities else np.zeros(0, np.int64))


@dataclass(frozen=True)
class Call:
    """What one call released, for tests and audits: its range, the step-3 share if it ended there
    (else None), z (None: RecConcave's bottom, or not run), the choice (None: bottom or not run),
    [a, b] and the released share of b."""

    first: int
    last: int
    halted: float | None
    z: int | None
    chosen: tuple[int, int] | None
    interval: tuple[int, int]
    share: float


def sanitize_range(rows: RangeCounts, first: int, last: int, params: SanThresholdsParameters,
                   noise: NoiseSource) -> Call:
    """Steps 2-11 of one call on [first, last]."""
    m = params.rows
    noisy = noisy_count(rows.count(first, last), params.count_scale, noise)  # step 2
    if noisy < math.ceil(Fraction(params.alpha) * m / 8):  # step 3 (noisy an integer)
        return Call(first, last, clipped_share(noisy, m), None, None, (first, last), clipped_share(noisy, m))
    z: int | None = 0  # a range of one value: [0, log T] = {0}
    if last > first:  # step 8
        quality = scale_quality(window_counts(rows, first, last), m, params.alpha)
        z = rec_concave(quality, Fraction(params.alpha) * m / 32, Fraction(1, 4), params.rec, noise)
    chosen: tuple[int, int] | None = (first, first)  # a range of one value: its only candidate
    if z is None:
        chosen = None
    elif last > first:  # steps 9-10
        intervals, qualities = candidates(rows, first, last, z)
        index = choose_solution(qualities, params.choosing, noise)
        chosen = None if index is None else intervals[index]
    a, b = chosen if chosen is not None else (first, last)
    share = clipped_share(noisy_count(rows.count(a, b), params.count_scale, noise), m)  # step 11
    return Call(first, last, None, z, chosen, (a, b), share)


def san_thresholds(values: np.ndarray, counts: np.ndarray, params: SanThresholdsParameters, noise: NoiseSource,
                   calls: list[Call] | None = None) -> list[tuple[int, float]]:
    """The released (point b, share) pairs in the order released, from the exact counts of the values
    seen (``values`` distinct sorted integers of the domain, ``counts`` their rows, at most m in all);
    ``calls``, if given, receives each call's :class:`Call`."""
    rows = RangeCounts(values, counts)
    domain = params.domain
    if (rows.values.shape != rows.counts.shape or (rows.counts.size and rows.counts.min() < 1)
            or int(rows.counts.sum()) > params.rows or np.any(np.diff(rows.values) <= 0)
            or (rows.values.size and (rows.values[0] < domain.lo or rows.values[-1] > domain.hi))):
        raise ValueError("values must be distinct sorted integers of the domain with positive counts summing to at "
                         "most the database size")
    released: list[tuple[int, float]] = []
    stack = [(domain.lo, domain.hi)]
    left = params.calls
    while stack and left > 0:  # step 1: once calls reaches 0 every later call halts
        left -= 1
        first, last = stack.pop()
        call = sanitize_range(rows, first, last, params, noise)
        if calls is not None:
            calls.append(call)
        a, b = call.interval
        released.append((b, call.share))
        if b < last:  # step 13, pushed first: popped after step 12's range and everything under it
            stack.append((b + 1, last))
        if a > first:  # step 12
            stack.append((first, a - 1))
    return released
