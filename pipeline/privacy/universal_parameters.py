"""The parameters of A_UnvPrivCl (Algorithm 4 of papers/001; ALGORITHMS.md section 5), checked and
certified (the algorithm itself is :mod:`pcqr.pipeline.mechanisms.universal`).

Step 1: m_o = 32 (d log(1/alpha) + log(1/beta)) / alpha (rounded up), m' = min(m_o, m); the first m'
queries are answered by A_AgPrivCl, and when m' = m_o, A_SSPP releases h_priv.

Privacy. Algorithm 4 as printed runs A_AgPrivCl at (eps, delta) and A_SSPP at eps
on the same private S; basic composition (Dwork-Roth Thm 3.16, which holds for
adaptively chosen mechanisms, so T_pub may depend on earlier answers) gives
(2 eps, delta), while Theorem 4.1 states (eps, delta) without an argument for the
sum. We split the budget: A_AgPrivCl runs at (eps/2, delta) -- its Lemma 3.4 chain,
computed per run, must end within (eps/2, delta) -- and A_SSPP at eps/2 (Lemma 3.2 of
papers/004: pure eps/2-DP for the exact EM; our sampled EM on the n private rows is
(eps/2, delta_EM)-DP with delta_EM = (1 + e^(eps/2)) TV(n),
:func:`pcqr.pipeline.privacy.em_sampler.sampler_delta`). The whole run is
(eps_chain + eps/2, delta_chain + delta_EM), added to ``delta_sampler``, and is refused
unless that is within (eps, delta), by any amount. The switch happens after a fixed,
public number of queries m_o, so when it happens reveals nothing; T_pub holds only
public query features.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.privacy.agnostic_parameters import AgnosticParameters
from pcqr.pipeline.privacy.em_sampler import sampler_delta
from pcqr.pipeline.privacy.subsamp import (
    check_epsilon_delta, check_fraction, check_queries_max, delta_certificate, round_up,
)


def public_queries(vc: int, alpha: float, beta: float) -> int:
    """m_o of step 1 (natural logarithms), rounded up to a whole number of queries."""
    return math.ceil(32 * (vc * math.log(1 / alpha) + math.log(1 / beta)) / alpha)


@dataclass(frozen=True)
class UniversalParameters:
    """Every derived parameter of one A_UnvPrivCl run (all public)."""

    epsilon: float
    delta: float
    alpha: float
    beta: float
    vc: int  # d, the VC dimension of the class
    queries_max: int  # m
    public_queries: int  # m_o
    first_queries: int  # m' = min(m_o, m)
    sspp_epsilon: float  # eps / 2
    agnostic: AgnosticParameters  # A_AgPrivCl at (eps / 2, delta) for m' queries

    @classmethod
    def algorithm4(
        cls,
        epsilon: float,
        delta: float,
        alpha: float,
        beta: float,
        queries_max: int,
        rows: int,
        vc: int,
        subsamples: int | None = None,
        threshold: float | None = None,
    ) -> UniversalParameters:
        """Step 1, and A_AgPrivCl's parameters for the first m' queries at half the budget."""
        check_epsilon_delta(epsilon, delta)
        check_fraction(alpha, "--alpha")
        check_fraction(beta, "--beta")
        check_queries_max(queries_max)
        m_o = public_queries(vc, alpha, beta)
        first = min(m_o, queries_max)
        agnostic = AgnosticParameters.algorithm3(
            epsilon / 2, delta, alpha, beta, first, rows, subsamples, threshold,
            queries_name="A_UnvPrivCl's m' = min(m_o, --queries-max) =",
        )
        params = cls(epsilon, delta, alpha, beta, vc, queries_max, m_o, first, epsilon / 2, agnostic)
        eps, total = params.guarantee()
        if eps > epsilon or total > delta:
            raise PcqrError(
                f"--epsilon {epsilon} --delta {delta}: Algorithm 4 (A_AgPrivCl chain plus A_SSPP) only "
                f"certifies ({eps:.4g}, {total:.3g})-DP for n = {rows}; see docs/privacy.md"
            )
        return params

    @property
    def switches(self) -> bool:
        """Whether step 3 runs: m' = m_o (otherwise the session is A_AgPrivCl for m queries)."""
        return self.first_queries == self.public_queries

    def certificate(self) -> dict[str, float]:
        """proven_epsilon, each delta term and proven_delta of the whole run: the A_AgPrivCl
        chain's, plus A_SSPP's eps / 2 and its sampler's delta_EM (basic composition)."""
        _, eps, terms = self.agnostic.links()[-1]
        if self.switches:
            eps = round_up(eps + self.sspp_epsilon)
            terms = {**terms, "sampler": round_up(terms["sampler"] + self.sspp_delta())}
        return delta_certificate(eps, terms)

    def sspp_delta(self) -> float:
        """delta_EM of A_SSPP's sampled exponential mechanism at eps / 2 on the n private rows."""
        return sampler_delta(self.sspp_epsilon, self.agnostic.rows)

    def guarantee(self) -> tuple[float, float]:
        """The whole run's (eps, delta) (:meth:`certificate`)."""
        certificate = self.certificate()
        return certificate["proven_epsilon"], certificate["proven_delta"]

    def summary(self) -> dict[str, Any]:
        return {
            "public_queries": self.public_queries,
            "first_queries": self.first_queries,
            "switches": self.switches,
            "agprivcl_epsilon": self.epsilon / 2,
            "sspp_epsilon": self.sspp_epsilon if self.switches else 0.0,
            "sspp_delta_sampler": self.sspp_delta() if self.switches else 0.0,
            "composition": "basic: A_AgPrivCl chain + A_SSPP (sampled EM: eps / 2, delta_EM)",
            **self.certificate(),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "epsilon": self.epsilon, "delta": self.delta, "alpha": self.alpha, "beta": self.beta,
            "vc": self.vc, "queries_max": self.queries_max, "public_queries": self.public_queries,
            "first_queries": self.first_queries, "sspp_epsilon": self.sspp_epsilon,
            "agnostic": self.agnostic.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> UniversalParameters:
        values = dict(data)
        values["agnostic"] = AgnosticParameters.from_dict(values["agnostic"])
        return cls(**values)
