"""Benchmark ``coordinator``: the SparseVector coordinator alone, on one core.

Run through benchmarks/run.py (``--only coordinator``); benchmarks/README.md says what each figure means."""
from __future__ import annotations

import time
from typing import Any

from harness import log, one_core, rate


# --------------------------------------------------------------------------- 1. coordinator


def vote_counts(n: int, k: int, threshold: float, near_fraction: float, seed: int) -> "Any":
    """Realistic ct(1): mostly near-unanimous, a few percent with gap near the threshold.

    Stable queries (1 - near_fraction): ones ~ Binomial(k, 0.03) or k - that (either
    label, 50/50), so gap = |2 ones - k| is about 0.88 k, far above 2w. Near
    queries: gap uniform on [0, 4w] (the noisy threshold is 2w + noise in gap units).
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    minority = rng.binomial(k, 0.03, size=n)
    ones = np.where(rng.random(n) < 0.5, minority, k - minority)
    near = rng.random(n) < near_fraction
    gaps = rng.integers(0, int(4 * threshold) + 1, size=int(near.sum()))
    signs = np.where(rng.random(gaps.size) < 0.5, -1, 1)
    ones[near] = np.clip((k + signs * gaps) // 2, 0, k)
    return ones.astype(np.int32)


def _coordinator_regime(params: Any, ones: Any, k: int, batch_sizes: tuple[int, ...]) -> dict[str, Any]:
    """Time SparseVector.process over ``ones`` in each batch size (secure noise)."""
    import numpy as np

    from pcqr.pipeline.privacy.noise import SecureNoise
    from pcqr.pipeline.gates.sparse_vector import ABSTAINED, ANSWERED, REFUSED, SparseVector

    total, out = int(ones.size), {}
    for batch in batch_sizes:
        log(f"coordinator: {total:,} queries in batches of {batch:,} (T={params.cutoff})")
        coordinator = SparseVector.create(params, SecureNoise())
        counts = np.zeros(3, dtype=np.int64)
        elapsed, halt_seconds, halt_seen = 0.0, None, None
        for start in range(0, total, batch):
            chunk = ones[start : start + batch]
            t0 = time.perf_counter()
            status, _ = coordinator.process(chunk, k)
            elapsed += time.perf_counter() - t0
            counts += np.bincount(status, minlength=3)
            if coordinator.halted and halt_seconds is None:
                halt_seconds, halt_seen = elapsed, coordinator.state.queries_seen
        tested = coordinator.state.queries_seen
        tested_seconds = halt_seconds if halt_seconds is not None else elapsed
        out[str(batch)] = {
            "seconds": elapsed,
            "queries_per_second": rate(total, elapsed),
            "tested_queries": int(tested),
            "tested_queries_per_second": rate(tested, tested_seconds),
            "fraction_answered": float(counts[ANSWERED] / total),
            "fraction_abstained": float(counts[ABSTAINED] / total),
            "fraction_refused": float(counts[REFUSED] / total),
            "abstentions": int(counts[ABSTAINED]),
            "halted": bool(coordinator.halted),
            "halted_after_queries": int(halt_seen) if halt_seen is not None else None,
            "microseconds_per_abstention": (tested_seconds / counts[ABSTAINED] * 1e6)
            if counts[ABSTAINED] else None,
        }
    return out


def bench_coordinator(quick: bool) -> dict[str, Any]:
    """Two regimes, both certifiable (w is pcqr's smallest certifiable): the paper's (k of
    Algorithm 5, T = 50: abstentions are rare, which is what the sparse vector is for), and an
    abstention-heavy one (T = 10^6 makes lambda ~ 5,400 and w ~ 300,000 >> k = 2,000: every
    query abstains until the T-th)."""
    import numpy as np

    from pcqr.pipeline.gates import sparse_vector
    from pcqr.pipeline.privacy.noise import DiscreteLaplaceTail, SecureNoise
    from pcqr.pipeline.privacy.subsamp import SubSampParameters

    total = 2 * 10**5 if quick else 10**7
    batch_sizes = (10**4, 10**5) if quick else (10**5, 10**6)
    result: dict[str, Any] = {"queries": total, "aim_queries_per_second": 1e7, "regimes": {}}
    paper = SubSampParameters.paper(epsilon=4, delta=1e-6, cutoff=50, queries_max=total, beta=0.05)
    heavy = SubSampParameters.paper(
        epsilon=4, delta=1e-6, cutoff=10**6, queries_max=10**9, beta=0.05, subsamples=2000
    )
    # paper regime: ~40 near-threshold queries in the whole stream, so T = 50 is not reached
    near_paper = 40 / total
    for name, params, near in (("paper", paper, near_paper), ("abstention_heavy", heavy, 0.03)):
        k = params.subsamples
        log(f"coordinator: generating {total:,} vote counts (k={k})")
        ones = vote_counts(total, k, params.threshold, near, seed=12345)
        gap = np.abs(2 * ones.astype(np.int64) - k)
        with one_core() as cpu:
            runs = _coordinator_regime(params, ones, k, batch_sizes)
        result["regimes"][name] = {
            "parameters": {
                "epsilon": params.epsilon, "delta": params.delta, "cutoff_T": params.cutoff,
                "queries_max": params.queries_max, "subsamples_k": k, "threshold_w": params.threshold,
                "lambda": params.lam, "query_noise_scale_gap_units": params.query_noise_scale,
                **params.certificate(),
            },
            "vote_counts": {
                "near_threshold_fraction": near,
                "median_gap": float(np.median(gap)),
                "how": "stable: ones ~ Bin(k, 0.03) or k - Bin(k, 0.03); near: gap ~ U[0, 4w]",
            },
            "cpu_pinned": cpu,
            "by_batch_size": runs,
        }
    # Diagnostics: the cost of the parts of one abstention.
    noise, reps = SecureNoise(), (2000 if quick else 20000)
    tail = DiscreteLaplaceTail(heavy.query_noise_scale)
    a = np.zeros(min(total, 10**6), dtype=np.int64)
    t0 = time.perf_counter()
    for start in range(0, total, a.size):
        tail.draw_at_least(a[: min(a.size, total - start)], noise)
    draw_seconds = time.perf_counter() - t0
    noise.discrete_laplace(heavy.threshold_noise_scale)
    t0 = time.perf_counter()
    for _ in range(reps):
        noise.discrete_laplace(heavy.threshold_noise_scale)
    threshold_us = (time.perf_counter() - t0) / reps * 1e6
    min_stretch = int(getattr(sparse_vector, "_MIN_STRETCH", 64))
    t0 = time.perf_counter()
    for _ in range(reps):
        tail.draw_at_least(a[:min_stretch], noise)
    stretch_us = (time.perf_counter() - t0) / reps * 1e6
    result["diagnostics"] = {
        "no_abstention_ceiling_queries_per_second": rate(total, draw_seconds),
        "no_abstention_ceiling_how": "DiscreteLaplaceTail.draw_at_least alone, batches of 10^6",
        "threshold_draw_microseconds": threshold_us,
        "min_stretch": min_stretch,
        "min_stretch_draw_microseconds": stretch_us,
    }
    main = result["regimes"]["paper"]["by_batch_size"][str(batch_sizes[-1])]
    result["queries_per_second"] = main["queries_per_second"]
    result["fraction_answered"] = main["fraction_answered"]
    result["meets_aim"] = bool(main["queries_per_second"] >= result["aim_queries_per_second"])
    return result
