"""Many processes charge one dataset's budget on a real PostgreSQL ledger at once, some killed with
SIGKILL (issue 30, item 4). The budget is never exceeded, and no committed batch is lost.

Phase 1: 8 ``pcqr train`` processes on one dataset, whose budget admits 3 of them. Two more
processes are killed holding the ledger's lock, their charge inserted but not committed; the
server rolls their transactions back.
Phase 2: each trained session answers from two copies of its state at once (6 ``pcqr answer``
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
HALTING = ["--epsilon", "4", "--delta", "1e-6", "--cutoff", "5", "--subsamples", "1100", "--gate", "stability",
           "--learner", "stump"]
T, ADMITTED, TRAINS = 5, 3, 8
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


def _kill_when(stop: Path, proc: subprocess.Popen[str], timeout: float = 120) -> bool:
    """SIGKILL ``proc`` once it is halted at its stop file; False if it ended first."""
    deadline = time.monotonic() + timeout
    while not stop.exists():
        if proc.poll() is not None:
            return False
        assert time.monotonic() < deadline, "the child never reached its stop"
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    return True


@pytest.mark.slow
def test_eight_trains_and_six_answers_with_kills_never_pass_the_budget_or_lose_a_batch(
        postgres_database: Any, tmp_path: Path) -> None:
    db = postgres_database
    init_ledger(db.admin_url, db.analyst_url.split("//")[1].split(":")[0])
    write_session_data(tmp_path)
    cluster = write_thread_cluster(tmp_path)
    private = str(tmp_path / "private")
    assert subprocess.run([sys.executable, "-m", "pcqr.jobs.cli", "budget", "set", private, "--epsilon",
                           str(4 * ADMITTED), "--delta", str(1e-6 * ADMITTED), "--ledger", db.admin_url],
                          cwd=ROOT, capture_output=True).returncode == 0

    def train(i: int) -> list[str]:
        return ["train", "--private", private, "--state", str(tmp_path / f"state-{i}"), *HALTING, "--cluster", cluster,
                "--ledger", db.analyst_url]

    # Phase 1: two trains halted inside the charge's transaction, then eight more; the two killed.
    doomed = [_start(tmp_path / f"stop-{i}", "charge", train(i)) for i in (100, 101)]
    trains = [_start(tmp_path / "never", "none", train(i)) for i in range(TRAINS)]
    killed = sum(_kill_when(tmp_path / f"stop-{i}", proc) for i, proc in zip((100, 101), doomed))
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

    pairs = []
    for i in admitted:
        shutil.copytree(tmp_path / f"state-{i}", tmp_path / f"copy-{i}")
        stop = tmp_path / f"stop-answer-{i}"
        pairs.append((i, _start(stop, "commit", answer(f"state-{i}", f"log-{i}")),
                      _start(tmp_path / "never", "none", answer(f"copy-{i}", f"log-copy-{i}")), stop))
    kills = 0
    for i, halted, copy, stop in pairs:
        kills += _kill_when(stop, halted)
        copy.wait(timeout=300)
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
    with open(tmp_path / "figures.json", "w") as handle:  # for the closing note
        json.dump({"processes": len(trains) + len(doomed) + 2 * len(admitted), "killed": killed + kills,
                   "charges": len(charges), "spent": spent, "budget": budget}, handle)
    print(json.dumps({"processes": len(trains) + len(doomed) + 2 * len(admitted), "killed": killed + kills,
                      "charges": len(charges), "spent": spent, "budget": budget}))
