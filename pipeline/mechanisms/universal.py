"""A_UnvPrivCl: answering any number of classification queries (Algorithm 4 of papers/001,
Theorem 4.1 there = Theorem 11 of papers/000; ALGORITHMS.md section 5).

1. m_o = 32 (d log(1/alpha) + log(1/beta)) / alpha (rounded up), m' = min(m_o, m).
2. The first m' queries are answered by A_AgPrivCl (:mod:`pcqr.pipeline.mechanisms.relabel`).
3. If m' = m_o: T_pub = the feature vectors of those m_o queries (public: the queries
   carry no privacy constraint, section 1 of ALGORITHMS.md), h_priv = A_SSPP(S, T_pub, H)
   (:mod:`pcqr.pipeline.mechanisms.sspp`), and h_priv is released.
4. Every later query j > m_o is answered by h_priv(x_j): post-processing of h_priv,
   no privacy cost, so the count of bottoms (the budget used) is frozen.

Privacy: A_AgPrivCl at (eps/2, delta), then A_SSPP at eps/2, by basic composition, certified for each
run by :class:`pcqr.pipeline.privacy.universal_parameters.UniversalParameters` (docstring there).

Before A_SSPP reads the private data again, the data must be the data the session was
trained on: :func:`check_private_fingerprint` compares the content fingerprint recorded
at training (the ledger's per-file SHA-256 hashes, computed on the workers) with the
data's current one.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from pcqr.pipeline.data.datasets import Dataset
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.privacy.noise import NoiseSource
from pcqr.pipeline.privacy.universal_parameters import UniversalParameters

MECHANISM = "A_UnvPrivCl (Algorithm 4 of Nandi-Bassily: A_AgPrivCl for m_o queries, then A_SSPP's h_priv)"
RELEASED_MODEL_FILE = "_released-model.json"  # "_": Parquet readers of the log skip it


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
