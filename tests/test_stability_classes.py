"""The stability gate over c > 2 classes (issue 49): the plurality's gap as the sparse vector's statistic.

The exact law of one sparse-vector instance over two queries, on every neighbouring pair of c = 3
count vectors of k <= 4 votes: its hockey-stick divergence at eps0 (the instance's epsilon) is at most
the probability that a query whose plurality differs between the two passes the test, and that is at
most p1 (the pass probability at gap 2, from which delta_stability = T p1 is computed) per such query.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np
import pytest

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.gates.gate import SparseVectorState
from pcqr.pipeline.gates.sparse_vector import SparseVector, plurality_gap
from pcqr.pipeline.privacy.stability import unstable_answer_probability
from pcqr.pipeline.privacy.subsamp import SubSampParameters

LAM, W = 2.0, 1.5  # small noise, so that the law is far from trivial: eps0 = 2 / LAM = 1
K, C = 4, 3


def _params(lam: float = LAM) -> SubSampParameters:
    base = SubSampParameters.create("paper", 8.0, 1e-3, 1, 100, 0.05, subsamples=K, gate="stability", classes=C)
    return replace(base, lam=lam, threshold=W)


def _dlap_pmf(scale: float, zs: np.ndarray) -> np.ndarray:
    q = math.exp(-1 / scale)
    return (1 - q) / (1 + q) * q ** np.abs(zs)


def _dlap_at_least(scale: float, a: np.ndarray) -> np.ndarray:
    q = math.exp(-1 / scale)
    a = np.asarray(a, dtype=np.float64)
    return np.where(a >= 1, q ** a / (1 + q), 1 - q ** (1 - a) / (1 + q))


def _transcripts(queries: list[tuple[int, ...]], params: SubSampParameters) -> dict[tuple, float]:
    """The exact law of one instance (T = 1) over ``queries``: each answered with its plurality while
    gap + Z1 > 2w + Z2, the first failure a bottom that ends it (later queries refused)."""
    zs = np.arange(-400, 401)
    p_threshold = _dlap_pmf(params.threshold_noise_scale, zs)
    first_above = np.floor(2 * params.threshold + zs) + 1  # the test is Z1 >= first_above - gap
    labels, gaps = plurality_gap(np.array(queries))
    law: dict[tuple, float] = {}
    alive = p_threshold.copy()
    prefix: tuple = ()
    for label, gap in zip(labels.tolist(), gaps.tolist()):
        passes = _dlap_at_least(params.query_noise_scale, first_above - gap)
        law[prefix + ("bottom",)] = float((alive * (1 - passes)).sum())
        alive = alive * passes
        prefix = prefix + (label,)
    law[prefix] = float(alive.sum())
    return law


def _neighbours(counts: tuple[int, ...]) -> list[tuple[int, ...]]:
    moved = []
    for a, b in itertools.permutations(range(C), 2):
        if counts[a]:
            one = list(counts)
            one[a] -= 1
            one[b] += 1
            moved.append(tuple(one))
    return moved


VECTORS = [v for v in itertools.product(range(K + 1), repeat=C) if sum(v) == K]


def test_the_gap_moves_by_at_most_two_and_the_plurality_only_below_three() -> None:
    """One moved vote: |gap change| <= 2 (the sensitivity in gap units), and a plurality that changes
    had gap <= 2 on both sides (the stability argument's condition)."""
    for k in range(1, 7):
        for counts in (v for v in itertools.product(range(k + 1), repeat=C) if sum(v) == k):
            (label,), (gap,) = plurality_gap(np.array([counts]))
            for other in _neighbours(counts):
                (label2,), (gap2,) = plurality_gap(np.array([other]))
                assert abs(int(gap) - int(gap2)) <= 2
                if label != label2:
                    assert gap <= 2 and gap2 <= 2


def test_every_neighbouring_pair_of_two_queries_meets_eps0_plus_the_stability_term() -> None:
    params = _params()
    eps0 = params.instance_epsilon
    p1 = unstable_answer_probability(params.threshold, params.query_noise_scale, params.threshold_noise_scale)
    assert eps0 == pytest.approx(1.0) and 0.01 < p1 < 0.5  # a regime where both terms matter
    worst = 0.0
    for first, second in itertools.product(VECTORS, repeat=2):
        law = _transcripts([first, second], params)
        assert sum(law.values()) == pytest.approx(1.0, abs=1e-9)
        labels = plurality_gap(np.array([first, second]))[0]
        for moved in itertools.product(_neighbours(first), _neighbours(second)):
            other = _transcripts(list(moved), params)
            hockey = sum(max(0.0, p - math.exp(eps0) * other.get(t, 0.0)) for t, p in law.items())
            changed = labels != plurality_gap(np.array(moved))[0]
            unstable = sum(p for t, p in law.items() for i in np.flatnonzero(changed) if len(t) > i and t[i] != "bottom")
            assert hockey <= unstable + 1e-12
            assert unstable <= changed.sum() * p1 + 1e-12
            worst = max(worst, hockey)
    assert worst > 0.01  # the stability term is what the bound is about


def test_the_bound_has_power() -> None:
    """A gate drawing a quarter of the noise fails the same check at eps0 on some pair whose pluralities
    agree (no stability excuse): the check sees noise too small for the certificate."""
    eps0, weak = _params().instance_epsilon, _params(LAM / 4)
    failed = False
    for first, second in itertools.product(VECTORS, repeat=2):
        law = _transcripts([first, second], weak)
        labels = plurality_gap(np.array([first, second]))[0]
        for moved in itertools.product(_neighbours(first), _neighbours(second)):
            if np.any(labels != plurality_gap(np.array(moved))[0]):
                continue
            other = _transcripts(list(moved), weak)
            failed |= sum(max(0.0, p - math.exp(eps0) * other.get(t, 0.0)) for t, p in law.items()) > 1e-9
    assert failed


def test_the_gate_releases_pluralities_and_abstains_by_the_gap() -> None:
    """The gate on c = 3 counts: unanimous queries are answered with their classes, rows past m are
    refused unread (their counts zeros), and counts that do not sum to k are a bug."""
    params = SubSampParameters.create("tight", 4.0, 1e-6, 5, 30, 0.05, gate="stability", classes=3)
    k = params.subsamples
    gate = SparseVector(params, SparseVectorState(0, 0, bytes(range(32)), np.zeros(5, dtype=np.int64)))
    counts = np.array([[0, k, 0], [0, 0, k], [k, 0, 0]] * 10 + [[0, 0, 0]] * 5)
    released = gate.release(counts, k, lambda: None)
    answered = released.status == 0
    assert list(released.status[30:]) == [2] * 5  # refused: past m
    assert answered[:30].mean() > 0.9
    assert np.array_equal(released.label[:30][answered[:30]], np.tile([1, 2, 0], 10)[answered[:30]])
    fresh = SparseVector(params, SparseVectorState(0, 0, bytes(range(32)), np.zeros(5, dtype=np.int64)))
    with pytest.raises(ValueError, match="class vote counts"):
        fresh.release(np.array([[1, 1, 1]]), k, lambda: None)


def test_the_guess_gate_still_refuses_more_than_two_classes() -> None:
    with pytest.raises(PcqrError, match="--gate guess answers two classes; 3 classes need --gate gnmax or stability"):
        SubSampParameters.create("tight", 1.0, 1e-6, 100, 1000, 0.05, gate="guess", classes=3)
