"""A_UnvPrivCl: answering any number of classification queries (Algorithm 4 of papers/001,
Theorem 4.1 there = Theorem 11 of papers/000; ALGORITHMS.md section 5).

1. m_o = 32 (d log(1/alpha) + log(1/beta)) / alpha (rounded up), m' = min(m_o, m).
2. The first m' queries are answered by A_AgPrivCl (:mod:`pcqr.pipeline.mechanisms.relabel`).
3. If m' = m_o: T_pub = the feature vectors of those m_o queries (public: the queries
   carry no privacy constraint, section 1 of ALGORITHMS.md), h_priv = A_SSPP(S, T_pub, H)
   (:mod:`pcqr.pipeline.mechanisms.sspp`), and h_priv is released.
4. Every later query j > m_o is answered by h_priv(x_j): post-processing of h_priv,
   no privacy cost, so the count of bottoms (the budget used) is frozen.

Privacy. Algorithm 4 as printed runs A_AgPrivCl at (eps, delta) and A_SSPP at eps
on the same private S; basic composition (Dwork-Roth Thm 3.16, which holds for
adaptively chosen mechanisms, so T_pub may depend on earlier answers) gives
(2 eps, delta), while Theorem 4.1 states (eps, delta) without an argument for the
sum. We split the budget: A_AgPrivCl runs at (eps/2, delta) -- its Lemma 3.4 chain,
computed per run, must end within (eps/2, delta) -- and A_SSPP at eps/2 (Lemma 3.2 of
papers/004: pure eps/2-DP for the exact EM; our sampled EM on the n private rows is
(eps/2, delta_EM)-DP with delta_EM = (1 + e^(eps/2)) TV(n),
:func:`pcqr.pipeline.mechanisms.exponential.sampler_delta`). The whole run is
(eps_chain + eps/2, delta_chain + delta_EM), added to ``delta_sampler``, and is refused
unless that is within (eps, delta), by any amount. The switch happens after a fixed,
public number of queries m_o, so when it happens reveals nothing; T_pub holds only
public query features.

Before A_SSPP reads the private data again, the data must be the data the session was
trained on: :func:`check_private_fingerprint` compares the content fingerprint recorded
at training (the ledger's per-file SHA-256 hashes, computed on the workers) with the
data's current one.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from pcqr.pipeline.data.datasets import Dataset
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.mechanisms.exponential import round_up, sampler_delta
from pcqr.pipeline.mechanisms.relabel import AgnosticParameters
from pcqr.pipeline.privacy.subsamp import delta_certificate
from pcqr.pipeline.privacy.noise import NoiseSource
from pcqr.pipeline.privacy.subsamp import check_epsilon_delta, check_fraction, check_queries_max

MECHANISM = "A_UnvPrivCl (Algorithm 4 of Nandi-Bassily: A_AgPrivCl for m_o queries, then A_SSPP's h_priv)"
RELEASED_MODEL_FILE = "_released-model.json"  # "_": Parquet readers of the log skip it


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


def private_fingerprint(client: Any, private: Dataset) -> str:
    """The private dataset's content fingerprint: the ledger's identity (a multiset hash of the
    decoded rows, hashed on the workers: pcqr.pipeline.budget.fingerprint), computed afresh (no cache).
    Private: it is kept in the session's private state, never in public output."""
    from pcqr.pipeline.budget.fingerprint import dataset_identity

    return dataset_identity(private.files, client)


def check_private_fingerprint(client: Any, private: Dataset, recorded: str | None) -> None:
    """Refuse (one line) a private dataset whose contents are not those the session was trained on:
    A_SSPP's guarantee is about the same S as A_AgPrivCl's."""
    if recorded is None:
        raise PcqrError("this session's state predates universal mode's fingerprint of the private data; "
                        "start a new session")
    if private_fingerprint(client, private) != recorded:
        raise PcqrError(
            f"{private.uri}: its contents changed since the session was trained (content fingerprint); "
            "A_SSPP must run on the same private dataset"
        )


def release_classifier(
    client: Any,
    params: UniversalParameters,
    hypothesis_name: str,
    private: Dataset,
    public: np.ndarray,
    noise: NoiseSource,
) -> tuple[Any, dict[str, Any]]:
    """Step 3 on the cluster: (h_priv, its public record). Workers read the private parts."""
    from pcqr.pipeline.mechanisms import sspp

    return sspp.release_classifier(
        client, hypothesis_name, private, public, params.sspp_epsilon, params.beta, noise,
        mechanism="A_SSPP (Alon-Bassily-Moran 2019) inside " + MECHANISM, public_queries=params.public_queries,
    )
