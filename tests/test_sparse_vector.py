"""The sparse-vector coordinator's state machine and the stability test's output distribution."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from scipy import stats

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.privacy.noise import SecureNoise, SeededNoise, discrete_laplace_pmf, session_key
from pcqr.pipeline.privacy.subsamp import SubSampParameters
from pcqr.pipeline.gates.sparse_vector import ABSTAINED, ANSWERED, REFUSED, SparseVector, SparseVectorState
from tests.conftest import P_FAIL


class CountingNoise(SecureNoise):
    """Secure noise that counts every draw."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, int]] = []

    def discrete_laplace(self, scale: float) -> int:
        self.calls.append(("scalar", 1))
        return super().discrete_laplace(scale)

    def discrete_laplace_vector(self, scale: float, size: int) -> np.ndarray:
        self.calls.append(("vector", size))
        return super().discrete_laplace_vector(scale, size)

    def uniform_words(self, size: int) -> np.ndarray:
        self.calls.append(("words", size))
        return super().uniform_words(size)


def sharp_params(cutoff: int = 3, queries_max: int = 10**6) -> SubSampParameters:
    """eps = 100 makes lambda ~ 0.2: a gap of 0 is (all but surely) bottom, a gap of 1000 answered."""
    return SubSampParameters.paper(100.0, 0.1, cutoff, queries_max, 0.1, subsamples=1000, threshold=10.0)


def test_all_randomness_is_drawn_at_creation() -> None:
    """A 256-bit key and T thresholds in one vector call, then nothing: process() draws no noise."""
    noise = CountingNoise()
    sv = SparseVector.create(sharp_params(cutoff=3), noise)
    assert noise.calls == [("words", 8), ("vector", 3)]
    assert sv.state.thresholds.dtype == np.int64 and sv.state.thresholds.shape == (3,)
    assert len(sv.state.key) == 32 and (sv.state.bottoms, sv.state.queries_seen) == (0, 0)
    sv.process(np.array([1000, 500, 0, 1000, 500, 1000]), 1000)
    assert noise.calls == [("words", 8), ("vector", 3)]


def test_bottoms_move_to_the_next_threshold_and_halt_at_cutoff() -> None:
    sv = SparseVector.create(sharp_params(cutoff=3), SecureNoise())
    thresholds = sv.state.thresholds.copy()
    k = 1000
    ones = np.array([1000, 500, 0, 1000, 500, 1000, 500, 1000, 0])  # gaps 1000, 0, 1000, ...
    status, label = sv.process(ones, k)
    assert status.tolist() == [ANSWERED, ABSTAINED, ANSWERED, ANSWERED, ABSTAINED,
                               ANSWERED, ABSTAINED, REFUSED, REFUSED]
    assert label.tolist() == [1, 0, 0, 1, 0, 1, 0, 0, 0]
    assert sv.state.bottoms == 3 and sv.halted and sv.state.queries_seen == 7
    assert (sv.state.thresholds == thresholds).all()  # fixed for the session's life
    status, _ = sv.process(np.array([1000, 1000]), k)
    assert status.tolist() == [REFUSED, REFUSED]  # refused for good after T bottoms
    assert sv.state.queries_seen == 7


def test_instance_j_uses_threshold_j() -> None:
    """Pin Z2[0] very high (everything abstains) and Z2[1] very low (everything is answered)."""
    params = sharp_params(cutoff=2)
    state = SparseVectorState(0, 0, session_key(SecureNoise()), np.array([10**6, -(10**6)], dtype=np.int64))
    status, _ = SparseVector(params, state).process(np.full(5, 1000), 1000)
    assert status.tolist() == [ABSTAINED] + [ANSWERED] * 4


def test_state_continues_across_batches_and_restarts() -> None:
    params = sharp_params(cutoff=2)
    sv = SparseVector.create(params, SecureNoise())
    sv.process(np.array([500, 1000]), 1000)
    saved = SparseVectorState.from_dict(sv.state.to_dict(), sv.state.thresholds)
    assert "thresholds" not in sv.state.to_dict()  # kept in their own file by pcqr.pipeline.session.state
    resumed = SparseVector(params, saved)
    status, _ = resumed.process(np.array([1000, 500, 1000]), 1000)
    assert status.tolist() == [ANSWERED, ABSTAINED, REFUSED]
    assert resumed.state.queries_seen == 4


def test_old_state_without_key_is_refused() -> None:
    with pytest.raises(PcqrError, match="predates"):
        SparseVectorState.from_dict({"bottoms": 0, "threshold_noise": 3, "queries_seen": 0}, np.zeros(3, np.int64))
    with pytest.raises(TypeError, match="create"):
        SparseVector(sharp_params(), SecureNoise())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="thresholds"):
        SparseVector(sharp_params(cutoff=3), SparseVectorState(0, 0, bytes(32), np.zeros(2, np.int64)))


def test_queries_beyond_m_are_refused() -> None:
    sv = SparseVector.create(sharp_params(queries_max=5), SecureNoise())
    status, _ = sv.process(np.full(8, 1000), 1000)
    assert status.tolist() == [ANSWERED] * 5 + [REFUSED] * 3


def test_vote_counts_outside_zero_to_k_are_a_bug() -> None:
    sv = SparseVector.create(sharp_params(), SecureNoise())
    with pytest.raises(ValueError, match="vote counts"):
        sv.process(np.array([1001]), 1000)


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


@pytest.mark.parametrize("noise_factory,gap", [(SecureNoise, 0), (SecureNoise, 6), (SecureNoise, 12),
                                               (lambda: SeededNoise(99), 6)], ids=["secure-0", "secure-6",
                                                                                 "secure-12", "seeded-6"])
@pytest.mark.parametrize("split", ["equal", "lyu_su_li"])
def test_stability_test_output_distribution(noise_factory, gap: int, split: str) -> None:
    """Empirical P(answer) on one query of a fresh session (new key and thresholds each time,
    through the keyed stream) matches the exact closed form (binomial test, 1e-6), under Algorithm
    5's split of eps0 and Lyu-Su-Li's (the thresholds and the tail table at non-integer scales).
    The secure source (what a private run uses) at every gap; the seeded one (tests) at one."""
    params = SubSampParameters.paper(8.0, 0.1, 1, 100, 0.1, subsamples=20)  # w = 5.5: P = 0.06, 0.20, 0.54
    params = dataclasses.replace(params, noise_split=split)
    noise = noise_factory()
    trials, answered = 20_000, 0
    ones = np.array([(20 + gap) // 2])
    for _ in range(trials):
        status, _ = SparseVector.create(params, noise).process(ones, 20)
        answered += int(status[0] == ANSWERED)
    expected = _exact_answer_probability(params, gap)
    assert 0.02 < expected < 0.98
    assert stats.binomtest(answered, trials, expected).pvalue > P_FAIL


@pytest.mark.parametrize("path", ["query_by_query", "vectorised"])
def test_each_query_is_an_exact_tail_draw_when_bottoms_are_dense(path, monkeypatch) -> None:
    """With every threshold pinned at 0, each query is answered independently with probability
    P(Z1 >= floor(2w) + 1 - gap), its U_i from the keyed stream; both code paths must give
    exactly that (binomial, 1e-6)."""
    import pcqr.pipeline.gates.sparse_vector as sv_module

    if path == "vectorised":
        monkeypatch.setattr(sv_module, "_DENSE", 0)
    calls = []
    original = SparseVector._query_by_query
    monkeypatch.setattr(SparseVector, "_query_by_query", lambda self, *a: calls.append(1) or original(self, *a))
    params = SubSampParameters.paper(40.0, 1e-6, 10**5, 10**9, 0.05, subsamples=20_000)
    state = SparseVectorState(0, 0, session_key(SecureNoise()), np.zeros(10**5, dtype=np.int64))
    sv = SparseVector(params, state)
    first_above = math.floor(2 * params.threshold) + 1
    levels = [first_above - 1 + d for d in (-700, 0, 700)]  # P(answer) about 0.15, 0.5, 0.85
    gaps = np.random.default_rng(0).choice(levels, size=120_000)
    k = params.subsamples
    status, _ = sv.process((k + gaps) // 2, k)
    assert bool(calls) == (path == "query_by_query")
    for g in levels:
        chosen = gaps == g
        answered = int(np.count_nonzero(status[chosen] == ANSWERED))
        p = sv.tail.probability(first_above - g)
        assert 0.01 < p < 0.99
        assert stats.binomtest(answered, int(chosen.sum()), p).pvalue > P_FAIL, (g, answered / chosen.sum(), p)
    assert sv.state.bottoms == int(np.count_nonzero(status == ABSTAINED))
