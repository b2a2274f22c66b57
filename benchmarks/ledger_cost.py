"""Benchmark ``ledger_cost`` (issue 30, item 6): what the team ledger on a PostgreSQL server costs against
the SQLite file, on this machine. The server is a throwaway one on 127.0.0.1 (tests/postgres_server.py:
fsync on, as a real one).

* ``charge``: one job's charge as a job makes it: open the ledger, charge (one transaction holding
  the ledger's lock, the server's ``charge`` function re-checking the budget and appending to the
  chain), close; median over CHARGES charges of one dataset.
* ``sketch``: storing a dataset's first full row sketch (4,096 pairs; the server checks its form,
  issue 46), as a job does once per dataset after its first charge; median over SKETCHES datasets.
* ``commit``: one batch commit (``SessionBook.commit``: the compare-and-swap on the session's row,
  the server's ``advance_session``) on an open ledger; median over COMMITS commits.
* ``answer``: ``pcqr answer`` of about 10^6 queries (those the models agree on) in batches of 10^5
  (10 commits), k = 100 stumps, the stability gate; a freshly trained session for each run,
  alternately against each backend, REPEATS runs each; the in-process time of the answer loop (release_answers, which holds
  every commit) and the whole command. Throughput = queries / loop seconds; the ratio is the
  server's median over SQLite's (aim: at least 0.9). The runs of one backend spread by 20-30% on
  this shared machine, far more than the commits differ, so ``batch_ratio_from_commits`` also
  gives the ratio the commit costs alone imply for one batch.

Run: ``python benchmarks/run.py --only ledger_cost`` or ``python benchmarks/ledger_cost.py``
(prints the JSON).
"""
from __future__ import annotations

import json
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from harness import (
    ROOT, generate_threshold_data, log, pcqr, pcqr_instrumented, stable_queries, temp_dir, write_cluster_yaml,
)

sys.path.insert(0, str(ROOT))
from tests.postgres_server import PostgresServer, find_postgres  # noqa: E402

CHARGES, COMMITS, SKETCHES, REPEATS = 200, 500, 50, 5
QUERIES, BATCH = 1_000_000, 100_000
# end_to_end's regime: eps 100 (a certificate for measuring work, not meaningful privacy), k = 100
# stumps, the stability gate, m large enough for the stream; the stream is the queries the models
# agree on (harness.stable_queries), so that the session answers them rather than halting at T.
SESSION = ["--epsilon", "100", "--delta", "1e-6", "--cutoff", "20", "--subsamples", "100", "--learner", "stump",
           "--gate", "stability", "--queries-max", "2000000"]


def _median_ms(samples: list[float]) -> float:
    return round(1000 * statistics.median(samples), 3)


def _charges(location: str) -> list[float]:
    from pcqr.pipeline.budget.ledger import Ledger

    seconds = []
    for _ in range(CHARGES):
        started = time.perf_counter()
        with Ledger(location) as ledger:
            ledger.charge("rows:" + "ab" * 32, "bench", "train", 1e-3, 0.0, {"bench": True})
        seconds.append(time.perf_counter() - started)
    return seconds


def bench_ledger_cost(quick: bool = False) -> dict[str, Any]:
    bindir, why = find_postgres()
    if bindir is None:
        return {"skipped": why}
    server = PostgresServer(bindir)
    try:
        server.execute("CREATE ROLE owner LOGIN PASSWORD 'o'", "CREATE ROLE analyst LOGIN PASSWORD 'a'",
                       "CREATE DATABASE bench OWNER owner")
        from pcqr.pipeline.budget.team_ledger import init_ledger

        init_ledger(server.url("owner", "o", "bench"), "analyst")
        with temp_dir("ledger_cost") as work:
            backends = {"sqlite": str(work / "ledger.sqlite"), "postgresql": server.url("analyst", "a", "bench")}
            return _measure(work, backends)
    finally:
        server.close()


def _measure(work: Path, backends: dict[str, str]) -> dict[str, Any]:
    result: dict[str, Any] = {"charges": CHARGES, "commits": COMMITS}
    for name, location in backends.items():
        log(f"ledger_cost: {CHARGES} charges and {COMMITS} commits on {name}")
        result[f"charge_ms_{name}"] = _median_ms(_charges(location))
        result[f"commit_ms_{name}"] = _median_ms(_commit_samples(location))
        result[f"sketch_ms_{name}"] = _median_ms(_sketch_samples(location))
    cluster = write_cluster_yaml(work)
    generate_threshold_data(work, str(cluster), 100_000, 5, int(QUERIES * 1.1))
    result.update(stable_queries(work, row_group_rows=BATCH))
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in backends}
    for repeat in range(REPEATS):
        for name, location in backends.items():  # alternately: the machine's drift hits both alike
            state, log_dir = work / f"state-{name}-{repeat}", work / f"log-{name}-{repeat}"
            pcqr(work, f"train-{name}-{repeat}", "train", "--private", str(work / "data" / "private"), "--state",
                 str(state), *SESSION, "--cluster", str(cluster), "--ledger", location)
            seconds, summary, report = pcqr_instrumented(
                work, f"answer-{name}-{repeat}", "answer", "--state", str(state), "--queries",
                str(work / "data" / "stable-queries"), "--log", str(log_dir), "--batch-size", str(BATCH),
                "--cluster", str(cluster), "--ledger", location)
            loop = report["timings"].get("release_answers", {}).get("seconds", 0.0)
            answered = summary["answered"] + summary["abstained"]
            assert summary["refused"] == 0, summary  # every query went through the gate
            runs[name].append({"command_s": round(seconds, 3), "loop_s": round(loop, 3), "queries": answered,
                               "loop_queries_per_s": round(answered / loop) if loop else 0.0})
            shutil.rmtree(log_dir, ignore_errors=True)
    for name in backends:
        result[f"answer_{name}"] = runs[name]
        result[f"answer_loop_queries_per_s_{name}"] = statistics.median(r["loop_queries_per_s"] for r in runs[name])
        result[f"answer_command_s_{name}"] = statistics.median(r["command_s"] for r in runs[name])
    result["answer_loop_ratio_postgresql_to_sqlite"] = round(
        result["answer_loop_queries_per_s_postgresql"] / result["answer_loop_queries_per_s_sqlite"], 3)
    # what the commits alone cost a batch of BATCH queries, at the median loop rate of each backend
    batch_s = BATCH / result["answer_loop_queries_per_s_sqlite"]
    result["batch_ratio_from_commits"] = round(
        (batch_s + result["commit_ms_sqlite"] / 1000) / (batch_s + result["commit_ms_postgresql"] / 1000), 4)
    return result


def _sketch_samples(location: str) -> list[float]:
    import numpy as np

    from pcqr.pipeline.budget.ledger import Ledger
    from pcqr.pipeline.budget.sketch import SKETCH_SIZE, Sketch

    data, seconds = Sketch.of(np.arange(1, SKETCH_SIZE + 1, dtype=np.uint64)).to_bytes(), []
    with Ledger(location) as ledger:
        for i in range(SKETCHES):
            identity = f"rows:{time.time_ns() + i:064x}"
            ledger.charge(identity, "bench", "train", 1e-3, 0.0, {})  # a role stores sketches of data it charged
            started = time.perf_counter()
            ledger.store.store_sketch(identity, "rows", "", "bench", SKETCH_SIZE, data)
            seconds.append(time.perf_counter() - started)
    return seconds


def _commit_samples(location: str) -> list[float]:
    from pcqr.pipeline.budget.ledger import Ledger
    from pcqr.pipeline.budget.store import Position

    session_id = f"bench-{time.time_ns()}"
    with Ledger(location) as ledger:
        charged = ledger.charge("rows:" + "cd" * 32, "bench", "train", 1e-3, 0.0, {})
        ledger.store.insert_session({
            "session_id": session_id, "identity": "rows:" + "cd" * 32, "charge_id": charged["id"], "cutoff": 10**6,
            "bottoms": 0, "batches": 0, "last_hash": "", "prev_hash": "", "state_path": "/bench", "fixed": "f" * 64,
            "position": '{"bottoms": 0, "queries_seen": 0, "next_batch": 0}', "seeded": 1, "created_at": "t",
            "updated_at": "t", "epsilon": 1e-3, "delta": 0.0})
        at, seconds = Position(0, 0, 0, ""), []
        for i in range(1, COMMITS + 1):
            new = Position(i // 10, i * BATCH, i, f"{i:064x}")
            record = json.dumps({"bottoms": new.bottoms, "queries_seen": new.queries_seen, "next_batch": new.batches,
                                 "last_hash": new.last_hash})
            started = time.perf_counter()
            assert ledger.store.advance_session(session_id, at, new, record)
            seconds.append(time.perf_counter() - started)
            at = new
    return seconds


if __name__ == "__main__":
    print(json.dumps(bench_ledger_cost(), indent=2))
