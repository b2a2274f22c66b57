"""Benchmark ``safety_overhead``: one-shot ``pcqr answer --private`` with the ledger and the crash-safe commit on and off.

Run through benchmarks/run.py (``--only safety_overhead``); benchmarks/README.md says what each figure means."""
from __future__ import annotations

import statistics
from typing import Any

from harness import (
    CERTIFIED, CERTIFIED_ROWS, certificate_of, environment, log, pcqr, pcqr_instrumented, rate,
    stable_queries, temp_dir, write_cluster_yaml,
)


def bench_safety_overhead(quick: bool) -> dict[str, Any]:
    """One-shot ``pcqr answer --private`` (ledger charge + training + 10^6 answers) with the ledger
    and the crash-safe commit on, against both off (CHILD_CODE's PCQR_BENCH_SAFETY=off: no ledger
    charge, log batch written straight after the session save). Runs alternate on/off."""
    rows, queries, repeats = (300_000, 10**5, 2) if quick else (CERTIFIED_ROWS, 10**6, 3)
    privacy = [*CERTIFIED, "--queries-max", str(2 * queries)]
    result: dict[str, Any] = {
        "queries": queries, "private_rows": rows, "repeats": repeats, "options": " ".join(privacy),
        "how": "pcqr answer --private (one shot: ledger charge, training, answers) through CHILD_CODE; "
        "loop = seconds inside release_answers; on and off alternate, medians compared",
        "batch_sizes": {},
    }
    with temp_dir("safety") as work:
        cluster = str(write_cluster_yaml(work))
        pcqr(work, "generate", "generate", "--kind", "realizable", "--rows", str(rows), "--features", "5",
             "--queries", str(queries), "--out", "data", "--cluster", cluster)
        result.update(stable_queries(work))
        kept = result["queries_kept"]
        for batch in (100_000, 10_000):
            runs: dict[str, dict[str, list[float]]] = {"on": {"wall": [], "loop": []}, "off": {"wall": [], "loop": []}}
            for r in range(repeats):
                for mode in ("on", "off"):
                    label = f"answer-{batch}-{mode}-{r}"
                    log(f"safety_overhead: batch {batch:,}, {mode}, run {r + 1}")
                    with environment(PCQR_BENCH_SAFETY=mode, PCQR_LEDGER=str(work / "ledger.sqlite")):
                        wall, summary, report = pcqr_instrumented(
                            work, label, "answer", "--private", "data/private", "--queries", "data/stable-queries",
                            "--state", f"state-{label}", "--log", f"log-{label}", "--batch-size", str(batch),
                            *privacy, "--cluster", cluster)
                    runs[mode]["wall"].append(wall)
                    runs[mode]["loop"].append(report["timings"]["release_answers"]["seconds"])
                    result.setdefault("certificate", certificate_of(summary))
            med = {m: {k: statistics.median(v) for k, v in runs[m].items()} for m in runs}
            result["batch_sizes"][str(batch)] = {
                "runs": runs, "median": med,
                "loop_queries_per_second": {m: rate(kept, med[m]["loop"]) for m in med},
                "overhead_loop": med["on"]["loop"] / med["off"]["loop"] - 1,
                "overhead_wall": med["on"]["wall"] / med["off"]["wall"] - 1,
                "answered": summary.get("answered"),
            }
    result["aim_overhead"] = 0.10
    return result
