"""A_SSPP: the semi-supervised semi-private learner (Alon-Bassily-Moran 2019, Algorithm 1 of papers/004;
Algorithm 7 of papers/001; ALGORITHMS.md section 6).

1. T_tilde = the distinct points of the public, unlabelled sample T_pub.
2. H_tilde = one hypothesis of H per dichotomy of H on T_tilde (an alpha-cover of H
   with high probability, Lemma 3.3 of 004) -- enumerated from PUBLIC data only.
3. h_priv = the exponential mechanism with eps over H_tilde, score -err(h; S) on the
   private labelled S, sensitivity 1/n (:func:`pcqr.pipeline.mechanisms.exponential.select_hypothesis`).

Guarantee: (eps, delta_EM)-DP with respect to S. Lemma 3.2 of 004: the candidate set does
not depend on S, and the exact EM is pure eps-DP. Our sampler is within total variation
TV(n) of the exact EM (n private rows scored,
:func:`pcqr.pipeline.privacy.em_sampler.total_variation`), so the run is (eps, delta_EM) with
delta_EM = (1 + e^eps) TV(n) (:func:`pcqr.pipeline.privacy.em_sampler.sampler_delta`, about
1e-42 at eps = 1, n = 10^6): reported as ``delta_sampler`` and ``proven_delta``
(:func:`certificate`), charged to the ledger and written into the released model's record.
h_priv is released: it is the output.

The cover radius reported is the alpha for which Lemma 3.3's failure bound
2 (2 e n_pub / d)^{2d} exp(-alpha n_pub / 4) equals beta:
alpha = (4 / n_pub) (log(2 / beta) + 2 d log(2 e n_pub / d)).
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from pcqr.pipeline.mechanisms.exponential import select_hypothesis
from pcqr.pipeline.privacy.em_sampler import sampler_delta


def cover_radius(public_points: int, vc: int, beta: float) -> float:
    """The alpha at which Lemma 3.3 of 004 says H_tilde is an alpha-cover w.p. >= 1 - beta."""
    n, d = max(public_points, 1), max(vc, 1)
    return 4 / n * (math.log(2 / beta) + 2 * d * math.log(2 * math.e * n / d))


def certificate(epsilon: float, rows: int) -> dict[str, float]:
    """What A_SSPP on ``rows`` private rows proves: proven_epsilon, delta_sampler, proven_delta."""
    delta = sampler_delta(epsilon, rows)
    return {"proven_epsilon": epsilon, "delta_sampler": delta, "proven_delta": delta}


def enumerate_public(hypothesis_class: Any, public: np.ndarray) -> Any:
    """Worker: the dichotomies of H on the public points (no private data involved)."""
    return hypothesis_class.enumerate(public)


def enumeration_size(enumeration: Any) -> int:
    """Worker: |H_tilde| (public: a function of the public points)."""
    return int(enumeration.size())


def release_classifier(
    client: Any,
    hypothesis_name: str,
    private: Any,
    public: np.ndarray,
    epsilon: float,
    beta: float,
    noise: Any,
    mechanism: str = "A_SSPP (Alon-Bassily-Moran 2019)",
    scored: tuple[list[Any], int] | None = None,
    **provenance: Any,
) -> tuple[Any, dict[str, Any]]:
    """A_SSPP on a private Dataset (its parts read by the workers) and ``public`` points:
    (h_priv, its public record in the released-model format, with |H_tilde|, the distinct
    public points and Lemma 3.3's cover radius at ``beta``). ``scored``: the futures of the
    labelled rows (X, y) the exponential mechanism scores and how many rows they hold (default:
    every row of ``private``; the label-private learner scores only its rows n..m-1)."""
    from pcqr.pipeline.hypotheses import make_class
    from pcqr.pipeline.models.released import model_record
    from pcqr.pipeline.models.subsample import PART_ROWS, load_part

    hclass = make_class(hypothesis_name, len(private.features))
    if scored is None:
        scored = ([client.submit(load_part, p, private.features, private.label, pure=False)
                   for p in private.parts(PART_ROWS)], private.rows)
    parts, rows = scored
    h_priv, candidates = semi_private_learner(client, hclass, public, parts, epsilon, noise)
    distinct = int(np.unique(public, axis=0).shape[0])
    record = model_record(
        h_priv, list(private.features), noise.private, **{
            "class": hypothesis_name, "mechanism": mechanism, "epsilon": epsilon, "private_rows": rows,
            "public_points": distinct, "candidates": candidates,
            "cover_radius_bound": cover_radius(distinct, hclass.vc_dimension(), beta), "beta": beta,
            **certificate(epsilon, rows), **provenance,
        },
    )
    return h_priv, record


def semi_private_learner(
    client: Any,
    hypothesis_class: Any,
    public: np.ndarray,
    private_parts: Sequence[Any],
    epsilon: float,
    noise: Any,
    shard_size: int = 1 << 20,
) -> tuple[Any, int]:
    """Run A_SSPP on the cluster: (h_priv, |H_tilde|). ``public`` is a feature matrix (public);
    ``private_parts`` futures of the private labelled parts (X, y)."""
    enumeration = client.submit(enumerate_public, hypothesis_class, public, pure=False)
    size = client.submit(enumeration_size, enumeration, pure=False).result()
    return select_hypothesis(client, enumeration, list(private_parts), epsilon, noise, shard_size), size
