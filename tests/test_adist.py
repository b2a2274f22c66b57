"""A_dist (propose-test-release on the best two candidates) and the POINT_d learner built on it
(Beimel-Nissim-Stemmer, papers/002 Prop 2.26 and Lemma 3.2; issue 14): the exact output
distribution on every pair of neighbouring tiny datasets against the certificate, the noisy test
against its closed form, utility on data whose answer is known, and the command line."""
from __future__ import annotations

import itertools
import json
import math
import sqlite3

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy import stats

from pcqr.jobs.cli import main
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.mechanisms.adist import AdistParameters, best_two, distance_to_instability, noise_scale, passes
from pcqr.pipeline.mechanisms.integer_domain import Domain, merge_counts
from pcqr.pipeline.mechanisms.learn_point import best_point, learn_point, positive_counts, rows_needed
from pcqr.pipeline.privacy.noise import SecureNoise, SeededNoise
from pcqr.pipeline.privacy.stability import laplace_tail
from tests.conftest import P_FAIL


def _pass_probability(dist: int, params: AdistParameters) -> float:
    """P(dist + Z > t) = P(Z >= t - dist + 1), Z ~ DLap(b), in closed form (float)."""
    a = params.threshold - dist + 1
    q = math.exp(-1 / params.scale)
    return q**a / (1 + q) if a >= 1 else 1 - q ** (1 - a) / (1 + q)


def _distribution(rows: tuple[tuple[int, int], ...], domain: Domain, params: AdistParameters) -> dict:
    """The POINT learner's exact output law on ``rows`` ((x, y) pairs): {point or None: probability},
    through the real code's qualities, best candidate and distance to instability."""
    X = np.array([[x] for x, _ in rows], dtype=float)
    y = np.array([label for _, label in rows], dtype=np.int8)
    top, gap = best_point(*merge_counts(positive_counts((X, y), domain)), domain)
    released = _pass_probability(distance_to_instability(gap), params)
    return {top: released, None: 1 - released}


def test_distance_to_instability_has_sensitivity_one_and_guards_the_choice() -> None:
    """Over every quality vector of 3 candidates in [0, 6] and every replace-one move (one quality
    down by 1, another up by 1, or one alone): dist moves by at most 1, and dist >= 1 keeps the best."""
    for q in itertools.product(range(7), repeat=3):
        best, gap = best_two(np.array(q))
        dist = distance_to_instability(gap)
        for down, up in itertools.product([None, 0, 1, 2], repeat=2):
            moved = list(q)
            if down is not None:
                moved[down] -= 1
            if up is not None:
                moved[up] += 1
            if min(moved) < 0:
                continue
            best2, gap2 = best_two(np.array(moved))
            assert abs(distance_to_instability(gap2) - dist) <= 1
            if dist >= 1:
                assert best2 == best


@pytest.mark.parametrize(("epsilon", "delta"), [(1.0, 0.1), (0.5, 0.2), (2.0, 0.01)])
def test_point_learner_is_eps_delta_dp_exactly_on_every_tiny_neighbour_pair(epsilon: float, delta: float) -> None:
    """Every multiset of 5 rows over domain {0, 1, 2} x labels {0, 1} and every replace-one neighbour:
    sum_o max(0, P(o | S) - e^eps P(o | S')) (the exact hockey-stick divergence over output sets) is at
    most the certified delta, and the worst pair reaches it (the certificate is tight, not vacuous)."""
    domain = Domain(0, 2)
    params = AdistParameters.create(epsilon, delta)
    certified = params.certificate()
    assert certified["proven_epsilon"] <= epsilon and certified["proven_delta"] <= delta
    kinds = [(x, label) for x in range(3) for label in (0, 1)]
    worst = 0.0
    for rows in itertools.combinations_with_replacement(kinds, 5):
        p = _distribution(rows, domain, params)
        for i, new in itertools.product(range(5), kinds):
            neighbour = rows[:i] + (new,) + rows[i + 1:]
            q = _distribution(neighbour, domain, params)
            divergence = sum(max(0.0, p[o] - math.exp(epsilon) * q.get(o, 0.0)) for o in p)
            worst = max(worst, divergence)
    assert worst <= certified["proven_delta"] * (1 + 1e-9)
    assert worst >= 0.99 * certified["proven_delta"]


@pytest.mark.parametrize(("epsilon", "delta"), [(1.0, 1e-6), (0.1, 1e-9), (8.0, 1e-3), (1e-3, 0.5)])
def test_threshold_is_the_smallest_that_fits_and_never_rounded_down(epsilon: float, delta: float) -> None:
    params = AdistParameters.create(epsilon, delta)
    assert 1 / params.scale <= epsilon
    assert laplace_tail(params.threshold + 1, params.scale) <= delta
    if params.threshold > 0:
        assert laplace_tail(params.threshold, params.scale) > delta
    exact = math.exp(-(params.threshold + 1) / params.scale) / (1 + math.exp(-1 / params.scale))
    assert laplace_tail(params.threshold + 1, params.scale) >= exact
    assert params.certificate()["delta_stability"] == laplace_tail(params.threshold + 1, params.scale)
    from fractions import Fraction

    proven = params.certificate()["proven_epsilon"]  # 1/b, rounded up, and still within the request
    assert Fraction(1) / Fraction(params.scale) <= Fraction(proven) and proven <= epsilon


# the secure source, which private runs use; the seeded one's law is tests/test_noise.py's
@pytest.mark.parametrize("noise_factory", [SecureNoise], ids=["secure"])
@pytest.mark.parametrize("dist", [0, 1, 2, 4])
def test_the_noisy_test_matches_its_closed_form(noise_factory, dist: int) -> None:
    """Empirical pass frequency of :func:`passes` (OpenDP's exact sampler, or the seeded one) against
    P(Z >= t - dist + 1) (binomial test, false failure 1e-6)."""
    params = AdistParameters.create(1.0, 0.1)  # t = 1: P = 0.10, 0.27, 0.73, 0.96
    noise = noise_factory()
    trials = 20_000
    passed = sum(passes(dist, params, noise) for _ in range(trials))
    assert stats.binomtest(passed, trials, _pass_probability(dist, params)).pvalue > P_FAIL


def test_utility_the_target_point_is_released_and_no_positives_give_all_zero() -> None:
    """A realizable sample: point 42 holds 5% of 20,000 rows, all labelled 1, nothing else is: the
    learner releases c_42 (its distance to instability, 499, is far past t + a_beta); with no
    positive row it releases the all-zero function unless the 1e-6 tail fires."""
    rng = np.random.default_rng(0)
    x = np.where(rng.random(20_000) < 0.05, 42, rng.integers(0, 1_000, 20_000)).astype(float)
    domain = Domain.parse("0:4294967295")
    params = AdistParameters.create(1.0, 1e-6)
    counts = merge_counts(*(positive_counts((x[i::4, None], (x[i::4] == 42).astype(np.int8)), domain)
                            for i in range(4)))
    hypothesis, released = learn_point(counts, domain, params, SecureNoise())
    assert released and hypothesis.value == 42.0
    assert hypothesis.predict(np.array([[42.0], [41.0]])).tolist() == [1, 0]
    nothing = merge_counts(positive_counts((x[:, None], np.zeros(x.shape, np.int8)), domain))
    hypothesis, released = learn_point(nothing, domain, params, SecureNoise())
    assert not released and hypothesis.value is None
    assert rows_needed(params, 0.1, 0.05) < 20_000


def test_rows_outside_the_domain_or_not_integers_count_for_no_point() -> None:
    domain = Domain(0, 10)
    X = np.array([[3.0], [3.0], [3.5], [-1.0], [11.0], [10.0]])
    values, counts = positive_counts((X, np.ones(6, np.int8)), domain)
    assert values.tolist() == [3, 10] and counts.tolist() == [2, 1]
    assert best_point(values, counts, domain) == (3, 1)
    assert best_point(np.array([], np.int64), np.array([], np.int64), domain) == (0, 0)
    assert best_point(np.array([0, 1]), np.array([2, 2]), Domain(0, 1)) == (0, 0)  # ties: the smallest


@pytest.mark.parametrize("text", ["5:5", "9:1", "a:b", "7", "0:9007199254740993", ""])
def test_bad_domains_are_refused_in_one_line(text: str) -> None:
    with pytest.raises(PcqrError, match="--domain"):
        Domain.parse(text)


def test_noise_scale_never_exceeds_epsilon() -> None:
    for epsilon in (0.1, 0.3, 1 / 3, 0.7, 1.0, 3.0, 10.0, 1e-6):
        assert 1 / noise_scale(epsilon) <= epsilon or math.isclose(1 / noise_scale(epsilon), epsilon, rel_tol=1e-15)


def test_pcqr_learn_point_end_to_end_on_the_cluster(tmp_path, capsys, thread_cluster_yaml) -> None:
    """pcqr learn --algorithm point: a model file pcqr predict serves, the certificate in --json
    (epsilon, proven_delta), one charge in the ledger; a refused command charges nothing."""
    rng = np.random.default_rng(1)
    x = np.where(rng.random(30_000) < 0.02, 7_777, rng.integers(0, 100_000, 30_000)).astype(float)
    (tmp_path / "private").mkdir()
    for i in range(3):  # three files: the workers read their own parts
        part = x[i::3]
        pq.write_table(pa.table({"x": part, "label": (part == 7_777).astype(np.int8)}),
                       tmp_path / "private" / f"part-{i}.parquet")
    ledger = str(tmp_path / "ledger.sqlite")
    common = ["learn", "--algorithm", "point", "--private", str(tmp_path / "private"), "--domain", "0:4294967295",
              "--ledger", ledger, "--cluster", thread_cluster_yaml, "--json"]
    assert main([*common, "--out", str(tmp_path / "bad.json"), "--delta", "2"]) != 0
    assert not (tmp_path / "bad.json").exists() and _charges(ledger) == []
    capsys.readouterr()
    assert main([*common, "--out", str(tmp_path / "point.json")]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["released"] == "point" and summary["algorithm"] == "point"
    assert summary["epsilon"] == 1.0 and 0 < summary["proven_delta"] <= 1e-6 and summary["delta_sampler"] == 0
    model = json.loads((tmp_path / "point.json").read_text())
    assert model["hypothesis"] == {"class": "point", "feature": 0, "value": 7777.0}
    queries = tmp_path / "queries"
    queries.mkdir()
    pq.write_table(pa.table({"x": [7_777.0, 1.0], "query_id": [0, 1]}), queries / "q.parquet")
    assert main(["predict", str(tmp_path / "point.json"), str(queries), "--out", str(tmp_path / "pred"),
                 "--cluster", thread_cluster_yaml]) == 0
    predictions = pq.read_table(tmp_path / "pred").sort_by("query_id").column("prediction").to_pylist()
    assert predictions == [1, 0]
    assert _charges(ledger) == [("learn", 1.0, summary["proven_delta"])]


def _charges(ledger: str) -> list[tuple]:
    """The ledger's charges not refunded (none if it was never created)."""
    import contextlib
    import os

    if not os.path.exists(ledger):
        return []
    with contextlib.closing(sqlite3.connect(ledger)) as db:
        return db.execute("SELECT job, epsilon, delta FROM charges WHERE refunded IS NULL").fetchall()


def test_the_example_spec_is_a_learn_point_job() -> None:
    """jobs/examples/learn-point.yaml: every key is one of pcqr learn's options (checked, nothing runs)."""
    import os

    from pcqr.jobs.run import job_arguments

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    job, args = job_arguments(os.path.join(here, "jobs", "examples", "learn-point.yaml"), (), None, False)
    assert job.name == "learn"
    assert args[args.index("--algorithm") + 1] == "point" and args[args.index("--domain") + 1] == "-1000:1000"
