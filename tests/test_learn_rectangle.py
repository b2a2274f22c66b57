"""``pcqr learn --algorithm rectangle`` (Beimel-Nissim-Stemmer Theorem 3.22, our construction:
docs/privacy.md Mechanism 13; issue 14, item 4): the edge qualities against brute force, the exact
output law through the counting code on neighbouring tiny databases against the certificate of
its 2d RecConcave runs, utility (inside the target, error within alpha), end to end, and the box
model's checked fields."""
from __future__ import annotations

import json
import math
import sqlite3
from fractions import Fraction

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pcqr.jobs.cli import main
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.hypotheses import hypothesis_from_dict
from pcqr.pipeline.hypotheses.box import BoxHypothesis
from pcqr.pipeline.mechanisms.integer_domain import Domain
from pcqr.pipeline.mechanisms.learn_rectangle import (
    cut_quality, cut_size, learn_rectangle, merge_axis_counts, positive_axis_counts,
)
from pcqr.pipeline.mechanisms.rec_concave import RecConcaveParameters
from pcqr.pipeline.privacy.noise import SecureNoise, SeededNoise
from tests.test_learn_thresholds import neighbouring_rows, random_rows
from tests.test_rec_concave import _divergence, exact_law


def _edge_points(x: np.ndarray, y: np.ndarray, domain: Domain, target: int, low_edge: bool) -> list[int]:
    """One feature's edge quality through the workers' code (three parts merged)."""
    parts = [positive_axis_counts((x[i::3, None], y[i::3]), domain) for i in range(3)]
    quality = cut_quality(merge_axis_counts(*parts)[0], domain, target, low_edge)
    return [quality.at(j) for j in range(quality.last + 1)]


def test_edge_quality_against_brute_force() -> None:
    """min(C, 2t - C), C the positives at or below theta (low edge) or above it (high edge), at every
    theta in [lo - 1, hi], on random rows with fractions and values beyond the domain."""
    rng = np.random.default_rng(5)
    for _ in range(200):
        domain, x, y = random_rows(rng)
        t = int(rng.integers(1, 6))
        for low in (True, False):
            brute = []
            for theta in range(domain.lo - 1, domain.hi + 1):
                c = int(np.sum((x <= theta) & (y == 1))) if low else int(np.sum((x > theta) & (y == 1)))
                brute.append(min(c, 2 * t - c))
            assert _edge_points(x, y, domain, t, low) == brute


def test_exact_law_of_both_edges_is_within_the_certificate() -> None:
    """One feature over 0:39 (two runs of two levels: 8 mechanisms), 8 rows, t = 2, eps 8, delta 0.05:
    the joint law of the two edges (independent runs given the data: the product of RecConcave's
    exact laws on the qualities the real counting code builds) over 300 random neighbouring pairs
    has hockey-stick divergence at eps at most the certified delta, and a positive one at eps/8
    (the law is not trivially private: the certificate's eps is doing work)."""
    domain = Domain(0, 39)
    params = RecConcaveParameters.create(8.0, 0.05, domain.size, 8, runs=2)
    certified = params.certificate()["proven_delta"]
    rng = np.random.default_rng(21)

    def law(x: np.ndarray, y: np.ndarray) -> dict:
        low = exact_law(_edge_points(x, y, domain, 2, True), Fraction(1, 2), params, Fraction(2))
        high = exact_law(_edge_points(x, y, domain, 2, False), Fraction(1, 2), params, Fraction(2))
        return {(a, b): p * q for a, p in low.items() for b, q in high.items()}

    worst = worst_small = 0.0
    for _ in range(300):
        x, y, x2, y2 = neighbouring_rows(rng, 8, -2, 42)
        for low in (True, False):  # each edge's quality through the counting code moves by at most 1
            moved = zip(_edge_points(x, y, domain, 2, low), _edge_points(x2, y2, domain, 2, low))
            assert max(abs(p - q) for p, q in moved) <= 1
        a, b = law(x, y), law(x2, y2)
        worst = max(worst, _divergence(a, b, params.epsilon), _divergence(b, a, params.epsilon))
        worst_small = max(worst_small, _divergence(a, b, params.epsilon / 8))
    assert worst <= certified and worst_small > 0


# the secure source, which private runs use; the seeded one's law is tests/test_noise.py's
@pytest.mark.parametrize("noise_factory", [SecureNoise], ids=["secure"])
def test_learn_rectangle_draws_the_exact_law(noise_factory) -> None:
    """3,000 runs of learn_rectangle (one feature over 0:39, 8 rows, t = 2) against the product of
    RecConcave's exact laws for its two edges (the real index -> edge mapping, bottom -> hi):
    chi-square over the (low, high) pairs expected >= 20 times, the rest pooled; false failure 1e-6."""
    from scipy import stats

    from tests.conftest import P_FAIL

    domain = Domain(0, 39)
    params = RecConcaveParameters.create(8.0, 0.05, domain.size, 8, runs=2)
    x = np.array([3.0, 7.0, 12.0, 15.0, 21.0, 26.0, 30.0, 38.0])
    y = np.array([0, 1, 1, 1, 1, 1, 1, 0], dtype=np.int8)
    alpha = 4 * 2 / 8  # t = floor(alpha m / 4d) = 2
    edge = {None: domain.hi}
    low = exact_law(_edge_points(x, y, domain, 2, True), Fraction(1, 2), params, Fraction(2))
    high = exact_law(_edge_points(x, y, domain, 2, False), Fraction(1, 2), params, Fraction(2))
    law: dict = {}
    for a, p in low.items():
        for b, q in high.items():
            key = (edge.get(a, domain.lo - 1 + (a or 0)), edge.get(b, domain.lo - 1 + (b or 0)))
            law[key] = law.get(key, 0.0) + p * q
    counts = merge_axis_counts(positive_axis_counts((x[:, None], y), domain))
    noise = noise_factory()
    trials = 3_000
    seen: dict = {}
    for _ in range(trials):
        box, _ = learn_rectangle(counts, domain, params, alpha, noise)
        key = (int(box.lows[0]), int(box.highs[0]))
        seen[key] = seen.get(key, 0) + 1
    assert set(seen) <= set(law)
    common = [o for o in law if trials * law[o] >= 20]
    rest, expected_rest = trials - sum(seen.get(o, 0) for o in common), trials * (1 - sum(law[o] for o in common))
    observed = [seen.get(o, 0) for o in common] + ([rest] if expected_rest >= 5 else [])
    expected = [trials * law[o] for o in common] + ([expected_rest] if expected_rest >= 5 else [])
    expected = [e * sum(observed) / sum(expected) for e in expected]
    assert stats.chisquare(observed, expected).pvalue > P_FAIL


def _box_data(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    X = rng.integers(0, 1000, (n, 3)).astype(float)
    y = ((X[:, 0] > 200) & (X[:, 0] <= 700) & (X[:, 1] > 100) & (X[:, 1] <= 900)
         & (X[:, 2] > 300) & (X[:, 2] <= 600)).astype(np.int8)
    return X, y


def test_utility_inside_the_target_and_within_alpha() -> None:
    """200,000 rows, a 3-D target box, eps 1, alpha 0.2: every released box lies inside the target (no
    false positive) and errs on at most alpha of the rows, in 5 runs. (At 50,000 rows the edges'
    A_dist tests mostly refuse: the gap they need, 2 (t_A + 1) ~ 700 at eps0 = 0.05, is above 3/16
    of the cut target t = 833.)"""
    rng = np.random.default_rng(9)
    X, y = _box_data(200_000, rng)
    domain = Domain(0, 999)
    counts = merge_axis_counts(positive_axis_counts((X, y), domain))
    params = RecConcaveParameters.create(1.0, 1e-6, domain.size, X.shape[0], runs=6)
    for _ in range(5):
        box, edges = learn_rectangle(counts, domain, params, 0.2, SecureNoise())
        assert edges == 6
        assert all(lo >= t for lo, t in zip(box.lows, (200, 100, 300)))
        assert all(hi <= t for hi, t in zip(box.highs, (700, 900, 600)))
        assert np.mean(box.predict(X) != y) <= 0.2


def test_too_few_rows_and_the_box_record() -> None:
    with pytest.raises(PcqrError, match="needs at least 120 rows"):
        cut_size(100, 3, 0.1)
    box = BoxHypothesis((0, 2), (-math.inf, 1.0), (5.0, math.inf))
    assert hypothesis_from_dict(json.loads(json.dumps(box.to_dict()))) == box
    assert list(box.predict(np.array([[3.0, 9.0, 2.0], [3.0, 9.0, 1.0], [6.0, 0.0, 7.0]]))) == [1, 0, 0]
    for bad in ({"features": [0], "lows": [0.0, 1.0], "highs": [2.0]}, {"features": [], "lows": [], "highs": []},
                {"features": [0], "lows": [float("nan")], "highs": [1.0]}, {"features": [-1], "lows": [0], "highs": [1]},
                {"features": [0], "lows": ["a"], "highs": [1]}):
        with pytest.raises(ValueError):
            hypothesis_from_dict({"class": "box", **bad})


def test_pcqr_learn_rectangle_end_to_end(tmp_path, capsys, thread_cluster_yaml) -> None:
    rng = np.random.default_rng(2)
    X, y = _box_data(200_000, rng)
    (tmp_path / "private").mkdir()
    for i in range(3):
        pq.write_table(pa.table({"a": X[i::3, 0], "b": X[i::3, 1], "c": X[i::3, 2], "label": y[i::3]}),
                       tmp_path / "private" / f"part-{i}.parquet")
    ledger = str(tmp_path / "ledger.sqlite")
    assert main(["learn", "--algorithm", "rectangle", "--private", str(tmp_path / "private"), "--domain", "0:999",
                 "--alpha", "0.2", "--ledger", ledger, "--cluster", thread_cluster_yaml, "--out",
                 str(tmp_path / "box.json"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["dimensions"] == 3 and summary["mechanisms"] == 24 and summary["class"] == "box"
    assert summary["epsilon"] == 1.0 and 0 < summary["proven_delta"] <= 1e-6
    queries = tmp_path / "queries"
    queries.mkdir()
    pq.write_table(pa.table({"a": [450.0, 50.0], "b": [500.0, 500.0], "c": [450.0, 450.0], "query_id": [0, 1]}),
                   queries / "q.parquet")
    assert main(["predict", str(tmp_path / "box.json"), str(queries), "--out", str(tmp_path / "pred"),
                 "--cluster", thread_cluster_yaml]) == 0
    assert pq.read_table(tmp_path / "pred").sort_by("query_id").column("prediction").to_pylist() == [1, 0]
    with sqlite3.connect(ledger) as db:
        assert db.execute("SELECT job, epsilon FROM charges WHERE refunded IS NULL").fetchall() == [("learn", 1.0)]


def test_the_example_spec_is_a_learn_rectangle_job() -> None:
    import os

    from pcqr.jobs.run import job_arguments

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    job, args = job_arguments(os.path.join(here, "jobs", "examples", "learn-rectangle.yaml"), (), None, False)
    assert job.name == "learn" and args[args.index("--algorithm") + 1] == "rectangle"


def test_pcqr_plan_reports_the_rectangle_learner(capsys) -> None:
    """pcqr plan --without-public-data --dimensions d: 2d runs' mechanisms, eps0 and certificate;
    beyond the exact composition reported as none."""
    assert main(["plan", "--without-public-data", "--epsilon", "1", "--alpha", "0.1", "--dimensions", "3",
                 "--domain", "0:999", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["algorithms"]["rectangle"]
    assert plan["mechanisms"]["value"] == 24 and plan["proven_delta"]["value"] <= 1e-6
    assert abs(plan["eps0"]["value"] - RecConcaveParameters.create(1.0, 1e-6, 1000, 1, runs=6).eps0) < 1e-12
    assert main(["plan", "--without-public-data", "--epsilon", "1", "--alpha", "0.1", "--dimensions", "500",
                 "--json"]) == 0
    too_many = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["algorithms"]["rectangle"]
    assert str(too_many["mechanisms"]["value"]).startswith("none")
    assert main(["plan", "--hypothesis", "threshold", "--epsilon", "1", "--alpha", "0.1", "--dimensions", "3"]) == 2
