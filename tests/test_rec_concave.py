"""RecConcave (Beimel-Nissim-Stemmer Fig. 5, Lemmas 3.12 and 3.14; issue 14, item 3): its interval
computations against brute force, its exact output law on neighbouring tiny databases against its
certificate, the code against that law, utility on promise problems whose answer is known up to a
range of 2^64 solutions, and the refusals."""
from __future__ import annotations

import math
import time
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.mechanisms.adist import distance_to_instability
from pcqr.pipeline.mechanisms.rec_concave import (
    RecConcaveParameters, StepQuality, inner_quality, interval_best_two, rec_concave, recursion_depth,
    window_max_min,
)
from pcqr.pipeline.privacy.noise import SecureNoise, SeededNoise
from tests.conftest import P_FAIL


def threshold_quality(rows: list[tuple[int, int]], last: int) -> StepQuality:
    """Q(S, i) = the rows (x, y) that the threshold 'x >= i' labels correctly, i in [0, last]."""
    return StepQuality.of_points([sum(y == int(x >= i) for x, y in rows) for i in range(last + 1)])


def test_window_max_min_and_interval_best_two_against_brute_force() -> None:
    rng = np.random.default_rng(3)
    for _ in range(300):
        last = int(rng.integers(0, 40))
        points = rng.integers(-3, 6, last + 1).tolist()
        quality = StepQuality.of_points(points)
        assert [quality.at(i) for i in range(last + 1)] == points
        widths = [w for w in (1, 2, 3, 4, 8, 16, 32) if w <= last + 1]
        brute = [max(min(points[a:a + w]) for a in range(last + 2 - w)) for w in widths]
        assert window_max_min(quality, widths) == brute
        width = int(rng.integers(1, 12))
        for offset in {0, width // 2} - {o for o in (width // 2,) if o > last}:
            intervals = [points[a:a + width] for a in range(offset, last + 1, width)]
            u = [max(i) for i in intervals]
            chosen, best, gap = interval_best_two(quality, offset, width)
            assert best == int(np.argmax(u)) and chosen == [(offset + width * best,
                                                             min(last, offset + width * (best + 1) - 1))]
            assert gap == (-1 if len(u) == 1 else u[best] - max(u[:best] + u[best + 1:]))


def test_recursion_depth_is_at_most_log_star() -> None:
    # T -> log2 T' (T' the least power of 2 >= T) until T <= 32
    assert [recursion_depth(t) for t in (1, 32, 33, 2**32, 2**32 + 1, 2**64 - 1)] == [1, 1, 2, 2, 3, 3]


# --- the exact law on tiny inputs ------------------------------------------------------------------


def _em_law(values: list[int], eps: float) -> np.ndarray:
    w = np.exp(eps * (np.array(values, float) - max(values)) / 2)
    return w / w.sum()


def _pass_probability(dist: int, params) -> float:
    """P(dist + Z > t), Z ~ DLap(b): the closed form of P(Z >= t - dist + 1)."""
    q, a = math.exp(-1 / params.scale), params.threshold - dist + 1
    return q**a / (1 + q) if a >= 1 else 1 - q ** (1 - a) / (1 + q)


def exact_law(points: list[int], alpha: Fraction, params: RecConcaveParameters, promise: Fraction | None = None) -> dict:
    """{solution or None: probability} of Fig. 5 for T in (32, 64] (two levels), brute force over
    the points: the inner exponential mechanism over q on [0, log T'], then for each k the two
    A_dist tests on the interval families and the exponential mechanism on the union released
    (promise r: the rows unless given)."""
    last, r = len(points) - 1, Fraction(params.rows) if promise is None else promise
    log_top = max(0, (last - 1).bit_length())
    padded = points + [min(0, points[-1])] * ((1 << log_top) - last)
    lows = [max(min(padded[a:a + 2**j]) for a in range(len(padded) - 2**j + 1)) for j in range(log_top + 1)]
    lows.append(min(0, lows[-1]))
    inner = [math.floor(min(lows[j] - (1 - alpha) * r, r - lows[j + 1])) for j in range(log_top + 1)]
    law: dict = {}
    for k, p_k in enumerate(_em_law(inner, params.eps0)):
        width = 8 << k
        families = []
        for offset in (0, width // 2):
            if offset > last:
                continue
            starts = list(range(offset, last + 1, width))
            u = [max(points[a:a + width]) for a in starts]
            best = int(np.argmax(u))
            interval = (starts[best], min(last, starts[best] + width - 1))
            if len(u) == 1:
                families.append([(1.0, interval)])
            else:
                gap = u[best] - max(u[:best] + u[best + 1:])
                p = _pass_probability(max(0, (gap + 1) // 2 - 1), params.adist)
                families.append([(p, interval), (1 - p, None)])
        outcomes = [(1.0, ())]
        for family in families:
            outcomes = [(p * q, got + ((i,) if i else ())) for p, got in outcomes for q, i in family]
        for p, got in outcomes:
            if not got:
                law[None] = law.get(None, 0.0) + p_k * p
                continue
            solutions = sorted({i for lo, hi in got for i in range(lo, hi + 1)})
            for i, q in zip(solutions, _em_law([points[i] for i in solutions], params.eps0)):
                law[i] = law.get(i, 0.0) + p_k * p * q
    return law


def _divergence(law: dict, other: dict, eps: float) -> float:
    return sum(max(0.0, p - math.exp(eps) * other.get(o, 0.0)) for o, p in law.items())


def _rows_and_neighbour(rng: np.random.Generator, m: int, last: int) -> tuple[list, list]:
    rows = [(int(rng.integers(0, last + 1)), int(rng.integers(0, 2))) for _ in range(m)]
    other = list(rows)
    other[int(rng.integers(0, m))] = (int(rng.integers(0, last + 1)), int(rng.integers(0, 2)))
    return rows, other


def test_exact_law_on_neighbouring_databases_is_within_the_certificate() -> None:
    """T = 40 (two levels: 4 mechanisms), 6 rows, eps 6, delta 0.05: over 400 random pairs of
    neighbouring databases (replace one row) plus 100 realizable ones near their cut, the exact
    hockey-stick divergence at eps is at most the certified delta; at eps/4 it is not (the
    certificate's eps is doing work), and the law is proper."""
    last, m, alpha = 40, 6, Fraction(1, 2)
    params = RecConcaveParameters.create(6.0, 0.05, last, m)
    assert params.depth == 2 and params.adist is not None
    certified = params.certificate()["proven_delta"]
    rng = np.random.default_rng(8)
    worst, worst_small = 0.0, 0.0
    for n in range(500):
        if n < 400:
            rows, other = _rows_and_neighbour(rng, m, last)
        else:  # realizable at a cut c, the neighbour moves one row across it
            c = int(rng.integers(1, last))
            xs = rng.integers(max(0, c - 3), min(last, c + 3) + 1, m)
            rows = [(int(x), int(x >= c)) for x in xs]
            other = list(rows)
            other[0] = (c - 1, 1)
        law = exact_law([q for q in _points(rows, last)], alpha, params)
        law2 = exact_law([q for q in _points(other, last)], alpha, params)
        assert abs(sum(law.values()) - 1) < 1e-12
        worst = max(worst, _divergence(law, law2, params.epsilon), _divergence(law2, law, params.epsilon))
        worst_small = max(worst_small, _divergence(law, law2, params.epsilon / 4))
    assert worst <= certified
    assert worst_small > certified


def _points(rows: list[tuple[int, int]], last: int) -> list[int]:
    return [sum(y == int(x >= i) for x, y in rows) for i in range(last + 1)]


def _points_of(quality: StepQuality) -> list[int]:
    return [quality.at(i) for i in range(quality.last + 1)]


def test_each_mechanism_of_a_run_is_eps0_private_on_neighbours() -> None:
    """The same 500 neighbouring pairs as above, one mechanism at a time, through the real code (the
    top-level Q, inner_quality, interval_best_two), at eps0, where a factor of 2 shows (the
    composed check at eps cannot see it): Q and the inner q move by at most 1; the inner exponential
    mechanism's law moves by at most e^eps0; for every k and each interval family, A_dist's dist moves
    by at most 1 (so its pass probability by at most e^eps0) and dist >= 1 on either side means the
    same best interval; the final exponential mechanism's law on every union it can run on moves by
    at most e^eps0."""
    last, m, alpha = 40, 6, Fraction(1, 2)
    params = RecConcaveParameters.create(6.0, 0.05, last, m)
    bound = math.exp(params.eps0) * (1 + 1e-12)
    rng = np.random.default_rng(8)
    for _ in range(500):
        rows, other = _rows_and_neighbour(rng, m, last)
        q, q2 = threshold_quality(rows, last), threshold_quality(other, last)
        assert max(abs(a - b) for a, b in zip(_points_of(q), _points_of(q2))) <= 1
        inner, inner2 = inner_quality(q, Fraction(m), alpha), inner_quality(q2, Fraction(m), alpha)
        a, b = _points_of(inner), _points_of(inner2)
        assert max(abs(x - y) for x, y in zip(a, b)) <= 1
        assert (_em_law(a, params.eps0) / _em_law(b, params.eps0)).max() <= bound
        for k in range(inner.last + 1):
            width = 8 << k
            unions = []
            for offset in (0, width // 2):
                if offset > last:
                    continue
                chosen, best, gap = interval_best_two(q, offset, width)
                chosen2, best2, gap2 = interval_best_two(q2, offset, width)
                assert (gap < 0) == (gap2 < 0)
                if gap >= 0:
                    dist, dist2 = distance_to_instability(gap), distance_to_instability(gap2)
                    assert abs(dist - dist2) <= 1
                    assert max(dist, dist2) == 0 or best == best2
                    p, p2 = _pass_probability(dist, params.adist), _pass_probability(dist2, params.adist)
                    assert p <= bound * p2 and p2 <= bound * p
                unions += chosen + (chosen2 if chosen2 != chosen else [])
            for lo, hi in unions:
                solutions = list(range(lo, hi + 1))
                law = _em_law([q.at(i) for i in solutions], params.eps0)
                law2 = _em_law([q2.at(i) for i in solutions], params.eps0)
                assert (law / law2).max() <= bound


# the secure source, which private runs use; the seeded one's law is tests/test_noise.py's
@pytest.mark.parametrize("noise_factory", [SecureNoise], ids=["secure"])
def test_the_code_draws_the_exact_law(noise_factory) -> None:
    """4,000 runs of rec_concave on one tiny database against exact_law (chi-square over the
    outcomes expected >= 20 times, the rest pooled; false failure 1e-6)."""
    last, m, alpha = 40, 6, Fraction(1, 2)
    params = RecConcaveParameters.create(6.0, 0.05, last, m)
    rows = [(3, 0), (10, 0), (17, 1), (20, 1), (33, 1), (12, 0)]
    law = exact_law(_points(rows, last), alpha, params)
    quality = threshold_quality(rows, last)
    noise = noise_factory()
    trials = 4_000
    seen: dict = {}
    for _ in range(trials):
        out = rec_concave(quality, Fraction(m), alpha, params, noise)
        seen[out] = seen.get(out, 0) + 1
    assert set(seen) <= set(law)
    common = [o for o in law if trials * law[o] >= 20]
    rest = trials - sum(seen.get(o, 0) for o in common)
    expected_rest = trials * (1 - sum(law[o] for o in common))
    observed = [seen.get(o, 0) for o in common] + ([rest] if expected_rest >= 5 else [])
    expected = [trials * law[o] for o in common] + ([expected_rest] if expected_rest >= 5 else [])
    expected = [e * sum(observed) / sum(expected) for e in expected]
    assert stats.chisquare(observed, expected).pvalue > P_FAIL


# --- utility and scale -----------------------------------------------------------------------------


def test_utility_on_thresholds_over_2_to_the_64() -> None:
    """A realizable sample of 3,000 rows for the threshold 'x >= c' with c near 2^63 over [0, 2^64 - 1]
    (three levels), eps 1, delta 1e-6, alpha 1/2: the output labels at least (1 - alpha) m rows
    correctly in each of 20 runs, and a run takes well under a second (intervals, not the domain)."""
    rng = np.random.default_rng(2)
    last, c, m = 2**64 - 1, 2**63 + 12_345, 3_000
    xs = sorted(set(int(x) for x in rng.integers(0, 2**63, m // 2)) | set(c + int(x) for x in rng.integers(0, 2**62, m // 2)))
    m = len(xs)
    # Q as segments: the threshold i labels x >= i as 1; Q changes only just after each x
    correct = sum(1 for x in xs if x < c)  # Q(0): every x >= 0 labelled 1, the negatives wrong
    starts, values = [0], [m - correct]
    for x in xs:
        if x == last:
            break
        nxt = values[-1] + (1 if x < c else -1)  # threshold x + 1 labels x as 0
        starts.append(x + 1)
        values.append(nxt)
    quality = StepQuality(last, tuple(starts), tuple(values))
    assert max(values) == m and quality.at(c) == m
    params = RecConcaveParameters.create(1.0, 1e-6, last, m)
    assert params.depth == 3
    noise = SecureNoise()
    started = time.perf_counter()
    for _ in range(20):
        out = rec_concave(quality, Fraction(m), Fraction(1, 2), params, noise)
        assert out is not None and quality.at(out) >= m / 2
    assert (time.perf_counter() - started) / 20 < 1.0


def test_certificate_and_refusals() -> None:
    params = RecConcaveParameters.create(1.0, 1e-6, 2**64 - 1, 10_000)
    certificate = params.certificate()
    assert certificate["proven_epsilon"] == 1.0 and 0 < certificate["proven_delta"] <= 1e-6
    assert params.mechanisms == 7 and params.eps0 > 1.0 / 7  # KOV beats basic composition's eps / M
    assert params.promise_needed(0.5, 0.05) > 10_000  # Lemma 3.14's promise is far above this size
    small = RecConcaveParameters.create(1.0, 1e-6, 32, 100)
    # one exponential mechanism: KOV certifies it (1, delta/2) at an eps0 a little above 1
    assert small.depth == 1 and small.adist is None and 1.0 <= small.eps0 < 1.001
    assert small.certificate()["delta_composition"] <= 5e-7
    for bad in ({"last": 0}, {"last": 2**64}, {"rows": 0}, {"delta": 0.0}, {"epsilon": -1.0}):
        args = {"epsilon": 1.0, "delta": 1e-6, "last": 100, "rows": 10, **bad}
        with pytest.raises(PcqrError):
            RecConcaveParameters.create(**args)
