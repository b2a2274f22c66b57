"""Benchmark ``sspp_intervals``: A_SSPP (semi_private_learner) with intervals: the exponential mechanism over u(u+1)/2 + 1 candidates, 1 and 2 workers.

Run through benchmarks/run.py (``--only sspp_intervals``); benchmarks/README.md says what each figure means."""
from __future__ import annotations

import statistics
import time
from typing import Any

from harness import log, rate


def _interval_rows(n: int, seed: int) -> tuple[Any, Any]:
    """n labelled private rows: x ~ N(0, 1), 1 inside (-0.5, 0.8], labels flipped with probability 0.1."""
    import numpy as np

    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    y = ((x > -0.5) & (x <= 0.8)) ^ (rng.random(n) < 0.1)
    return x.reshape(-1, 1), y.astype(np.int8)


def bench_sspp_intervals(quick: bool) -> dict[str, Any]:
    """A_SSPP (semi_private_learner) with intervals: u public points -> u(u+1)/2 + 1 candidates,
    scored against n private rows held on the workers in parts."""
    import numpy as np
    from distributed import Client, LocalCluster

    from pcqr.pipeline.hypotheses import make_class
    from pcqr.pipeline.mechanisms.sspp import semi_private_learner
    from pcqr.pipeline.privacy.noise import SecureNoise

    u, n, parts, repeats = (600, 10**5, 2, 3) if quick else (2000, 10**6, 2, 3)
    public = np.random.default_rng(1).normal(size=(u, 1))
    hclass = make_class("interval", 1)
    result: dict[str, Any] = {
        "public_points": u, "private_rows": n, "private_parts": parts, "repeats": repeats,
        "how": "semi_private_learner(client, interval class, u public N(0,1) points, private parts (futures "
        "made on the workers), eps 1, SecureNoise()) on a LocalCluster(n_workers=N, threads_per_worker=1); "
        "one warm-up call, then the median of the repeats",
        "workers": {},
    }
    for n_workers in (1, 2):
        log(f"sspp_intervals: u = {u:,}, n = {n:,} on {n_workers} worker(s)")
        with LocalCluster(n_workers=n_workers, threads_per_worker=1, host="127.0.0.1", dashboard_address=":0",
                          processes=True) as cluster, Client(cluster) as client:
            private = [client.submit(_interval_rows, n // parts, seed, pure=False) for seed in range(parts)]
            client.gather(private, errors="raise")  # loaded before timing
            semi_private_learner(client, hclass, public, private, 1.0, SecureNoise())  # warm-up
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                h, candidates = semi_private_learner(client, hclass, public, private, 1.0, SecureNoise())
                times.append(time.perf_counter() - t0)
        median = statistics.median(times)
        result["candidates"] = candidates
        result["workers"][str(n_workers)] = {"seconds_median": median, "seconds_all": times,
                                             "candidates_per_second": rate(candidates, median), "chosen": h.to_dict()}
    one, two = result["workers"]["1"]["seconds_median"], result["workers"]["2"]["seconds_median"]
    result["speedup"] = one / two if two else None
    return result
