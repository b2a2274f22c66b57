"""Optimal composition of pure-DP mechanisms: the exact delta of T adaptive eps0-DP instances.

Kairouz, Oh and Viswanath, "The composition theorem for differential privacy" (ICML 2015; IEEE
Trans. Inf. Theory 2017), Theorem 3.3, restated in ALGORITHMS.md section 10: the T-fold adaptive
composition of eps0-DP mechanisms is (eps, delta(eps))-DP with

    delta(eps) = sum_{l=0..T} C(T, l) [ e^{(T-l) eps0} - e^{eps} e^{l eps0} ]_+ / (1 + e^{eps0})^T,

and no smaller delta holds for every such composition: it is the hockey-stick divergence at
e^eps between T independent binary randomized responses RR(eps0) run on two neighbours, which
one eps0-DP mechanism can realise at every step. The sparse vector's instances are each
eps0 = 2/lambda -DP (pcqr.pipeline.privacy.subsamp), at most T of them run, so this is the
tightest (eps, delta) their composition has.

Directed rounding. :func:`optimal_delta` never reports less than the exact value:

* delta(eps) grows with eps0 (RR(eps0) is a post-processing of RR(eps0') for eps0 <= eps0', so
  its products' divergences are smaller) and falls with eps. It is evaluated at a rational
  a >= e^eps0 and a rational E <= e^eps: ``math.exp`` moved 2 ulps outward (libm's exp is
  within 1 ulp; tests/test_composition.py checks the brackets against an exact series);
* at those rationals the sum is computed exactly in integers (Python's big ints: the terms'
  common denominator is s (p + q)^T for a = p / q, E = r / s) and the quotient rounded up to a
  float.

The exact sum has T + 1 terms of about 53 T bits each: fine up to EXACT_MAX_COUNT (about
0.25 s at T = 2,000 on one core). :func:`optimal_delta_estimate` is the same sum in
floating point (log-sum-exp), for searching; only the exact value certifies.

Two families (:func:`optimal_delta_two`, for PMW): ``count`` eps_a-DP and ``count`` eps_b-DP
mechanisms, adaptively interleaved, composed exactly as T randomized responses are, in floating point
with a stated error bound (the same sum in exact rationals would take minutes at PMW's counts).
"""
from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np

from pcqr.pipeline.errors import PcqrError

#: Largest T the exact certifier accepts (the big-integer sum grows as T^2 log T).
EXACT_MAX_COUNT = 2_000
#: Largest count per family :func:`optimal_delta_two` accepts (two arrays of count + 1 floats each;
#: about 0.1 s an evaluation there).
TWO_FAMILY_MAX_COUNT = 2_000_000
_UNIT = 2.0**-53  # the unit roundoff of a float
#: Largest eps0 :func:`optimal_delta_two` accepts, and the largest eps at which it subtracts the second
#: neighbour's mass: e^700 is still a finite float.
MAX_EXP = 700.0


def exp_above(x: float) -> Fraction:
    """A rational at least e^x (``math.exp`` moved up by 2 ulps)."""
    return Fraction(math.nextafter(math.nextafter(math.exp(x), math.inf), math.inf))


def exp_below(x: float) -> Fraction:
    """A rational at most e^x (``math.exp`` moved down by 2 ulps, never below 0)."""
    return Fraction(max(0.0, math.nextafter(math.nextafter(math.exp(x), -math.inf), -math.inf)))


def _check(eps0: float, count: int, epsilon: float) -> None:
    if not (math.isfinite(eps0) and eps0 > 0):
        raise PcqrError(f"optimal composition: eps0 must be a positive number, got {eps0}")
    if not (isinstance(count, int) and 1 <= count):
        raise PcqrError(f"optimal composition: the number of instances must be a whole number >= 1, got {count}")
    if not (math.isfinite(epsilon) and epsilon >= 0):
        raise PcqrError(f"optimal composition: eps must be a number >= 0, got {epsilon}")


@functools.lru_cache(maxsize=1024)  # pure; a session's certificate asks for the same value several times
def optimal_delta(eps0: float, count: int, epsilon: float) -> float:
    """The delta at which ``count`` adaptively composed ``eps0``-DP mechanisms are ``epsilon``-DP,
    exactly as KOV Theorem 3.3 gives it, rounded up (never understated; see the module docstring).

    Raises PcqrError for ``count`` above EXACT_MAX_COUNT (the exact sum would take minutes)."""
    _check(eps0, count, epsilon)
    if count > EXACT_MAX_COUNT:
        raise PcqrError(f"optimal composition is certified exactly for at most {EXACT_MAX_COUNT:,} instances, "
                        f"got T = {count:,}")
    if Fraction(epsilon) >= count * Fraction(eps0):
        return 0.0  # exactly: every bracket is <= 0, basic composition already gives (T eps0, 0)
    value = optimal_delta_at(exp_above(eps0), exp_below(epsilon), count)
    return _float_above(value) if value else 0.0


def optimal_delta_at(a: Fraction, e: Fraction, count: int) -> Fraction:
    """KOV's sum, exactly, at e^eps0 = ``a`` and e^eps = ``e`` (rationals, a > 1, e > 0):
    sum_l C(T, l) [a^(T-l) - e a^l]_+ / (1 + a)^T."""
    p, q, r, s = a.numerator, a.denominator, e.numerator, e.denominator
    T = count
    # term l: C(T, l) (s p^(T-l) q^l - r p^l q^(T-l)); it falls with l, so stop at the first <= 0.
    # The powers move one factor per step (exact divisions: each power still holds the factor).
    high, low = p**T, q**T  # p^(T-l) q^l and p^l q^(T-l) at l = 0
    total = 0
    binomial = 1
    for l in range(T + 1):
        term = s * high - r * low
        if term <= 0:
            break
        total += binomial * term
        if l < T:
            high, low = high * q // p, low * p // q
            binomial = binomial * (T - l) // (l + 1)
    return Fraction(total, s * (p + q) ** T)


def _float_above(value: Fraction) -> float:
    """The smallest float at least ``value`` (a float rounds to nearest: step up if it fell below)."""
    nearest = float(value)
    return nearest if Fraction(nearest) >= value else math.nextafter(nearest, math.inf)


def quotient_above(numerator: int, scale: float) -> float:
    """The smallest float at least numerator / scale: the eps0 of a noise of that scale, never understated."""
    return _float_above(Fraction(numerator) / Fraction(scale))


def optimal_delta_estimate(eps0: float, count: int, epsilon: float) -> float:
    """The same sum in floating point (log-sum-exp): within a few ulps times T of the exact value,
    for searching only; certify with :func:`optimal_delta`."""
    _check(eps0, count, epsilon)
    logs = []
    log_choose = 0.0
    for l in range(count + 1):
        gap = (count - 2 * l) * eps0 - epsilon
        if gap <= 0:
            break
        logs.append(log_choose + (count - l) * eps0 + math.log(-math.expm1(-gap)))  # log(1 - e^-gap), gap tiny too
        log_choose += math.log(count - l) - math.log(l + 1)
    if not logs:
        return 0.0
    top = max(logs)
    log_sum = top + math.log(math.fsum(math.exp(x - top) for x in logs))
    return math.exp(log_sum - count * (eps0 + math.log1p(math.exp(-eps0))))


def largest_eps0(count: int, epsilon: float, delta: float) -> float:
    """The largest eps0 (to about 1e-12 relative) whose ``count``-fold optimal composition is
    certified (eps, delta)-DP by :func:`optimal_delta`; PcqrError if even tiny eps0 is not."""
    if not 0 < delta < 1:
        raise PcqrError(f"optimal composition: delta must be in (0, 1), got {delta}")
    _check(1.0, count, epsilon)
    low, high = 0.0, epsilon if epsilon > 0 else 1.0  # delta(eps0 >= eps) >= the T = 1 term > 0 for small delta
    while optimal_delta_estimate(high, count, epsilon) <= delta:
        low, high = high, 2 * high
    for _ in range(200):  # bisection on the estimate
        middle = (low + high) / 2
        if middle in (low, high):
            break
        if optimal_delta_estimate(middle, count, epsilon) <= delta:
            low = middle
        else:
            high = middle
    candidate = low
    while candidate > 0 and optimal_delta(candidate, count, epsilon) > delta:  # the exact value decides
        candidate = math.nextafter(candidate * (1 - 1e-12), 0.0)
    if candidate <= 0:
        raise PcqrError(f"optimal composition: no eps0 > 0 makes {count} instances ({epsilon}, {delta})-DP")
    return candidate


def optimal_delta_two(eps_a: float, eps_b: float, count: int, epsilon: float) -> float:
    """An upper bound on the delta at which ``count`` eps_a-DP and ``count`` eps_b-DP mechanisms,
    adaptively composed in any order, are ``epsilon``-DP: the optimum plus the error bound below.

    Theorem relied on. On each pair of neighbours an eps-DP mechanism is a post-processing of
    randomized response RR(eps) (the proof of KOV Theorem 3.3, in their supplementary material:
    that mechanism dominates every eps-DP one, and the adaptive composition is bounded by the
    composition of the dominating mechanisms, an argument that does not need the eps's equal);
    dominating pairs compose adaptively (Zhu, Dong and Wang 2022, Theorem 10, as in
    pcqr.pipeline.privacy.gnmax). Murtagh and Vadhan ("The complexity of computing the optimal
    composition of differential privacy", TCC 2016 / Theory of Computing 14(8), 2018) give the
    optimum of mechanisms with different eps's as the hockey-stick divergence of that product of
    the RR(eps_i); with two distinct eps's it is this sum of (c + 1)^2 cells. With ``count`` = c,
    that product's privacy loss is L = eps_a (c - 2 I) + eps_b (c - 2 J), I ~ Bin(c, 1/(1 + e^eps_a))
    and J ~ Bin(c, 1/(1 + e^eps_b)) independent under the first neighbour (I and J count the outcomes
    of loss -eps_a, -eps_b), and under the second I -> c - I, J -> c - J. So

        delta(eps) = sum_{i,j: L(i,j) > eps} P(I = i) P(J = j) - e^eps P(I = c - i) P(J = c - j),

    computed as sum_i P(I = i) F(j_i) - e^eps P(I = c - i) G(j_i), with j_i the largest j of loss
    above eps, F the distribution function of J and G(j) = P(J >= c - j). It is exact for discrete
    Laplace releases on sensitivity-1 integer counts (their privacy loss is two-point, +-eps), and
    no larger than the Dwork-Rothblum-Vadhan bound.

    Error bound. The binomial weights come from the mode outward by products of the ratios
    (c - l)/(l + 1) e^-eps0, each float operation correctly rounded (relative 2^-53) and e^-eps0
    within 1 ulp: a weight l steps from the mode is within (5 l + 2) 2^-53 of exact, relative, the
    normalising sum and the cumulative sums of positive terms add (c + 1) 2^-53 each, and below
    about 1e-300 (subnormals) an absolute 1e-300 per weight covers whatever is lost. Together the
    two sums are within R = (c + 8) 2^-44 of exact (over 30 times those terms, and the final
    subtraction's rounding) plus 2 (c + 1)^2 1e-300, and the certified value adds R times both sums
    and (1 + e^eps) times that absolute term; where that is larger than P(L > eps) itself, or e^eps
    is not a float (eps above MAX_EXP), the bound is the first sum alone (the subtracted one
    dropped). A cell whose loss is
    within eta = 8 (eps_a c + eps_b c + eps) 2^-53 of eps may be put on the wrong side by the float
    j_i; its term is at most (e^eta - 1) times its probability, added for the two candidate cells
    of each i. Refused above TWO_FAMILY_MAX_COUNT, and for eps_a or eps_b above MAX_EXP."""
    for value in (eps_a, eps_b):
        _check(value, count, epsilon)
        if value > MAX_EXP:
            raise PcqrError(f"optimal composition of two families: an eps0 above {MAX_EXP:g} is not supported, got {value}")
    if count > TWO_FAMILY_MAX_COUNT:
        raise PcqrError(f"optimal composition of two families is certified for at most {TWO_FAMILY_MAX_COUNT:,} "
                        f"instances of each, got {count:,}")
    if Fraction(epsilon) >= count * (Fraction(eps_a) + Fraction(eps_b)):
        return 0.0  # exactly: no outcome has loss above eps (basic composition)
    c = count
    p_a, p_b = _randomized_response_counts(eps_a, c), _randomized_response_counts(eps_b, c)
    i = np.arange(c + 1)
    t = (eps_a * (c - 2 * i) + eps_b * c - epsilon) / (2 * eps_b)  # L(i, j) > eps  <=>  j < t_i
    last = np.clip(np.ceil(t).astype(np.int64) - 1, -1, c)  # j_i (-1: no such j)
    below = np.concatenate(([0.0], np.cumsum(p_b)))  # below[j + 1] = P(J <= j)
    above = np.concatenate((np.cumsum(p_b[::-1])[::-1], [0.0]))  # above[k] = P(J >= k)
    first_sum = float(np.sum(p_a * below[last + 1]))
    second_sum = float(np.sum(p_a[::-1] * above[c - last]))
    eta = 8 * _UNIT * (eps_a * c + eps_b * c + epsilon)
    if eta >= min(eps_b, 1e-3):
        raise PcqrError(f"optimal composition of two families: eps_b {eps_b:g} is too small for {c:,} instances")
    padded = np.concatenate((p_b, [0.0]))
    boundary = float(np.sum(p_a * (padded[np.maximum(last, 0)] + padded[last + 1]))) * math.expm1(2 * eta)
    relative = (c + 8) * 2.0**-44
    lost = 2.0 * (c + 1) ** 2 * 1e-300  # the subnormal weights' absolute error, in each sum
    upper = first_sum * (1 + relative)  # P(L > eps) bounds delta(eps) on its own
    if epsilon <= MAX_EXP:
        e_eps = math.exp(epsilon) * (1 - 4 * _UNIT)
        upper = min(upper, first_sum - e_eps * second_sum + relative * (first_sum + e_eps * second_sum)
                    + math.exp(epsilon) * lost)
    upper += boundary + lost
    return math.nextafter(max(upper, 0.0), math.inf)


@functools.lru_cache(maxsize=8)  # a search evaluates the same family at many eps
def _randomized_response_counts(eps0: float, count: int) -> np.ndarray:
    """P(I = l), l = 0..count, I ~ Bin(count, 1/(1 + e^eps0)): how many of ``count`` RR(eps0) have
    loss -eps0 (within the relative error that :func:`optimal_delta_two` bounds). Read-only."""
    ratio = math.exp(-eps0)  # P(l + 1) / P(l) = (count - l) / (l + 1) e^-eps0
    mode = min(count, math.floor((count + 1) / (1 + math.exp(eps0))))
    weights = np.ones(count + 1)
    up = np.arange(mode, count, dtype=np.float64)
    weights[mode + 1:] = np.cumprod((count - up) / (up + 1) * ratio)
    down = np.arange(mode, 0, -1, dtype=np.float64)  # P(l - 1) / P(l) = l / (count - l + 1) e^eps0
    weights[:mode][::-1] = np.cumprod(down / (count - down + 1) / ratio)
    weights /= weights.sum()
    weights.flags.writeable = False
    return weights


def optimal_epsilon_two(eps_a: float, eps_b: float, count: int, delta: float) -> float:
    """The smallest eps (to one part in 1e9, rounded up) at which :func:`optimal_delta_two` is at
    most ``delta``: the certificate of ``count`` eps_a-DP plus ``count`` eps_b-DP mechanisms."""
    if not 0 <= delta < 1:
        raise PcqrError(f"optimal composition: delta must be in [0, 1), got {delta}")
    high = float(count * (Fraction(eps_a) + Fraction(eps_b)))
    high = high if Fraction(high) >= count * (Fraction(eps_a) + Fraction(eps_b)) else math.nextafter(high, math.inf)
    if delta == 0:
        return high
    if optimal_delta_two(eps_a, eps_b, count, 0.0) <= delta:
        return 0.0
    low = 0.0
    while high - low > 1e-9 * high:
        middle = (low + high) / 2
        if optimal_delta_two(eps_a, eps_b, count, middle) <= delta:
            high = middle
        else:
            low = middle
    return high
