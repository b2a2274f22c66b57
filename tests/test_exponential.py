"""The sharded exponential mechanism against its closed form (chi-square, false-failure 1e-6)."""
from __future__ import annotations

import math
from decimal import Decimal, localcontext

import numpy as np
import pytest
from scipy import stats

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.mechanisms.exponential import (
    MAX_CANDIDATES, Choice, check_candidates, choose, exponential_mechanism, histogram, level_weights, pick_in_shard,
)
from pcqr.pipeline.privacy.em_sampler import sampler_delta, total_variation
from pcqr.pipeline.privacy.noise import SecureNoise, SeededNoise, uniform_below
from tests.conftest import P_FAIL


def _sharded_em(mistakes: np.ndarray, bounds: list[int], epsilon: float, noise, draws: int) -> np.ndarray:
    """``draws`` runs of the mechanism with plain calls as the transport: the chosen candidates' indices.
    Each shard's histogram is computed once (a function of the shard's mistakes alone)."""
    shards = [(a, b) for a, b in zip(bounds[:-1], bounds[1:])]
    histograms = [histogram(mistakes[a:b]) for a, b in shards]

    def pick(choice: Choice) -> int:
        a, b = shards[choice.shard]
        return a + pick_in_shard(mistakes[a:b], choice.mistakes, choice.rank)

    return np.array([exponential_mechanism(histograms.__getitem__, pick, len(shards), epsilon, noise)
                     for _ in range(draws)])


@pytest.mark.parametrize("noise_factory,bounds", [
    (SecureNoise, [0, 40]), (SecureNoise, [0, 7, 8, 23, 40]), (SecureNoise, [0, 10, 20, 30, 40]),
    (lambda: SeededNoise(5), [0, 7, 8, 23, 40]),
], ids=["secure-1 shard", "secure-uneven", "secure-4 shards", "seeded-uneven"])
def test_em_matches_closed_form(bounds, noise_factory) -> None:
    """Chi-square of 20,000 draws against the closed form (false failure 1e-6): the secure source at
    every shard layout, the seeded one (tests only) at one."""
    rng = np.random.default_rng(1)
    mistakes = rng.integers(0, 9, size=40)  # repeated levels across shards
    epsilon, draws = 0.8, 20_000
    weights = np.exp(-epsilon * mistakes / 2)
    expected = weights / weights.sum() * draws
    noise = noise_factory()
    picks = _sharded_em(mistakes, bounds, epsilon, noise, draws)
    observed = np.bincount(picks, minlength=40)
    assert stats.chisquare(observed, expected).pvalue > P_FAIL


def test_far_levels_are_negligible_and_ties_are_uniform() -> None:
    mistakes = np.array([1000, 0, 0, 5000, 0])
    noise = SecureNoise()
    picks = _sharded_em(mistakes, [0, 2, 5], 1.0, noise, 3000)
    assert set(picks) <= {1, 2, 4}  # weights e^-500 and less: never drawn in practice
    counts = np.bincount(picks, minlength=5)[[1, 2, 4]]
    assert stats.chisquare(counts).pvalue > P_FAIL


def test_choice_is_consistent_with_histograms() -> None:
    hists = [{0: 2, 3: 1}, {}, {0: 1}]
    for _ in range(200):
        c = choose(hists, 100.0, SecureNoise())  # eps huge: level 0 almost surely
        assert c.mistakes == 0 and c.shard in (0, 2) and c.rank < hists[c.shard][0]


def test_uniform_below_is_uniform() -> None:
    noise = SecureNoise()
    n = 7
    draws = [uniform_below(noise, n) for _ in range(14_000)]
    assert stats.chisquare(np.bincount(draws, minlength=n)).pvalue > P_FAIL
    assert uniform_below(noise, 1) == 0
    big = 3 * 2**100 + 1
    assert all(0 <= uniform_below(noise, big) < big for _ in range(100))
    assert math.isclose(np.mean([uniform_below(noise, 2**64) / 2**64 for _ in range(4000)]), 0.5, abs_tol=0.04)


def test_cluster_transport_returns_the_chosen_candidate(client, monkeypatch) -> None:
    """select_hypothesis on the cluster returns exactly the candidate `choose` picked (several shards)."""
    from pcqr.pipeline.hypotheses import make_class
    from pcqr.pipeline.mechanisms import exponential

    rng = np.random.default_rng(3)
    X = rng.normal(size=(60, 1))
    y = (X[:, 0] > 0.2).astype(np.int8)
    enumeration = make_class("threshold", 1).enumerate(X)
    shards = enumeration.shards(7)
    seen = []
    original = exponential.choose
    monkeypatch.setattr(exponential, "choose", lambda h, e, n: seen.append(original(h, e, n)) or seen[-1])
    for seed in range(5):
        chosen = exponential.select_hypothesis(client, enumeration, (X, y), 0.5, SeededNoise(seed), shard_size=7)
        c = seen[-1]
        shard = shards[c.shard]
        position = pick_in_shard(enumeration.mistakes(shard, X, y), c.mistakes, c.rank)
        expected = enumeration.hypothesis(shard.start + position)
        assert chosen.to_dict() == expected.to_dict()
        assert int(np.sum(chosen.predict(X) != y)) == c.mistakes


def _exact_level_law(totals: dict[int, int], epsilon: float) -> dict[int, Decimal]:
    """P(level j) of the exact EM, in 120-digit decimals."""
    with localcontext() as ctx:
        ctx.prec = 120
        weights = {j: Decimal(n) * (Decimal(-epsilon) * j / 2).exp() for j, n in totals.items()}
        total = sum(weights.values(), Decimal(0))
        return {j: w / total for j, w in weights.items()}


def _sampler_tv(totals: dict[int, int], epsilon: float) -> Decimal:
    """Total variation between the sampler's level law (its integer weights) and the exact EM's."""
    kept, weights = level_weights(totals, epsilon)
    exact = _exact_level_law(totals, epsilon)
    with localcontext() as ctx:
        ctx.prec = 120
        whole = Decimal(sum(weights))
        sampled = {j: Decimal(w) / whole for j, w in zip(kept, weights)}
        return sum((abs(sampled.get(j, Decimal(0)) - p) for j, p in exact.items()), Decimal(0)) / 2


@pytest.mark.parametrize("epsilon", [1.0, 0.05, 0.02])
def test_sampler_is_within_its_stated_total_variation(epsilon) -> None:
    """The worst case for dropped levels: up to 1,000 consecutive levels (at most 2^40 candidates
    each), each just below 2^-160 of the best candidate. The exact TV (120-digit decimals) is below
    TV(rows) = (rows + 2) 2^-159, and near the dropped mass (the levels were dropped: a real test)."""
    totals = {0: 1}
    j = math.ceil(2 * 160 * math.log(2) / epsilon) + 1
    while len(totals) <= 1000:
        count = math.floor(2.0**-160 * math.exp(epsilon * j / 2) * (1 - 1e-6))
        if count > 2**40:
            break
        totals[j] = count
        j += 1
    rows = max(totals)
    tv = _sampler_tv(totals, epsilon)
    assert level_weights(totals, epsilon)[0] == [0] and len(totals) > 20
    assert Decimal(0.25) * Decimal(2.0**-160) * (len(totals) - 1) <= tv <= Decimal(total_variation(rows))


def test_kept_weights_are_exact_to_their_stated_precision() -> None:
    totals = {3: 2, 4: 7, 40: 10**12, 300: 5, 900: 1}
    for epsilon in (0.7, 2.0):
        kept, weights = level_weights(totals, epsilon)
        exact = _exact_level_law(totals, epsilon)
        with localcontext() as ctx:
            ctx.prec = 120
            base = exact[kept[0]] / Decimal(weights[0])
            for j, w in zip(kept, weights):
                assert abs(Decimal(w) * base / exact[j] - 1) < Decimal(2) ** -228
        dropped = set(totals) - set(kept)
        assert all(totals[j] * math.exp(-epsilon * (j - 3) / 2) < 2.0**-159 for j in dropped)
        assert all(totals[j] * math.exp(-epsilon * (j - 3) / 2) >= 2.0**-160 for j in kept)


def test_sampler_delta_and_the_candidate_limit() -> None:
    assert total_variation(10**6) == (10**6 + 2) * 2.0**-159
    assert sampler_delta(1.0, 10**6) >= (1 + math.e) * total_variation(10**6)
    assert sampler_delta(1.0, 10**6) == pytest.approx((1 + math.e) * total_variation(10**6), rel=1e-9)
    assert sampler_delta(800.0, 10) == 1.0 and sampler_delta(200.0, 10**9) == 1.0
    check_candidates(MAX_CANDIDATES)
    with pytest.raises(PcqrError, match="candidates"):
        check_candidates(MAX_CANDIDATES + 1)
