"""``pcqr sanitize --algorithm histogram`` and ``--algorithm cdf`` end to end (issue 31): on the
cluster, counted by the workers, one ledger charge of the certificate, ``--json`` with ``epsilon`` and
``proven_delta``, ``pcqr release-answer`` reading the tables, and refusals before any row is read or
any budget spent."""
from __future__ import annotations

import numpy as np

from pcqr.jobs.cli import main
from pcqr.pipeline.models.synthetic import read_synthetic
from tests.test_sanitize import HEAVY, _charges, _last_json, _private, _thresholds_private


def test_histogram_answers_every_point_query_within_its_bound(tmp_path, capsys, thread_cluster_yaml,
                                                             monkeypatch) -> None:
    """The default algorithm on 200,000 rows (four heavy values, a tail of light ones) in 4 shards
    (SHARD_VALUES lowered to 60,000: each merged by a worker from the parts' picked pieces), eps 1, delta
    1e-6: charged (1, proven_delta) once, proven_delta (the terms summed, rounded up) <= 1e-6; the
    heavy values released; every point query asked (heavy, light, unseen, the domain's ends) within
    the summary's error_bound (6.5e-4 here) of its true share."""
    from pcqr.pipeline.mechanisms import stable_histogram

    monkeypatch.setattr(stable_histogram, "SHARD_VALUES", 60_000)
    private, truth = _private(tmp_path)
    ledger = str(tmp_path / "ledger.sqlite")
    out = str(tmp_path / "points.parquet")
    assert main(["sanitize", "--private", private, "--features", "v", "--domain", "0:4294967295", "--ledger", ledger,
                 "--cluster", thread_cluster_yaml, "--out", out, "--json"]) == 0
    summary = _last_json(capsys)
    assert summary["algorithm"] == "histogram" and summary["class"] == "point" and summary["epsilon"] == 1.0
    assert summary["delta_threshold"] + summary["delta_sampler"] <= summary["proven_delta"] <= 1e-6
    assert summary["privacy"] == "private" and summary["threshold"] == 28 and summary["noise_scale"] == 2.0
    assert _charges(ledger) == [("sanitize", 1.0, summary["proven_delta"])]
    values, weights, metadata = read_synthetic(out)
    assert metadata["algorithm"] == "histogram" and set(HEAVY) <= set(values.tolist())
    assert summary["released_points"] == len(values)
    asked = [*HEAVY, *list(truth)[:100], 0, 5, 9_999, 4_294_967_294]
    assert main(["release-answer", out, *[a for v in asked for a in ("--query", f"value={v}")], "--json"]) == 0
    answers = _last_json(capsys)["answers"]
    errors = [abs(a["answer"] - truth.get(v, 0.0)) for v, a in zip(asked, answers)]
    assert len(answers) == len(asked) and max(errors) <= summary["error_bound"] < 1e-3


def test_cdf_answers_every_threshold_query_within_a_hundredth(tmp_path, capsys, thread_cluster_yaml) -> None:
    """--algorithm cdf on 300,000 rows (40% at 1,000, 30% uniform over [0, 2^32), 30% fractional around
    2^31, taken at ceil(x)), eps 1: pure (proven_delta 0), charged (1, 0) once; 8 levels of 16;
    release-answer's 'x <= theta' and 'x > theta' for 200 thetas (at data values, around the heavy
    value, the domain's ends) within 0.01 of the rows' true share (measured: about 1e-3)."""
    private, x = _thresholds_private(tmp_path, 300_000)
    ledger = str(tmp_path / "ledger.sqlite")
    out = str(tmp_path / "cdf.parquet")
    assert main(["sanitize", "--algorithm", "cdf", "--private", private, "--features", "v", "--domain",
                 "0:4294967295", "--ledger", ledger, "--cluster", thread_cluster_yaml, "--out", out, "--json"]) == 0
    summary = _last_json(capsys)
    assert summary["algorithm"] == "cdf" and summary["class"] == "threshold" and summary["proven_delta"] == 0.0
    assert summary["levels"] == 8 and summary["noise_scale"] == 16.0 and summary["epsilon_opendp_map"] == 1.0
    assert "alpha" not in summary and summary["privacy"] == "private"
    assert _charges(ledger) == [("sanitize", 1.0, 0.0)]
    values, weights, metadata = read_synthetic(out)
    assert metadata["class"] == "threshold" and abs(weights.sum() - 1) < 1e-9 and (weights > 0).all()
    rng = np.random.default_rng(1)
    clipped = np.clip(np.ceil(x), 0, 2**32 - 1)
    thetas = [999, 1_000, 0, 4_294_967_294, *np.floor(rng.choice(clipped, 196)).astype(np.int64).tolist()]
    queries = [a for t in thetas for a in ("--query", f"threshold={t},direction=down")]
    assert main(["release-answer", out, *queries, "--query", "threshold=1000,direction=up", "--json"]) == 0
    answers = [a["answer"] for a in _last_json(capsys)["answers"]]
    truth = [float(np.mean(clipped <= t)) for t in thetas]
    assert max(abs(a - t) for a, t in zip(answers, truth)) <= 0.01
    assert abs(answers[-1] - (1 - answers[1])) < 1e-9  # 'x > 1000' is the rest


def test_refused_in_one_line_before_any_row_is_read_or_budget_spent(tmp_path, capsys, thread_cluster_yaml) -> None:
    """--alpha or --beta with cdf (its error is reported, not set), too few rows for the histogram's
    alpha (the least number in the message), an impossible delta: exit 2, one line, no table, no charge."""
    private, _ = _private(tmp_path, rows=3_000)
    ledger = str(tmp_path / "ledger.sqlite")
    out = tmp_path / "t.parquet"
    base = ["sanitize", "--private", private, "--features", "v", "--domain", "0:4294967295", "--ledger", ledger,
            "--cluster", thread_cluster_yaml, "--out", str(out)]
    for extra, needle in ((["--algorithm", "cdf", "--alpha", "0.01"], "--alpha is not used by --algorithm cdf"),
                          (["--algorithm", "cdf", "--beta", "0.1"], "--beta is not used by --algorithm cdf"),
                          (["--alpha", "0.001"], "needs at least"),
                          (["--delta", "1.5"], "--delta")):
        assert main([*base, *extra]) == 2, extra
        err = capsys.readouterr().err
        assert needle in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists() and _charges(ledger) == []


def test_pcqr_plan_reports_both(capsys) -> None:
    """pcqr plan --without-public-data: the histogram's least certified m (create accepts it, m - 1 is
    refused) and far below SanPoints'; the CDF's 8 levels of scale 16 over 2^32 values, 14 over a
    2^53-wide domain, pure."""
    import json

    import pytest

    from pcqr.pipeline.errors import PcqrError
    from pcqr.pipeline.mechanisms.stable_histogram import HistogramParameters

    assert main(["plan", "--without-public-data", "--epsilon", "1", "--alpha", "0.01", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["algorithms"]
    certified = plan["histogram"]["rows_certified"]["value"]
    HistogramParameters.create(1.0, 1e-6, 0.01, 0.05, certified)
    with pytest.raises(PcqrError, match=f"needs at least {certified:,} rows"):
        HistogramParameters.create(1.0, 1e-6, 0.01, 0.05, certified - 1)
    assert 100 * certified < plan["san_points"]["rows_certified"]["value"]
    assert plan["histogram"]["threshold"]["value"] == 28 and plan["histogram"]["proven_delta"]["value"] <= 1e-6
    assert plan["cdf"]["levels"]["value"] == 8 and plan["cdf"]["noise_scale"]["value"] == 16.0
    assert main(["plan", "--without-public-data", "--epsilon", "2", "--alpha", "0.01", "--domain",
                 "-9007199254740991:9007199254740991", "--json"]) == 0
    wide = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["algorithms"]["cdf"]
    assert wide["levels"]["value"] == 14 and wide["noise_scale"]["value"] == 14.0
