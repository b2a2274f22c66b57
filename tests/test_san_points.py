"""SanPoints (Beimel-Nissim-Stemmer Fig. 9, Theorem 4.6; issue 14): its exact output law on every pair
of neighbouring tiny databases against the composition its certificate is built from, the real code
against that law, the certificate and its refusals, and utility on a database whose answers are known."""
from __future__ import annotations

import itertools
import math
from functools import lru_cache

import numpy as np
import pytest
from scipy import stats

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.mechanisms.adist import noise_scale
from pcqr.pipeline.mechanisms.choosing import ChoosingParameters
from pcqr.pipeline.mechanisms.san_points import SanPointsParameters, san_points
from pcqr.pipeline.privacy.composition import optimal_delta
from pcqr.pipeline.privacy.noise import SecureNoise, SeededNoise
from tests.conftest import P_FAIL
from tests.test_choosing import exact_law as choosing_law

VALUES = 3  # the tiny domain {0, 1, 2}


def clipped_count_law(count: int, rows: int, scale: float) -> np.ndarray:
    """P(min(max(count + Z, 0), rows) = v) for v = 0..rows, Z ~ DLap(scale): exact closed forms."""
    q = math.exp(-1 / scale)

    def at_least(a: int) -> float:  # P(Z >= a)
        return q**a / (1 + q) if a >= 1 else 1 - q ** (1 - a) / (1 + q)

    law = np.array([(1 - q) / (1 + q) * q ** abs(v - count) for v in range(rows + 1)])
    law[0], law[rows] = at_least(count), at_least(rows - count)  # P(Z <= -count) = P(Z >= count)
    return law


def san_points_law(counts: tuple[int, ...], params: SanPointsParameters) -> dict[tuple, np.ndarray]:
    """{the rounds' choices (index or None): the joint law of the released clipped counts of the
    chosen points (flattened), times the choices' probability}: the exact law of Fig. 9 with the
    exact exponential mechanism (the sampler's term aside)."""
    law: dict[tuple, np.ndarray] = {}

    def walk(remaining: list[int], probability: float, picks: tuple, counts_law: np.ndarray, rounds: int) -> None:
        if rounds == 0:
            law[picks] = probability * counts_law
            return
        for choice, p in choosing_law(remaining, params.choosing).items():
            if p == 0:
                continue
            if choice is None:
                walk(remaining, probability * p, picks + (None,), counts_law, rounds - 1)
                continue
            after = list(remaining)
            after[choice] = 0  # R minus {b}
            released = clipped_count_law(counts[choice], params.rows, params.count_scale)
            walk(after, probability * p, picks + (choice,), np.multiply.outer(counts_law, released).ravel(),
                 rounds - 1)

    walk(list(counts), 1.0, (), np.ones(1), params.rounds)
    return law


def tiny_parameters(eps0: float, rows: int, alpha: float) -> SanPointsParameters:
    """SanPoints' pieces at a size the certified constructor refuses (so every law is non-trivial)."""
    choosing = ChoosingParameters.create(eps0, 0.9, alpha / 2, 0.5, 1, rows)
    return SanPointsParameters(1.0, 0.9, alpha, 0.5, rows, math.ceil(2 / alpha), eps0, noise_scale(eps0), choosing)


def neighbours(counts: tuple[int, ...]):
    """Every replace-one neighbour of a count vector over the tiny domain."""
    for removed, added in itertools.product(range(len(counts)), repeat=2):
        if counts[removed] and removed != added:
            other = list(counts)
            other[removed] -= 1
            other[added] += 1
            yield tuple(other)


def choosing_delta_exact(params: ChoosingParameters, rows: int) -> float:
    """The choosing mechanism's exact worst hockey-stick divergence at its eps over every restricted
    quality vector SanPoints can give it (copies of each point still in R, 0 for those chosen; at
    most ``rows`` in all) and every replace-one move of the restricted qualities (one -1, one +1,
    or one of them alone when the other point has left R)."""
    worst = 0.0
    for q in itertools.product(range(rows + 1), repeat=VALUES):
        if sum(q) > rows:
            continue
        law = choosing_law(list(q), params)
        for down, up in itertools.product([None, *range(VALUES)], repeat=2):
            if (down is not None and q[down] == 0) or (down is not None and down == up):
                continue
            other = list(q)
            if down is not None:
                other[down] -= 1
            if up is not None:
                other[up] += 1
            if sum(other) > rows or other == list(q):
                continue
            law2 = choosing_law(other, params)
            worst = max(worst, sum(max(0.0, p - math.exp(params.epsilon) * law2.get(o, 0.0)) for o, p in law.items()))
    return worst


def worst_divergence(params: SanPointsParameters, epsilons: list[float], outside: bool = False) -> list[float]:
    """max over every multiset of ``params.rows`` points of the tiny domain (with ``outside``, also
    of a value outside it, which counts in m and for no point) and every replace-one neighbour of
    sum_o max(0, P(o|S) - e^eps P(o|S')), for each eps."""
    law_of = lru_cache(maxsize=None)(lambda counts: san_points_law(counts[:VALUES], params))
    symbols = VALUES + outside
    worst = [0.0] * len(epsilons)
    for split in itertools.combinations_with_replacement(range(symbols), params.rows):
        counts = tuple(split.count(a) for a in range(symbols))
        law = law_of(counts)
        for other in neighbours(counts):
            law2 = law_of(other)
            for i, eps in enumerate(epsilons):
                divergence = sum(np.maximum(0.0, p - math.exp(eps) * law2.get(picks, 0.0)).sum()
                                 for picks, p in law.items())
                worst[i] = max(worst[i], float(divergence))
    return worst


def test_exact_law_obeys_the_composition_its_certificate_is_built_from() -> None:
    """Fig. 9 on every multiset of 20 points over 3 values and every replace-one neighbour, eps0 = 4,
    alpha = 0.9 (3 rounds: 3 choosing mechanisms and 3 counts): the exact hockey-stick divergence at
    eps is at most KOV's heterogeneous bound the certificate uses, pure part optimal_delta(eps0, 2r,
    eps) plus r times the choosing mechanism's EXACT worst delta0 (not its loose lemma bound, so the
    check is sharp), at six eps; and the counts' law (what the sampler test ties the code to) has
    privacy loss exactly 1/count_scale <= eps0 between neighbouring counts, interior or clipped."""
    params = tiny_parameters(4.0, 20, 0.9)
    delta0 = choosing_delta_exact(params.choosing, params.rows)
    assert 0 < delta0 < 0.1
    epsilons = [4.0, 8.0, 12.0, 16.0, 20.0, 24.0]
    bounds = [min(1.0, optimal_delta(params.eps0, 2 * params.rounds, eps) + params.rounds * delta0) for eps in epsilons]
    worst = worst_divergence(params, epsilons)
    assert all(w <= b * (1 + 1e-9) for w, b in zip(worst, bounds)), (worst, bounds)
    assert worst[0] > 0 and worst[-1] > 0  # not pure DP at any eps: the delta0 terms are doing work
    losses = [np.log(clipped_count_law(c, params.rows, params.count_scale)
                     / clipped_count_law(c + 1, params.rows, params.count_scale)) for c in range(params.rows)]
    loss = max(float(np.abs(x).max()) for x in losses)
    assert loss <= params.eps0 * (1 + 1e-12) and loss >= params.eps0 * (1 - 1e-9)


def test_exact_law_with_rows_outside_the_domain() -> None:
    """The same check on every multiset of 12 rows over the 3 values and one outside the domain (the
    counts then sum to less than m) and every replace-one neighbour, moving rows in and out of the
    domain: within KOV's bound with the exact delta0."""
    params = tiny_parameters(4.0, 12, 0.9)
    delta0 = choosing_delta_exact(params.choosing, params.rows)
    epsilons = [4.0, 12.0, 24.0]
    bounds = [min(1.0, optimal_delta(params.eps0, 2 * params.rounds, eps) + params.rounds * delta0) for eps in epsilons]
    worst = worst_divergence(params, epsilons, outside=True)
    assert all(w <= b * (1 + 1e-9) for w, b in zip(worst, bounds)), (worst, bounds)
    assert worst[-1] > 0


# the secure source, which private runs use; the seeded one's law is tests/test_noise.py's
@pytest.mark.parametrize("noise_factory", [SecureNoise], ids=["secure"])
def test_the_code_draws_the_exact_law(noise_factory) -> None:
    """6,000 runs of san_points on the counts (9, 7, 4) of 20 rows against san_points_law: the
    sequence of choices (chi-square over the sequences expected >= 20 times, the rest pooled) and the
    first released point's clipped count given it is point 0 (chi-square over its likely values);
    false failure 1e-6 each."""
    params = tiny_parameters(4.0, 20, 0.9)
    counts = (9, 7, 4)
    law = san_points_law(counts, params)
    picks_law = {picks: float(p.sum()) for picks, p in law.items()}
    noise = noise_factory()
    trials = 6_000
    seen: dict[tuple, int] = {}
    first_counts: list[int] = []
    for _ in range(trials):
        out = san_points(np.arange(VALUES), np.array(counts), params, noise)
        # the released pairs in order, so the choices are the released points with bottoms dropped
        key = tuple(v for v, _ in out)
        seen[key] = seen.get(key, 0) + 1
        if out and out[0][0] == 0:
            first_counts.append(round(out[0][1] * params.rows))
    dropped: dict[tuple, float] = {}
    for picks, p in picks_law.items():
        key = tuple(c for c in picks if c is not None)
        dropped[key] = dropped.get(key, 0.0) + p
    assert set(seen) <= set(dropped)
    common = [k for k in dropped if trials * dropped[k] >= 20]
    observed = [seen.get(k, 0) for k in common] + [trials - sum(seen.get(k, 0) for k in common)]
    expected = [trials * dropped[k] for k in common] + [trials * (1 - sum(dropped[k] for k in common))]
    if expected[-1] < 5:  # nothing worth pooling
        observed, expected = observed[:-1], expected[:-1]
        expected = [e * sum(observed) / sum(expected) for e in expected]
    assert stats.chisquare(observed, expected).pvalue > P_FAIL
    released = clipped_count_law(counts[0], params.rows, params.count_scale)
    likely = [v for v in range(params.rows + 1) if len(first_counts) * released[v] >= 20]
    got = [first_counts.count(v) for v in likely]
    want = released[likely] / released[likely].sum() * sum(got)
    assert stats.chisquare(got, want).pvalue > P_FAIL


def test_certificate_fits_the_request_and_small_databases_are_refused() -> None:
    params = SanPointsParameters.create(1.0, 1e-6, 0.1, 0.05, 10**6)
    certificate = params.certificate()
    # the counts' noise the command draws: DLap(b) with 1/b at most eps0 (and not far below it)
    assert params.eps0 * (1 - 1e-12) <= 1 / params.count_scale <= params.eps0
    assert certificate["proven_epsilon"] == 1.0 and certificate["proven_delta"] <= 1e-6
    assert params.rounds == 20
    # KOV's composition beats basic composition's eps / 2r and the paper's eps / sqrt(32/alpha ln(5/delta))
    assert params.eps0 > 1.0 / 40 and params.eps0 > 2.5 / math.sqrt(32 / 0.1 * math.log(5 / 1e-6))
    assert certificate["delta_composition"] <= 5e-7
    least = SanPointsParameters.least_rows(1.0, 1e-6, 0.1, 0.05)
    SanPointsParameters.create(1.0, 1e-6, 0.1, 0.05, least)
    with pytest.raises(PcqrError, match=f"needs at least {least:,} rows"):
        SanPointsParameters.create(1.0, 1e-6, 0.1, 0.05, least - 1)
    for bad in ({"alpha": 0.0}, {"beta": 1.0}, {"delta": 0.0}, {"epsilon": float("nan")}):
        args = {"epsilon": 1.0, "delta": 1e-6, "alpha": 0.1, "beta": 0.05, "rows": 10**6, **bad}
        with pytest.raises(PcqrError):
            SanPointsParameters.create(**args)


def test_every_point_query_within_alpha() -> None:
    """10^6 rows: 5 heavy points (10%, 8%, 6%, 5%, 3%) and a long tail of light ones: every point's
    estimate (0 for those not released) is within alpha = 0.1 of its true frequency in each of 20
    runs (Theorem 4.6 says with probability 1 - beta each: at m >= utility_rows, the miss rate is
    far below)."""
    rng = np.random.default_rng(0)
    heavy = np.array([10, 20, 30, 40, 50])
    shares = np.array([0.10, 0.08, 0.06, 0.05, 0.03])
    n = 10**6
    light = rng.integers(1_000, 10**9, int(n * (1 - shares.sum())))
    data = np.concatenate([np.repeat(heavy, (shares * n).astype(int)), light])
    values, counts = np.unique(data, return_counts=True)
    params = SanPointsParameters.create(1.0, 1e-6, 0.1, 0.05, int(counts.sum()))
    assert params.utility_rows() <= params.rows
    truth = dict(zip(values.tolist(), (counts / counts.sum()).tolist()))
    for _ in range(20):
        estimates = dict(san_points(values, counts, params, SecureNoise()))
        assert all(0.0 <= e <= 1.0 for e in estimates.values())
        worst = max(abs(estimates.get(v, 0.0) - f) for v, f in truth.items())
        assert worst <= 0.1
    assert {10, 20}.issubset(estimates)  # the points above alpha are always released


def test_pcqr_plan_reports_san_points(capsys) -> None:
    """pcqr plan --without-public-data: SanPoints' least certified m (create accepts it, m - 1 is
    refused), the proof's m with our noise below the paper's as stated; an alpha whose rounds are
    beyond the exact composition is reported as none, not crashed on."""
    import json

    from pcqr.jobs.cli import main
    from pcqr.pipeline.mechanisms.san_points import paper_rows

    assert main(["plan", "--without-public-data", "--epsilon", "1", "--alpha", "0.1", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["algorithms"]["san_points"]
    certified = plan["rows_certified"]["value"]
    SanPointsParameters.create(1.0, 1e-6, 0.1, 0.05, certified)
    with pytest.raises(PcqrError):
        SanPointsParameters.create(1.0, 1e-6, 0.1, 0.05, certified - 1)
    assert plan["rows_for_utility"]["value"] < plan["paper_rows"]["value"] == paper_rows(1.0, 1e-6, 0.1, 0.05)
    assert main(["plan", "--without-public-data", "--epsilon", "1", "--alpha", "0.001", "--json"]) == 0
    tiny = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["algorithms"]["san_points"]
    assert str(tiny["rows_certified"]["value"]).startswith("none (--alpha")
