"""The noise sources against the exact discrete-Laplace distribution.

Every statistical assertion here fails by chance with probability at most
P_FAIL = 1e-6 (chi-square or binomial tail at that level).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from pipeline.errors import PcqrError
from pipeline.noise import (
    DiscreteLaplaceTail,
    SecureNoise,
    SeededNoise,
    discrete_laplace_pmf,
    noise_source,
)
from tests.conftest import P_FAIL


def _chi_square_pvalue(draws: np.ndarray, scale: float, support: int) -> float:
    """Goodness of fit of integer draws to DLap(scale), bins -support..support plus two tails."""
    z = np.arange(-support, support + 1)
    pmf = discrete_laplace_pmf(z, scale)
    tail = (1 - pmf.sum()) / 2
    expected = np.concatenate(([tail], pmf, [tail])) * draws.size
    clipped = np.clip(draws, -support - 1, support + 1) + support + 1
    observed = np.bincount(clipped, minlength=2 * support + 3)
    return float(stats.chisquare(observed, expected).pvalue)


@pytest.mark.parametrize("scale", [0.7, 3.0])
def test_secure_discrete_laplace_matches_pmf(scale: float) -> None:
    noise = SecureNoise()
    draws = np.array([noise.discrete_laplace(scale) for _ in range(20_000)])
    assert _chi_square_pvalue(draws, scale, support=int(4 * scale) + 2) > P_FAIL


@pytest.mark.parametrize("scale", [0.7, 3.0, 40.0])
def test_seeded_discrete_laplace_matches_pmf(scale: float) -> None:
    noise = SeededNoise(1234)
    draws = np.array([noise.discrete_laplace(scale) for _ in range(50_000)])
    assert _chi_square_pvalue(draws, scale, support=int(3 * scale) + 2) > P_FAIL


@pytest.mark.parametrize("noise", [SecureNoise(), SeededNoise(77)], ids=["secure", "seeded"])
def test_vector_draws_match_pmf(noise) -> None:
    draws = noise.discrete_laplace_vector(2.5, 30_000)
    assert draws.dtype == np.int64 and draws.shape == (30_000,)
    assert _chi_square_pvalue(draws, 2.5, support=12) > P_FAIL
    assert noise.discrete_laplace_vector(2.5, 0).shape == (0,)


def test_tail_table_matches_closed_form() -> None:
    scale = 5.0
    tail = DiscreteLaplaceTail(scale)
    q = math.exp(-1 / scale)
    for a in range(-60, 61):
        exact = q**a / (1 + q) if a >= 1 else 1 - q ** (1 - a) / (1 + q)
        assert tail.probability(a) == pytest.approx(exact, rel=1e-12, abs=1e-300)
    assert tail.probability(10**9) == 0.0
    assert tail.probability(-(10**9)) == pytest.approx(1.0, abs=1e-30)


@pytest.mark.parametrize("noise", [SecureNoise(), SeededNoise(7)], ids=["secure", "seeded"])
def test_tail_bits_have_the_tail_probability(noise) -> None:
    tail = DiscreteLaplaceTail(3.0)
    n = 200_000
    for a in (-4, 0, 1, 3, 9):
        hits = int(tail.draw_at_least(np.full(n, a), noise).sum())
        p = tail.probability(a)
        assert stats.binomtest(hits, n, p).pvalue > P_FAIL, (a, hits / n, p)


def test_tail_bits_reproduce_the_pmf() -> None:
    """P(Z >= a) - P(Z >= a+1) from the bit sampler equals the pmf at a."""
    tail, noise, n = DiscreteLaplaceTail(2.0), SecureNoise(), 400_000
    for a in (-2, 0, 2):
        at_least = tail.draw_at_least(np.full(n, a), noise).mean()
        above = tail.draw_at_least(np.full(n, a + 1), noise).mean()
        pmf = float(discrete_laplace_pmf(np.array([a]), 2.0)[0])
        # difference of two independent binomial means: normal bound at 1e-6 two-sided (z = 4.89)
        sd = math.sqrt((at_least * (1 - at_least) + above * (1 - above)) / n)
        assert abs((at_least - above) - pmf) < 4.89 * sd + 1e-9


class _ScriptedWords:
    """A fake source returning prepared words, to check the lazy 128-bit comparison exactly."""

    private = False

    def __init__(self, batches: list[list[int]]) -> None:
        self.batches = [np.array(b, dtype=np.uint32) for b in batches]

    def uniform_words(self, size: int) -> np.ndarray:
        batch = self.batches.pop(0)
        assert batch.size == size
        return batch


def test_lazy_comparison_breaks_ties_with_later_words() -> None:
    tail = DiscreteLaplaceTail(3.0)
    words = tail.words(2)
    a = np.array([2, 2, 2, 2])
    below, tie, above = words[0] - 1, words[0], min(words[0] + 1, 2**32 - 1)
    source = _ScriptedWords([
        [below, above, tie, tie],
        [words[1] - 1, words[1] + 1],  # the two ties: second word decides
    ])
    assert tail.draw_at_least(a, source).tolist() == [True, False, True, False]


def test_seed_needs_insecure_flag() -> None:
    assert noise_source(None, False).private
    with pytest.raises(PcqrError, match="--insecure-seed"):
        noise_source(5, False)
    with pytest.raises(PcqrError, match="--seed"):
        noise_source(None, True)
    assert not noise_source(5, True).private
