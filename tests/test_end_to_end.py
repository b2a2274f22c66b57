"""End to end on a local cluster of worker processes, at the issue's test size.

Realizable synthetic data (a threshold on one of 5 features), n = 200,000,
10,000 queries, eps = 4, delta = 1e-6, T = 50, k = 2,000, w = 150: at least 95%
answered with at most 2% error; with label noise 0.1: at least 90% answered,
error on the answered queries at most 0.13. (An independent implementation of
Algorithm 5 gives 99.7% answered at 0.6% error, and 99.6% at 10.6%.)
"""
from __future__ import annotations

import json
import os

import pyarrow.parquet as pq
import pytest

from jobs.cli import main


@pytest.fixture(scope="module")
def process_cluster(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("cluster") / "cluster.yaml"
    path.write_text("pcqr:\n  cluster:\n    backend: local\n    n-workers: 2\n    threads-per-worker: 1\n")
    return str(path)


@pytest.mark.parametrize("noise,min_answered,max_error", [(0.0, 0.95, 0.02), (0.1, 0.90, 0.13)])
def test_issue_size_run(tmp_path, capsys, process_cluster, noise, min_answered, max_error) -> None:
    kind = "agnostic" if noise else "realizable"
    data = tmp_path / "data"
    assert main(["generate", "--kind", kind, "--rows", "200000", "--features", "5", "--queries", "10000",
                 "--noise", str(noise), "--seed", "11", "--out", str(data), "--cluster", process_cluster]) == 0
    capsys.readouterr()
    code = main([
        "answer", "--private", str(data / "private"), "--queries", str(data / "queries"),
        "--truth", str(data / "truth"), "--state", str(tmp_path / "state"), "--log", str(tmp_path / "log"),
        "--epsilon", "4", "--delta", "1e-6", "--cutoff", "50", "--queries-max", "10000",
        "--subsamples", "2000", "--threshold", "150", "--batch-size", "2500",
        "--cluster", process_cluster, "--json",
    ])
    out, err = capsys.readouterr()
    assert code == 0, err
    summary = json.loads(out.strip().splitlines()[-1])
    total = summary["answered"] + summary["abstained"] + summary["refused"]
    assert total == 10_000
    assert summary["answered"] / total >= min_answered, summary
    assert 1 - summary["accuracy"] <= max_error, summary
    assert summary["budget_used"] == summary["abstained"] <= 50
    # the log accounts for every query, once, with the released answers only
    log = pq.read_table(str(tmp_path / "log"))
    assert sorted(log.column("query_id").to_pylist()) == list(range(10_000))
    assert log.column("answer").null_count == summary["abstained"] + summary["refused"]
    assert "models.pkl" in os.listdir(tmp_path / "state") and not any(
        f.endswith(".pkl") for f in os.listdir(tmp_path / "log")
    )
