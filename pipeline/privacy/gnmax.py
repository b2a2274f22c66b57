"""The accountant of the Gaussian noisy argmax (``--gate gnmax``): zCDP, then the tight conversion.

PATE's GNMax (Papernot et al. 2018; ALGORITHMS.md section 10) over two labels releases, per query,
the argmax of (v0 + N(0, s^2), v1 + N(0, s^2)); pcqr draws one discrete Gaussian of scale
``count_sigma(s) = s / sqrt(2)`` on the count v1 instead (pcqr.pipeline.gates.noisy_argmax).

* Released: one label per answer, at most m answers.
* Sensitivity: one person is in one of the k disjoint subsamples, so changes one model's vote:
  v1 moves by at most 1.
* Guarantee: the discrete Gaussian N_Z(0, sc^2) with sensitivity 1 is rho = 1/(2 sc^2) -zCDP,
  i.e. (alpha, alpha rho)-RDP for every alpha > 1 (Canonne-Kamath-Steinke 2020, Theorem 4: the same
  as the continuous Gaussian); m adaptively chosen answers compose to m rho -zCDP (Bun-Steinke 2016,
  Lemma 2.3).
* Conversion (:func:`zcdp_epsilon`): for every alpha > 1 the mechanism is (eps(alpha), delta)-DP with
  eps(alpha) = rho alpha + log((alpha - 1)/alpha) - (log delta + log alpha)/(alpha - 1)
  (CKS20 Proposition 12; Balle et al. 2020 Theorem 21), tighter than Mironov's
  rho alpha + log(1/delta)/(alpha - 1). Because it holds at every alpha, alpha is found by a float
  search that needs no proof; only the evaluation at that alpha certifies, and it is rounded
  outward (never below the real value of the expression).

At eps = 1, delta = 1e-6, m = 2,000: s = 287 (Mironov's conversion: 338).
"""
from __future__ import annotations

import math

from pcqr.pipeline.errors import PcqrError

_MARGIN = 2.0**-40  # relative error allowance of a few float operations (2^-53 each), generously


def count_sigma(sigma: float) -> float:
    """The scale of the one discrete Gaussian on ct(1) equivalent to per-label scale ``sigma``."""
    return sigma / math.sqrt(2)


def gnmax_rho(sigma: float, answers: int) -> float:
    """answers / (2 count_sigma(sigma)^2), the zCDP of ``answers`` answers, rounded up."""
    sc = count_sigma(sigma)
    return math.nextafter(math.nextafter(answers / (2 * sc * sc), math.inf), math.inf) * (1 + _MARGIN)


def _conversion(rho: float, delta: float, alpha: float) -> float:
    """eps(alpha) in floats (for the search)."""
    return rho * alpha + math.log1p(-1 / alpha) - (math.log(delta) + math.log(alpha)) / (alpha - 1)


def zcdp_epsilon(rho: float, delta: float) -> tuple[float, float]:
    """(eps, alpha): an upper bound on the eps at which a rho-zCDP mechanism is (eps, delta)-DP, by the
    tight conversion minimised over alpha (golden-section search on log(alpha - 1)), evaluated at the
    chosen alpha with outward rounding."""
    if not (math.isfinite(rho) and rho > 0):
        raise PcqrError(f"zCDP rho must be a positive number, got {rho}")
    if not 0 < delta < 1:
        raise PcqrError(f"--delta must be in (0, 1), got {delta}")
    lo, hi = math.log(1e-9), math.log(1e12)
    f = lambda t: _conversion(rho, delta, 1 + math.exp(t))  # noqa: E731
    ratio = (math.sqrt(5) - 1) / 2
    a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
    fa, fb = f(a), f(b)
    for _ in range(200):
        if fa <= fb:
            hi, b, fb = b, a, fa
            a = hi - ratio * (hi - lo)
            fa = f(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + ratio * (hi - lo)
            fb = f(b)
    alpha = 1 + math.exp(a if fa <= fb else b)
    terms = (rho * alpha, math.log1p(-1 / alpha), -math.log(delta) / (alpha - 1), -math.log(alpha) / (alpha - 1))
    # each term is within a few ulps of its real value; the margin covers them and the sum's rounding
    eps = math.fsum(terms) + _MARGIN * math.fsum(abs(t) for t in terms) + 1e-300
    return eps, alpha


def mironov_epsilon(rho: float, delta: float) -> float:
    """Mironov's simpler conversion, minimised: rho + 2 sqrt(rho log(1/delta)) (for comparison only)."""
    return rho + 2 * math.sqrt(rho * math.log(1 / delta))


def gnmax_guarantee(sigma: float, answers: int, delta: float) -> tuple[float, float]:
    """(eps, alpha) of ``answers`` GNMax answers at per-label scale ``sigma``, at ``delta``."""
    return zcdp_epsilon(gnmax_rho(sigma, answers), delta)


def calibrate_sigma(epsilon: float, delta: float, answers: int) -> float:
    """The smallest sigma (to one part in 1e12) whose ``answers`` answers are certified (eps, delta)-DP."""
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise PcqrError(f"--epsilon must be a positive number, got {epsilon}")
    if not 0 < delta < 1:
        raise PcqrError(f"--delta must be in (0, 1), got {delta}")
    if not (isinstance(answers, int) and answers >= 1):
        raise PcqrError(f"--queries-max must be a whole number >= 1, got {answers}")
    fits = lambda s: gnmax_guarantee(s, answers, delta)[0] <= epsilon  # noqa: E731
    hi = 1.0
    while not fits(hi):
        hi *= 2
        if hi > 1e15:
            raise PcqrError(f"--epsilon {epsilon}: no Gaussian scale certifies it at --delta {delta}")
    lo = hi / 2
    while fits(lo) and lo > 1e-12:
        hi, lo = lo, lo / 2
    for _ in range(80):
        mid = (lo + hi) / 2
        if fits(mid):
            hi = mid
        else:
            lo = mid
        if hi - lo <= hi * 1e-12:
            break
    return hi
