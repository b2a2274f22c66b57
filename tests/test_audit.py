"""The audit surface (pipeline/audit.py): codes and shapes, exact output distributions on tiny
cases (binomial and chi-square tests, each failing by chance with probability < P_FAIL = 1e-6),
refusals, and speed."""
from __future__ import annotations

import math
import time

import numpy as np
import pytest
from scipy import stats

from pcqr.pipeline import audit
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.privacy.noise import SeededNoise, discrete_laplace_pmf
from tests.conftest import P_FAIL

K = 50


@pytest.fixture(scope="module")
def params():
    """lambda 1.10 and the smallest certifiable w = 17 at k = 50: gaps near 2w = 34 are answered at
    rates far from 0 and 1 (a meaningless eps, a true certificate)."""
    return audit.subsamp_parameters(20.0, 1e-3, cutoff=2, queries_max=6, subsamples=K, profile="paper")


def test_parameters_go_through_the_cli_certification(params) -> None:
    assert params.threshold_source == "smallest_certifiable" and params.subsamples == K
    assert params.certificate()["proven_delta"] <= 1e-3 and params.certificate()["proven_epsilon"] <= 20
    with pytest.raises(PcqrError, match="the smallest --threshold that fits is 17"):
        audit.subsamp_parameters(20.0, 1e-3, cutoff=2, queries_max=6, subsamples=K, threshold=16.5, profile="paper")


def test_codes_shape_halting_and_refusal(params) -> None:
    """Answered codes carry the majority label; after T = 2 bottoms a session refuses everything;
    past m = 6 queries everything is refused; unanimous queries are mostly answered."""
    ones = np.array([K, 0, K // 2, K // 2, K, 0, K, K])
    codes = audit.run_sparse_vector(ones, K, params, sessions=300)
    assert codes.shape == (300, 8) and codes.dtype == np.int8
    assert set(np.unique(codes)) <= {audit.ANSWERED_0, audit.ANSWERED_1, audit.ABSTAINED, audit.REFUSED}
    majority = (2 * ones > K).astype(np.int8)  # a tie (gap 0) has label 0
    answered = codes <= audit.ANSWERED_1
    assert (codes[answered] == np.broadcast_to(majority, codes.shape)[answered]).all()
    bottoms = np.cumsum(codes == audit.ABSTAINED, axis=1)
    halted = np.concatenate([np.zeros((300, 1), dtype=bool), bottoms[:, :-1] >= 2], axis=1)
    assert (bottoms <= 2).all() and ((codes == audit.REFUSED) == (halted | (np.arange(8) >= 6))).all()
    assert np.mean(codes[:, 0] == audit.ANSWERED_1) > 0.9 and np.mean(codes[:, 1] == audit.ANSWERED_0) > 0.9
    assert audit.run_sparse_vector(np.zeros(0, dtype=int), K, params, sessions=3).shape == (3, 0)


def _exact_answer_probability(gap: int, params) -> float:
    """P(gap + Z1 > 2w + Z2), Z1 ~ DLap(4 lambda), Z2 ~ DLap(2 lambda), by summing the pmfs directly."""
    z = np.arange(-2000, 2001)
    p1, p2 = discrete_laplace_pmf(z, params.query_noise_scale), discrete_laplace_pmf(z, params.threshold_noise_scale)
    diff = np.convolve(p1, p2)  # P(Z1 + Z2 = s), s from -4000; Z2 is symmetric so Z1 - Z2 has this law
    s = np.arange(-4000, 4001)
    return float(diff[gap + s > 2 * params.threshold].sum())


@pytest.mark.parametrize("offset", [-6, 0, 6])
def test_one_query_at_a_known_gap_has_the_exact_answer_rate(params, offset) -> None:
    """Binomial test of the answered rate of one query at gap 2w + offset against its closed form
    (false failure < 1e-6)."""
    sessions, gap = 10_000, round(2 * params.threshold) + offset
    assert gap % 2 == K % 2
    codes = audit.run_sparse_vector(np.array([(K + gap) // 2]), K, params, sessions)
    answered = int(np.count_nonzero(codes[:, 0] == audit.ANSWERED_1))
    assert answered + int(np.count_nonzero(codes[:, 0] == audit.ABSTAINED)) == sessions
    exact = _exact_answer_probability(gap, params)
    assert 0.02 < exact < 0.98  # a case the test can fail on
    assert stats.binomtest(answered, sessions, exact).pvalue > P_FAIL, (answered / sessions, exact)


def test_ten_thousand_sessions_of_ten_queries_take_seconds(params) -> None:
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    codes = audit.run_sparse_vector(rng.integers(0, K + 1, size=10), K, params, sessions=10_000)
    elapsed = time.perf_counter() - start
    assert codes.shape == (10_000, 10) and elapsed < 10, elapsed


def test_sparse_vector_refusals() -> None:
    p = audit.subsamp_parameters(20.0, 1e-3, cutoff=2, queries_max=6, subsamples=K)
    for ones, k, needle in (([K + 1], K, "in \\[0, 50\\]"), ([[1, 2]], K, "one-dimensional"), ([0.5], K, "integer"),
                            ([1], 0, "positive integer")):
        with pytest.raises(PcqrError, match=needle) as refused:
            audit.run_sparse_vector(np.array(ones), k, p, sessions=1)
        assert "\n" not in str(refused.value)
    with pytest.raises(PcqrError, match="sessions"):
        audit.run_sparse_vector(np.array([1]), K, p, sessions=-1)


@pytest.mark.parametrize("sensitivity", [1.0, 0.5, 1 / 7])
def test_exponential_selection_matches_the_closed_form(sensitivity) -> None:
    """Chi-square of 10,000 draws against P(i) proportional to exp(eps score_i / (2 s)) (false failure < 1e-6)."""
    levels = np.array([0, -1, -1, -3, -6, 2])
    scores, epsilon, draws = levels * sensitivity, 0.9, 10_000
    picks = audit.exponential_selection(scores, epsilon, sensitivity, draws)
    assert picks.shape == (draws,) and picks.dtype == np.int64
    weights = np.exp(epsilon * levels / 2)
    expected = weights / weights.sum() * draws
    assert stats.chisquare(np.bincount(picks, minlength=6), expected).pvalue > P_FAIL


def test_exponential_selection_is_reproducible_with_a_seeded_source_and_refuses_bad_input() -> None:
    scores = np.array([0.0, -2.0, 1.0])
    a = audit.exponential_selection(scores, 1.0, 1.0, 50, SeededNoise(3))
    assert (a == audit.exponential_selection(scores, 1.0, 1.0, 50, SeededNoise(3))).all()
    for args, needle in (((np.array([0.3, 0.0]), 1.0, 0.25, 1), "scores\\[0\\] = 0.3 is not an integer multiple"),
                         ((np.array([]), 1.0, 1.0, 1), "non-empty"),
                         ((np.array([math.nan]), 1.0, 1.0, 1), "finite"),
                         ((scores, 0.0, 1.0, 1), "epsilon must be a positive number"),
                         ((scores, 1.0, -1.0, 1), "sensitivity must be a positive number"),
                         ((scores, 1.0, 1.0, -2), "draws")):
        with pytest.raises(PcqrError, match=needle) as refused:
            audit.exponential_selection(*args)
        assert "\n" not in str(refused.value)


def test_subsamp_parameters_takes_the_profile() -> None:
    """The audit surface's default is the CLI's default profile in realizable mode, 'tight' (issue 27;
    before, 'paper'), and 'paper' is one argument away; the docstring example runs as written."""
    import doctest

    from pcqr.pipeline.privacy.subsamp import SubSampParameters

    assert audit.subsamp_parameters(1.0, 1e-6, 50, 10_000, 5_000) == SubSampParameters.tight(
        1.0, 1e-6, 50, 10_000, 0.05, 5_000)
    paper = audit.subsamp_parameters(1.0, 1e-6, 50, 10_000, 5_000, profile="paper")
    assert paper == SubSampParameters.paper(1.0, 1e-6, 50, 10_000, 0.05, 5_000)
    failed, tried = doctest.testmod(audit, raise_on_error=False, report=False)
    assert tried >= 4 and failed == 0


def test_learn_without_public_data_runs_draws_the_point_learners_law() -> None:
    """audit.learn_without_public_data_runs("point") on 9 rows: the release rate of the best value
    equals A_dist's closed-form pass probability (binomial, false failure 1e-6); the threshold and
    rectangle learners give the model file's fields; settings the CLI refuses are refused."""
    from pcqr.pipeline.mechanisms.adist import AdistParameters, distance_to_instability

    x = np.array([[3.0], [5.0], [5.0], [5.0], [5.0], [5.0], [5.0], [5.0], [9.0]])
    y = np.array([0, 1, 1, 1, 1, 1, 1, 1, 0])  # value 5: 7 positives, every other value 0: gap 7
    params = AdistParameters.create(8.0, 0.01)
    q = math.exp(-1 / params.scale)
    a = params.threshold - distance_to_instability(7) + 1
    passing = q**a / (1 + q) if a >= 1 else 1 - q ** (1 - a) / (1 + q)
    out = audit.learn_without_public_data_runs(x, y, "point", "0:15", 8.0, 0.01, runs=4_000)
    released = sum(o["value"] == 5.0 for o in out)
    assert all(o["value"] in (5.0, None) for o in out)
    assert stats.binomtest(released, 4_000, passing).pvalue > P_FAIL
    rng = np.random.default_rng(0)
    xs = rng.integers(0, 100, (20_000, 1)).astype(float)
    thresholds = audit.learn_without_public_data_runs(xs, (xs[:, 0] > 40).astype(int), "learn-thresholds",
                                                      "0:99", 1.0, 1e-6, runs=3)
    assert all(t["class"] == "threshold" and abs(t["threshold"] - 40) <= 5 for t in thresholds)
    boxes = audit.learn_without_public_data_runs(np.hstack([xs, xs[::-1]]), (xs[:, 0] > 40).astype(int),
                                                 "rectangle", "0:99", 1.0, 1e-6, runs=2, alpha=0.5)
    assert all(b["class"] == "box" and len(b["lows"]) == 2 for b in boxes)
    with pytest.raises(PcqrError):
        audit.learn_without_public_data_runs(x, y, "point", "0:15", 8.0, 0.0, runs=1)
    with pytest.raises(PcqrError):
        audit.learn_without_public_data_runs(np.hstack([x, x]), y, "point", "0:15", 8.0, 0.01, runs=1)


def test_san_points_runs() -> None:
    """audit.san_points_runs: each run's table ({value: weight}) from the real mechanism; a database
    below the certified size is refused as the CLI refuses it."""
    x = np.repeat([1.0, 2.0, 3.0], [12_000, 6_000, 2_000])
    tables = audit.san_points_runs(x, "0:15", 1.0, 1e-6, 0.5, 0.05, runs=5)
    assert len(tables) == 5 and all(abs(t.get(1, 0.0) - 0.6) <= 0.5 for t in tables)
    with pytest.raises(PcqrError, match="needs at least"):
        audit.san_points_runs(x[:1_000], "0:15", 1.0, 1e-6, 0.5, 0.05, runs=1)


def test_san_thresholds_runs() -> None:
    """audit.san_thresholds_runs: each run's table ({value: weight}) from the real mechanism, every
    'x <= theta' within alpha (fractional rows and rows beyond the domain are taken at ceil(x)
    clipped to it); a database below the certified size, or an alpha beyond the exact composition,
    is refused as the CLI refuses it."""
    rng = np.random.default_rng(6)
    x = np.concatenate([np.repeat([1.0, 7.0], [200_000, 50_000]), rng.uniform(-5.0, 20.0, 50_000)])
    tables = audit.san_thresholds_runs(x, "0:15", 8.0, 1e-6, 0.9, 0.05, runs=3)
    assert len(tables) == 3
    for table in tables:
        for theta in range(15):
            answer = sum(w for v, w in table.items() if v <= theta)
            assert abs(answer - float(np.mean(x <= theta))) <= 0.9
    with pytest.raises(PcqrError, match="needs at least"):
        audit.san_thresholds_runs(x[:10_000], "0:15", 8.0, 1e-6, 0.9, 0.05, runs=1)
    with pytest.raises(PcqrError, match="--alpha must be at least"):
        audit.san_thresholds_runs(x, "0:15", 8.0, 1e-6, 0.1, 0.05, runs=1)


def test_histogram_and_cdf_runs() -> None:
    """audit.histogram_runs and audit.cdf_runs (issue 31): each run's table from the real mechanism;
    seeded runs repeat, secure ones are independent; the histogram's point queries and the CDF's
    'x <= theta' within 0.01 on 20,000 rows; the histogram refuses too few rows as the CLI does."""
    from pcqr.pipeline.privacy.noise import SeededNoise

    rng = np.random.default_rng(7)
    x = np.concatenate([np.repeat([1.0, 7.0], [8_000, 4_000]), rng.integers(0, 16, 8_000).astype(float)])
    points = audit.histogram_runs(x, "0:15", 1.0, 1e-6, runs=2)
    assert len(points) == 2 and points[0] != points[1]
    assert all(abs(t.get(v, 0.0) - float(np.mean(x == v))) <= 0.01 for t in points for v in range(16))
    cdfs = audit.cdf_runs(x, "0:15", 1.0, runs=2)
    assert all(abs(sum(w for v, w in t.items() if v <= theta) - float(np.mean(x <= theta))) <= 0.01
               for t in cdfs for theta in range(15))
    assert audit.cdf_runs(x, "0:15", 1.0, runs=1, noise=SeededNoise(3)) == audit.cdf_runs(
        x, "0:15", 1.0, runs=1, noise=SeededNoise(3))
    with pytest.raises(PcqrError, match="needs at least"):
        audit.histogram_runs(x[:100], "0:15", 1.0, 1e-6, runs=1, alpha=0.01)


def test_the_c_class_gates_run_through_the_audit_surface() -> None:
    """Over c = 3 classes (issue 49) the auditor gives (q, 3) class counts: gnmax's codes are the
    released classes (a unanimous query's class almost always at eps 8), the stability gate's the
    plurality, c for an abstention and c + 1 for a refusal; a count matrix that is not (q, c) or does not
    sum to k is refused in one line."""
    gn = audit.subsamp_parameters(8.0, 1e-3, cutoff=2, queries_max=2, subsamples=60, gate="gnmax", classes=3)
    codes = audit.run_gnmax(np.array([[0, 60, 0], [0, 0, 60], [20, 20, 20]]), 60, gn, sessions=200)
    assert codes.shape == (200, 3) and (codes[:, 0] == 1).mean() > 0.95 and (codes[:, 1] == 2).mean() > 0.95
    assert set(np.unique(codes[:, 2]).tolist()) == {4}  # past m = 2: refused, code c + 1
    st = audit.subsamp_parameters(100.0, 1e-3, cutoff=20, queries_max=10, subsamples=50, gate="stability", classes=3)
    codes = audit.run_sparse_vector(np.array([[0, 0, 50], [25, 25, 0]]), 50, st, sessions=200)
    assert set(np.unique(codes[:, 0]).tolist()) <= {2, 3} and (codes[:, 0] == 2).mean() > 0.9
    assert set(np.unique(codes[:, 1]).tolist()) <= {0, 3}  # a tie: class 0 (the smaller index) or abstain
    for bad in (np.array([30, 30]), np.array([[30, 30]]), np.array([[30, 30, 1]])):
        with pytest.raises(PcqrError, match=r"^ones"):
            audit.run_gnmax(bad, 60, gn, sessions=1)
