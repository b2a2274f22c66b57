"""Benchmark ``answer_logistic``: issue 12's end-to-end setting: ``pcqr answer`` with k = 120 logistic
regressions (issue 12 says 100: see LOGISTIC for why 120) on 20 features, Parquet to Parquet log, 2 local worker processes, against the same
pipeline without the sparse vector's cost.

Run through benchmarks/run.py (``--only answer_logistic``); benchmarks/README.md says what each figure means."""
from __future__ import annotations

from typing import Any

from harness import (
    certificate_of, generate_threshold_data, log, pcqr, pcqr_instrumented, rate, stable_queries, temp_dir,
    write_cluster_yaml,
)

# Issue 12 asks for k = 100 logistic models. At k = 100 no certifiable setting answers a stream of
# 10^6: the largest eps pcqr certifies at T = 20 (100, delta 1e-6: w = 32.5, lambda 0.96) still
# makes a unanimous query abstain with probability 8.5e-5, so T = 20 is spent after ~2.4 x 10^5
# queries and the rest are refused (which skips the votes and flatters the figure). k = 120 gives
# 4.8e-7 (about one abstention per 2 x 10^6 queries): the work per query is 1.2x issue 12's.
# eps 100 is a certificate (proven (41.5, 9.2e-7)), not meaningful privacy.
LOGISTIC = ["--epsilon", "100", "--delta", "1e-6", "--cutoff", "20", "--subsamples", "120",
            "--learner", "sklearn.linear_model.LogisticRegression"]
MARGIN = 0.5  # queries this far from the concept's cut: the models agree, abstentions are rare


def bench_answer_logistic(quick: bool) -> dict[str, Any]:
    rows, features, generated = (200_000, 20, 200_000) if quick else (1_000_000, 20, 1_800_000)
    with temp_dir("logistic") as work:
        cluster = str(write_cluster_yaml(work))
        log(f"answer_logistic: generating {rows:,} private rows and {generated:,} queries, {features} features")
        generate_threshold_data(work, cluster, rows, features, generated)
        stable = stable_queries(work, MARGIN)
        queries = stable["queries_kept"]
        _, train_summary = pcqr(work, "train", "train", "--private", "data/private", "--state", "state",
                                *LOGISTIC, "--queries-max", str(2 * queries), "--cluster", cluster)
        log(f"answer_logistic: answering {queries:,} queries")
        wall, summary, report = pcqr_instrumented(work, "answer", "answer", "--state", "state", "--queries",
                                                  "data/stable-queries", "--log", "log", "--cluster", cluster)
    timings = report["timings"]
    loop = timings.get("release_answers", {}).get("seconds", 0.0)
    coordinator = timings.get("coordinator", {}).get("seconds", 0.0)
    ceiling = rate(queries, loop - coordinator) if loop > coordinator else None
    return {
        "queries": queries,
        "private_rows": rows,
        "features": features,
        "options": " ".join(LOGISTIC),
        **certificate_of(train_summary),
        **stable,
        "answered": summary["answered"],
        "abstained": summary["abstained"],
        "refused": summary["refused"],
        "halted": summary["budget_spent"],
        "wall_seconds": wall,
        "queries_per_second_wall": rate(queries, wall),
        "loop_seconds": loop,
        "queries_per_second_loop": rate(queries, loop),
        "coordinator_seconds": coordinator,
        "no_sparse_vector_ceiling_queries_per_second": ceiling,
        "ceiling_how": "queries / (answer-loop seconds - coordinator seconds): the same reads, votes and log "
                       "without the sparse vector",
        "ratio_loop_to_ceiling": (rate(queries, loop) or 0) / ceiling if ceiling else None,
        "ratio_wall_to_ceiling": (rate(queries, wall) or 0) / ceiling if ceiling else None,
        "timings_seconds": {key: round(v["seconds"], 3) for key, v in sorted(timings.items())},
        "driver_peak_rss_mb": report["maxrss_self_kb"] / 1024,
        "driver_peak_rss_how": "ru_maxrss of the pcqr process, floored by the benchmark parent's peak at "
                               "fork (Linux carries it across exec); the answer loop's own peak is below",
        "driver_answer_loop_peak_mb": report["peak_during_loop_kb"] / 1024
        if report["peak_during_loop_kb"] is not None else None,
        "aim_queries_per_second_wall": 3e5,
        "aim_ratio_to_ceiling": 0.9,
    }
