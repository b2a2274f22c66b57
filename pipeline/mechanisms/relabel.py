"""A_AgPrivCl (Algorithm 3 of papers/001) and A_Relabel (Algorithm 2, LabelBoost of BNS15).

Algorithm 3, step 1, from the run's (eps, delta, alpha, beta, m, n):

    n'        = floor(eps n / 56)
    T         = max(1, m alpha / 8 + (1/4) sqrt(3 m alpha log(m / beta)))   (we use ceil(T))
    eps'      = alpha max(1, sqrt(m alpha));   eps* = min(1, eps')
    eps_hat   = eps* / log(2 / delta)
    delta_hat = delta / (2 e^eps* log(2 / delta))

Steps 2-5: S' = n' rows of S sampled without replacement; S'' = A_Relabel(S', H)
(the exponential mechanism with eps~ = 1 over one hypothesis per dichotomy of H
on S', score -err(h; S'), sensitivity 1/n'); S_hat = n' rows drawn from S''
with replacement; then A_SubSamp(S_hat, m, T, eps_hat, delta_hat, beta).

Privacy: the chain of Lemma 3.4 (Lemma 8 of papers/000), computed for each run by
:class:`pcqr.pipeline.privacy.agnostic_parameters.AgnosticParameters` (docstring there).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from pcqr.pipeline.privacy.agnostic_parameters import RELABEL_EPSILON, AgnosticParameters
from pcqr.pipeline.privacy.keyed_draws import RESAMPLE, SAMPLE, KeyedWords, uniform_integers, uniform_subset


def sample_rows(rows: tuple[np.ndarray, np.ndarray], chosen: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Worker: the part's rows at ``chosen`` (local positions of the secret sample S', step 2)."""
    X, y = rows
    return X[chosen], y[chosen]


def concatenate(*pieces: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Worker: S' in one place (the dichotomies are those of the whole sample)."""
    return np.concatenate([p[0] for p in pieces]), np.concatenate([p[1] for p in pieces])


def relabelled_resample(sample: tuple[np.ndarray, np.ndarray], hypothesis: Any,
                        chosen: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Worker: S_hat = the rows ``chosen`` (n' positions drawn with replacement) of S'' = (S'_u, h_hat(S'_u))
    (step 4)."""
    X_hat = sample[0][chosen]
    return X_hat, np.asarray(hypothesis.predict(X_hat), dtype=np.int8)


def sample_positions(part_rows: Sequence[int], total: int, words: KeyedWords) -> list[np.ndarray]:
    """The secret sample S' as local positions in each part: ``total`` of the parts' rows, a uniform
    subset without replacement (step 2), drawn from the session key's stream for that purpose."""
    chosen = uniform_subset(words, int(sum(part_rows)), total)  # sorted
    starts = np.cumsum([0, *part_rows[:-1]])
    return [piece - start for piece, start in zip(np.split(chosen, np.searchsorted(chosen, starts[1:])), starts)]


def _enumerate(hypothesis_class: Any, sample: tuple[np.ndarray, np.ndarray]) -> Any:
    """Worker: the dichotomies of H on the sample's feature vectors S'_u."""
    return hypothesis_class.enumerate(sample[0])


def relabel_and_resample(
    client: Any,
    sources: Sequence[Any],
    source_rows: Sequence[int],
    params: AgnosticParameters,
    hypothesis_class: Any,
    noise: Any,
    key: bytes,
    shard_size: int = 1 << 20,
) -> tuple[Any, Any]:
    """Steps 2-4 of Algorithm 3 on the cluster: returns (h_hat, future of S_hat).

    ``sources`` are futures of a private dataset's parts as (X, y). h_hat is
    private: it goes to the private state, never to public output. The secret sample S' and the
    resample S_hat are drawn in the driver, before any row is read, from the session ``key``'s
    streams (:mod:`pcqr.pipeline.privacy.keyed_draws`); the exponential mechanism from ``noise``.
    """
    from pcqr.pipeline.mechanisms.exponential import select_hypothesis

    positions = sample_positions(source_rows, params.sample_rows, KeyedWords(key, SAMPLE, noise.private))
    pieces = [
        client.submit(sample_rows, source, chosen, pure=False)
        for source, chosen in zip(sources, positions)
        if chosen.size
    ]
    sample = client.submit(concatenate, *pieces, pure=False)
    enumeration = client.submit(_enumerate, hypothesis_class, sample, pure=False)
    h_hat = select_hypothesis(client, enumeration, sample, RELABEL_EPSILON, noise, shard_size)
    resample = uniform_integers(KeyedWords(key, RESAMPLE, noise.private), params.sample_rows, params.sample_rows)
    resampled = client.submit(relabelled_resample, sample, h_hat, resample, pure=False)
    return h_hat, resampled
