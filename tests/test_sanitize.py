"""``pcqr sanitize --algorithm san-points`` and ``pcqr release-answer`` from its synthetic database
(issue 14, item 5): end to end on the cluster with the certificate and the ledger, every point query
within alpha, refusals before any row is read or any budget spent, the example spec, and
``pcqr generate --integer-scale``."""
from __future__ import annotations

import json
import os
import sqlite3

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pcqr.jobs.cli import main
from pcqr.pipeline.data.synthetic import make_spec
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.models.synthetic import read_synthetic

#: Shares of the private rows: four heavy values and a tail of light ones (each far below alpha).
HEAVY = {3: 0.30, 1_000: 0.25, 77_777: 0.15, 4_294_967_295: 0.10}


def _private(tmp_path, rows: int = 200_000) -> tuple[str, dict[int, float]]:
    """Three files of one integer column ``v`` (and a label the sanitizer ignores); the true shares."""
    rng = np.random.default_rng(4)
    heavy = np.repeat(np.array(list(HEAVY), dtype=np.int64), [int(s * rows) for s in HEAVY.values()])
    light = rng.integers(10_000, 60_000, rows - heavy.size)
    x = rng.permutation(np.concatenate([heavy, light]))
    folder = tmp_path / "private"
    folder.mkdir()
    for i in range(3):
        part = x[i::3]
        pq.write_table(pa.table({"v": part.astype(float), "label": np.zeros(part.size, np.int8)}),
                       folder / f"part-{i}.parquet")
    values, counts = np.unique(x, return_counts=True)
    return str(folder), dict(zip(values.tolist(), (counts / rows).tolist()))


def _charges(ledger: str) -> list[tuple]:
    if not os.path.exists(ledger):
        return []
    with sqlite3.connect(ledger) as db:
        return db.execute("SELECT job, epsilon, delta FROM charges WHERE refunded IS NULL").fetchall()


def _last_json(capsys) -> dict:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_sanitize_end_to_end_every_point_query_within_alpha(tmp_path, capsys, thread_cluster_yaml) -> None:
    """200,000 rows, eps 1, delta 1e-6, alpha 0.2: the summary's certificate (epsilon, proven_delta),
    one charge; the table's every point query (the four heavy values, 200 light ones, unseen values
    and the domain's ends) within alpha of its true share. The theorem allows a beta = 0.05 failure;
    here the margins are thousands of rows against noise scales of ~20 and ~80 (a failure is far
    below 1e-9)."""
    private, truth = _private(tmp_path)
    ledger = str(tmp_path / "ledger.sqlite")
    out = str(tmp_path / "points.parquet")
    assert main(["sanitize", "--algorithm", "san-points", "--private", private, "--features", "v", "--domain", "0:4294967295", "--alpha", "0.2",
                 "--ledger", ledger, "--cluster", thread_cluster_yaml, "--out", out, "--json"]) == 0
    summary = _last_json(capsys)
    assert summary["algorithm"] == "san-points" and summary["epsilon"] == 1.0
    assert 0 < summary["proven_delta"] <= 1e-6 and summary["rounds"] == 10
    assert summary["rows_certified"] <= 200_000 and summary["privacy"] == "private"
    assert _charges(ledger) == [("sanitize", 1.0, summary["proven_delta"])]
    values, weights, metadata = read_synthetic(out)
    assert metadata["class"] == "point" and metadata["features"] == ["v"] and metadata["proven_delta"] <= 1e-6
    assert set(HEAVY) <= set(values.tolist()) and ((weights >= 0) & (weights <= 1)).all()
    assert summary["released_points"] == len(values)
    asked = [*HEAVY, *list(truth)[:200], 0, 5, 9_999, 4_294_967_294]
    assert main(["release-answer", out, *[a for v in asked for a in ("--query", f"value={v}")], "--json"]) == 0
    answers = _last_json(capsys)["answers"]
    errors = [abs(a["answer"] - truth.get(v, 0.0)) for v, a in zip(asked, answers)]
    assert len(answers) == len(asked) and max(errors) <= 0.2


def test_refused_before_any_row_is_read_or_budget_spent(tmp_path, capsys, thread_cluster_yaml) -> None:
    """Too few rows for alpha (the least certified number in the message), two feature columns, a bad
    domain: exit 2, one line, no table, no charge."""
    private, _ = _private(tmp_path, rows=30_000)
    ledger = str(tmp_path / "ledger.sqlite")
    out = tmp_path / "points.parquet"
    base = ["sanitize", "--algorithm", "san-points", "--private", private, "--domain", "0:4294967295", "--ledger", ledger,
            "--cluster", thread_cluster_yaml, "--out", str(out)]
    for extra, needle in ((["--features", "v"], "needs at least 148,161 rows"),
                          ([], "ONE feature"),
                          (["--features", "v", "--alpha", "0.5", "--domain", "9:1"], "--domain 9:1"),
                          (["--features", "v", "--alpha", "0.5", "--beta", "0"], "--beta")):
        assert main([*base, *extra]) == 2, extra
        assert needle in capsys.readouterr().err
    assert not out.exists() and _charges(ledger) == []


def _thresholds_private(tmp_path, rows: int) -> tuple[str, np.ndarray]:
    """Three files of one column ``v``: 40% at 1,000, 30% uniform integers over [0, 2^32), 30%
    fractional values around 2^31 (taken at ceil(v)); the rows."""
    rng = np.random.default_rng(8)
    x = rng.permutation(np.concatenate([np.full(int(0.4 * rows), 1_000.0),
                                        rng.integers(0, 2**32, int(0.3 * rows)).astype(float),
                                        2.0**31 + 1e5 * rng.standard_normal(rows - int(0.4 * rows) - int(0.3 * rows))]))
    folder = tmp_path / "private"
    folder.mkdir()
    for i in range(3):
        pq.write_table(pa.table({"v": x[i::3]}), folder / f"part-{i}.parquet")
    return str(folder), x


def test_san_thresholds_end_to_end_every_threshold_query_within_alpha(tmp_path, capsys, thread_cluster_yaml) -> None:
    """pcqr sanitize --algorithm san-thresholds on 300,000 rows (eps 8, alpha 0.9 over 2^32 values:
    86 calls of 4 mechanisms; 275,343 rows certified): the summary's certificate, one charge of it;
    pcqr release-answer answers 'x <= theta' and 'x > theta' from the table (the weights at or below
    theta, above theta: checked against the table itself), each within alpha of the rows' true
    share (the table's largest error measured here is about 0.1)."""
    private, x = _thresholds_private(tmp_path, 300_000)
    ledger = str(tmp_path / "ledger.sqlite")
    out = str(tmp_path / "cdf.parquet")
    assert main(["sanitize", "--algorithm", "san-thresholds", "--private", private, "--features", "v", "--domain",
                 "0:4294967295", "--epsilon", "8", "--alpha", "0.9", "--ledger", ledger, "--cluster",
                 thread_cluster_yaml, "--out", out, "--json"]) == 0
    summary = _last_json(capsys)
    assert summary["algorithm"] == "san-thresholds" and summary["class"] == "threshold"
    assert summary["calls"] == 86 and summary["mechanisms"] == 344 and summary["recursion_depth"] == 1
    assert summary["rows_certified"] == 275_343 and 0 < summary["proven_delta"] <= 1e-6
    assert summary["privacy"] == "private" and summary["paper_rows"] > summary["rows_certified"]
    assert _charges(ledger) == [("sanitize", 8.0, summary["proven_delta"])]
    values, weights, metadata = read_synthetic(out)
    assert metadata["class"] == "threshold" and metadata["algorithm"] == "san-thresholds"
    assert summary["released_points"] == len(values) == len(set(values.tolist())) >= 1
    assert ((weights >= 0) & (weights <= 1)).all() and (values >= 0).all() and (values <= 2**32 - 1).all()
    thetas = [0, 999, 1_000, 2**31 - 1, 2**31, 2**31 + 100_000, 3_000_000_000, 2**32 - 2]
    asked = [a for t in thetas for a in ("--query", f"threshold={t},direction=down", "--query", f"threshold={t}")]
    assert main(["release-answer", out, *asked, "--json"]) == 0
    answers = [a["answer"] for a in _last_json(capsys)["answers"]]
    for i, theta in enumerate(thetas):
        below, above = answers[2 * i], answers[2 * i + 1]
        assert below == pytest.approx(weights[values <= theta].sum(), abs=1e-12)
        assert above == pytest.approx(weights[values > theta].sum(), abs=1e-12)
        assert abs(below - np.mean(x <= theta)) <= 0.9 and abs(above - np.mean(x > theta)) <= 0.9


def test_san_thresholds_refused_before_any_row_is_read_or_budget_spent(tmp_path, capsys, thread_cluster_yaml) -> None:
    """Too few rows (the least certified number in the message), an alpha beyond the exact
    composition (the smallest that fits), a domain beyond +-(2^53 - 1): exit 2, one line, no table,
    no charge."""
    private, _ = _thresholds_private(tmp_path, 30_000)
    ledger = str(tmp_path / "ledger.sqlite")
    out = tmp_path / "cdf.parquet"
    base = ["sanitize", "--algorithm", "san-thresholds", "--private", private, "--features", "v", "--ledger", ledger,
            "--cluster", thread_cluster_yaml, "--out", str(out)]
    for extra, needle in ((["--domain", "0:4294967295", "--alpha", "0.5"], "needs at least 4,477,441 rows"),
                          (["--domain", "0:4294967295", "--alpha", "0.15"], "--alpha must be at least 0.154"),
                          (["--domain", "0:4294967296", "--alpha", "0.25"], "--alpha must be at least 0.2702"),
                          (["--domain", "0:9007199254740992"], "--domain")):
        assert main([*base, *extra]) == 2, extra
        assert needle in capsys.readouterr().err
    assert not out.exists() and _charges(ledger) == []


def test_release_answer_from_a_synthetic_database(tmp_path, capsys) -> None:
    """Weights summed per value (a value listed twice counts twice); only point queries with a
    value; no --public; a file that is not a synthetic database is named."""
    from pcqr.pipeline.models.synthetic import write_synthetic

    table = str(tmp_path / "t.parquet")
    write_synthetic(table, "v", [5, 9, 5], [0.25, 0.5, 0.125], True, **{"class": "point"})
    assert main(["release-answer", table, "--query", "value=5", "--query", '{"value": 9}', "--query", "value=6",
                 "--json"]) == 0
    assert [a["answer"] for a in _last_json(capsys)["answers"]] == [0.375, 0.5, 0.0]
    for query, needle in (("threshold=3", "not a field of a point query"), ("feature=v", "needs value"),
                          ("value=x", "value")):
        assert main(["release-answer", table, "--query", query]) == 2
        assert needle in capsys.readouterr().err
    assert main(["release-answer", table, "--query", "value=5", "--public", table]) == 2
    assert "needs no public data" in capsys.readouterr().err
    pq.write_table(pa.table({"v": [1.0]}), tmp_path / "plain.parquet")
    assert main(["release-answer", str(tmp_path / "plain.parquet"), "--query", "value=1"]) == 2
    assert "not a pcqr release table" in capsys.readouterr().err
    with pytest.raises(PcqrError, match="not a pcqr synthetic database"):
        read_synthetic(str(tmp_path / "plain.parquet"))


@pytest.mark.parametrize("name", ["points", "thresholds"])
def test_the_example_spec_is_a_sanitize_job(name: str) -> None:
    """jobs/examples/sanitize-points.yaml and sanitize-thresholds.yaml: every key is one of pcqr
    sanitize's options (checked, nothing runs)."""
    from pcqr.jobs.run import job_arguments

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    job, args = job_arguments(os.path.join(here, "jobs", "examples", f"sanitize-{name}.yaml"), (), None, False)
    assert job.name == "sanitize" and args[args.index("--algorithm") + 1] == f"san-{name}"


def test_generate_integer_scale() -> None:
    """--integer-scale sets x0 = floor(S z) for the point (default 100) and threshold (default none:
    continuous) concepts only, S in (0, 2^40]; the concept labels the integer x0."""
    from pcqr.pipeline.data.synthetic import concept_from_seed, make_chunk

    assert make_spec("realizable", "point", 10, 1, 0, 0, integer_scale=2.0).integer_scale == 2.0
    assert make_spec("realizable", "point", 10, 1, 0, 0).integer_scale == 100.0
    assert make_spec("realizable", "threshold", 10, 1, 0, 0).integer_scale is None
    for concept, scale in (("xor", 2.0), ("point", 0.0), ("point", float("nan")), ("point", 2.0**41)):
        with pytest.raises(PcqrError, match="--integer-scale"):
            make_spec("realizable", concept, 10, 2, 0, 0, integer_scale=scale)
    concept = concept_from_seed("threshold", 1, 4)
    table = make_chunk("realizable", concept, 1_000, 1, 0.0, np.random.SeedSequence(1), 50.0)
    x, y = table.column("x0").to_numpy(), table.column("label").to_numpy()
    assert (x == np.floor(x)).all() and ((x > concept.bias) == (y == 1)).all()
