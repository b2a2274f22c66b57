"""A_dist: propose-test-release on the gap between the two best candidates.

Beimel, Nissim, Stemmer (papers/002, section 2.5.3, Proposition 2.26; after Smith and Thakurta),
restated in ALGORITHMS.md section 8. Given integer qualities q(S, h) over candidates h, each of
sensitivity 1, A_dist releases the best candidate h1 when it is far from being displaced, and
bottom otherwise.

What one record can do (pcqr's neighbours replace one record): it can lower one candidate's
quality by 1 and raise another's by 1, so the gap q(h1) - q(h2) between the best two moves by up
to 2, not 1 (the caveat of ALGORITHMS.md section 2: the paper's noise Lap(1/eps) on the gap is
calibrated for sensitivity 1). We therefore test a quantity whose sensitivity we have proved:

    dist(S) = max(0, ceil(gap / 2) - 1)

* sensitivity 1: ceil(gap/2) moves by at most 1 when gap moves by at most 2;
* dist(S) >= 1 implies every neighbour has the same best candidate: gap >= 3, one record lowers
  it to at least 1, and no third candidate (at most gap below h1 before) can pass h1 either.

Mechanism (:func:`propose_test_release`): release h1 iff dist(S) + Z > t, Z ~ DLap(b) (exact
discrete Laplace, OpenDP), b = 1/eps (rounded up, so the ratio bound e^(1/b) is at most e^eps), t
the smallest integer >= 0 with P(Z > t) <= delta.

Guarantee: (eps, delta)-DP with delta = P(Z >= t + 1) (:meth:`AdistParameters.certificate`,
``delta_stability``: rounded up, never down). Proof (propose-test-release, Dwork-Lei 2009; the
pass/fail bit is the Laplace mechanism on the sensitivity-1 dist): for neighbours S, S' with
dist(S) >= 1 both have the same h1, and the pass probabilities are within e^eps; if dist(S) = 0,
P[M(S) in O] <= P[bottom] 1[bottom in O] + P[pass] <= e^eps P[M(S') in O] + P(Z > t). No sampler
term: the noise and the comparison are exact integers. The failure probability the caveat asks
to count is exactly that last term.

Utility (Prop 2.26 (ii), in dist units): h1 is released with probability at least 1 - beta when
dist(S) >= t + a_beta, a_beta the smallest a with P(Z <= -a) <= beta
(:meth:`AdistParameters.stable_distance`); in gap units gap >= 2 (t + a_beta + 1).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.privacy.limits import MIN_EM_EPSILON
from pcqr.pipeline.privacy.noise import NoiseSource
from pcqr.pipeline.privacy.stability import laplace_tail
from pcqr.pipeline.privacy.subsamp import check_epsilon, check_fraction, delta_certificate

def noise_scale(epsilon: float, sensitivity: float = 1.0) -> float:
    """b >= sensitivity/eps as a float (the sampler's scale): the ratio bound e^(sensitivity/b) of a
    shift by ``sensitivity`` is at most e^eps."""
    b = sensitivity / epsilon
    return b if Fraction(sensitivity) / Fraction(b) <= Fraction(epsilon) else math.nextafter(b, math.inf)


def distance_to_instability(gap: int) -> int:
    """max(0, ceil(gap / 2) - 1): a lower bound on how many records must be replaced before the best
    candidate changes, of sensitivity 1 under replace-one neighbours (module docstring)."""
    if gap < 0:
        raise ValueError(f"the gap between the best two qualities is never negative, got {gap}")
    return max(0, (gap + 1) // 2 - 1)


def best_two(qualities: np.ndarray) -> tuple[int, int]:
    """(index of the best candidate, its quality minus the second best's); ties go to the smallest
    index. Fewer than two candidates are refused (nothing to choose)."""
    q = np.asarray(qualities, dtype=np.int64)
    if q.ndim != 1 or q.shape[0] < 2:
        raise ValueError("A_dist needs at least two candidates")
    best = int(np.argmax(q))
    rest = np.delete(q, best)
    return best, int(q[best] - rest.max())


@dataclass(frozen=True)
class AdistParameters:
    """A_dist's public parameters: the request, the noise scale b and the threshold t."""

    epsilon: float
    delta: float
    scale: float
    threshold: int

    @classmethod
    def create(cls, epsilon: float, delta: float) -> AdistParameters:
        """b from eps, t the smallest that keeps P(Z > t) <= delta; refused in one line otherwise."""
        check_epsilon(epsilon, lowest=MIN_EM_EPSILON)  # below it the noise scale's arithmetic is no longer sound
        check_fraction(delta, "--delta")
        scale = noise_scale(epsilon)
        # P(Z >= t + 1) ~ e^(-(t+1)/b) / 2: start from the real-valued solution, then step exactly
        t = max(0, math.floor(scale * math.log(1 / (2 * delta))) - 2)
        while laplace_tail(t + 1, scale) > delta:
            t += 1
        while t > 0 and laplace_tail(t, scale) <= delta:
            t -= 1
        return cls(epsilon, delta, scale, t)

    def certificate(self) -> dict[str, float]:
        """proven_epsilon (1/b, at most eps), the delta terms and proven_delta."""
        exact = Fraction(1) / Fraction(self.scale)
        proven_epsilon = float(exact)  # rounded up, never below 1/b (and so still at most eps)
        if Fraction(proven_epsilon) < exact:
            proven_epsilon = math.nextafter(proven_epsilon, math.inf)
        terms = {"composition": 0.0, "stability": laplace_tail(self.threshold + 1, self.scale), "sampler": 0.0}
        return delta_certificate(proven_epsilon, terms)

    def stable_distance(self, beta: float) -> int:
        """The smallest dist at which h1 is released with probability at least 1 - beta."""
        if not 0 < beta < 1:
            raise ValueError(f"beta must be in (0, 1), got {beta}")
        a = max(1, math.ceil(self.scale * math.log(1 / (2 * beta))))  # P(Z <= -a) = P(Z >= a) <= beta
        while a > 1 and laplace_tail(a - 1, self.scale) <= beta:
            a -= 1
        while laplace_tail(a, self.scale) > beta:
            a += 1
        return self.threshold + a

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def passes(dist: int, params: AdistParameters, noise: NoiseSource) -> bool:
    """The test: dist + Z > t, Z ~ DLap(b) from ``noise`` (exact integers)."""
    return dist + int(noise.discrete_laplace(params.scale)) > params.threshold


def propose_test_release(best: int, gap: int, params: AdistParameters, noise: NoiseSource) -> int | None:
    """A_dist: ``best`` (the index of the best candidate) if its distance to instability, from
    ``gap`` (the exact gap to the second best), passes the noisy test, else None (bottom)."""
    if params.threshold < 0:
        raise PcqrError("A_dist's threshold must be at least 0 (parameters edited?)")
    return best if passes(distance_to_instability(gap), params, noise) else None
