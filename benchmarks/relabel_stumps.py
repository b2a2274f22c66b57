"""Benchmark ``relabel_stumps``: A_Relabel's exponential mechanism alone: stumps over 20 features, 10^6 and 10^7 rows.

Run through benchmarks/run.py (``--only relabel_stumps``); benchmarks/README.md says what each figure means."""
from __future__ import annotations

import time
from typing import Any

from harness import enumerate_class, enumeration_size, log, rate, reset_peak, run_with_deadline, vmhwm_kb


# --------------------------------------------------------------------------- 6. relabel with stumps


def _stump_sample(n: int, features: int, noise: float, seed: int) -> tuple[Any, Any]:
    """Worker: n rows x features N(0, 1); label x3 > 0.2, flipped with probability ``noise``."""
    import numpy as np

    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, features))
    y = (X[:, 3] > 0.2) ^ (rng.random(n) < noise)
    return X, y.astype(np.int8)


def bench_relabel_stumps(quick: bool) -> dict[str, Any]:
    import resource

    from distributed import Client, LocalCluster
    from distributed import wait as distributed_wait

    from pcqr.pipeline.mechanisms.exponential import select_hypothesis
    from pcqr.pipeline.privacy.noise import SecureNoise

    import math

    import dask

    features, noise = 20, 0.1
    sizes = [10**5, 10**6] if quick else [10**6, 10**7]
    # If the big size does not fit (a worker killed at its memory limit, or the deadline), try
    # these in turn: the largest that fits is measured.
    fallbacks = [] if quick else [5 * 10**6, 2 * 10**6, 15 * 10**5]
    deadline = 600
    result: dict[str, Any] = {
        "features": features,
        "label": "x3 > 0.2 flipped with probability 0.1; features N(0,1), so u_j = n distinct values",
        "how": "LocalCluster(n_workers=2, threads_per_worker=1, memory_limit=10GiB, allowed-failures 0 so "
        "a worker killed at its memory limit fails the size at once); the sample is made by a task (the "
        "driver never holds it); timed: enumeration = make_class('stump', 20).enumerate(X) as a task + "
        "select_hypothesis(client, enumeration, data, 1.0, SecureNoise()) (default shard size 2^20); a "
        "fresh cluster per size; driver peak = VmHWM after resetting it (/proc/self/clear_refs) at the start",
        "deadline_seconds_per_size": deadline,
        "sizes": {},
        "aim_ratio": "<= ~12 for 10x the rows (n log n: 11.7 from 10^6 to 10^7)",
    }
    todo, measured = list(sizes), []
    while todo:
        n = todo.pop(0)
        log(f"relabel_stumps: n' = {n:,} rows x {features} features")
        entry: dict[str, Any] = {}
        with dask.config.set({"distributed.scheduler.allowed-failures": 0}), LocalCluster(
            n_workers=2, threads_per_worker=1, host="127.0.0.1", memory_limit="10GiB",
            dashboard_address=":0", processes=True,
        ) as cluster, Client(cluster) as client:
            data = client.submit(_stump_sample, n, features, noise, 7, pure=False)
            distributed_wait([data])
            rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            reset = reset_peak()
            t0 = time.perf_counter()

            def run() -> tuple[Any, int, float]:
                enumeration = client.submit(enumerate_class, "stump", features, data, pure=False)
                h = select_hypothesis(client, enumeration, data, 1.0, SecureNoise())
                seconds = time.perf_counter() - t0
                return h, client.submit(enumeration_size, enumeration, pure=False).result(), seconds

            try:
                h, size, seconds = run_with_deadline(run, deadline)
                entry.update({
                    "seconds": seconds,
                    "candidates": size,
                    "candidates_per_second": rate(size, seconds),
                    "chosen": h.to_dict(),
                })
                measured.append(n)
            except Exception as exc:
                import concurrent.futures

                kind = "timed out" if isinstance(exc, concurrent.futures.TimeoutError) else "failed"
                entry["error"] = f"{kind} after {time.perf_counter() - t0:.0f} s: {type(exc).__name__}: {exc}"[:500]
                log(f"relabel_stumps: n' = {n:,}: {entry['error']}")
            entry["driver_maxrss_before_mb"] = rss_before / 1024
            entry["driver_maxrss_after_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            entry["driver_peak_during_mb"] = (vmhwm_kb() or 0) / 1024 if reset else None
        result["sizes"][str(n)] = entry
        if "error" in entry and n != sizes[0] and fallbacks:
            todo.append(fallbacks.pop(0))
    if len(measured) >= 2:
        small, big = measured[0], max(measured)
        a, b = result["sizes"][str(small)], result["sizes"][str(big)]
        n_log_n = big * math.log(big) / (small * math.log(small))
        result.update({
            "small_rows": small,
            "big_rows": big,
            "big_is_requested_size": big == sizes[-1],
            "rows_ratio": big / small,
            "ratio_big_over_small": b["seconds"] / a["seconds"],
            "n_log_n_ratio": n_log_n,
            "aim_ratio_for_these_sizes": 12 / 11.67 * n_log_n,
            "driver_peak_during_mb_small_big": [a["driver_peak_during_mb"], b["driver_peak_during_mb"]],
        })
        result["meets_aim"] = bool(result["ratio_big_over_small"] <= result["aim_ratio_for_these_sizes"])
    return result
