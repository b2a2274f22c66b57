"""Benchmark ``end_to_end``: ``pcqr answer`` Parquet -> Parquet log on a local 2-worker cluster.

Run through benchmarks/run.py (``--only end_to_end``); benchmarks/README.md says what each figure means."""
from __future__ import annotations

from typing import Any

from harness import (
    CERTIFIED, CERTIFIED_ROWS, CLUSTER_YAML, certificate_of, copy_session, dir_bytes,
    generate_threshold_data, log, pcqr, pcqr_instrumented, rate, stable_queries, temp_dir,
    write_cluster_yaml,
)


# --------------------------------------------------------------------------- 2. end to end


def bench_end_to_end(quick: bool) -> dict[str, Any]:
    rows, features, queries = (300_000, 5, 10**5) if quick else (CERTIFIED_ROWS, 5, 10**6)
    k = 3200
    privacy = [*CERTIFIED, "--queries-max", str(2 * queries)]
    learner = "stump"
    with temp_dir("e2e") as work:
        cluster = str(write_cluster_yaml(work))
        log(f"end_to_end: generating {rows:,} private rows, {queries:,} queries, {features} features")
        gen_s = generate_threshold_data(work, cluster, rows, features, queries)
        stable = stable_queries(work)
        queries = stable["queries_kept"]
        log(f"end_to_end: training k={k} {learner}")
        train_s, train_summary = pcqr(
            work, "train", "train", "--private", "data/private", "--state", "state",
            *privacy, "--cluster", cluster,
        )
        unfiltered_ledger = copy_session(work, "state", "state-unfiltered")
        log(f"end_to_end: answering {queries:,} queries")
        answer_s, summary, report = pcqr_instrumented(
            work, "answer", "answer", "--state", "state", "--queries", "data/stable-queries",
            "--log", "log", "--cluster", cluster,
        )
        log_bytes = dir_bytes(work / "log")
        query_bytes = dir_bytes(work / "data" / "queries")
        log(f"end_to_end: the same trained session on all {stable['queries_generated']:,} generated queries")
        _, full = pcqr(work, "answer-unfiltered", "answer", "--state", "state-unfiltered", "--queries",
                       "data/queries", "--log", "log-unfiltered", "--cluster", cluster,
                       *unfiltered_ledger)
    t = report["timings"]
    release = t.get("release_answers", {}).get("seconds", 0.0)
    coordinator = t.get("coordinator", {}).get("seconds", 0.0)
    inside = {key: round(v["seconds"], 3) for key, v in sorted(t.items())}
    return {
        "queries": queries,
        "private_rows": rows,
        "features": features,
        "subsamples_k": k,
        "learner": learner,
        "cluster": CLUSTER_YAML.strip(),
        "parameters": {
            "command_options": " ".join(privacy),
            "lambda": train_summary.get("lambda"),
            "why": "pcqr demo's certifiable regime (w the smallest certifiable) on a stream of queries "
            "the models agree on (stable_queries): see stable_queries for why",
            **certificate_of(train_summary),
            **stable,
        },
        "generate_seconds": gen_s,
        "train_seconds": train_s,
        "answer_wall_seconds": answer_s,
        "answer_queries_per_second_wall": rate(queries, answer_s),
        "answer_in_process_seconds": release,
        "answer_queries_per_second_in_process": rate(queries, release),
        "in_process_how": "time inside pcqr.pipeline.session.query_release.release_answers (after cluster start, "
        "model load and the validation pass)",
        "coordinator_seconds": coordinator,
        "coordinator_share_of_in_process": coordinator / release if release else None,
        "queries_per_second_outside_coordinator": rate(queries, release - coordinator)
        if release and coordinator is not None else None,
        "outside_coordinator_how": "queries / (in-process seconds - coordinator seconds): the pipeline "
        "(reading, votes, log) without the abstention-dominated sparse-vector cost",
        "timings_seconds": inside,
        "batches": summary.get("batches"),
        "answered": summary.get("answered"),
        "abstained": summary.get("abstained"),
        "refused": summary.get("refused"),
        "fraction_answered": summary["answered"] / queries,
        "halted": summary.get("budget_spent"),
        "query_mb": query_bytes / 2**20,
        "log_mb": log_bytes / 2**20,
        "unfiltered_stream": {
            "how": "a copy of the same trained state answering every generated query, near-boundary ones "
            "included (not timed): where a certifiable session stops",
            "queries": stable["queries_generated"],
            **{key: full.get(key) for key in ("answered", "abstained", "refused")},
            "halted": full.get("budget_spent"),
            "halted_after_queries": full["answered"] + full["abstained"] if full.get("budget_spent") else None,
        },
        "aim_queries_per_second": 2e5,
        "meets_aim": bool((rate(queries, answer_s) or 0) >= 2e5),
    }
