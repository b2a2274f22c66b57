"""The sparse-vector coordinator's state machine and the stability test's output distribution."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from pipeline.noise import SecureNoise, SeededNoise, discrete_laplace_pmf
from pipeline.privacy import SubSampParameters
from pipeline.sparse_vector import ABSTAINED, ANSWERED, REFUSED, SparseVector, SparseVectorState
from tests.conftest import P_FAIL


class CountingNoise(SecureNoise):
    """Secure noise that counts threshold draws."""

    def __init__(self) -> None:
        super().__init__()
        self.threshold_draws = 0

    def discrete_laplace(self, scale: float) -> int:
        self.threshold_draws += 1
        return super().discrete_laplace(scale)


def sharp_params(cutoff: int = 3, queries_max: int = 10**6) -> SubSampParameters:
    """eps = 100 makes lambda ~ 0.2: a gap of 0 is (all but surely) bottom, a gap of 1000 answered."""
    return SubSampParameters.paper(100.0, 0.1, cutoff, queries_max, 0.1, subsamples=1000, threshold=10.0)


def test_bottoms_refresh_threshold_and_halt_at_cutoff() -> None:
    noise = CountingNoise()
    sv = SparseVector(sharp_params(cutoff=3), noise)
    assert noise.threshold_draws == 1
    k = 1000
    ones = np.array([1000, 500, 0, 1000, 500, 1000, 500, 1000, 0])  # gaps 1000, 0, 1000, ...
    status, label = sv.process(ones, k)
    assert status.tolist() == [ANSWERED, ABSTAINED, ANSWERED, ANSWERED, ABSTAINED,
                               ANSWERED, ABSTAINED, REFUSED, REFUSED]
    assert label.tolist() == [1, 0, 0, 1, 0, 1, 0, 0, 0]
    assert sv.state.bottoms == 3 and sv.halted
    assert noise.threshold_draws == 1 + 3  # fresh threshold after each bottom, and only then
    status, _ = sv.process(np.array([1000, 1000]), k)
    assert status.tolist() == [REFUSED, REFUSED]  # refused for good after T bottoms
    assert noise.threshold_draws == 4


def test_no_bottom_keeps_the_threshold() -> None:
    noise = CountingNoise()
    sv = SparseVector(sharp_params(), noise)
    before = sv.state.threshold_noise
    status, _ = sv.process(np.full(200_000, 1000), 1000)
    assert (status == ANSWERED).all()
    assert sv.state.threshold_noise == before and noise.threshold_draws == 1


def test_state_continues_across_batches_and_restarts() -> None:
    params = sharp_params(cutoff=2)
    sv = SparseVector(params, SecureNoise())
    sv.process(np.array([500, 1000]), 1000)
    saved = SparseVectorState.from_dict(sv.state.to_dict())
    resumed = SparseVector(params, SecureNoise(), saved)
    status, _ = resumed.process(np.array([1000, 500, 1000]), 1000)
    assert status.tolist() == [ANSWERED, ABSTAINED, REFUSED]
    assert resumed.state.queries_seen == 4


def test_queries_beyond_m_are_refused() -> None:
    sv = SparseVector(sharp_params(queries_max=5), SecureNoise())
    status, _ = sv.process(np.full(8, 1000), 1000)
    assert status.tolist() == [ANSWERED] * 5 + [REFUSED] * 3


@pytest.mark.parametrize("k", [100, 101])
def test_gap_moves_by_zero_or_two_when_one_vote_moves(k: int) -> None:
    """One record -> one model -> one vote: the gap changes by 0 (majority flips) or 2."""
    ones = np.arange(k + 1)
    gap = np.abs(2 * ones - k)
    assert set(np.abs(np.diff(gap)).tolist()) <= {0, 2}


def _exact_answer_probability(params: SubSampParameters, gap: int) -> float:
    """P(answer) for one query on a fresh session: sum over Z2 of P(Z2) P(Z1 > 2w + Z2 - gap)."""
    b1, b2 = params.query_noise_scale, params.threshold_noise_scale
    z2 = np.arange(-int(60 * b2) - 5, int(60 * b2) + 6)
    q1 = math.exp(-1 / b1)

    def tail(a: int) -> float:  # P(Z1 >= a)
        return q1**a / (1 + q1) if a >= 1 else 1 - q1 ** (1 - a) / (1 + q1)

    first = [math.floor(2 * params.threshold + z) + 1 - gap for z in z2]
    return float(np.sum(discrete_laplace_pmf(z2, b2) * np.array([tail(a) for a in first])))


@pytest.mark.parametrize("noise_factory", [SecureNoise, lambda: SeededNoise(99)], ids=["secure", "seeded"])
@pytest.mark.parametrize("gap", [0, 6, 12])
def test_stability_test_output_distribution(noise_factory, gap: int) -> None:
    """Empirical P(answer) on one query matches the exact closed form (binomial test, 1e-6)."""
    params = SubSampParameters.paper(8.0, 0.1, 1, 100, 0.1, subsamples=20, threshold=3.0)
    noise = noise_factory()
    sv = SparseVector(params, noise)
    trials, answered = 20_000, 0
    ones = np.array([(20 + gap) // 2])
    for _ in range(trials):
        sv.state = SparseVectorState(0, noise.discrete_laplace(params.threshold_noise_scale), 0)
        status, _ = sv.process(ones, 20)
        answered += int(status[0] == ANSWERED)
    expected = _exact_answer_probability(params, gap)
    assert 0.02 < expected < 0.98
    assert stats.binomtest(answered, trials, expected).pvalue > P_FAIL


class FixedThreshold(SecureNoise):
    """Secure per-query words, but every threshold draw returns 0: answers become i.i.d."""

    def discrete_laplace(self, scale: float) -> int:
        return 0


@pytest.mark.parametrize("path", ["query_by_query", "vectorised"])
def test_each_query_is_an_exact_tail_draw_when_bottoms_are_dense(path, monkeypatch) -> None:
    """With the threshold pinned, each query is answered independently with probability
    P(Z1 >= floor(2w) + 1 - gap); both code paths must give exactly that (binomial, 1e-6)."""
    import pipeline.sparse_vector as sv_module

    if path == "vectorised":
        monkeypatch.setattr(sv_module, "_DENSE", 0)
    calls = []
    original = SparseVector._query_by_query
    monkeypatch.setattr(SparseVector, "_query_by_query", lambda self, *a: calls.append(1) or original(self, *a))
    params = SubSampParameters.paper(4.0, 1e-6, 10**6, 10**9, 0.05, subsamples=2000, threshold=150.0)
    sv = SparseVector(params, FixedThreshold())
    rng = np.random.default_rng(0)
    gaps = rng.choice([0, 1000, 2000], size=120_000)
    status, _ = sv.process((2000 + gaps) // 2, 2000)
    assert bool(calls) == (path == "query_by_query")
    first_above = math.floor(2 * 150.0) + 1
    for g in (0, 1000, 2000):
        chosen = gaps == g
        answered = int(np.count_nonzero(status[chosen] == ANSWERED))
        p = sv._tail.probability(first_above - g)
        assert stats.binomtest(answered, int(chosen.sum()), p).pvalue > P_FAIL, (g, answered / chosen.sum(), p)
    assert sv.state.bottoms == int(np.count_nonzero(status == ABSTAINED))
