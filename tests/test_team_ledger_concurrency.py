"""Many processes charge one dataset's budget on a real PostgreSQL ledger at once, some killed with
SIGKILL (issue 30, item 4). The budget is never exceeded, and no committed batch is lost.

Phase 1: 8 ``pcqr train`` processes on one dataset, whose budget admits 2 of them. Two more
processes are killed holding the ledger's lock, their charge inserted but not committed; the
server rolls their transactions back.
Phase 2: each trained session answers from two copies of its state at once (4 ``pcqr answer``
processes). One process of each pair is killed just after a batch commit reached the server, before
its session.json was saved. It is then resumed: it takes the server's position if it is still the
one that moved it, and is refused if the other copy moved it first.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pcqr.pipeline.budget.ledger import Ledger
from pcqr.pipeline.public_log.batches import batch_files
from pcqr.pipeline.public_log.replay import verify_log
from pcqr.pipeline.budget.team_ledger import init_ledger
from tests.conftest import write_session_data, write_thread_cluster

ROOT = Path(__file__).resolve().parents[1]
# tests/conftest.py's MECHANICS setting: 50 stumps, T = 20 (fast to train: the processes are the test)
SESSION = ["--epsilon", "100", "--delta", "0.001", "--cutoff", "20", "--subsamples", "50", "--gate", "stability",
           "--learner", "stump"]
EPSILON, DELTA, T, ADMITTED, TRAINS = 100.0, 1e-3, 20, 2, 8
# pcqr's command line in a child; with a stop file, it halts (and waits to be killed) inside the
# ledger method named, after the server call: a charge inserted but not committed ("charge"), or
# a batch committed on the server before session.json ("commit").
CHILD = """
import os, sys, time
from pcqr.jobs.cli import main
from pcqr.pipeline.budget import postgres_store
stop, where, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
if where != "none":
    name = {"charge": "insert_charge", "commit": "advance_session"}[where]
    original = getattr(postgres_store.PostgresStore, name)
    def halting(self, *args):
        result = original(self, *args)
        open(stop, "w").close()
        while True:
            time.sleep(1)
    setattr(postgres_store.PostgresStore, name, halting)
sys.exit(main(argv))
"""


def _start(stop: Path, where: str, argv: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", CHILD, str(stop), where, *argv], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _kill_at_stops(halting: dict[Path, subprocess.Popen[str]], timeout: float = 120) -> int:
    """SIGKILL each process once it is halted at its stop file (in whatever order they get there: one
    halted holding the ledger's lock keeps the others waiting); returns how many were killed, the
    others having ended first."""
    deadline, killed, waiting = time.monotonic() + timeout, 0, dict(halting)
    while waiting:
        for stop, proc in list(waiting.items()):
            if stop.exists():
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=30)
                killed += 1
                del waiting[stop]
            elif proc.poll() is not None:
                del waiting[stop]
        if time.monotonic() > deadline:
            for proc in waiting.values():
                proc.kill()
            raise AssertionError(f"{len(waiting)} processes never reached their stop")
        time.sleep(0.01)
    return killed


@pytest.mark.slow
def test_eight_trains_and_six_answers_with_kills_never_pass_the_budget_or_lose_a_batch(
        postgres_database: Any, tmp_path: Path) -> None:
    db = postgres_database
    init_ledger(db.admin_url, db.analyst_url.split("//")[1].split(":")[0])
    write_session_data(tmp_path)
    cluster = write_thread_cluster(tmp_path)
    private = str(tmp_path / "private")
    assert subprocess.run([sys.executable, "-m", "pcqr.jobs.cli", "budget", "set", private, "--epsilon",
                           str(EPSILON * ADMITTED), "--delta", str(DELTA * ADMITTED), "--ledger", db.admin_url],
                          cwd=ROOT, capture_output=True).returncode == 0

    def train(i: int) -> list[str]:
        return ["train", "--private", private, "--state", str(tmp_path / f"state-{i}"), *SESSION, "--cluster", cluster,
                "--ledger", db.analyst_url]

    # Phase 1: a train halted inside its charge's transaction (the ledger's lock held, its charge
    # written, not committed); then eight trains and one more that halts likewise, all waiting on the
    # lock; both halted ones killed, whenever they get there (the second only if the budget still
    # admits it when its turn comes).
    first = tmp_path / "stop-100"
    doomed = {first: _start(first, "charge", train(100))}
    while not first.exists():
        assert doomed[first].poll() is None, doomed[first].communicate()
        time.sleep(0.01)
    doomed[tmp_path / "stop-101"] = _start(tmp_path / "stop-101", "charge", train(101))
    trains = [_start(tmp_path / "never", "none", train(i)) for i in range(TRAINS)]
    time.sleep(1)  # they start, fingerprint the data and queue on the lock
    killed = _kill_at_stops(doomed)
    outcomes = [(proc.wait(timeout=300), proc.stderr.read() if proc.stderr else "") for proc in trains]
    assert killed >= 1
    admitted = [i for i, (code, _) in enumerate(outcomes) if code == 0]
    assert len(admitted) == ADMITTED, outcomes
    assert all("privacy budget of" in err and "exceeded" in err for code, err in outcomes if code != 0)
    with Ledger(db.analyst_url) as ledger:
        (identity,) = ledger.store.identities()
        charges = ledger.store.charges(identity)
        spent, budget = ledger.store.spent(identity), ledger.store.budget(identity)
        assert len(charges) == ADMITTED and spent[0] <= budget[0] * (1 + 1e-9) and spent[1] <= budget[1] * (1 + 1e-9)
        assert ledger.store.verify_chain()["broken"] is None

    # Phase 2: two copies of each session answer at once; one of each pair killed after a commit.
    def answer(state: str, log: str) -> list[str]:
        return ["answer", "--state", str(tmp_path / state), "--queries", str(tmp_path / "queries"), "--log",
                str(tmp_path / log), "--batch-size", "500", "--cluster", cluster, "--ledger", db.analyst_url, "--json"]

    halted, copies = {}, []
    for i in admitted:
        shutil.copytree(tmp_path / f"state-{i}", tmp_path / f"copy-{i}")
        halted[tmp_path / f"stop-answer-{i}"] = _start(tmp_path / f"stop-answer-{i}", "commit",
                                                       answer(f"state-{i}", f"log-{i}"))
        copies.append(_start(tmp_path / "never", "none", answer(f"copy-{i}", f"log-copy-{i}")))
    kills = _kill_at_stops(halted)
    for copy in copies:
        copy.wait(timeout=300)
    for i in admitted:
        resumed = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "never"), "none",
                                  *answer(f"state-{i}", f"log-{i}")], cwd=ROOT, capture_output=True, text=True)
        assert resumed.returncode in (0, 2, 3), resumed.stderr
    assert kills >= 1
    with Ledger(db.analyst_url) as ledger:
        for i in admitted:
            session = json.loads((tmp_path / f"state-{i}" / "session.json").read_text())["session_id"]
            row = ledger.store.session(session)
            assert row is not None and int(row["bottoms"]) <= T
            published = 0
            for log in (tmp_path / f"log-{i}", tmp_path / f"log-copy-{i}"):
                if log.exists() and batch_files(str(log)):
                    assert verify_log(str(log)).ok  # the chain of each published log holds
                    published += len(batch_files(str(log)))
            # every published batch is a committed one, and every committed batch was published
            assert published == int(row["batches"]), (i, published, row["batches"])
        assert ledger.store.spent(identity) == spent and ledger.store.verify_chain()["broken"] is None
    # the closing note's figures (pytest -s shows them)
    print(json.dumps({"processes": len(trains) + len(doomed) + 3 * len(admitted), "killed": killed + kills,
                      "charges": len(charges), "spent": spent, "budget": budget}))
