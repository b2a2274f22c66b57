"""Benchmark ``driver_memory``: peak RSS of the ``pcqr answer`` driver for two query counts.

Run through benchmarks/run.py (``--only driver_memory``); benchmarks/README.md says what each figure means."""
from __future__ import annotations

import shutil
from typing import Any

from harness import (
    CERTIFIED, CERTIFIED_ROWS, CLUSTER_YAML, certificate_of, copy_session, dir_bytes,
    generate_threshold_data, log, pcqr, pcqr_instrumented, stable_queries, temp_dir,
    write_cluster_yaml,
)


# --------------------------------------------------------------------------- 4. driver memory


def _folder_of(work: Any, files: list[Any], n: int) -> str:
    """A folder of links to the first query files (the stream of about ``n`` queries)."""
    folder = work / "data" / f"stable-queries-{n}"
    folder.mkdir(exist_ok=True)
    for file in files:
        (folder / file.name).symlink_to(file)
    return str(folder)


def bench_driver_memory(quick: bool) -> dict[str, Any]:
    sizes = (10**5, 10**6) if quick else (10**6, 10**7, 10**8)  # issue 32: flat to 10^8
    small, big = sizes[0], sizes[-1]
    rows, features, k = (300_000 if quick else CERTIFIED_ROWS), 5, 3200
    privacy = [*CERTIFIED, "--queries-max", str(2 * big)]
    result: dict[str, Any] = {
        "query_counts": list(sizes),
        "subsamples_k": k,
        "learner": "stump",
        "features": features,
        "private_rows": rows,
        "cluster": CLUSTER_YAML.strip(),
        "parameters": " ".join(privacy),
        "how": "pcqr answer in a fresh Python process; the driver's peak RSS is its own "
        "getrusage(RUSAGE_SELF).ru_maxrss read at exit (after the cluster is closed); "
        "workers_peak is getrusage(RUSAGE_CHILDREN) in that process: the largest peak among "
        "its waited-for descendants, i.e. the Dask worker processes. The driver's peak-RSS mark "
        "is also read and reset (/proc/self/clear_refs) when the coordinator gets its first "
        "batch: driver_peak_before_loop_mb covers start-up (cluster, models, the coordinator's "
        "noise tables), driver_peak_during_loop_mb the answer loop to the end. Every part is voted "
        "inside the loop here (PCQR_BENCH_EARLY_VOTES=off: no early votes on the validation pass)",
        "runs": {},
        "aim": "the driver's answer-loop peak grows at most x1.05 from the smallest to the largest query count",
    }
    with temp_dir("mem") as work:
        cluster = str(write_cluster_yaml(work))
        log(f"driver_memory: generating {big:,} queries ({features} features)")
        gen_s = generate_threshold_data(work, cluster, rows, features, big, "--rows-per-file", str(small))
        result["generate_seconds"] = gen_s
        result.update(stable_queries(work, row_group_rows=100_000))  # batch-sized row groups (README)
        log(f"driver_memory: training k={k} stumps")
        _, train_summary = pcqr(work, "train", "train", "--private", "data/private", "--state", "state0",
                                *privacy, "--cluster", cluster)
        result["certificate"] = certificate_of(train_summary)
        first_file = sorted((work / "data" / "stable-queries").glob("part-*.parquet"))[0]
        files = sorted((work / "data" / "stable-queries").glob("part-*.parquet"))
        for n in sizes:
            queries = str(first_file) if n == small else _folder_of(work, files[:n // small], n)
            log(f"driver_memory: answering {n:,} queries")
            ledger = copy_session(work, "state0", f"state-{n}")
            wall, summary, report = pcqr_instrumented(
                work, f"answer-{n}", "answer", "--state", str(work / f"state-{n}"), "--queries", queries,
                "--log", f"log-{n}", "--cluster", cluster, *ledger,
            )
            total = summary["answered"] + summary["abstained"] + summary["refused"]
            result["runs"][str(n)] = {
                "queries": total,
                "driver_peak_rss_mb": report["maxrss_self_kb"] / 1024,
                "driver_peak_before_loop_mb": (report["peak_before_loop_kb"] or 0) / 1024,
                "driver_peak_during_loop_mb": report["peak_during_loop_kb"] / 1024
                if report["peak_during_loop_kb"] is not None else None,
                "tail_table_build_seconds": report["timings"].get("tail_table_build", {}).get("seconds"),
                "coordinator_seconds": report["timings"].get("coordinator", {}).get("seconds"),
                "release_answers_seconds": report["timings"].get("release_answers", {}).get("seconds"),
                "workers_peak_rss_mb": report["maxrss_children_kb"] / 1024,
                "wall_seconds": wall,
                "answered": summary["answered"],
                "abstained": summary["abstained"],
                "refused": summary["refused"],
                "halted": summary["budget_spent"],
                "batches": summary["batches"],
                "log_mb": dir_bytes(work / f"log-{n}") / 2**20,
            }
            shutil.rmtree(work / f"log-{n}", ignore_errors=True)
    if len(sizes) > 2:
        middle = result["runs"][str(sizes[1])]
        result["loop_ratio_middle_over_small"] = (middle["driver_peak_during_loop_mb"] or 0) / (
            result["runs"][str(small)]["driver_peak_during_loop_mb"] or 1)
    a, b = result["runs"][str(small)], result["runs"][str(big)]
    result["driver_peak_rss_mb_small"] = a["driver_peak_rss_mb"]
    result["driver_peak_rss_mb_big"] = b["driver_peak_rss_mb"]
    result["ratio_big_over_small"] = b["driver_peak_rss_mb"] / a["driver_peak_rss_mb"]
    if a["driver_peak_during_loop_mb"] and b["driver_peak_during_loop_mb"]:
        result["loop_ratio_big_over_small"] = b["driver_peak_during_loop_mb"] / a["driver_peak_during_loop_mb"]
    result["meets_aim"] = bool((result.get("loop_ratio_big_over_small") or 99.0) <= 1.05)  # issue 32: x1.05
    return result
