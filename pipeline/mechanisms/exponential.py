"""The exponential mechanism over candidates enumerated in shards on the cluster.

McSherry-Talwar 2007; ALGORITHMS.md conventions: with privacy eps over a
finite set H and a score q of sensitivity s, pick h with probability
proportional to exp(eps q(h) / (2 s)).

Every score pcqr uses is an empirical error: q(h) = -mistakes(h; S) / n, of
sensitivity s = 1/n (replacing one record changes one mistake count by at most
one). So the weight of h is exp(-eps * mistakes(h) / 2): it depends on h only
through an *integer*. That makes an exact sharded sample easy, in three steps:

1. each shard task (deterministic, no noise) returns the histogram of its
   candidates' mistake counts: {mistakes: how many candidates};
2. the driver draws a mistake level j with probability proportional to
   N_j exp(-eps j / 2) (N_j = candidates at level j over all shards), then a
   uniform candidate among the N_j: a shard with probability count_s[j] / N_j
   and a uniform rank within it -- exact integer draws;
3. one more deterministic task returns the candidate of that rank and level
   in that shard.

P(h) = N_j e^{-eps j/2} / W * 1/N_j = e^{-eps j/2} / W: exactly the EM. Worker
tasks carry no randomness, so Dask re-running one changes nothing; all draws
happen once, in the driver, from the noise source; no score, noisy or not,
is released.

Sampler error, and its delta (:func:`pcqr.pipeline.privacy.em_sampler.total_variation`,
:func:`~pcqr.pipeline.privacy.em_sampler.sampler_delta`). Step 2
is exact up to three approximations; measured in units of the best candidate's weight
(1, so the whole weight W >= 1), with the scores counted on ``rows`` rows (levels are
mistake counts 0..rows, so at most ``rows`` levels besides the best):

(a) the driver drops every level whose whole weight N_j e^{-eps (j - best)/2} is below
    2^-160 (a float test: below 2^-159 with its rounding): at most ``rows`` levels,
    less than rows * 2^-159 of mass;
(b) a shard leaves out levels more than 311/eps mistakes above its own best (so above
    the global best): each such candidate weighs below e^-155.5 = 2^-224.3 and there are
    at most MAX_CANDIDATES = 2^64 of them (:func:`select_hypothesis` refuses more):
    less than 2^-160;
(c) the kept levels' weights are held as integers floor(weight 2^400), computed in
    80-digit decimals: q = e^{-eps/2} correctly rounded, q^d by Decimal's integer power
    for d = j - best <= 2^32 (each of its at most 2 log2 d + 2 products rounded, and q's
    error raised to the power d: relative error below (2^32 + 70) 10^-79 < 2^-230), or
    e^{-eps d/2} directly beyond; every kept weight is at least 2^240, so the floor adds
    at most 2^-240. The level is drawn exactly from these integers (:func:`uniform_below`):
    total variation below 2^-228 from the exact restriction.

The candidate within the level is exactly uniform over those the shards reported. The
output is therefore within total variation TV(rows) = (rows + 2) 2^-159 of the exact EM
(the EM restricted to a set A is within TV EM(not A) of the EM). A mechanism within TV
tau of an eps-DP one is (eps, (1 + e^eps) tau)-DP: P[M'(S) in E] <= P[M(S) in E] + tau
<= e^eps P[M(S') in E] + tau <= e^eps P[M'(S') in E] + (1 + e^eps) tau. So a pure eps
claim for this sampler is (eps, delta_EM) with delta_EM = (1 + e^eps) TV(rows),
:func:`sampler_delta`; every certificate that uses it adds that term to its
``delta_sampler`` (A_Relabel inside A_AgPrivCl, A_SSPP, A_UnvPrivCl).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal, localcontext
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.privacy.noise import NoiseSource, uniform_below

Histogram = Mapping[int, int]
MAX_CANDIDATES = 1 << 64  # (b) of the module docstring assumes at most this many candidates
_DIGITS = 80
_WEIGHT_BITS = 400
_POWER_LIMIT = 1 << 32  # q^d by integer power up to here ((c) of the module docstring)
_DROP_BELOW_LOG2 = -160
_NEGLIGIBLE_SPAN = 311.0  # (2 / eps) * (160 + 64) ln 2 mistakes, times eps


@dataclass(frozen=True)
class Choice:
    """What the mechanism picked: the shard, the mistake level, the rank within both."""

    shard: int
    mistakes: int
    rank: int


def histogram(mistakes: np.ndarray, epsilon: float | None = None) -> dict[int, int]:
    """Worker side of step 1: {mistake count: number of candidates}.

    With ``epsilon``, levels more than 311/epsilon mistakes above the shard's
    best are left out: even 2^64 candidates there weigh less than 2^-160 of
    the shard's best one (e^(-epsilon 311/(2 epsilon)) 2^64 < 2^-160), so
    :func:`sample_level` would drop them anyway.
    """
    mistakes = np.asarray(mistakes, dtype=np.int64)
    if epsilon is not None and mistakes.size:
        mistakes = mistakes[mistakes <= mistakes.min() + math.ceil(_NEGLIGIBLE_SPAN / epsilon)]
    levels, counts = np.unique(mistakes, return_counts=True)
    return {int(level): int(count) for level, count in zip(levels, counts)}


def pick_in_shard(mistakes: np.ndarray, level: int, rank: int) -> int:
    """Worker side of step 3: the position in the shard of the rank-th candidate at this level."""
    return int(np.flatnonzero(np.asarray(mistakes) == level)[rank])


def level_weights(totals: Histogram, epsilon: float) -> tuple[list[int], list[int]]:
    """The kept levels, in order, and their weights as integers floor(N_j e^{-eps (j - best)/2} 2^400).

    A level is kept when its whole weight is at least 2^-160 of the best candidate's
    ((a) of the module docstring); the weights are correct to a relative 2^-229 ((c)).
    """
    best = min(totals)
    kept = [
        j for j in sorted(totals)
        if math.log2(totals[j]) - epsilon * (j - best) / (2 * math.log(2)) >= _DROP_BELOW_LOG2
    ]
    with localcontext() as ctx:
        ctx.prec = _DIGITS
        half = Decimal(epsilon) / 2
        q, scale = (-half).exp(), Decimal(1 << _WEIGHT_BITS)

        def factor(d: int) -> Decimal:  # e^{-eps d / 2}
            return q**d if d <= _POWER_LIMIT else (-(half * d)).exp()

        weights = [int(Decimal(totals[j]) * factor(j - best) * scale) for j in kept]
    return kept, weights


def sample_level(totals: Histogram, epsilon: float, noise: NoiseSource) -> int:
    """Draw a mistake level j with probability proportional to N_j exp(-epsilon j / 2)
    (exactly proportional to the integer weights of :func:`level_weights`)."""
    if not totals:
        raise ValueError("the exponential mechanism needs at least one candidate")
    kept, weights = level_weights(totals, epsilon)
    u = uniform_below(noise, sum(weights))
    for j, weight in zip(kept, weights):
        if u < weight:
            return j
        u -= weight
    raise AssertionError("unreachable: u is below the sum of the weights")


def choose(histograms: Sequence[Histogram], epsilon: float, noise: NoiseSource) -> Choice:
    """Driver side of step 2: the level, then the shard and rank, from the shards' histograms.

    Parameters
    ----------
    histograms : one {mistakes: count} per shard, in shard order (private).
    epsilon : the mechanism's privacy parameter; the score's sensitivity is
        one mistake (1/n of the error), so weights are exp(-epsilon mistakes / 2).
    noise : the run's noise source.
    """
    totals: dict[int, int] = {}
    for h in histograms:
        for level, count in h.items():
            totals[level] = totals.get(level, 0) + count
    level = sample_level(totals, epsilon, noise)
    rank = uniform_below(noise, totals[level])
    for shard, h in enumerate(histograms):
        count = h.get(level, 0)
        if rank < count:
            return Choice(shard, level, rank)
        rank -= count
    raise AssertionError("unreachable: the ranks of a level cover its shards")


def check_candidates(count: int) -> None:
    """Refuse more than MAX_CANDIDATES candidates, beyond which :func:`total_variation` is not proven."""
    if count > MAX_CANDIDATES:
        raise PcqrError(
            f"the exponential mechanism has {count} candidates, above the {MAX_CANDIDATES} its sampler's "
            "error bound covers: use fewer points"
        )


def exponential_mechanism(
    score_shard: Callable[[int], Any],
    pick: Callable[[Choice], Any],
    shards: int,
    epsilon: float,
    noise: NoiseSource,
    gather: Callable[[list[Any]], list[Histogram]] = lambda futures: list(futures),
) -> Any:
    """Run steps 1-3 with the caller's transport (Dask futures or plain calls).

    ``score_shard(i)`` returns shard i's histogram (or a future of it);
    ``gather`` turns the list of those into histograms; ``pick(choice)``
    returns the chosen candidate.
    """
    histograms = gather([score_shard(i) for i in range(shards)])
    return pick(choose(histograms, epsilon, noise))


def _shard_mistakes(enumeration: Any, shard: Any, data: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Worker: the mistakes of one shard's candidates on labelled data (kept on the worker)."""
    X, y = data
    return enumeration.mistakes(shard, X, y).astype(np.int32 if len(y) < 2**31 else np.int64)


def _shard_pick(enumeration: Any, shard: Any, mistakes: np.ndarray, level: int, rank: int) -> Any:
    """Worker: step 3: the chosen representative hypothesis."""
    return enumeration.hypothesis(shard.start + pick_in_shard(mistakes, level, rank))


def enumeration_shards(enumeration: Any, shard_size: int) -> list[Any]:
    """Worker: an enumeration's shard descriptors."""
    return enumeration.shards(shard_size)


def sum_arrays(*arrays: np.ndarray) -> np.ndarray:
    """Worker: the elementwise sum of partial results."""
    return np.sum(arrays, axis=0)


def select_hypothesis(
    client: Any, enumeration: Any, data: Any, epsilon: float, noise: NoiseSource, shard_size: int = 1 << 20
) -> Any:
    """The exponential mechanism over an enumeration's candidates, on the cluster.

    ``enumeration`` is a future (or value) of a :class:`pcqr.pipeline.hypotheses.Enumeration`;
    ``data`` a future of labelled rows (X, y), or a list of them (the parts of a
    private dataset: each shard is scored on every part and the counts summed).
    The score is -mistakes / n, sensitivity 1 / n: weights exp(-epsilon
    mistakes / 2). Each shard's mistake counts stay on a worker (so step 3
    does not score again); only shard descriptors, histograms and the chosen
    hypothesis reach the driver; the hypothesis is private unless the caller's
    mechanism releases it.
    """
    parts = data if isinstance(data, list) else [data]
    shards = client.submit(enumeration_shards, enumeration, shard_size, pure=False).result()
    check_candidates(sum(s.stop - s.start for s in shards))
    mistakes = []
    for s in shards:
        partial = [client.submit(_shard_mistakes, enumeration, s, part, pure=False) for part in parts]
        mistakes.append(partial[0] if len(partial) == 1 else client.submit(sum_arrays, *partial, pure=False))
    futures = [client.submit(histogram, m, epsilon, pure=False) for m in mistakes]
    choice = choose(client.gather(futures), epsilon, noise)
    chosen = mistakes[choice.shard]
    del futures, mistakes  # free the other shards' counts
    shard = shards[choice.shard]
    return client.submit(_shard_pick, enumeration, shard, chosen, choice.mistakes, choice.rank, pure=False).result()
