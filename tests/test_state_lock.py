"""One process at a time on a state directory (issue 10, point 4; pipeline/session/state_lock.py).

* unit: a lock held by another process refuses a second one with the holder's pid in the one-line
  message; it is released when the holder exits or is SIGKILLed; ``wait=True`` blocks, says so
  once, then proceeds; the lock is re-entrant in one process; a failed creating command leaves no
  directory; a waiter whose lock file was removed locks the new one;
* every command that writes a state (train, answer in both forms, replay --into, run) is refused
  while the state is held, charges nothing, and with --wait proceeds once it is free;
* two real ``pcqr answer`` (and two ``pcqr train``) processes released together on one state: one
  runs, the other exits 2 with the one-line error; the log's abstentions never exceed T and the
  ledger holds one charge.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pyarrow.parquet as pq
import pytest

from pcqr.jobs.cli import main
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.budget.fingerprint import dataset_identity
from pcqr.pipeline.budget.ledger import Ledger
from pcqr.pipeline.data.datasets import open_dataset
from pcqr.pipeline.public_log.replay import verify_log
from pcqr.pipeline.session.state_lock import LOCK_FILE, lock_state
from tests.conftest import MECHANICS_PRIVACY, write_session_data

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
# Holds the lock on argv[1] as "pcqr answer" for argv[2] seconds, then fails if argv[3] == "fail".
HOLDER = """
import sys, time
from pcqr.pipeline.session.state_lock import lock_state
with lock_state(sys.argv[1], False, create=True, command="pcqr answer"):
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
    if sys.argv[3:] == ["fail"]:
        raise SystemExit(1)
"""
# pcqr's command line, run once the file argv[1] exists; argv[1].PID says the imports are done, so
# processes released together reach the lock within milliseconds of each other.
BARRIER = """
import os, sys, time
from pcqr.jobs.cli import main
open(f"{sys.argv[1]}.{os.getpid()}", "w").close()
while not os.path.exists(sys.argv[1]):
    time.sleep(0.001)
sys.exit(main(sys.argv[2:]))
"""
# T = 5 with k = 1100 and w the smallest certifiable: the boundary queries among 2000 abstain,
# so one run alone spends all T abstentions; two runs each spending T would release up to 2T.
HALTING = ["--epsilon", "4", "--delta", "1e-6", "--cutoff", "5", "--subsamples", "1100", "--gate", "stability"]


def _refusal(state: Path, pid: int, command: str = "pcqr answer", option: str = "--state") -> str:
    return (f"{option} {state} is in use by pcqr process {pid} ({command}); "
            "wait for it to finish or pass --wait")


@pytest.fixture
def holder(tmp_path) -> Iterator[object]:
    """Start a process holding the lock of a state directory; killed at teardown if still alive."""
    procs: list[subprocess.Popen] = []

    def start(state: Path, seconds: float = 60.0, fail: bool = False) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(state), str(seconds), *(["fail"] if fail else [])],
                                stdout=subprocess.PIPE, text=True, env=ENV, start_new_session=True)
        procs.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


@pytest.mark.parametrize("end", ["exit", "sigkill"])
def test_refused_with_the_holders_pid_until_it_exits_or_is_killed(tmp_path, holder, end) -> None:
    state = tmp_path / "state"
    proc = holder(state, seconds=60.0 if end == "sigkill" else 1.0)
    with pytest.raises(PcqrError) as refused:
        with lock_state(str(state), False):
            raise AssertionError("locked a state another process holds")
    assert str(refused.value) == _refusal(state, proc.pid)
    if end == "sigkill":
        os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=30) == (-signal.SIGKILL if end == "sigkill" else 0)
    with lock_state(str(state), False, command="pcqr train"):
        record = json.loads((state / LOCK_FILE).read_text())
        assert record["pid"] == os.getpid() and record["command"] == "pcqr train"


def test_wait_blocks_says_so_once_then_proceeds(tmp_path, holder, capfd) -> None:
    state = tmp_path / "state"
    proc = holder(state, seconds=1.5)
    start = time.monotonic()
    with lock_state(str(state), True):
        waited = time.monotonic() - start
        assert proc.wait(timeout=30) == 0  # the holder has let go: it is finishing or done
    assert waited > 1.0
    lines = capfd.readouterr().err.strip().splitlines()
    assert lines == [f"waiting for --state {state}: in use by pcqr process {proc.pid} (pcqr answer)"]


def test_reentrant_in_one_process_and_nothing_left_by_a_failed_creation(tmp_path) -> None:
    state = tmp_path / "state"
    with pytest.raises(PcqrError, match="no session here"):
        with lock_state(str(state), False):
            pass
    assert not state.exists()
    with pytest.raises(RuntimeError):
        with lock_state(str(state), False, create=True):
            with lock_state(str(state), False):  # replay --into runs answer on the state it holds
                assert (state / LOCK_FILE).exists()
            raise RuntimeError("the command failed before writing anything")
    assert not state.exists()
    with lock_state(str(state), False, create=True):
        (state / "session.json").write_text("{}")
    assert sorted(os.listdir(state)) == [LOCK_FILE, "session.json"]  # the lock file is never removed


def test_a_waiter_whose_lock_file_was_removed_locks_the_new_one(tmp_path, holder) -> None:
    state = tmp_path / "state"
    proc = holder(state, seconds=1.0, fail=True)  # made the directory, fails: removes both
    with lock_state(str(state), True, create=True):
        assert proc.wait(timeout=30) == 1
        third = subprocess.run([sys.executable, "-c", HOLDER, str(state), "0"], env=ENV, capture_output=True,
                               text=True)
        assert third.returncode != 0 and _refusal(state, os.getpid(), "pcqr") in third.stderr  # one lock
        assert (state / LOCK_FILE).exists()
    assert not state.exists() or os.listdir(state) == [LOCK_FILE]


@pytest.fixture
def data(tmp_path):
    write_session_data(tmp_path)
    return tmp_path


def _charges(ledger: Path, private: Path) -> list[dict]:
    files = open_dataset(str(private), "private").files
    with Ledger(str(ledger)) as book:
        return book.store.charges(dataset_identity(files, None, book))


def _error_lines(err: str) -> list[str]:
    return [line for line in err.strip().splitlines() if not line.startswith("dashboard:")]


def test_every_state_writer_is_refused_while_held_and_waits_with_wait(data, holder, capsys, thread_cluster_yaml,
                                                                     tmp_path) -> None:
    ledger = tmp_path / "ledger.sqlite"
    common = ["--cluster", thread_cluster_yaml, "--ledger", str(ledger)]
    state = tmp_path / "state"
    proc = holder(state, seconds=60.0)
    spec = tmp_path / "job.yaml"
    spec.write_text(f"job: train\nprivate: {data / 'private'}\nstate: {state}\n")
    attempts = [
        (["train", "--private", str(data / "private"), "--state", str(state), *MECHANICS_PRIVACY, *common], "--state"),
        (["answer", "--state", str(state), "--queries", str(data / "queries"), "--log", str(tmp_path / "log"),
          *common], "--state"),
        (["answer", "--private", str(data / "private"), "--state", str(state), "--queries", str(data / "queries"),
          "--log", str(tmp_path / "log"), *MECHANICS_PRIVACY, *common], "--state"),
        (["replay", str(tmp_path / "some-log"), "--into", str(state)], "--into"),
        (["run", str(spec), "--set", f"ledger={ledger}"], "--state"),
    ]
    for args, option in attempts:
        code = main(args)
        err = capsys.readouterr().err
        assert code == 2 and _error_lines(err) == [f"pcqr: error: {_refusal(state, proc.pid, option=option)}"], err
    assert os.listdir(state) == [LOCK_FILE] and not (tmp_path / "log").exists()
    assert not ledger.exists() or _charges(ledger, data / "private") == []
    ending = threading.Timer(1.0, os.kill, (proc.pid, signal.SIGTERM))  # the holder ends while train waits
    ending.start()
    code = main(["train", "--private", str(data / "private"), "--state", str(state), *MECHANICS_PRIVACY, *common,
                 "--wait"])
    ending.join()
    err = capsys.readouterr().err
    assert code == 0 and f"waiting for --state {state}: in use by pcqr process {proc.pid} (pcqr answer)" in err, err
    assert [c["pid"] for c in _charges(ledger, data / "private")] == [os.getpid()]


def _together(argvs: list[list[str]], tmp_path: Path) -> list[subprocess.CompletedProcess]:
    """Run pcqr command lines as processes released at the same moment; their results."""
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", BARRIER, str(go), *argv], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": ENV["PYTHONPATH"]})
             for argv in argvs]  # os.environ now: the suite's PCQR_LEDGER, which knows the sessions
    deadline = time.monotonic() + 60
    while not all(Path(f"{go}.{proc.pid}").exists() for proc in procs):  # all waiting at the barrier
        assert time.monotonic() < deadline and all(proc.poll() is None for proc in procs)
        time.sleep(0.01)
    go.touch()
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        results.append(subprocess.CompletedProcess(proc.pid, proc.returncode, out, err))
    return results


def _one_ran_one_refused(results: list[subprocess.CompletedProcess], state: Path, command: str) -> tuple[int, dict]:
    """The winner's pid and summary, after checking the loser's exit status and one-line error."""
    codes = sorted(r.returncode for r in results)
    assert codes == [0, 2], [(r.returncode, r.stderr) for r in results]
    winner = next(r for r in results if r.returncode == 0)
    loser = next(r for r in results if r.returncode == 2)
    assert _error_lines(loser.stderr) == [f"pcqr: error: {_refusal(state, int(winner.args), command)}"], loser.stderr
    assert loser.stdout == ""
    return int(winner.args), json.loads(winner.stdout.strip().splitlines()[-1])


def test_two_answer_processes_on_one_state_spend_t_once(data, thread_cluster_yaml, tmp_path) -> None:
    state, log = tmp_path / "state", tmp_path / "log"
    assert main(["train", "--private", str(data / "private"), "--state", str(state), *HALTING,
                 "--seed", "1", "--insecure-seed", "--cluster", thread_cluster_yaml]) == 0
    answer = ["answer", "--state", str(state), "--queries", str(data / "queries"), "--log", str(log),
              "--batch-size", "100", "--cluster", thread_cluster_yaml, "--json"]
    _, summary = _one_ran_one_refused(_together([answer, answer], tmp_path), state, "pcqr answer")
    assert summary["budget_spent"] and summary["budget_used"] == 5  # the winner alone spent all of T
    table = pq.read_table(log)
    assert table.num_rows == 2000 and table.column("status").to_pylist().count("abstained") == 5
    assert verify_log(str(log)).ok


def test_two_train_processes_on_one_new_state_charge_once(data, thread_cluster_yaml, tmp_path) -> None:
    state, ledger = tmp_path / "state", tmp_path / "ledger.sqlite"
    train = ["train", "--private", str(data / "private"), "--state", str(state), *MECHANICS_PRIVACY,
             "--seed", "1", "--insecure-seed", "--cluster", thread_cluster_yaml, "--ledger", str(ledger), "--json"]
    pid, summary = _one_ran_one_refused(_together([train, train], tmp_path), state, "pcqr train")
    assert summary["models"] == 50
    assert [c["pid"] for c in _charges(ledger, data / "private")] == [pid]
