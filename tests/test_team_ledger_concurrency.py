"""Many processes charge one dataset's budget on a real PostgreSQL ledger at once, some killed with
SIGKILL (issue 30, item 4). The budget is never exceeded, and no committed batch is lost.

Phase 1: 8 ``pcqr train`` processes on one dataset, whose budget admits 2 of them. The first is
killed holding the ledger's lock, its charge written but not committed, while the other 7 queue on
the lock; the server rolls its transaction back.
Phase 2: one admitted session answers from two copies of its state at once. The first copy is killed
just after a batch commit reached the server, before its session.json was saved. It is then resumed:
it takes the server's position if it is still the one that moved it, and is refused if the other
copy moved it first.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from pcqr.pipeline.budget.ledger import Ledger
from pcqr.pipeline.public_log.batches import batch_files
from pcqr.pipeline.public_log.replay import verify_log
from pcqr.pipeline.budget.fingerprint import fingerprint_dataset
from pcqr.pipeline.data.datasets import scan_dataset
from tests.conftest import write_session_data, write_thread_cluster
from tests.fault_injection import PreloadedCli, PreloadedRun, cli_env

# tests/conftest.py's MECHANICS setting: 50 stumps, T = 20 (fast to train: the processes are the test)
SESSION = ["--epsilon", "100", "--delta", "0.001", "--cutoff", "20", "--subsamples", "50", "--gate", "stability",
           "--learner", "stump"]
EPSILON, DELTA, T, ADMITTED, TRAINS = 100.0, 1e-3, 20, 2, 8
#: Where a run halts to be killed: after the server call of a charge (inserted, not committed, the
#: ledger's lock held) or of a batch commit (on the server, before session.json).
CHARGE = ("pcqr.pipeline.budget.postgres_store.PostgresStore", "insert_charge")
COMMIT = ("pcqr.pipeline.budget.postgres_store.PostgresStore", "advance_session")


def _kill_at_stops(halting: dict[Path, PreloadedRun], timeout: float = 120) -> int:
    """SIGKILL each run once it is halted at its stop file (in whatever order they get there: one
    halted holding the ledger's lock keeps the others waiting); returns how many were killed, the
    others having ended first."""
    deadline, killed, waiting = time.monotonic() + timeout, 0, dict(halting)
    while waiting:
        for stop, run in list(waiting.items()):
            if stop.exists():
                os.killpg(run.pid, signal.SIGKILL)
                run.wait()
                killed += 1
                del waiting[stop]
            elif run.poll() is not None:
                del waiting[stop]
        if time.monotonic() > deadline:
            for run in waiting.values():
                os.killpg(run.pid, signal.SIGKILL)
            raise AssertionError(f"{len(waiting)} runs never reached their stop")
        time.sleep(0.01)
    return killed


@pytest.mark.slow
def test_eight_processes_with_kills_never_pass_the_budget_or_lose_a_batch(team_ledger: Any,
                                                                          tmp_path: Path) -> None:
    db = team_ledger
    write_session_data(tmp_path)
    cluster = write_thread_cluster(tmp_path)
    private = str(tmp_path / "private")
    with Ledger(db.admin_url) as owner:  # the budget admits ADMITTED sessions
        found = fingerprint_dataset(scan_dataset(private, "private").files)
        identity = found.identity
        owner.set_budget(identity, private, EPSILON * ADMITTED, DELTA * ADMITTED, None, found.row_sketch, found.rows)
    started: list[PreloadedRun] = []
    cli = PreloadedCli(cli_env(), "train", "answer")

    def start(name: str, argv: list[str], halt: tuple[str, str] | None = None) -> PreloadedRun:
        stop = str(tmp_path / f"stop-{name}")
        started.append(cli.start(argv, stderr=str(tmp_path / f"{name}.err"), halt=halt and (*halt, stop)))
        return started[-1]

    def stderr(name: str) -> str:
        return (tmp_path / f"{name}.err").read_text()

    def train(i: int) -> list[str]:
        return ["train", "--private", private, "--state", str(tmp_path / f"state-{i}"), *SESSION, "--cluster", cluster,
                "--ledger", db.analyst_url]

    def answer(state: str, log: str) -> list[str]:
        return ["answer", "--state", str(tmp_path / state), "--queries", str(tmp_path / "queries"), "--log",
                str(tmp_path / log), "--batch-size", "500", "--cluster", cluster, "--ledger", db.analyst_url, "--json"]

    try:
        # Phase 1: one train halted inside its charge's transaction (the ledger's lock held, its charge
        # written, not committed); seven more start and queue on the lock; the halted one is killed.
        halted = tmp_path / "stop-doomed"
        doomed = start("doomed", train(100), CHARGE)
        while not halted.exists():
            assert doomed.poll() is None, stderr("doomed")
            time.sleep(0.01)
        trains = [start(f"train-{i}", train(i)) for i in range(TRAINS - 1)]
        time.sleep(1)  # they start, fingerprint the data and queue on the lock
        killed = _kill_at_stops({halted: doomed})
        outcomes = [(run.wait(), stderr(f"train-{i}")) for i, run in enumerate(trains)]
        admitted = [i for i, (code, _) in enumerate(outcomes) if code == 0]
        assert killed == 1 and len(admitted) == ADMITTED, outcomes
        assert all("privacy budget of" in err and "exceeded" in err for code, err in outcomes if code != 0)
        with Ledger(db.analyst_url) as ledger:
            charges, spent = ledger.store.charges(identity), ledger.store.spent(identity)
            assert len(charges) == ADMITTED and spent == (pytest.approx(EPSILON * ADMITTED),
                                                           pytest.approx(DELTA * ADMITTED))
            assert {c["pid"] for c in charges} <= {run.pid for run in trains}  # not the killed one's

        # Phase 2: one session answers from two copies of its state at once; one copy is killed just
        # after a batch commit reached the server (before its session.json), then resumed.
        session = admitted[0]
        shutil.copytree(tmp_path / f"state-{session}", tmp_path / "copy")
        answering = start("answer", answer(f"state-{session}", "log"), COMMIT)
        copy = start("copy", answer("copy", "log-copy"))
        killed += _kill_at_stops({tmp_path / "stop-answer": answering})
        copy.wait()
        resumed = start("resumed", answer(f"state-{session}", "log"))
        assert resumed.wait() in (0, 2, 3), stderr("resumed")
    finally:
        for run in started:
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)
                run.wait()
        cli.__exit__()
    assert killed == 2
    with Ledger(db.analyst_url) as ledger:
        session_id = json.loads((tmp_path / f"state-{session}" / "session.json").read_text())["session_id"]
        row = ledger.store.session(session_id)
        assert row is not None and int(row["bottoms"]) <= T
        published = 0
        for log in (tmp_path / "log", tmp_path / "log-copy"):
            if log.exists() and batch_files(str(log)):
                assert verify_log(str(log)).ok  # the chain of each published log holds
                published += len(batch_files(str(log)))
        # every published batch is a committed one, and every committed batch was published
        assert published == int(row["batches"]) > 0, (published, row["batches"])
        assert ledger.store.spent(identity) == spent and ledger.store.verify_chain()["broken"] is None
    # the closing note's figures (pytest -s shows them)
    print(json.dumps({"processes": len(started), "concurrent_trains": TRAINS, "killed": killed,
                      "charges": len(charges), "spent": spent, "batches": int(row["batches"]),
                      "abstentions": int(row["bottoms"]), "T": T}))
