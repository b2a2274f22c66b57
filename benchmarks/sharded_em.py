"""Benchmark ``sharded_em``: the sharded exponential mechanism over ~10^7 interval candidates, 1 and 2 workers.

Run through benchmarks/run.py (``--only sharded_em``); benchmarks/README.md says what each figure means."""
from __future__ import annotations

import statistics
import time
from typing import Any

from harness import enumerate_class, enumeration_size, local_client, log, rate


# --------------------------------------------------------------------------- 7. sharded exponential mechanism


def _interval_sample(u: int, n: int, seed: int) -> tuple[Any, Any]:
    """n labelled rows on the u distinct points 0..u-1 (each at least once): 1 inside [u/3, 2u/3), 10% noise."""
    import numpy as np

    rng = np.random.default_rng(seed)
    x = np.concatenate([np.arange(u), rng.integers(0, u, n - u)]).astype(np.float64)
    y = ((x >= u / 3) & (x < 2 * u / 3)) ^ (rng.random(n) < 0.1)
    return x.reshape(-1, 1), y.astype(np.int8)


def bench_sharded_em(quick: bool) -> dict[str, Any]:
    from pcqr.pipeline.mechanisms.exponential import select_hypothesis
    from pcqr.pipeline.privacy.noise import SecureNoise

    # quick: shards of 2^18 so that each worker still gets several shards
    u, n, repeats = (1500 if quick else 4500), 10**5, 3
    shard_size = (1 << 18) if quick else (1 << 20)
    result: dict[str, Any] = {
        "distinct_points_u": u,
        "rows": n,
        "shard_size": shard_size,
        "repeats": repeats,
        "how": "make_class('interval', 1).enumerate on u distinct values (a task), scored against n "
        "labelled rows (a task); timed: select_hypothesis(client, enumeration, data, 1.0, SecureNoise(), "
        "shard_size) on a LocalCluster(n_workers=N, threads_per_worker=1), after one warm-up call; "
        "median of the repeats",
        "workers": {},
        "aim_speedup": 1.7,
    }
    for n_workers in (1, 2):
        log(f"sharded_em: u = {u:,} on {n_workers} worker(s)")
        with local_client(n_workers) as client:
            data = client.submit(_interval_sample, u, n, 3, pure=False)
            enumeration = client.submit(enumerate_class, "interval", 1, data, pure=False)
            size = client.submit(enumeration_size, enumeration, pure=False).result()
            if n_workers > 1:  # both workers hold the (small) data and enumeration before timing
                client.replicate([data, enumeration])
            select_hypothesis(client, enumeration, data, 1.0, SecureNoise(), shard_size)  # warm-up
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                h = select_hypothesis(client, enumeration, data, 1.0, SecureNoise(), shard_size)
                times.append(time.perf_counter() - t0)
        median = statistics.median(times)
        result["candidates"] = size
        result["shards"] = -(-size // shard_size)
        result["workers"][str(n_workers)] = {
            "seconds_median": median,
            "seconds_all": times,
            "candidates_per_second": rate(size, median),
            "chosen": h.to_dict(),
        }
    one, two = result["workers"]["1"]["seconds_median"], result["workers"]["2"]["seconds_median"]
    result["speedup"] = one / two if two else None
    result["meets_aim"] = bool(result["speedup"] and result["speedup"] >= 1.7)
    return result
