"""Benchmark ``answer_logistic``: issue 12's end-to-end setting: ``pcqr answer`` with k = 100 logistic
regressions on 20 features, Parquet to Parquet log, 2 local workers, against the same pipeline without
the sparse vector's cost; ~10^6 queries (best of REPEATS runs, all reported) and ~10^7 (the driver's
memory).

Run through benchmarks/run.py (``--only answer_logistic``); benchmarks/README.md says what each figure means."""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from harness import (
    certificate_of, copy_session, generate_threshold_data, log, pcqr, pcqr_instrumented, rate, stable_queries,
    temp_dir, write_cluster_yaml,
)

# k = 100, as issue 12 asks. At T = 20, eps 100, delta 1e-6 the tight profile (Lyu-Su-Li's split)
# certifies w = 23 (proven (50.8, 8.3e-7)): a unanimous query abstains with probability 1.2e-9
# (pcqr.pipeline.privacy.stability.answer_probability), so the stream of 10^6 is answered, not
# refused (a refused batch skips the votes and would flatter the figure). (Before the split, w was
# 32.5, a unanimous query abstained with probability 8.5e-5 at k = 100, and this ran k = 120.)
# eps 100 is a certificate, not meaningful privacy: the work per query is what is measured.
# The stability gate (Algorithm 5), named: without --gate, a non-default --cutoff makes pcqr choose
# the public-guess gate, whose student is refitted on the driver during the first 200,000 answers of
# a session (pcqr.pipeline.gates.public_guess) -- measured separately (GUESS_RUN).
LOGISTIC = ["--epsilon", "100", "--delta", "1e-6", "--cutoff", "20", "--subsamples", "100",
            "--learner", "sklearn.linear_model.LogisticRegression", "--gate", "stability"]
#: One more 10^6-query run on a session trained with the same options but no --gate (pcqr's choice).
GUESS_RUN = [arg for arg in LOGISTIC if arg not in ("--gate", "stability")]
MARGIN = 0.5  # queries this far from the concept's cut: the models agree, abstentions are rare


#: Generated queries per file: ~69% are kept (MARGIN), so one file is the ~10^6-query run.
FILE_ROWS = 1_800_000
#: Row groups of the query files. A Parquet row group is read whole: each concurrent reader (the
#: workers' threads and the driver) holds one, 2^20 rows x 20 features ~ 170 MB at pyarrow's default
#: size. Batch-sized groups keep that small, so the memory figure shows what grows with the stream.
ROW_GROUP_ROWS = 100_000
#: Runs of the 10^6-query command: the machine is shared and runs vary by 10-20%; all are reported.
REPEATS = 3


def bench_answer_logistic(quick: bool) -> dict[str, Any]:
    rows, features = (200_000, 20) if quick else (1_000_000, 20)
    files = 1 if quick else 8  # 8 x 1.8e6 x 0.69: ~10^7 queries, for the memory figure
    file_rows = 200_000 if quick else FILE_ROWS
    with temp_dir("logistic") as work:
        cluster = str(write_cluster_yaml(work))
        log(f"answer_logistic: generating {rows:,} private rows and {files * file_rows:,} queries, {features} features")
        generate_threshold_data(work, cluster, rows, features, files * file_rows, "--rows-per-file", str(file_rows))
        stable = stable_queries(work, MARGIN, ROW_GROUP_ROWS)
        _, train_summary = pcqr(work, "train", "train", "--private", "data/private", "--state", "state",
                                *LOGISTIC, "--queries-max", str(2 * stable["queries_kept"]), "--cluster", cluster)
        first = sorted((work / "data" / "stable-queries").glob("part-*.parquet"))[0]
        runs = [_answer(work, cluster, f"one-{i}", str(first)) for i in range(1 if quick else REPEATS)]
        big = None if quick else _answer(work, cluster, "all", "data/stable-queries")
        _, guess_summary = pcqr(work, "train-guess", "train", "--private", "data/private", "--state", "state-default",
                                *GUESS_RUN, "--queries-max", str(2 * stable["queries_kept"]), "--cluster", cluster)
        guesses = [_answer(work, cluster, f"default-gate-{i}", str(first), source="state-default")
                   for i in range(1 if quick else REPEATS)]
        # the default path's fixed costs (the student's learner imported, its fits up to STUDENT_ROWS
        # labels) spread over ten times the queries
        big_guess = None if quick else _answer(work, cluster, "all-default-gate", "data/stable-queries",
                                               source="state-default")
    best = max(runs, key=lambda r: r["queries_per_second_wall"] or 0)
    guess = max(guesses, key=lambda r: r["queries_per_second_wall"] or 0)
    result: dict[str, Any] = {
        "private_rows": rows,
        "features": features,
        "options": " ".join(LOGISTIC),
        **certificate_of(train_summary),
        **stable,
        "cluster": "local, 2 workers, processes: auto (threads here: linear votes are array work)",
        "row_group_rows": ROW_GROUP_ROWS,
        "runs": runs,
        "queries_per_second_wall_all_runs": [r["queries_per_second_wall"] for r in runs],
        **{key: best[key] for key in ("queries", "queries_per_second_wall", "queries_per_second_loop",
                                      "no_sparse_vector_ceiling_queries_per_second", "ratio_loop_to_ceiling",
                                      "ratio_wall_to_ceiling", "ratio_wall_to_wall_ceiling",
                                      "outside_pass_and_loop_seconds", "ratio_wall_to_pass_and_loop_ceiling",
                                      "timings_seconds",
                                      "driver_answer_loop_peak_mb")},
        "best_of": len(runs),
        "ceiling_how": "queries / (answer-loop seconds - coordinator seconds): the same reads, votes and log "
                       "without the sparse vector",
        "driver_peak_rss_how": "VmHWM of the pcqr process, reset when the coordinator gets its first batch: "
                               "the answer loop's peak, with the in-process workers' memory when the local "
                               "cluster's workers are threads",
        "aim_queries_per_second_wall": 3e5,
        "aim_ratio_to_ceiling": 0.8,  # issue 32: the whole command at least 0.8 of the loop's ceiling
        "aim_ratio_default_gate_to_stability": 0.8,  # issue 32: the default path at least 0.8 of --gate stability's
    }
    result["default_gate"] = {"gate": guess_summary.get("gate"), "why": guess_summary.get("gate_chosen"),
                              "options": " ".join(GUESS_RUN), **guess, "best_of": len(guesses),
                              "queries_per_second_wall_all_runs": [r["queries_per_second_wall"] for r in guesses]}
    result["ratio_default_gate_to_stability_wall"] = (guess["queries_per_second_wall"] or 0) / (
        best["queries_per_second_wall"] or 1)
    if big is not None and big_guess is not None:
        result["default_gate"]["ten_million"] = big_guess
        result["ratio_default_gate_to_stability_wall_ten_million"] = (big_guess["queries_per_second_wall"] or 0) / (
            big["queries_per_second_wall"] or 1)
    if big is not None:
        result["ten_million"] = big
        small_peak, big_peak = best["driver_answer_loop_peak_mb"], big["driver_answer_loop_peak_mb"]
        if small_peak and big_peak:
            result["loop_peak_ratio_big_over_small"] = big_peak / small_peak
    return result


def _answer(work: Path, cluster: str, label: str, queries: str, source: str = "state") -> dict[str, Any]:
    """One ``pcqr answer`` on a copy of the trained session in ``source``; its figures."""
    ledger = copy_session(work, source, f"state-{label}")
    count = _rows(work / queries)
    log(f"answer_logistic: answering {count:,} queries ({label})")
    wall, summary, report = pcqr_instrumented(work, f"answer-{label}", "answer", "--state", f"state-{label}",
                                              "--queries", queries, "--log", f"log-{label}", "--cluster", cluster,
                                              *ledger)
    shutil.rmtree(work / f"log-{label}", ignore_errors=True)
    shutil.rmtree(work / f"state-{label}", ignore_errors=True)
    timings = report["timings"]
    loop = timings.get("release_answers", {}).get("seconds", 0.0)
    coordinator = timings.get("coordinator", {}).get("seconds", 0.0)
    validate = timings.get("validate_queries", {}).get("seconds", 0.0)
    ceiling = rate(count, loop - coordinator) if loop > coordinator else None
    return {
        "queries": count,
        "answered": summary["answered"],
        "abstained": summary["abstained"],
        "refused": summary["refused"],
        "halted": summary["budget_spent"],
        "wall_seconds": wall,
        "queries_per_second_wall": rate(count, wall),
        "loop_seconds": loop,
        "queries_per_second_loop": rate(count, loop),
        "coordinator_seconds": coordinator,
        "no_sparse_vector_ceiling_queries_per_second": ceiling,
        "ratio_loop_to_ceiling": (rate(count, loop) or 0) / ceiling if ceiling else None,
        "ratio_wall_to_ceiling": (rate(count, wall) or 0) / ceiling if ceiling else None,
        # the whole command against the same whole command without the coordinator's time
        "ratio_wall_to_wall_ceiling": (wall - coordinator) / wall if wall > coordinator else None,
        # what the command spends outside the validation pass and the loop: Python's start, imports,
        # the cluster, the session's checks, teardown
        "outside_pass_and_loop_seconds": wall - loop - validate,
        # the whole command against the pass and the loop without the coordinator: since issue 32 the
        # pass reads, hashes and votes a stream's first 2^21 queries, so the loop alone no longer holds
        # the reads and votes the loop's ceiling was defined by
        "ratio_wall_to_pass_and_loop_ceiling": (validate + loop - coordinator) / wall if wall else None,
        "timings_seconds": {key: round(v["seconds"], 3) for key, v in sorted(timings.items())},
        "driver_answer_loop_peak_mb": report["peak_during_loop_kb"] / 1024
        if report["peak_during_loop_kb"] is not None else None,
        "driver_peak_before_loop_mb": (report["peak_before_loop_kb"] or 0) / 1024,
    }


def _rows(path: Path) -> int:
    import pyarrow.parquet as pq

    files = sorted(path.glob("*.parquet")) if path.is_dir() else [path]
    return sum(pq.ParquetFile(str(f)).metadata.num_rows for f in files)
