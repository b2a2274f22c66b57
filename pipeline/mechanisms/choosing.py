"""The choosing mechanism for k-bounded-growth quality functions (Beimel-Nissim-Stemmer, papers/002
section 4.1, Figure 8, Lemmas 4.4 and 4.5; ALGORITHMS.md section 8).

A quality q(S, f) >= 0 (integer) over solutions f is k-bounded-growth when q(empty, f) = 0 and adding
one element to S raises at most k qualities, each by exactly 1 (Definition 4.2). For replace-one
neighbours S = D + {x1}, S' = D + {x2}: every quality moves by at most 1, and at most k solutions
have q(S, f) >= 1 = q(S', f) + 1 with q(S', f) = 0 (the proof's set B = G(S) minus G(S')). Example:
q(S, a) = the number of copies of a in S is 1-bounded-growth (Example 4.3).

Mechanism, with m = |S| (public):

1. best = max_f q(S, f) + Z, Z ~ DLap(b) exact (OpenDP), b = 4/eps rounded up; if best < alpha m / 2,
   release bottom (integers: pass iff Z >= ceil(alpha m / 2) - max q);
2. else release f from G(S) = {f : q(S, f) >= 1} (bottom if it is empty: then max q = 0, which the
   case (a) bound below covers) by the exponential mechanism with parameter eps/2
   on q (sensitivity 1): P(f) proportional to exp(eps q(S, f) / 4), through pcqr's exact sampler
   (:mod:`pcqr.pipeline.mechanisms.exponential`, mistakes = max q - q).

Guarantee (Lemma 4.4, its proof with our discrete noise; :meth:`ChoosingParameters.delta_terms`):
(eps, delta)-DP with delta = max(delta_a, delta_b) + delta_sampler, where, c = ceil(alpha m / 4) (the
smallest integer quality that puts S in the proof's case (b)):

* case (a), every q(S, f) < alpha m / 4, so max q <= c - 1: the mechanism passes step 1 with
  probability delta_a = P(Z >= ceil(alpha m / 2) - (c - 1)), exact discrete-Laplace tail, rounded up;
* case (b), some q(S, f_hat) >= c: each of the at most k solutions of B is drawn with probability at
  most e^(eps/4) / e^(eps c / 4) (Fact 1), so delta_b = k e^(eps/4 - eps c / 4); and Fact 3 needs
  e^(eps c / 4) >= k / (e^(eps/4) - 1) -- parameters where it fails are refused, with the smallest
  m that satisfies it;
* the sampler is within total variation TV(m) of the exact exponential mechanism:
  delta_sampler = (1 + e^eps) TV(m).

The bottom's probability ratio is at most e^(1/b) <= e^(eps/4) (max q has sensitivity 1), and on
G(S) and G(S') both: e^(eps/4) (step 1) x e^(eps/4) (the weight) x e^(eps/2) (Fact 3) = e^eps.

Utility (Lemma 4.5): with m >= 16/(alpha eps) ln(16 k / (alpha beta eps delta)) the output is
alpha-good (q(S, f) >= max q - alpha m) with probability at least 1 - beta; reported as
:meth:`ChoosingParameters.utility_rows`, not enforced (the privacy conditions above are).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.privacy.limits import MIN_EM_EPSILON
from pcqr.pipeline.mechanisms.adist import noise_scale
from pcqr.pipeline.mechanisms.exponential import choose, histogram, pick_in_shard
from pcqr.pipeline.privacy.em_sampler import sampler_delta
from pcqr.pipeline.privacy.noise import NoiseSource
from pcqr.pipeline.privacy.stability import laplace_tail
from pcqr.pipeline.privacy.subsamp import check_epsilon, check_fraction, delta_certificate, round_up


@dataclass(frozen=True)
class ChoosingParameters:
    """The choosing mechanism's public parameters: the request, the database size m, the growth k."""

    epsilon: float
    delta: float
    alpha: float
    beta: float
    growth: int
    rows: int
    scale: float

    @classmethod
    def create(cls, epsilon: float, delta: float, alpha: float, beta: float, growth: int,
               rows: int) -> ChoosingParameters:
        """Refused in one line unless Lemma 4.4's conditions hold for these values and the
        certified delta fits ``delta`` (the message gives the smallest m that would)."""
        check_epsilon(epsilon, lowest=MIN_EM_EPSILON)  # below it the noise scale's arithmetic is no longer sound
        check_fraction(delta, "--delta")
        check_fraction(alpha, "--alpha")
        check_fraction(beta, "--beta")
        if not (isinstance(growth, int) and growth >= 1):
            raise PcqrError(f"the quality's growth bound k must be a positive integer, got {growth!r}")
        if not (isinstance(rows, int) and rows >= 1):
            raise PcqrError(f"the choosing mechanism needs at least one row, got {rows!r}")
        params = cls(epsilon, delta, alpha, beta, growth, rows, noise_scale(epsilon, 4.0))  # b >= 4/eps
        problem = params.problem()
        if problem is not None:
            smallest = cls.least_rows(epsilon, delta, alpha, beta, growth)
            raise PcqrError(f"the choosing mechanism at eps {epsilon:g}, delta {delta:g}, alpha {alpha:g}, k {growth} "
                            f"{problem} with m = {rows:,} rows; it needs at least {smallest:,} rows")
        return params

    @property
    def case_b_quality(self) -> int:
        """c = ceil(alpha m / 4): the least integer quality of the proof's case (b)."""
        return math.ceil(self.alpha * self.rows / 4)

    @property
    def pass_quality(self) -> int:
        """ceil(alpha m / 2): step 1 passes iff max q + Z >= this."""
        return math.ceil(self.alpha * self.rows / 2)

    def delta_terms(self) -> dict[str, float]:
        """{"case_a", "case_b", "sampler"}: each an upper bound (module docstring)."""
        c = self.case_b_quality
        case_a = laplace_tail(self.pass_quality - (c - 1), self.scale)  # pass_quality - (c - 1) >= 1 always
        case_b = round_up(self.growth * math.exp(self.epsilon / 4 - self.epsilon * c / 4))
        return {"case_a": case_a, "case_b": case_b, "sampler": sampler_delta(self.epsilon, self.rows)}

    def problem(self) -> str | None:
        """Why Lemma 4.4 does not certify these values (one clause), or None."""
        c = self.case_b_quality
        # Fact 3: e^(eps c / 4) >= k / (e^(eps/4) - 1), in logs with a margin far above float error
        if self.epsilon * c / 4 < math.log(self.growth) - math.log(math.expm1(self.epsilon / 4)) + 1e-9:
            return "does not meet Fact 3 of Lemma 4.4 (e^(eps ceil(alpha m/4) / 4) >= k / (e^(eps/4) - 1))"
        if self.certificate()["proven_delta"] > self.delta:
            return f"proves only delta {self.certificate()['proven_delta']:.3g}"
        return None

    @classmethod
    def least_rows(cls, epsilon: float, delta: float, alpha: float, beta: float, growth: int) -> int:
        """The smallest m at which (eps, delta, alpha, k) are certified (a doubling, then bisection;
        the values are assumed checked, as :meth:`create` does)."""
        scale = noise_scale(epsilon, 4.0)

        def fits(m: int) -> bool:
            return cls(epsilon, delta, alpha, beta, growth, m, scale).problem() is None

        hi = 1
        while not fits(hi):
            hi *= 2
            if hi > 2**62:
                raise PcqrError("the choosing mechanism cannot certify these parameters at any size")
        lo = 0
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if fits(mid) else (mid, hi)
        return hi

    def certificate(self) -> dict[str, float]:
        """proven_epsilon, delta_composition (0), delta_stability (the larger of the two cases),
        delta_sampler and proven_delta."""
        terms = self.delta_terms()
        return delta_certificate(self.epsilon, {"composition": 0.0, "stability": max(terms["case_a"], terms["case_b"]),
                                                "sampler": terms["sampler"]})

    def utility_rows(self) -> int | float:
        """Lemma 4.5's m >= 16/(alpha eps) ln(16 k / (alpha beta eps delta)) (inf beyond a float)."""
        log_ratio = (math.log(16 * self.growth) - math.log(self.alpha) - math.log(self.beta) - math.log(self.epsilon)
                     - math.log(self.delta))
        value = 16 / (self.alpha * self.epsilon) * log_ratio
        return math.ceil(value) if math.isfinite(value) else math.inf

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def choose_solution(qualities: np.ndarray, params: ChoosingParameters, noise: NoiseSource) -> int | None:
    """The choosing mechanism on the qualities of the candidates (an integer array; the solutions not
    listed have quality 0, so only those with q >= 1 matter): the index of the chosen one, or None."""
    q = np.asarray(qualities, dtype=np.int64)
    if q.ndim != 1 or (q.size and q.min() < 0):
        raise ValueError("qualities must be a one-dimensional array of non-negative integers")
    best = int(q.max()) if q.size else 0
    if best + int(noise.discrete_laplace(params.scale)) < params.pass_quality:
        return None
    members = np.flatnonzero(q >= 1)  # G(S)
    if members.size == 0:  # max q = 0: case (a) (c >= 2 whenever delta_b < 1), covered by delta_a
        return None
    mistakes = best - q[members]
    choice = choose([histogram(mistakes, params.epsilon / 2)], params.epsilon / 2, noise)
    return int(members[pick_in_shard(mistakes, choice.mistakes, choice.rank)])
