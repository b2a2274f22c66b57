"""Benchmark ``training_speedup``: train_models with 1 and with 2 workers.

Run through benchmarks/run.py (``--only training_speedup``); benchmarks/README.md says what each figure means."""
from __future__ import annotations

import statistics
import time
from typing import Any

from harness import local_client, log, pcqr, temp_dir, write_cluster_yaml


# --------------------------------------------------------------------------- 3. training speed-up


def _task_breakdown(events: list[dict[str, Any]]) -> dict[str, float]:
    """Seconds of compute per task kind, and of transfers, from a Dask task stream."""
    from dask.utils import key_split

    out: dict[str, float] = {}
    for event in events:
        prefix = key_split(event["key"])
        for part in event.get("startstops", ()):
            name = prefix if part["action"] == "compute" else part["action"]
            out[name] = out.get(name, 0.0) + part["stop"] - part["start"]
    return {key: round(value, 3) for key, value in sorted(out.items())}


def bench_training_speedup(quick: bool) -> dict[str, Any]:
    from pcqr.pipeline.data.datasets import open_dataset
    from pcqr.pipeline.models.learners import LearnerSpec
    from pcqr.pipeline.models.subsample import train_models

    rows, features, k = (200_000, 10, 200) if quick else (2_000_000, 10, 200)
    repeats = 5
    learner = LearnerSpec("sklearn.linear_model.LogisticRegression", {})
    result: dict[str, Any] = {
        "rows": rows,
        "features": features,
        "subsamples_k": k,
        "learner": learner.name + " (default parameters)",
        "repeats": repeats,
        "how": "pcqr.pipeline.models.subsample.train_models on a LocalCluster(n_workers=N, threads_per_worker=1, "
        "processes), same data, after one warm-up training (k=20) per cluster; median of the repeats",
        "workers": {},
        "aim_speedup": 1.7,
    }
    with temp_dir("train") as work:
        cluster = str(write_cluster_yaml(work))
        log(f"training_speedup: generating {rows:,} rows x {features} features")
        pcqr(
            work, "generate", "generate", "--kind", "agnostic", "--concept", "halfspace",
            "--rows", str(rows), "--features", str(features), "--queries", "0",
            "--out", "data", "--cluster", cluster,
        )
        dataset = open_dataset(str(work / "data" / "private"), "private", label="label")
        for n_workers in (1, 2):
            log(f"training_speedup: k={k} on {n_workers} worker(s)")
            with local_client(n_workers) as client:
                train_models(client, dataset, 20, learner, seed=1)  # warm-up: imports, page cache
                times, breakdown = [], {}
                for rep in range(repeats):
                    if rep == 0:
                        from distributed import get_task_stream

                        with get_task_stream(client) as stream:
                            t0 = time.perf_counter()
                            ensemble = train_models(client, dataset, k, learner, seed=2 + rep)
                            times.append(time.perf_counter() - t0)
                        breakdown = _task_breakdown(stream.data)
                    else:
                        t0 = time.perf_counter()
                        ensemble = train_models(client, dataset, k, learner, seed=2 + rep)
                        times.append(time.perf_counter() - t0)
                    assert ensemble.size == k
            result["workers"][str(n_workers)] = {
                "seconds_median": statistics.median(times),
                "seconds_all": times,
                "task_seconds_first_repeat": breakdown,
            }
    one, two = result["workers"]["1"]["seconds_median"], result["workers"]["2"]["seconds_median"]
    result["speedup"] = one / two if two else None
    result["meets_aim"] = bool(result["speedup"] and result["speedup"] >= 1.7)
    return result
