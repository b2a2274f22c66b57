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

The privacy-loss distribution (:func:`pld_delta`, :func:`pld_epsilon`; ALGORITHMS.md section 11) is
tighter, and is what certifies a gnmax session (``accountant`` "pld" in its parameters; sessions
certified before it keep "rdp"):

* Dominating pair: one answer is post-processing of ct(1) + Z, Z ~ N_Z(0, V1), V1 = count_sigma(s)^2,
  ct(1) of sensitivity 1; by the noise's symmetry the pair (N_Z(0, V1), N_Z(1, V1)) dominates either
  direction of change, and m adaptively chosen answers are dominated by its m-fold product (Zhu, Dong
  and Wang 2022, Theorem 10: dominating pairs compose).
* Exact delta: the product's privacy loss is L = (m - 2 S) / (2 V1) with S the sum of the m noises, so
  delta(eps) = sum over integers s < m/2 - V1 eps of P(S = s) - e^eps P(S = s - m).
* P(S = s), bounded: by Poisson summation the characteristic function of N_Z(0, V1) is within
  6 tau of exp(-V1 t^2 / 2) on [-pi, pi], tau = exp(-pi^2 V1 / 2) (V1 >= 1), so P(S = s) is within
  (6 m + 1) tau of the normal density n(s) of variance V = m V1 (CKS20 section 4 argues the same
  way for sums of discrete Gaussians). The sum of the m noises is sub-Gaussian with variance proxy
  V (CKS20 Corollary 9), so P(S < -W) <= exp(-W^2 / (2 V)): the sums run over a window
  [-W, m/2 - V1 eps) with that bound at most 1e-300, each pointwise error counted once per integer
  of the window, and the float sums' relative error bounded by _PLD_RELATIVE_ERROR. The
  certified delta adds every one of these terms, in the direction that only enlarges it.
* The bound is not monotone in eps (its Poisson term is multiplied by 1 + e^eps), but the true delta(eps)
  is non-increasing: a bound within delta at eps' certifies every eps >= eps'. So :func:`pld_epsilon`
  returns the smallest eps' it finds where the bound fits, also where it does not fit at the RDP's eps
  (small sigma, large eps: eps 8, delta 1e-3, m 20 was refused before issue 49).

At eps = 1, delta = 0.998e-6, m = 2,000 the PLD's sigma is about 267 (the RDP conversion's: 287).

More than two classes (:func:`dominating_noises`): the gate adds an independent N_Z(0, V1) to each of
the c counts and releases the argmax. One moved vote shifts two counts by 1 (one down, one up), so
one answer is dominated by the 2-fold product of the pair above, and m answers by its 2m-fold
product: every function here applies with ``answers`` = 2m, unchanged (zCDP: 2m / (2 V1) = m / V1,
PATE's m / sigma^2 at per-label sigma^2 = V1).
"""
from __future__ import annotations

import functools
import math

import numpy as np

from pcqr.pipeline.errors import PcqrError

_MARGIN = 2.0**-40  # relative error allowance of a few float operations (2^-53 each), generously
#: The accountants a gnmax session can be certified by: the privacy-loss distribution, or zCDP and the
#: tight RDP conversion (the only one before issue 29, and the fallback where the PLD's window is too wide).
ACCOUNTANTS = ("pld", "rdp")
#: The PLD's sums run over at most this many integers (about 35,000 answers at eps 1); beyond, "rdp".
PLD_MAX_WINDOW = 5_000_000
#: A bound on the relative error of the PLD's float sums (exp within a few ulps, pairwise summation of
#: at most PLD_MAX_WINDOW positive terms: below 1e-13), with a wide margin.
_PLD_RELATIVE_ERROR = 1e-9
_LOG_TAIL = math.log(1e-300)  # the window starts where the sub-Gaussian tail bound is 1e-300


def count_sigma(sigma: float) -> float:
    """The scale of the one discrete Gaussian on ct(1) equivalent to per-label scale ``sigma``."""
    return sigma / math.sqrt(2)


def dominating_noises(answers: int, classes: int = 2) -> int:
    """How many unit shifts of N_Z(0, count_sigma(s)^2) dominate ``answers`` answers over ``classes``
    labels: one per answer for two (the one noise on ct(1)); two per answer for more, where each of the
    c counts carries its own noise of that scale and one moved vote shifts two counts by 1 each (the
    other c - 2 coordinates have the same law on both sides). Every accountant below takes this
    count as its ``answers``: the c-class certificate is the two-class one at 2m (docs/privacy.md)."""
    if not (isinstance(classes, int) and classes >= 2):
        raise ValueError(f"classes must be a whole number >= 2, got {classes!r}")
    return answers if classes == 2 else 2 * answers


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


def gnmax_guarantee(sigma: float, answers: int, delta: float, accountant: str = "rdp") -> tuple[float, float]:
    """(eps, alpha) of ``answers`` GNMax answers at per-label scale ``sigma``, at ``delta``, certified by
    ``accountant`` (alpha is the RDP order; nan under the PLD, which has none)."""
    if accountant == "pld":
        return pld_epsilon(sigma, answers, delta), math.nan
    if accountant != "rdp":
        raise PcqrError(f"the gnmax accountant must be one of {', '.join(ACCOUNTANTS)}, got {accountant!r}")
    return zcdp_epsilon(gnmax_rho(sigma, answers), delta)


def pld_fits(sigma: float, answers: int) -> bool:
    """Whether the PLD can certify ``answers`` answers at ``sigma`` (at any eps >= 0): V1 >= 1 (the
    Poisson bound) and a window of at most PLD_MAX_WINDOW integers."""
    v1 = count_sigma(sigma) ** 2
    if not (math.isfinite(v1) and v1 >= 1 and 1 <= answers <= 2**53):
        return False
    return math.sqrt(-2 * _LOG_TAIL * answers * v1) + answers / 2 <= PLD_MAX_WINDOW  # [low, m/2) for eps >= 0


def pld_delta(epsilon: float, sigma: float, answers: int) -> float:
    """An upper bound on the delta at ``epsilon`` of ``answers`` adaptively chosen GNMax answers at
    per-label scale ``sigma``: the exact privacy-loss distribution of the module docstring plus every
    error term, rounded up. Refused where :func:`pld_fits` is False."""
    if not (pld_fits(sigma, answers) and epsilon >= 0):
        raise PcqrError(f"the PLD accountant cannot certify sigma {sigma:g} over {answers:,} answers here")
    m, v1 = answers, count_sigma(sigma) ** 2
    variance = m * v1
    a = m / 2 - v1 * epsilon  # L > eps  <=>  S < a
    top = math.ceil(a) - 1  # the largest integer below a
    low = math.floor(-math.sqrt(-2 * _LOG_TAIL * variance))  # P(S < low) <= 1e-300
    if top < low:
        return 1e-300
    s = np.arange(low, top + 1, dtype=np.float64)
    norm = math.sqrt(2 * math.pi * variance)
    p_sum = float(np.exp(-(s * s) / (2 * variance)).sum()) / norm
    shifted = s - m
    q_sum = float(np.exp(-(shifted * shifted) / (2 * variance)).sum()) / norm
    log_tau = -math.pi**2 * v1 / 2
    pointwise = math.exp(min(0.0, log_tau + math.log(6 * m + 1) + math.log(2 * s.size)))  # both sums
    upper = (p_sum * (1 + _PLD_RELATIVE_ERROR) - math.exp(epsilon) * (1 - 1e-15) * q_sum * (1 - _PLD_RELATIVE_ERROR)
             + pointwise * (1 + math.exp(epsilon)) + 1e-300)
    return math.nextafter(max(upper, 0.0) * (1 + _MARGIN), math.inf)


def pld_epsilon(sigma: float, answers: int, delta: float) -> float:
    """The smallest eps (to one part in 1e9, rounded up) at which :func:`pld_delta` is at most
    ``delta``: the PLD's certificate for ``answers`` answers at ``sigma``."""
    return _pld_epsilon(float(sigma), int(answers), float(delta))


@functools.lru_cache(maxsize=256)
def _pld_epsilon(sigma: float, answers: int, delta: float) -> float:
    if not 0 < delta < 1:
        raise PcqrError(f"--delta must be in (0, 1), got {delta}")
    hi = zcdp_epsilon(gnmax_rho(sigma, answers), delta)[0]  # certified: the PLD's is at most this
    if not pld_fits(sigma, answers):
        return hi  # the RDP certificate stands where the PLD cannot run
    if pld_delta(hi, sigma, answers) > delta:
        # The bound is not monotone in eps: its Poisson error term grows with e^eps (at large eps and
        # small sigma it can exceed delta at the RDP's eps while certifying a smaller one). The true
        # delta(eps) is non-increasing, so a bound <= delta at eps' certifies every eps >= eps': look
        # for the bound's minimum below hi (it is convex: a convex decreasing part plus E (1 + e^eps)),
        # and take the first eps below it where the bound fits.
        valley = _bound_minimum(sigma, answers, hi)
        if pld_delta(valley, sigma, answers) > delta:
            return hi  # the RDP certificate stands where the PLD cannot improve on it
        hi = valley
    lo = 0.0
    while hi - lo > 1e-9 * hi:
        mid = (lo + hi) / 2
        if pld_delta(mid, sigma, answers) <= delta:
            hi = mid
        else:
            lo = mid
    return hi


def _bound_minimum(sigma: float, answers: int, hi: float) -> float:
    """Where :func:`pld_delta` is smallest on [0, hi] (golden-section search; the caller checks the
    value it returns, so the search needs no proof)."""
    ratio = (math.sqrt(5) - 1) / 2
    lo, top = 0.0, hi
    a, b = top - ratio * (top - lo), lo + ratio * (top - lo)
    fa, fb = pld_delta(a, sigma, answers), pld_delta(b, sigma, answers)
    for _ in range(100):
        if fa <= fb:
            top, b, fb = b, a, fa
            a = top - ratio * (top - lo)
            fa = pld_delta(a, sigma, answers)
        else:
            lo, a, fa = a, b, fb
            b = lo + ratio * (top - lo)
            fb = pld_delta(b, sigma, answers)
    return a if fa <= fb else b


@functools.lru_cache(maxsize=64)
def calibrate_sigma(epsilon: float, delta: float, answers: int, accountant: str = "rdp") -> float:
    """The smallest sigma (to one part in 1e12) whose ``answers`` answers are certified (eps, delta)-DP
    by ``accountant``."""
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise PcqrError(f"--epsilon must be a positive number, got {epsilon}")
    if not 0 < delta < 1:
        raise PcqrError(f"--delta must be in (0, 1), got {delta}")
    if not (isinstance(answers, int) and answers >= 1):
        raise PcqrError(f"--queries-max must be a whole number >= 1, got {answers}")
    if accountant == "pld":
        aim = epsilon * (1 - 4e-9)  # pld_epsilon's bisection stops within 1e-9 above the crossing
        fits = lambda s: pld_fits(s, answers) and pld_delta(aim, s, answers) <= delta  # noqa: E731
        if not fits(calibrate_sigma(epsilon, delta, answers)):  # the PLD cannot run here
            raise PcqrError(f"the PLD accountant cannot certify {answers:,} answers at --epsilon {epsilon}")
    else:
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
