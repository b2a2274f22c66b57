"""The stability term of A_SubSamp: the probability that an unstable query is answered.

ALGORITHMS.md section 2 (BTT18 Theorem 3.1; A_stab of Smith-Thakurta). The coordinator
releases the exact majority label y_hat, which one record can flip when the query is
*unstable*: its distance to instability is at most 1, i.e. its gap |ct(1) - ct(0)| is at most 2
(k even: gap 0 or 2; k odd: gap 1). That label is private only because such a query is
answered with small probability, and that probability is a delta term.

Bad event B: some unstable query is answered. In one sparse-vector instance (one threshold
draw) the first unstable query either passes (B) or is a bottom that ends the instance, so only
that query matters; its query noise is fresh and the probes before it can only lower the
chance of reaching it. Hence P[B in one instance] <= p1, the probability that a fresh instance
answers a query at gap 2 (answering is monotone in the gap), and with at most T instances::

    delta_stab <= T * p1,   p1 = P(Z1 - Z2 > 2w - 2) = P(Z1 - Z2 >= floor(2w) - 1)

in gap units, Z1 ~ DLap(query scale), Z2 ~ DLap(threshold scale), independent. (The test is
gap + Z1 > 2w + Z2; Z1 - Z2 is an integer, so "> 2w - 2" is ">= floor(2w - 2) + 1".)

The tail of the difference of two discrete Laplace variables has a closed form
(:func:`difference_tail`), evaluated in 80-digit decimal arithmetic and rounded *up* to a
float with a relative margin far larger than the arithmetic's error: the term is never
rounded in the claim's favour. Only ``floor(2w)`` matters, so the certifiable thresholds are
the multiples of 1/2.
"""
from __future__ import annotations

import functools
import math
from decimal import Decimal, localcontext
from typing import Callable

_DIGITS = 80
# Relative margin added when a Decimal result becomes a float: the closed form loses at most
# a few dozen of its 80 digits to cancellation (q1, q2 within 1e-12 of each other), so a
# 1e-12 relative margin plus rounding up bounds the exact value from above.
_MARGIN = 1e-12


def _q(scale: float) -> Decimal:
    """q = exp(-1/scale) for the exact binary value of ``scale`` (the value the samplers use)."""
    return (Decimal(-1) / Decimal(scale)).exp()


def _upper_float(value: Decimal) -> float:
    """A float >= value (value >= 0), with the relative margin above."""
    if value <= 0:
        return 0.0
    f = float(value) * (1 + _MARGIN)
    return math.nextafter(f, math.inf)


def _tail_at_least(a: int, q1: Decimal, q2: Decimal) -> Decimal:
    """P(X + Y >= a) for a >= 1, X ~ DLap(q1), Y ~ DLap(q2) independent.

    With c_i = (1 - q_i)/(1 + q_i) and r = q1 q2 / (1 - q1 q2), for s >= 0
    P(X + Y = s) = c1 c2 [ r (q1^s + q2^s) + sum_{j=0..s} q1^j q2^(s-j) ]; summing s >= a:
    c1 c2 [ r (q1^a/(1-q1) + q2^a/(1-q2)) + G ], G = sum_{s>=a} sum_j q1^j q2^(s-j)
    = (q2^(a+1)/(1-q2) - q1^(a+1)/(1-q1)) / (q2 - q1)   (q1 != q2)
    = q^a ((a+1)/(1-q) + q/(1-q)^2)                   (q1 == q2 == q).
    """
    one = Decimal(1)
    c = (one - q1) / (one + q1) * (one - q2) / (one + q2)
    r = q1 * q2 / (one - q1 * q2)
    outer = r * (q1**a / (one - q1) + q2**a / (one - q2))
    if q1 == q2:
        inner = q1**a * ((a + 1) / (one - q1) + q1 / (one - q1) ** 2)
    else:
        inner = (q2 ** (a + 1) / (one - q2) - q1 ** (a + 1) / (one - q1)) / (q2 - q1)
    return c * (outer + inner)


def laplace_tail(a: int, scale: float) -> float:
    """An upper bound (relative margin 1e-12) on P(Z >= a), Z ~ DLap(scale), for an integer a >= 1:
    q^a / (1 + q) at the exact binary value of ``scale`` (A_dist's and the choosing mechanism's delta)."""
    if a < 1:
        raise ValueError(f"a must be at least 1, got {a}")
    with localcontext() as ctx:
        ctx.prec = _DIGITS
        q = _q(scale)
        return _upper_float(q**a / (1 + q))


@functools.lru_cache(maxsize=1 << 16)
def difference_tail(a: int, scale1: float, scale2: float) -> float:
    """An upper bound (tight to ~1e-12 relative) on P(Z1 - Z2 >= a), Z_i ~ DLap(scale_i), a an integer.

    Z2 is symmetric, so Z1 - Z2 has the law of Z1 + Z2. For a <= 0 the symmetry of the sum
    gives P(S >= a) = 1 - P(S >= 1 - a); that difference is computed in decimals, then rounded up.
    A function of public numbers only, kept per process: the searches for w and k and the planner
    ask for the same points again and again (a repeated certificate costs 3 ms instead of 30).
    """
    if not (scale1 > 0 and scale2 > 0):
        raise ValueError(f"scales must be positive, got {scale1}, {scale2}")
    with localcontext() as ctx:
        ctx.prec = _DIGITS
        q1, q2 = _q(scale1), _q(scale2)
        if a >= 1:
            return _upper_float(_tail_at_least(a, q1, q2))
        return min(1.0, _upper_float(Decimal(1) - _tail_at_least(1 - a, q1, q2)))


def unstable_answer_probability(threshold: float, query_scale: float, threshold_scale: float) -> float:
    """p1: the probability that a fresh instance answers a query at gap 2 (an upper bound).

    ``threshold`` is w in distance units; the scales are in gap units (4 lambda and 2 lambda).
    """
    return difference_tail(math.floor(2 * threshold) - 1, query_scale, threshold_scale)


def answer_probability(gap: int, threshold: float, query_scale: float, threshold_scale: float) -> float:
    """P(a fresh instance answers a query at ``gap``) = P(Z1 - Z2 >= floor(2w) + 1 - gap)
    (rounded up; for reports, e.g. how often a unanimous query is answered)."""
    return difference_tail(math.floor(2 * threshold) + 1 - gap, query_scale, threshold_scale)


def stability_delta(threshold: float, cutoff: int, query_scale: float, threshold_scale: float) -> float:
    """delta_stab = T * p1 (rounded up)."""
    p1 = unstable_answer_probability(threshold, query_scale, threshold_scale)
    return math.nextafter(cutoff * p1, math.inf) if p1 > 0 else 0.0


def smallest_integer(fits: Callable[[int], bool], start: int = 1) -> int:
    """The smallest n >= 0 with fits(n), for a predicate that is False up to some n and True from
    it on (doubling from ``start``, then bisection)."""
    if fits(0):
        return 0
    lo, hi = 0, max(1, start)
    while not fits(hi):
        lo, hi = hi, 2 * hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(mid) else (mid, hi)
    return hi


def smallest_threshold(budget: float, cutoff: int, query_scale: float, threshold_scale: float) -> float | None:
    """The smallest w (a multiple of 1/2) with T * p1(w) <= ``budget``; None if budget <= 0.

    p1 falls with floor(2w), so a search over the integer floor(2w) finds it.
    """
    if not budget > 0:
        return None
    twice_w = smallest_integer(
        lambda n: stability_delta(n / 2, cutoff, query_scale, threshold_scale) <= budget, start=2
    )
    return twice_w / 2
