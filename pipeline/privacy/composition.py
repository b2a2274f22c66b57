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
"""
from __future__ import annotations

import functools
import math
from fractions import Fraction

from pcqr.pipeline.errors import PcqrError

#: Largest T the exact certifier accepts (the big-integer sum grows as T^2 log T).
EXACT_MAX_COUNT = 2_000


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
