"""Privacy parameters of A_SubSamp and the accounting that proves the run's guarantee.

Algorithm 5 of papers/001 (BTT18, restated in ALGORITHMS.md section 2):

    lambda = sqrt(32 T log(2/delta)) / eps
    k      = 34 sqrt(2) lambda log(4 m T / min(delta, beta/2))
    w      = 2 lambda log(2 m / delta)

Only lambda and T enter the privacy proof; k and w decide accuracy, so
``--subsamples`` and ``--threshold`` may override them without changing the
guarantee.

The proof this module checks (:func:`sparse_vector_guarantee`): between two
bottoms the coordinator is one AboveThreshold instance (Dwork-Roth,
"The Algorithmic Foundations of Differential Privacy", Thm 3.23, run on the
negated statistic) on the distance to instability (gap / 2, sensitivity 1) with
threshold noise Lap(lambda) = Lap(2/eps0) and query noise Lap(2 lambda) =
Lap(4/eps0): each instance is eps0 = 2/lambda -DP. The session halts after T
bottoms, so at most T instances run, and their composition is the better of

* basic composition: T eps0, delta 0;
* advanced composition (Dwork-Rothblum-Vadhan; Dwork-Roth Thm 3.20) with
  delta' = delta/2: sqrt(2 T log(2/delta)) eps0 + T eps0 (e^eps0 - 1).

With the paper's lambda the advanced bound's first term is exactly eps/2. A run
whose parameters this bound cannot certify at (eps, delta) is refused.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from pipeline.errors import PcqrError

# Per-query error of DiscreteLaplaceTail (see pipeline.noise): its bits differ
# from exact discrete-Laplace tails by at most this much in probability.
TAIL_SAMPLER_ERROR = 3e-39


def check_epsilon(epsilon: float) -> None:
    """Refuse an impossible eps with a one-line error naming the parameter."""
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise PcqrError(f"--epsilon must be a positive number, got {epsilon}")


def check_fraction(value: float, option: str) -> None:
    """Refuse a parameter that must lie in (0, 1) (--alpha, --beta), naming it."""
    if not (0 < value < 1):
        raise PcqrError(f"{option} must be in (0, 1), got {value}")


def check_queries_max(queries_max: int) -> None:
    if queries_max < 1:
        raise PcqrError(f"--queries-max (m) must be at least 1, got {queries_max}")


def check_epsilon_delta(epsilon: float, delta: float) -> None:
    """Refuse impossible (eps, delta) with a one-line error naming the parameter."""
    check_epsilon(epsilon)
    if not (0 < delta < 1):
        raise PcqrError(f"--delta must be in (0, 1), got {delta}")


@dataclass(frozen=True)
class SubSampParameters:
    """Every parameter of one A_SubSamp session (all public)."""

    epsilon: float
    delta: float
    beta: float
    cutoff: int
    queries_max: int
    lam: float
    subsamples: int
    threshold: float
    subsamples_source: str  # "paper" or "override"
    threshold_source: str

    @classmethod
    def paper(
        cls,
        epsilon: float,
        delta: float,
        cutoff: int,
        queries_max: int,
        beta: float,
        subsamples: int | None = None,
        threshold: float | None = None,
    ) -> SubSampParameters:
        """Algorithm 5's lambda, k and w, with optional overrides of k and w."""
        check_epsilon_delta(epsilon, delta)
        if cutoff < 1:
            raise PcqrError(f"--cutoff (T) must be at least 1, got {cutoff}")
        check_queries_max(queries_max)
        check_fraction(beta, "--beta")
        if subsamples is not None and subsamples < 1:
            raise PcqrError(f"--subsamples must be at least 1, got {subsamples}")
        if threshold is not None and not (math.isfinite(threshold) and threshold >= 0):
            raise PcqrError(f"--threshold must be a non-negative number, got {threshold}")
        lam = math.sqrt(32 * cutoff * math.log(2 / delta)) / epsilon
        k = 34 * math.sqrt(2) * lam * math.log(4 * queries_max * cutoff / min(delta, beta / 2))
        w = 2 * lam * math.log(2 * queries_max / delta)
        params = cls(
            epsilon=epsilon,
            delta=delta,
            beta=beta,
            cutoff=cutoff,
            queries_max=queries_max,
            lam=lam,
            subsamples=subsamples if subsamples is not None else math.ceil(k),
            threshold=threshold if threshold is not None else w,
            subsamples_source="paper" if subsamples is None else "override",
            threshold_source="paper" if threshold is None else "override",
        )
        params.certify()
        return params

    @property
    def threshold_noise_scale(self) -> float:
        """Scale of the threshold noise in gap units (2 x Lap(lambda) on dist = gap/2)."""
        return 2 * self.lam

    @property
    def query_noise_scale(self) -> float:
        """Scale of the per-query noise in gap units (2 x Lap(2 lambda) on dist = gap/2)."""
        return 4 * self.lam

    def guarantee(self) -> tuple[float, float]:
        """The (eps, delta) this session provably satisfies; see the module docstring."""
        eps, delta = sparse_vector_guarantee(self.lam, self.cutoff, self.delta)
        return eps, delta + (1 + math.exp(eps)) * self.queries_max * TAIL_SAMPLER_ERROR

    def certify(self) -> None:
        """Refuse parameters for which the composition bound does not reach (eps, delta)."""
        eps, delta = self.guarantee()
        if eps > self.epsilon * (1 + 1e-12) or delta > self.delta:
            raise PcqrError(
                f"--epsilon {self.epsilon} with --cutoff {self.cutoff} and --delta {self.delta}: "
                f"Algorithm 5's lambda only certifies ({eps:.4g}, {delta:.3g})-DP by composition; "
                "use a smaller --epsilon or a larger --cutoff"
            )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SubSampParameters:
        return cls(**data)


def sparse_vector_guarantee(lam: float, cutoff: int, delta: float) -> tuple[float, float]:
    """(eps, delta) of at most ``cutoff`` AboveThreshold instances, each 2/lam -DP
    (see :func:`composition_guarantee`)."""
    return composition_guarantee(2.0 / lam, cutoff, delta)


def composition_guarantee(eps0: float, count: int, delta: float) -> tuple[float, float]:
    """(eps, delta) of ``count`` adaptively composed eps0-DP mechanisms.

    The better of basic composition (count eps0, 0) and advanced composition with
    delta' = delta / 2 (Dwork-Rothblum-Vadhan; Dwork-Roth Thm 3.20):
    sqrt(2 count log(2/delta)) eps0 + count eps0 (e^eps0 - 1).
    """
    basic = count * eps0
    advanced = math.sqrt(2 * count * math.log(2 / delta)) * eps0 + count * eps0 * math.expm1(eps0)
    if basic <= advanced:
        return basic, 0.0
    return advanced, delta / 2
