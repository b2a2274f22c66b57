"""SanPoints: a sanitizer for point counting queries (Beimel-Nissim-Stemmer, papers/002 section 4.2,
Figure 9, Theorem 4.6; ALGORITHMS.md section 8).

For a database S of m rows and a public integer domain X (``--domain lo:hi``), every point query
Q_a(S) = |{i : x_i = a}| / m, a in X, is answered within alpha (with probability 1 - beta) by the
released estimates Est (every point not released has Est = 0):

1. R = X;
2. ceil(2/alpha) rounds: b = the choosing mechanism (:mod:`pcqr.pipeline.mechanisms.choosing`) on
   q_R(S, x) = copies of x in S for x in R, 0 outside R (1-bounded growth, Example 4.3), with
   approximation alpha/2 and confidence alpha beta / 4, at (eps0, delta0); if b is not bottom,
   release Est(b) = (copies of b + Z) / m, Z ~ DLap(1/eps0) exact (OpenDP; the count has
   sensitivity 1 under replace-one), and R = R minus {b};
3. release {b: Est(b)}, each Est clipped to [0, 1] (post-processing: every true frequency lies in
   [0, 1], so clipping never moves an estimate away from it).

A row whose value is not an integer of X counts in m and for no point (as in the POINT learner).

Privacy (the paper's proof, our composition): S is touched only by the r = ceil(2/alpha) choosing
mechanisms, each (eps0, delta0)-DP by Lemma 4.4 (delta0 its certificate: cases (a)/(b) and the
sampler's term), and the r discrete-Laplace counts, each (eps0, 0)-DP. The paper composes them by
advanced composition with eps0 = eps / sqrt(32/alpha ln(5/delta)); we use the exact optimal
composition of Kairouz-Oh-Viswanath (Theorem 3.5, heterogeneous: 2r mechanisms (eps0, delta_l) are
(eps, 1 - (1 - delta_pure) prod_l (1 - delta_l))-DP, delta_pure the pure 2r-fold composition's
delta at eps), bounded above by delta_pure + r delta0. eps0 is the largest whose delta_pure fits
delta/2 (:func:`pcqr.pipeline.privacy.composition.largest_eps0`, exact rationals), and each choosing
mechanism must certify delta0 <= delta / (2r): refused otherwise, with the least m that does.
Certificate keys: delta_composition = delta_pure, delta_stability = r x the choosing mechanism's
case (a)/(b) bound, delta_sampler = r x its sampler term.

Utility (Theorem 4.6's proof with our noise; :meth:`SanPointsParameters.utility_rows`): E1 (a
released estimate off by more than alpha) has probability at most r P(|Z| > alpha m) <= beta/2, and
E2 (an unreleased point above alpha) at most beta/2 when every choosing round is alpha/2-good
(Lemma 4.5 at the inner parameters).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.mechanisms.adist import noise_scale
from pcqr.pipeline.mechanisms.choosing import ChoosingParameters, choose_solution
from pcqr.pipeline.privacy.composition import EXACT_MAX_COUNT, largest_eps0, optimal_delta
from pcqr.pipeline.privacy.noise import NoiseSource
from pcqr.pipeline.privacy.stability import laplace_tail
from pcqr.pipeline.privacy.subsamp import check_epsilon_delta, check_fraction, delta_certificate, round_up


@dataclass(frozen=True)
class SanPointsParameters:
    """The request (eps, delta, alpha, beta), the database size m (public), the rounds r, eps0 of
    every mechanism, the counts' noise scale and the choosing mechanism's parameters."""

    epsilon: float
    delta: float
    alpha: float
    beta: float
    rows: int
    rounds: int
    eps0: float
    count_scale: float
    choosing: ChoosingParameters

    @staticmethod
    def budget(epsilon: float, delta: float, alpha: float) -> tuple[int, float, float]:
        """(r, eps0, delta0's cap): r = ceil(2/alpha) rounds, eps0 the largest whose 2r-fold pure
        composition is (eps, delta/2)-DP, and delta/(2r) for each choosing mechanism."""
        rounds = math.ceil(2 / alpha)
        if 2 * rounds > EXACT_MAX_COUNT:
            raise PcqrError(f"--alpha {alpha:g}: SanPoints runs ceil(2/alpha) rounds of two mechanisms, and their "
                            f"optimal composition is certified for at most {EXACT_MAX_COUNT:,} mechanisms: --alpha "
                            f"must be at least {4 / EXACT_MAX_COUNT:g}")
        return rounds, largest_eps0(2 * rounds, epsilon, delta / 2), delta / (2 * rounds)

    @classmethod
    def create(cls, epsilon: float, delta: float, alpha: float, beta: float, rows: int) -> SanPointsParameters:
        """Refused in one line unless every choosing round is certified at m = ``rows`` (the message
        gives the least m that is)."""
        check_epsilon_delta(epsilon, delta)
        check_fraction(alpha, "--alpha")
        check_fraction(beta, "--beta")
        rounds, eps0, delta0 = cls.budget(epsilon, delta, alpha)
        choosing = certified_choosing(f"SanPoints at eps {epsilon:g}, delta {delta:g}, alpha {alpha:g}",
                                      f"{rounds} choosing rounds", eps0, delta0, alpha / 2, alpha * beta / 4, 1, rows)
        params = cls(epsilon, delta, alpha, beta, rows, rounds, eps0, noise_scale(eps0), choosing)
        proven = params.certificate()["proven_delta"]
        if proven > delta:  # cannot happen: delta/2 + r delta/(2r); kept as the last word
            raise PcqrError(f"SanPoints at eps {epsilon:g}, delta {delta:g}: proves only delta {proven:.3g}")
        return params

    @classmethod
    def least_rows(cls, epsilon: float, delta: float, alpha: float, beta: float) -> int:
        """The least m at which :meth:`create` certifies (eps, delta, alpha, beta)."""
        check_epsilon_delta(epsilon, delta)
        check_fraction(alpha, "--alpha")
        check_fraction(beta, "--beta")
        _, eps0, delta0 = cls.budget(epsilon, delta, alpha)
        return ChoosingParameters.least_rows(eps0, delta0, alpha / 2, alpha * beta / 4, 1)

    def certificate(self) -> dict[str, float]:
        """proven_epsilon, delta_composition (the pure 2r-fold part), delta_stability and
        delta_sampler (r x the choosing mechanism's), proven_delta: KOV's bound, rounded up."""
        pure = optimal_delta(self.eps0, 2 * self.rounds, self.epsilon)
        terms = self.choosing.delta_terms()
        return delta_certificate(self.epsilon, {
            "composition": pure,
            "stability": round_up(self.rounds * max(terms["case_a"], terms["case_b"])),
            "sampler": round_up(self.rounds * terms["sampler"]),
        })

    def estimate_error_probability(self) -> float:
        """E1's bound: r P(|Z| > alpha m), Z ~ DLap(count_scale) (an upper bound)."""
        beyond = math.floor(self.alpha * self.rows) + 1  # |Z| > alpha m iff |Z| >= this (Z an integer)
        return min(1.0, round_up(2 * self.rounds * laplace_tail(beyond, self.count_scale)))

    def utility_rows(self) -> int | float:
        """The least m of Theorem 4.6's proof with our noise: Lemma 4.5 at the inner parameters (E2)
        and r P(|Z| > alpha m) <= beta/2 (E1)."""
        q = math.exp(-1 / self.count_scale)
        # 2 r q^a / (1 + q) <= beta/2 with a = floor(alpha m) + 1 (the closed form of the tail)
        a = math.ceil(math.log(self.beta / 2 * (1 + q) / (2 * self.rounds)) / math.log(q))
        return max(self.choosing.utility_rows(), math.ceil(max(a, 1) / self.alpha))

    def to_dict(self) -> dict[str, Any]:
        return {"rounds": self.rounds, "eps0": self.eps0, "count_noise_scale": self.count_scale,
                "choosing_noise_scale": self.choosing.scale, "choosing_delta0": self.choosing.certificate()["proven_delta"]}


def certified_choosing(what: str, calls: str, eps0: float, delta0: float, alpha: float, beta: float, growth: int,
                       rows: int) -> ChoosingParameters:
    """A sanitizer's choosing mechanism (Lemma 4.4) at (eps0, delta0) on m = ``rows``, or one line:
    ``what`` needs at least the least m that is certified (each of its ``calls`` ...)."""
    try:
        return ChoosingParameters.create(eps0, delta0, alpha, beta, growth, rows)
    except PcqrError:
        least = ChoosingParameters.least_rows(eps0, delta0, alpha, beta, growth)
        raise PcqrError(f"{what} needs at least {least:,} rows (each of its {calls} at eps0 {eps0:.4g}, delta0 "
                        f"{delta0:.3g}: Lemma 4.4); the private data has {rows:,}") from None


def noisy_count(count: int, scale: float, noise: NoiseSource) -> int:
    """count + Z, Z ~ DLap(scale) exact (OpenDP through ``noise``): the Laplace mechanism on a count
    of sensitivity 1 under replace-one, (1/scale)-DP."""
    return int(count) + int(noise.discrete_laplace(scale))


def clipped_share(noisy: int, rows: int) -> float:
    """A noisy count as a share of the m rows, clipped to [0, 1]: post-processing (a true share lies
    in [0, 1], so clipping never moves the estimate away from it)."""
    return min(max(int(noisy), 0), rows) / rows


def paper_rows(epsilon: float, delta: float, alpha: float, beta: float) -> int | float:
    """Theorem 4.6's m as its proof instantiates it (the paper's constants and composition): E1's
    6/(alpha^1.5 eps) ln(4/(alpha beta)) sqrt(ln(5/delta)) and Lemma 4.5 at approximation alpha/2,
    confidence alpha beta/4, eps~ = eps / sqrt(32/alpha ln(5/delta)), delta~ = alpha delta / 5 (inf
    beyond a float)."""
    root = math.sqrt(math.log(5 / delta))
    eps_t = epsilon / (math.sqrt(32 / alpha) * root)
    delta_t = alpha * delta / 5
    e1 = 6 / (alpha**1.5 * epsilon) * math.log(4 / (alpha * beta)) * root
    e2 = 16 / (alpha / 2 * eps_t) * (math.log(16) - math.log(alpha / 2) - math.log(alpha * beta / 4) - math.log(eps_t)
                                     - math.log(delta_t))
    value = max(e1, e2)
    return math.ceil(value) if math.isfinite(value) else math.inf


def san_points(values: np.ndarray, counts: np.ndarray, params: SanPointsParameters,
               noise: NoiseSource) -> list[tuple[int, float]]:
    """The released (point, Est) pairs in the order chosen, from the exact counts of the points
    seen (``values`` distinct integers of the domain, ``counts`` their copies, at most m in all;
    points not listed have count 0 and are never chosen: the choosing mechanism picks from
    q >= 1)."""
    values = np.asarray(values)
    exact = np.asarray(counts, dtype=np.int64)
    if values.shape != exact.shape or (exact.size and exact.min() < 1) or int(exact.sum()) > params.rows:
        raise ValueError("counts must be positive, one per value, and sum to at most the database size")
    remaining = exact.copy()  # q_R: the chosen points drop to 0
    released: list[tuple[int, float]] = []
    for _ in range(params.rounds):
        chosen = choose_solution(remaining, params.choosing, noise)
        if chosen is None:
            continue
        released.append((int(values[chosen]),
                         clipped_share(noisy_count(int(exact[chosen]), params.count_scale, noise), params.rows)))
        remaining[chosen] = 0
    return released
