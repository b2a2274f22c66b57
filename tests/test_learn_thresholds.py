"""``pcqr learn --algorithm learn-thresholds`` (Beimel-Nissim-Stemmer Theorem 3.18; issue 14, item 4):
the workers' counts and the step quality against brute force, the exact output law through that
code on neighbouring tiny databases against the certificate, end to end on the cluster with the
ledger and pcqr predict, and the example spec."""
from __future__ import annotations

import json
import os
import sqlite3
from fractions import Fraction

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pcqr.jobs.cli import main
from pcqr.pipeline.mechanisms.integer_domain import Domain
from pcqr.pipeline.mechanisms.learn_thresholds import (
    learn_thresholds, merge_threshold_counts, threshold_counts, threshold_quality,
)
from pcqr.pipeline.mechanisms.rec_concave import RecConcaveParameters
from pcqr.pipeline.privacy.noise import SecureNoise
from tests.test_rec_concave import _divergence, exact_law


def _brute(x: np.ndarray, y: np.ndarray, domain: Domain, up: bool) -> list[int]:
    """Q(theta) for theta = lo - 1 .. hi: the rows 'x > theta' (up) or 'x <= theta' labels correctly."""
    return [int(np.sum(((x > t) == up) == (y == 1))) for t in range(domain.lo - 1, domain.hi + 1)]


def _quality_points(x: np.ndarray, y: np.ndarray, domain: Domain, up: bool = True) -> list[int]:
    """The learner's Q through the workers' code: counts of three parts merged, then the step quality."""
    parts = [threshold_counts((x[i::3, None], y[i::3]), domain) for i in range(3)]
    quality = threshold_quality(*merge_threshold_counts(*parts), domain, up)
    return [quality.at(j) for j in range(quality.last + 1)]


def random_rows(rng: np.random.Generator) -> tuple[Domain, np.ndarray, np.ndarray]:
    """A small random domain and 1-39 labelled rows on one feature: integers and fractions, some
    beyond the domain on both sides (shared with tests/test_learn_rectangle.py)."""
    lo = int(rng.integers(-20, 20))
    domain = Domain(lo, lo + int(rng.integers(1, 30)))
    n = int(rng.integers(1, 40))
    x = np.where(rng.random(n) < 0.3, rng.uniform(lo - 5, domain.hi + 5, n),
                 rng.integers(lo - 3, domain.hi + 4, n)).astype(float)
    return domain, x, rng.integers(0, 2, n).astype(np.int8)


def neighbouring_rows(rng: np.random.Generator, n: int, low: float, high: float
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """n labelled rows uniform over [low, high] (integers or not), and a neighbour: one row replaced
    (shared with tests/test_learn_rectangle.py)."""
    x = rng.uniform(low, high, n).round(int(rng.integers(0, 2)))
    y = rng.integers(0, 2, n).astype(np.int8)
    x2, y2 = x.copy(), y.copy()
    i = int(rng.integers(0, n))
    x2[i], y2[i] = rng.uniform(low, high), rng.integers(0, 2)
    return x, y, x2, y2


def test_the_step_quality_is_the_correct_count_of_every_threshold() -> None:
    """Random rows (integers, fractions, values beyond the domain on both sides) over a few domains,
    both directions: the step quality equals the brute-force count at every theta."""
    rng = np.random.default_rng(6)
    for _ in range(200):
        domain, x, y = random_rows(rng)
        for up in (True, False):
            assert _quality_points(x, y, domain, up) == _brute(x, y, domain, up)


def test_exact_law_through_the_counting_code_is_within_the_certificate() -> None:
    """Domain 0:39 (40 thresholds: two levels), 6 rows, eps 6, delta 0.05: over 300 random neighbouring
    pairs (one row replaced; values inside, outside and between integers), the exact law of
    RecConcave on the Q the real counting code builds has hockey-stick divergence at eps at most the
    certified delta (the Q of one row's replacement moves by at most 1 everywhere)."""
    domain = Domain(0, 39)
    params = RecConcaveParameters.create(6.0, 0.05, domain.size, 6)
    certified = params.certificate()["proven_delta"]
    rng = np.random.default_rng(12)
    worst = 0.0
    for _ in range(300):
        x, y, x2, y2 = neighbouring_rows(rng, 6, -3, 43)
        q, q2 = _quality_points(x, y, domain), _quality_points(x2, y2, domain)
        assert max(abs(a - b) for a, b in zip(q, q2)) <= 1
        law, law2 = exact_law(q, Fraction(1, 20), params), exact_law(q2, Fraction(1, 20), params)
        worst = max(worst, _divergence(law, law2, params.epsilon), _divergence(law2, law, params.epsilon))
    assert worst <= certified


def test_utility_the_threshold_of_a_realizable_sample() -> None:
    """10,000 rows labelled by 'x > 123456789' over 0:2^32 - 1, eps 1: the released threshold errs
    on at most 5% of the rows in each of 10 runs."""
    rng = np.random.default_rng(1)
    x = rng.integers(0, 2**32, 10_000).astype(float)
    y = (x > 123_456_789).astype(np.int8)
    domain = Domain(0, 2**32 - 1)
    counts = merge_threshold_counts(threshold_counts((x[:, None], y), domain))
    params = RecConcaveParameters.create(1.0, 1e-6, domain.size, x.size)
    for _ in range(10):
        hypothesis, released = learn_thresholds(counts, domain, params, 0.1, SecureNoise())
        assert released and np.mean(hypothesis.predict(x[:, None]) != y) <= 0.05


def test_pcqr_learn_thresholds_end_to_end(tmp_path, capsys, thread_cluster_yaml) -> None:
    """The command on three files: a model pcqr predict serves, the certificate in --json, one charge;
    a refused command (two features) charges nothing."""
    rng = np.random.default_rng(3)
    x = rng.integers(-10**6, 10**6, 30_000).astype(float)
    (tmp_path / "private").mkdir()
    for i in range(3):
        part = x[i::3]
        pq.write_table(pa.table({"x": part, "z": part, "label": (part <= 4_321).astype(np.int8)}),
                       tmp_path / "private" / f"part-{i}.parquet")
    ledger = str(tmp_path / "ledger.sqlite")
    common = ["learn", "--algorithm", "learn-thresholds", "--private", str(tmp_path / "private"),
              "--domain", "-1000000:1000000", "--ledger", ledger, "--cluster", thread_cluster_yaml, "--json"]
    assert main([*common, "--out", str(tmp_path / "bad.json")]) == 2  # x and z: two features
    assert "ONE feature" in capsys.readouterr().err and not (tmp_path / "bad.json").exists()
    assert main([*common, "--features", "x", "--direction", "down", "--out", str(tmp_path / "t.json")]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["released"] == "threshold" and summary["recursion_depth"] == 2  # 2,000,001 -> 21 -> base
    assert summary["epsilon"] == 1.0 and 0 < summary["proven_delta"] <= 1e-6
    model = json.loads((tmp_path / "t.json").read_text())
    # RecConcave at approximation alpha/2 = 0.05: at most 1,500 of the 30,000 rows (density 0.015 a unit)
    # misclassified, so theta within 10^5 of the cut (measured: median 287, 99th percentile ~2,100)
    assert model["hypothesis"]["direction"] == "down" and abs(model["hypothesis"]["threshold"] - 4_321) < 100_000
    queries = tmp_path / "queries"
    queries.mkdir()
    pq.write_table(pa.table({"x": [-5.0e5, 5.0e5], "query_id": [0, 1]}), queries / "q.parquet")
    assert main(["predict", str(tmp_path / "t.json"), str(queries), "--out", str(tmp_path / "pred"),
                 "--cluster", thread_cluster_yaml]) == 0
    assert pq.read_table(tmp_path / "pred").sort_by("query_id").column("prediction").to_pylist() == [1, 0]
    with sqlite3.connect(ledger) as db:
        charges = db.execute("SELECT job, epsilon, delta FROM charges WHERE refunded IS NULL").fetchall()
    assert charges == [("learn", 1.0, summary["proven_delta"])]


def test_the_example_spec_is_a_learn_thresholds_job() -> None:
    from pcqr.jobs.run import job_arguments

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    job, args = job_arguments(os.path.join(here, "jobs", "examples", "learn-thresholds.yaml"), (), None, False)
    assert job.name == "learn" and args[args.index("--algorithm") + 1] == "learn-thresholds"


def test_pcqr_plan_reports_learn_thresholds(capsys) -> None:
    """pcqr plan --without-public-data --domain: RecConcave's depth (log* of the domain), its
    mechanisms, eps0 and Theorem 3.18's rows; a bad domain is refused in one line."""
    for domain, depth in (("0:20", 1), ("0:4294967295", 2), ("-4294967296:4294967295", 3)):
        assert main(["plan", "--without-public-data", "--epsilon", "1", "--alpha", "0.1", "--domain", domain,
                     "--json"]) == 0
        plan = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["algorithms"]["learn_thresholds"]
        assert plan["recursion_depth"]["value"] == depth and plan["mechanisms"]["value"] == 3 * depth - 2
        assert plan["proven_delta"]["value"] <= 1e-6 and plan["rows_needed"]["value"] > 10_000
    assert main(["plan", "--without-public-data", "--epsilon", "1", "--alpha", "0.1", "--domain", "9:1"]) == 2
    assert main(["plan", "--hypothesis", "threshold", "--epsilon", "1", "--alpha", "0.1", "--domain", "0:9"]) == 2
