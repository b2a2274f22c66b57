"""Private multiplicative weights (Hardt-Rothblum 2010), offline over a finite query class, with the
algorithm and constants of Dwork and Roth, "The Algorithmic Foundations of Differential Privacy"
(2014), Section 4.2: the Online Multiplicative Weights Mechanism via NumericSparse (their
Algorithm "Online Multiplicative Weights Mechanism (via NumericSparse)", the MW update rule of
Section 4.1 with eta = alpha/2, NumericSparse of Section 3.6, accuracy Theorem 4.15). A_PAP
(papers/003, Algorithm 3) runs it with (alpha/2, beta/2, eps, delta); its Lemma 7 is the
corollary of Theorem 4.15 it relies on.

Data: the private rows mapped to the representative domain X_tilde (a histogram x with
||x||_1 = n). Queries: the members h of the cover, in a fixed order, each a linear query
f_h(x) = (1/n) sum_r x_r h(r) in [0, 1] (the fraction of rows h labels 1; papers/003 uses the
+-1 convention, E[h] = 2 f_h - 1). Neighbouring datasets differ in one row (substitution, n
public), so the count n f_h has sensitivity 1. We work in counts: integers.

Parameters (delta > 0, k = number of queries, ln natural):

    c       = ceil(4 ln|X_tilde| / alpha^2)                    most updates (MW rounds)
    eta     = alpha / 2
    T       = (2 + 32 sqrt 2) sqrt(c ln(2/delta)) (ln k + ln(4c/beta)) / (eps n)
    eps1    = sqrt(512) eps / (sqrt(512) + 1),  eps2 = 2 eps / (sqrt(512) + 1)   (eps1 + eps2/2 = eps)
    sigma(e)= sqrt(32 c ln(2/delta)) / e  (count units)

Loop (A^0 uniform on X_tilde; t counts updates; threshold T_hat = T n + Z, Z ~ Lap(sigma(eps1))):
for each query h, est = n f_h(A^t):
  test 1: (count - est) + nu1 >= T_hat;  else test 2: (est - count) + nu2 >= T_hat,
  nu ~ Lap(2 sigma(eps1)). If neither passes, answer f_h(A^t). If one passes, NumericSparse
  releases its value plus Lap(sigma(eps2)), i.e. a = count +- Lap(sigma(eps2)); answer a / n;
  MW update: r = h if a/n < f_h(A^t) else 1 - h, A^{t+1} proportional to A^t exp(-eta r);
  draw a fresh threshold. After c updates NumericSparse halts; the remaining queries are
  answered by f_h(A^t) (post-processing of released values; the accuracy theorem no longer
  covers them and the result says so).

Noise: discrete Laplace (exact, OpenDP through :class:`pcqr.pipeline.privacy.noise.SecureNoise`) on integer
counts. Comparisons are exact in integers: test 1 is ``nu1 >= Z - count + ceil(T n + est)``, test
2 ``nu2 >= Z + count + ceil(T n - est)``; ``ceil(T n +- est)`` depends only on released values
(A^t), so its floating-point rounding is a data-independent shift of the threshold. The
AboveThreshold proof (Dwork-Roth Thm 3.23) only shifts the noise by the integers 1 and 2, which
the discrete Laplace allows exactly; the release is the discrete Laplace mechanism on an integer
sensitivity-1 count (Canonne-Kamath-Steinke 2020), 1/sigma(eps2)-DP.

Privacy, certified per run (:meth:`PMWParameters.guarantee`, not taken from the book): at most c
AboveThreshold instances, each 2/sigma(eps1)-DP, plus at most c releases, each 1/sigma(eps2)-DP,
adaptively interleaved (fewer run when the queries end first: pad with empty ones). Their exact
optimal composition (``accountant`` "optimal_composition",
:func:`pcqr.pipeline.privacy.composition.optimal_epsilon_two`): every eps-DP mechanism is dominated
by randomized response at its eps, and a discrete-Laplace release on a sensitivity-1 count is
exactly that, so no accountant certifies these 2c mechanisms at a smaller eps. Before issue 29 each
group was composed by the better of basic and advanced composition at delta/2 and the two added
(``accountant`` "advanced", still used above TWO_FAMILY_MAX_COUNT updates). Only the answers leave
this module; the counts, the noise and the thresholds stay in it.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Protocol

import numpy as np

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.privacy.composition import (
    TWO_FAMILY_MAX_COUNT, optimal_delta_two, optimal_epsilon_two, quotient_above,
)
from pcqr.pipeline.privacy.noise import NoiseSource
from pcqr.pipeline.privacy.subsamp import check_epsilon_delta, check_fraction, composition_guarantee, round_up

_SPARSE_SHARE = math.sqrt(512) / (math.sqrt(512) + 1)  # eps1 / eps of NumericSparse (delta > 0)
_FIRST_STRETCH = 256
#: The accountants a PMW run can be certified by (:meth:`PMWParameters.guarantee`): the exact optimal
#: composition of its two families (issue 29), or basic/advanced composition per family, added.
ACCOUNTANTS = ("optimal_composition", "advanced")


@dataclass(frozen=True)
class PMWParameters:
    """Every parameter of one PMW run (all public)."""

    epsilon: float
    delta: float
    alpha: float
    beta: float
    rows: int  # n
    domain: int  # |X_tilde|
    queries: int  # k
    updates: int  # c
    eta: float
    threshold: float  # T, in fractions (T n in counts)
    sparse_scale: float  # sigma(eps1): threshold noise; the per-test noise is twice it
    release_scale: float  # sigma(eps2)
    constants: str = "dwork-roth"  # or "calibrated": every noise scale and T times the same factor < 1
    noise_factor: float = 1.0  # that factor (1 for Dwork-Roth's constants)
    accountant: str = "optimal_composition"  # one of ACCOUNTANTS

    @classmethod
    def dwork_roth(
        cls, epsilon: float, delta: float, alpha: float, beta: float, rows: int, domain: int, queries: int
    ) -> PMWParameters:
        check_epsilon_delta(epsilon, delta)
        check_fraction(alpha, "--alpha")
        check_fraction(beta, "--beta")
        if rows < 1:
            raise PcqrError("the private dataset has no rows")
        c = max(1, math.ceil(4 * math.log(max(domain, 2)) / alpha**2))
        root = math.sqrt(c * math.log(2 / delta))
        threshold = (2 + 32 * math.sqrt(2)) * root * (math.log(max(queries, 2)) + math.log(4 * c / beta)) / (epsilon * rows)
        sigma = math.sqrt(32 * c * math.log(2 / delta))
        eps1, eps2 = _SPARSE_SHARE * epsilon, 2 * (1 - _SPARSE_SHARE) * epsilon  # D-R: eps1 + eps2 / 2 = eps
        accountant = ACCOUNTANTS[0] if c <= TWO_FAMILY_MAX_COUNT else "advanced"
        params = cls(epsilon, delta, alpha, beta, rows, domain, queries, c, alpha / 2, threshold,
                     sigma / eps1, sigma / eps2, accountant=accountant)
        params.certify()
        return params

    def calibrated(self) -> PMWParameters:
        """The same mechanism with every noise scale (and T, which is a multiple of the noise) shrunk
        by the one factor f at which our per-run accountant certifies exactly eps (bisection, then
        certified again). Dwork-Roth's constants certify well below eps under it; the calibrated
        run spends the whole budget for a fraction of the noise (docs/privacy.md, Mechanism 6, has
        the figures). Privacy rests on the accountant (:meth:`guarantee`), not on the book's constants."""
        def scaled(f: float) -> PMWParameters:
            return replace(self, threshold=self.threshold * f, sparse_scale=self.sparse_scale * f,
                           release_scale=self.release_scale * f, constants="calibrated", noise_factor=f)

        lo, hi = 1e-3, 1.0  # scaled(hi) is certified (this run), find the smallest certified factor
        for _ in range(60):
            mid = (lo + hi) / 2
            eps, delta = scaled(mid).guarantee()
            if eps <= self.epsilon and delta <= self.delta:
                hi = mid
            else:
                lo = mid
        params = scaled(hi)
        params.certify()
        return params

    def guarantee(self) -> tuple[float, float]:
        """(eps, delta) of the run: c AboveThreshold instances plus c releases (module docstring),
        by ``accountant``.

        "optimal_composition": the smallest eps (rounded up) whose certified delta is at most the
        request, and that delta (0 where basic composition's eps is the smaller). "advanced": each
        family by the better of basic and advanced composition at delta / 2, eps added and rounded
        up, delta the sum of the halves used. No other term: the noise is exact discrete Laplace
        (OpenDP) and the tests are exact integer comparisons, so there is no sampler error or
        dropped tail to count."""
        eps_sparse, eps_release = quotient_above(2, self.sparse_scale), quotient_above(1, self.release_scale)
        if self.accountant == "optimal_composition":
            eps = optimal_epsilon_two(eps_sparse, eps_release, self.updates, self.delta)
            return eps, optimal_delta_two(eps_sparse, eps_release, self.updates, eps)
        if self.accountant != "advanced":
            raise PcqrError(f"the PMW accountant must be one of {', '.join(ACCOUNTANTS)}, got {self.accountant!r}")
        e_sparse, d_sparse = composition_guarantee(eps_sparse, self.updates, self.delta)
        e_release, d_release = composition_guarantee(eps_release, self.updates, self.delta)
        return round_up(e_sparse + e_release), d_sparse + d_release

    def certify(self) -> None:
        eps, delta = self.guarantee()
        if eps > self.epsilon or delta > self.delta:
            raise PcqrError(f"PMW's composition only certifies ({eps:.4g}, {delta:.3g}); refusing the run")

    def accuracy(self) -> dict[str, Any]:
        """Theorem 4.15 of Dwork-Roth for this run: every answer within 3 alpha of the private
        sample's value (w.p. >= 1 - beta) when alpha >= the bound below; else no guarantee. The
        bound is linear in the noise scale, so a calibrated run's is ``noise_factor`` times it."""
        logx = math.log(max(self.domain, 2))
        need = self.noise_factor * ((2 + 32 * math.sqrt(2)) * math.sqrt(logx * math.log(2 / self.delta))
                * (math.log(max(self.queries, 2)) + math.log(32 * logx / (self.alpha**2 * self.beta)))
                / (self.epsilon * self.alpha))
        met = self.alpha >= need / self.rows
        return {"condition_met": met, "error_bound": 3 * self.alpha if met else None,
                "rows_needed": math.ceil(need / self.alpha)}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class QueryMatrix(Protocol):
    """The queries' values on X_tilde, wherever they live (numpy here, Dask shards in A_PAP)."""

    def values(self, weights: np.ndarray, lo: int, hi: int) -> np.ndarray:
        """sum_r weights[r] h_i(r) for queries lo <= i < hi."""

    def counts(self, lo: int, hi: int) -> np.ndarray:
        """The private counts n f_i(x) for queries lo <= i < hi (int64)."""

    def row(self, i: int) -> np.ndarray:
        """h_i on X_tilde (0/1)."""


@dataclass
class DenseQueries:
    """A :class:`QueryMatrix` held in memory: rows = queries, columns = X_tilde (tests, small runs)."""

    matrix: np.ndarray
    histogram: np.ndarray  # the private x

    def values(self, weights: np.ndarray, lo: int, hi: int) -> np.ndarray:
        return self.matrix[lo:hi].astype(np.float64) @ weights

    def counts(self, lo: int, hi: int) -> np.ndarray:
        return self.matrix[lo:hi].astype(np.int64) @ self.histogram.astype(np.int64)

    def row(self, i: int) -> np.ndarray:
        return self.matrix[i]


@dataclass
class PMWResult:
    answers: np.ndarray  # released f_h estimates, in [0, 1]
    updated: np.ndarray  # bool: the answer is a noisy measurement (an MW round), else f_h(A^t)
    updates: int
    halted: bool
    synthetic: np.ndarray = field(repr=False)  # the final A (public: post-processing)


def private_multiplicative_weights(
    queries: QueryMatrix,
    params: PMWParameters,
    noise: NoiseSource,
    on_progress: Callable[[int], None] | None = None,
) -> PMWResult:
    """Run PMW over all ``params.queries`` queries in index order (see the module docstring)."""
    k, n = params.queries, params.rows
    log_weights = np.zeros(params.domain)
    synthetic = np.full(params.domain, 1.0 / params.domain)
    answers = np.zeros(k)
    updated = np.zeros(k, dtype=bool)
    shift = params.threshold * n
    z = noise.discrete_laplace(params.sparse_scale)
    used, i, stretch, halted = 0, 0, _FIRST_STRETCH, False
    while i < k:
        if used >= params.updates:  # NumericSparse has halted: answer from the synthetic data
            answers[i:] = queries.values(synthetic, i, k)
            halted = True
            if on_progress:
                on_progress(k - i)
            break
        hi = min(k, i + stretch)
        est = queries.values(synthetic, i, hi) * n
        count = queries.counts(i, hi)
        nu = noise.discrete_laplace_vector(2 * params.sparse_scale, 2 * (hi - i)).reshape(-1, 2)
        first = nu[:, 0] >= z - count + np.ceil(shift + est).astype(np.int64)
        second = nu[:, 1] >= z + count + np.ceil(shift - est).astype(np.int64)
        passed = np.flatnonzero(first | second)
        if passed.size == 0:
            answers[i:hi] = est / n
            if on_progress:
                on_progress(hi - i)
            i, stretch = hi, stretch * 2
            continue
        j = int(passed[0])
        answers[i : i + j] = est[:j] / n
        sign = 1 if first[j] else -1  # which of f' = count - est, est - count passed
        measured = int(count[j]) + sign * noise.discrete_laplace(params.release_scale)
        q = i + j
        answers[q], updated[q] = min(1.0, max(0.0, measured / n)), True
        row = queries.row(q).astype(np.float64)
        loss = row if measured < est[j] else 1.0 - row  # D-R's MW rule: v < f(A) -> r = f, else 1 - f
        log_weights -= params.eta * loss
        synthetic = np.exp(log_weights - log_weights.max())
        synthetic /= synthetic.sum()
        used += 1
        z = noise.discrete_laplace(params.sparse_scale)  # a fresh threshold after each release
        if on_progress:
            on_progress(j + 1)
        i, stretch = q + 1, max(_FIRST_STRETCH, 2 * (j + 1))
    np.clip(answers, 0.0, 1.0, out=answers)
    return PMWResult(answers, updated, used, halted, synthetic)
