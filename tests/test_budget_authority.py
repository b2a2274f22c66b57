"""The ledger is the authority for a session's identity and abstention count (issue 11, items 2, 3, 5).

Nothing done to the files of a state directory gains budget: an edited count is refused; copies of
a state share the ledger's one count (never more than T abstentions released in all, one charge);
two `train` on one state charge once and register one session; a state the ledger does not know is
refused naming --ledger; a tampered log batch is refused before any repeat is served from it;
`pcqr replay` fails a log holding more than its provenance's T abstentions; a one-shot `answer`
that fails after its charge is refunded unless a batch was released, and says which; a crash
between the ledger's commit and session.json's is recovered from the ledger.

Each test has its own ledger (PCQR_LEDGER), so "one charge" counts every charge the test made.
"""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import pcqr.pipeline.session.answering
import pcqr.pipeline.session.query_release
import pcqr.pipeline.session.committer
from pcqr.jobs.cli import main
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.public_log.batches import PREV_HASH_KEY, PROVENANCE_KEY, append_batch, batch_files, encode_batch, sha256
from pcqr.pipeline.public_log.replay import verify_log
from tests.conftest import write_parquet, write_session_data

ROOT = Path(__file__).resolve().parents[1]
# T = 5 with k = 1100 and w the smallest certifiable: the boundary queries among 2000 abstain, so
# one run alone spends all T abstentions (as in tests/test_state_lock.py).
HALTING = ["--epsilon", "4", "--delta", "1e-6", "--cutoff", "5", "--subsamples", "1100", "--gate", "stability",
           "--learner", "stump"]  # the ledger's authority is the test, not the learner: the fastest one
T = 5
# pcqr's command line, run once the file argv[1] exists (processes released together).
BARRIER = """
import os, sys, time
from pcqr.jobs.cli import main
open(f"{sys.argv[1]}.{os.getpid()}", "w").close()
while not os.path.exists(sys.argv[1]):
    time.sleep(0.001)
sys.exit(main(sys.argv[2:]))
"""


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, thread_cluster_yaml: str) -> SimpleNamespace:
    """SessionState data, this test's own ledger (PCQR_LEDGER, inherited by subprocesses) and a cluster."""
    write_session_data(tmp_path)
    ledger = tmp_path / "ledger.sqlite"
    monkeypatch.setenv("PCQR_LEDGER", str(ledger))
    return SimpleNamespace(root=tmp_path, ledger=ledger, cluster=thread_cluster_yaml)


def _train(w: SimpleNamespace, state: str, *extra: str) -> None:
    assert main(["train", "--private", str(w.root / "private"), "--state", str(w.root / state), *HALTING,
                 "--cluster", w.cluster, *extra]) == 0


def _answer(w: SimpleNamespace, state: str, log: str, *extra: str) -> list[str]:
    return ["answer", "--state", str(w.root / state), "--queries", str(w.root / "queries"), "--log", str(w.root / log),
            "--batch-size", "500", "--cluster", w.cluster, "--json", *extra]


def _ledger(w: SimpleNamespace) -> dict[str, list[tuple[Any, ...]]]:
    """Every charge and session row of the test's ledger (to compare before and after)."""
    with closing(sqlite3.connect(w.ledger)) as db:
        return {table: db.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall() for table in ("charges", "sessions")}


def _abstained(log: Path) -> int:
    return sum(pq.read_table(path).column("status").to_pylist().count("abstained") for _, path in batch_files(str(log)))


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str], *needles: str) -> str:
    """Run pcqr: exit 2 and exactly one line on stderr, starting 'pcqr: error: ', holding every needle."""
    code = main(argv)
    lines = capsys.readouterr().err.strip().splitlines()  # no dashboard line: none was asked for
    assert code == 2 and len(lines) == 1 and lines[0].startswith("pcqr: error: "), (code, lines)
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def _together(argvs: list[list[str]], root: Path) -> list[subprocess.CompletedProcess[str]]:
    """pcqr command lines as processes released at the same moment; their results."""
    go = root / "go"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    procs = [subprocess.Popen([sys.executable, "-c", BARRIER, str(go), *argv], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for argv in argvs]
    deadline = time.monotonic() + 60
    while not all(Path(f"{go}.{proc.pid}").exists() for proc in procs):
        assert time.monotonic() < deadline and all(proc.poll() is None for proc in procs)
        time.sleep(0.01)
    go.touch()
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=180)
        results.append(subprocess.CompletedProcess(proc.pid, proc.returncode, out, err))
    return results


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pcqr: error: "), err
    return lines[0]


@pytest.mark.parametrize("seeded", [False, True])
def test_an_edited_abstention_count_is_refused(world, capsys, seeded) -> None:
    """Seeded sessions follow the same rules."""
    _train(world, "state", *(["--seed", "3", "--insecure-seed"] if seeded else []))
    assert main(_answer(world, "state", "log")) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["budget_spent"] and summary["budget_used"] == T  # halted
    session_file = world.root / "state" / "session.json"
    edited = json.loads(session_file.read_text())
    edited["sparse_vector"]["bottoms"] = 0  # re-open the halted session
    edited["totals"]["abstained"] = 0
    session_file.write_text(json.dumps(edited))
    before, files = _ledger(world), sorted(os.listdir(world.root / "log"))
    _refused(capsys, _answer(world, "state", "log"), "--state", "c = 0 after 4 batches", f"c = {T} after 4 batches",
             str(world.ledger))
    assert _ledger(world) == before and sorted(os.listdir(world.root / "log")) == files
    assert json.loads(session_file.read_text()) == edited  # nothing written
    assert _abstained(world.root / "log") == T


def test_copies_of_a_state_share_one_count(world, capsys) -> None:
    _train(world, "state")
    shutil.copytree(world.root / "state", world.root / "copy")
    assert main(_answer(world, "state", "log")) == 0
    capsys.readouterr()
    _refused(capsys, _answer(world, "copy", "log-copy"), "--state", "edited, copied or restored")
    assert not (world.root / "log-copy").exists()
    assert _abstained(world.root / "log") == T
    charges = _ledger(world)["charges"]
    assert len(charges) == 1


def test_copies_answering_at_once_never_pass_t(world) -> None:
    """Two copies started together: the ledger's compare-and-swap lets one chain of batches through;
    the other copy is refused at its first commit (or when it opens) and publishes nothing."""
    _train(world, "state")
    shutil.copytree(world.root / "state", world.root / "copy")
    results = _together([_answer(world, "state", "log-a"), _answer(world, "copy", "log-b")], world.root)
    assert sorted(r.returncode for r in results) == [0, 2], [(r.returncode, r.stderr) for r in results]
    loser = next(i for i, r in enumerate(results) if r.returncode == 2)
    assert "--state" in _one_line(results[loser].stderr)
    logs = [world.root / "log-a", world.root / "log-b"]
    assert batch_files(str(logs[loser])) == []  # refused before anything was published
    assert _abstained(logs[0]) + _abstained(logs[1]) == T
    ledger = _ledger(world)
    assert len(ledger["charges"]) == 1 and len(ledger["sessions"]) == 1
    with closing(sqlite3.connect(world.ledger)) as db:
        assert db.execute("SELECT bottoms FROM sessions").fetchone() == (T,)


def test_two_trains_on_one_state_charge_once_and_register_one_session(world) -> None:
    train = ["train", "--private", str(world.root / "private"), "--state", str(world.root / "state"), *HALTING,
             "--cluster", world.cluster, "--json"]
    results = _together([train, train], world.root)
    assert sorted(r.returncode for r in results) == [0, 2], [(r.returncode, r.stderr) for r in results]
    assert "--state" in _one_line(next(r for r in results if r.returncode == 2).stderr)
    ledger = _ledger(world)
    assert len(ledger["charges"]) == 1 and len(ledger["sessions"]) == 1
    session = json.loads((world.root / "state" / "session.json").read_text())
    with closing(sqlite3.connect(world.ledger)) as db:
        row = db.execute("SELECT session_id, charge_id, cutoff, bottoms, batches, state_path FROM sessions").fetchone()
    assert row == (session["session_id"], ledger["charges"][0][0], T, 0, 0, str(world.root / "state"))


def test_a_session_unknown_to_the_ledger_is_refused(world, capsys) -> None:
    _train(world, "state")
    other = world.root / "other.sqlite"
    _refused(capsys, [*_answer(world, "state", "log"), "--ledger", str(other)], "--ledger", "not in the ledger")
    assert not (world.root / "log").exists() and not other.exists()
    session_file = world.root / "state" / "session.json"
    forged = json.loads(session_file.read_text())
    forged["session_id"] = "0" * 32
    session_file.write_text(json.dumps(forged))
    before = _ledger(world)
    _refused(capsys, _answer(world, "state", "log"), "--ledger", "not in the ledger")
    assert _ledger(world) == before and not (world.root / "log").exists()


@pytest.mark.parametrize("tampered", [0, 1, 3])
def test_a_tampered_batch_is_refused_before_any_repeat_is_served(world, capsys, tampered) -> None:
    """Batch `tampered`'s answers flipped, provenance and chain field kept: asking the same queries
    again (all repeats) is refused naming that batch's file; nothing is served or written."""
    _train(world, "state")
    assert main(_answer(world, "state", "log")) == 0
    capsys.readouterr()
    path = world.root / "log" / f"batch-{tampered:08d}.parquet"
    table = pq.read_table(path)
    flipped = pc.subtract(pa.scalar(1, pa.int8()), table.column("answer")).cast(pa.int8())
    table = table.set_column(table.column_names.index("answer"), "answer", flipped)
    pq.write_table(table.replace_schema_metadata(table.schema.metadata), path, compression="zstd")
    before, files = _ledger(world), sorted(os.listdir(world.root / "log"))
    _refused(capsys, _answer(world, "state", "log"), path.name)
    assert _ledger(world) == before and sorted(os.listdir(world.root / "log")) == files


def test_replay_fails_a_log_with_more_abstentions_than_t(world, capsys) -> None:
    """A log whose hash chain is intact but which holds more than its provenance's T abstentions."""
    _train(world, "state")
    assert main(_answer(world, "state", "log")) == 0
    capsys.readouterr()
    log = str(world.root / "log")
    assert verify_log(log).ok
    number, last = batch_files(log)[-1]
    data = Path(last).read_bytes()
    table = pq.read_table(last)
    provenance = json.loads(table.schema.metadata[PROVENANCE_KEY])
    n = table.num_rows
    extra = table.replace_schema_metadata(None)
    extra = extra.set_column(extra.column_names.index("status"), "status", pa.array(["abstained"] * n))
    extra = extra.set_column(extra.column_names.index("answer"), "answer", pa.nulls(n, pa.int8()))
    extra = extra.set_column(extra.column_names.index("batch"), "batch", pa.array(np.full(n, number + 1, np.int32)))
    append_batch(log, number + 1, encode_batch(extra, provenance, sha256(data)))
    report = verify_log(log)
    assert not report.ok and report.first_bad == number + 1, report.problems
    assert f"cutoff T = {T}" in str(report.problem) and len(report.problems) == 1  # the chain itself is intact
    assert pq.read_schema(batch_files(log)[-1][1]).metadata[PREV_HASH_KEY] == sha256(data).encode()
    _refused(capsys, ["replay", log], f"batch {number + 1} exceeds the session's budget")


def test_a_one_shot_answer_with_bad_ids_leaves_the_ledger_unchanged(world, capsys) -> None:
    q = pq.read_table(world.root / "queries" / "p.parquet")
    strings = q.set_column(0, "query_id", pa.array([f"q{i}" for i in range(q.num_rows)]))
    write_parquet(str(world.root / "string-ids" / "p.parquet"), {n: strings.column(n) for n in strings.column_names})
    argv = ["answer", "--private", str(world.root / "private"), "--state", str(world.root / "state"), "--queries",
            str(world.root / "string-ids"), "--log", str(world.root / "log"), *HALTING, "--cluster", world.cluster]
    _refused(capsys, argv, "query_id")
    assert not world.ledger.exists() or _ledger(world) == {"charges": [], "sessions": []}
    assert not (world.root / "state").exists() and not (world.root / "log").exists()


def _failing_release(monkeypatch: pytest.MonkeyPatch, after_batches: int) -> None:
    """Make the answer loop fail (a PcqrError) once `after_batches` batches are committed and published."""
    release = pcqr.pipeline.session.answering.release_answers

    def failing(*args: Any, **kwargs: Any) -> Any:
        if after_batches == 0:
            raise PcqrError("injected failure")

        def on_batch(rows: int) -> None:
            raise PcqrError("injected failure")

        return release(*args, **{**kwargs, "on_batch": on_batch})

    monkeypatch.setattr(pcqr.pipeline.session.answering, "release_answers", failing)


def test_a_one_shot_answer_failing_before_any_batch_is_refunded(world, capsys, monkeypatch) -> None:
    argv = ["answer", "--private", str(world.root / "private"), "--state", str(world.root / "state"), "--queries",
            str(world.root / "queries"), "--log", str(world.root / "log"), *HALTING, "--cluster", world.cluster]
    _failing_release(monkeypatch, 0)
    line = _refused(capsys, argv, "injected failure")
    assert line.endswith("; charge refunded")
    ledger = _ledger(world)
    (charge,), (session,) = ledger["charges"], ledger["sessions"]
    assert charge[-1] is not None and "answer failed on invalid input" in charge[-1]  # refunded
    assert session[-1] is not None  # closed: the session can never answer
    assert not (world.root / "state").exists() and not (world.root / "log").exists()
    monkeypatch.undo()
    monkeypatch.setenv("PCQR_LEDGER", str(world.ledger))
    assert main(argv) == 0  # a retry is a new session with its own charge


def test_a_one_shot_answer_failing_after_a_batch_keeps_its_charge(world, capsys, monkeypatch) -> None:
    argv = ["answer", "--private", str(world.root / "private"), "--state", str(world.root / "state"), "--queries",
            str(world.root / "queries"), "--log", str(world.root / "log"), "--batch-size", "500", *HALTING,
            "--cluster", world.cluster]
    _failing_release(monkeypatch, 1)
    line = _refused(capsys, argv, "injected failure")
    assert line.endswith("; charge kept: 1 batch was released")
    ledger = _ledger(world)
    (charge,), (session,) = ledger["charges"], ledger["sessions"]
    assert charge[-1] is None and session[-1] is None  # kept, and the session goes on
    assert len(batch_files(str(world.root / "log"))) == 1
    monkeypatch.undo()
    monkeypatch.setenv("PCQR_LEDGER", str(world.ledger))
    assert main(_answer(world, "state", "log")) == 0  # continues after its committed batch
    assert len(_ledger(world)["charges"]) == 1


class _Killed(BaseException):
    """Stands for SIGKILL between the ledger's commit and session.json's."""


def test_a_crash_between_the_ledger_and_the_state_is_recovered_from_the_ledger(world, capsys, monkeypatch) -> None:
    _train(world, "state")
    save = pcqr.pipeline.session.committer.save_session
    calls = []

    def save_then_die(state_dir: str, session: Any) -> None:
        calls.append(session.next_batch)
        if len(calls) == 2:  # batch 1: committed to the ledger, not yet to session.json
            raise _Killed()
        save(state_dir, session)

    monkeypatch.setattr(pcqr.pipeline.session.committer, "save_session", save_then_die)
    with pytest.raises(_Killed):
        main(_answer(world, "state", "log"))
    monkeypatch.undo()
    monkeypatch.setenv("PCQR_LEDGER", str(world.ledger))
    with closing(sqlite3.connect(world.ledger)) as db:
        assert db.execute("SELECT batches FROM sessions").fetchone() == (2,)
    state = json.loads((world.root / "state" / "session.json").read_text())
    assert state["next_batch"] == 1 and (world.root / "state" / "pending" / "batch-00000001.parquet").exists()
    assert len(batch_files(str(world.root / "log"))) == 1
    capsys.readouterr()
    assert main(_answer(world, "state", "log")) == 0
    err = capsys.readouterr().err
    assert "batch 1 was committed to the ledger before the previous run stopped" in err
    assert "recovered batch 1" in err
    state = json.loads((world.root / "state" / "session.json").read_text())
    with closing(sqlite3.connect(world.ledger)) as db:
        bottoms, batches, last_hash = db.execute("SELECT bottoms, batches, last_hash FROM sessions").fetchone()
    assert (bottoms, batches, last_hash) == (state["sparse_vector"]["bottoms"], state["next_batch"], state["last_hash"])
    log = str(world.root / "log")
    assert verify_log(log, expected_last_hash=last_hash).ok and _abstained(world.root / "log") == bottoms
    table = pq.read_table(log)
    assert sorted(table.column("query_id").to_pylist()) == list(range(2000))  # each query once


def test_a_train_failing_after_its_charge_for_any_reason_is_refunded(world, capsys, monkeypatch) -> None:
    """Not only invalid input: any failure before anything is released (here a bug in training)."""
    import pcqr.pipeline.session.planning

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a learner crashed")

    monkeypatch.setattr(pcqr.pipeline.session.planning, "train_session", broken)
    with pytest.raises(RuntimeError) as raised:
        main(["train", "--private", str(world.root / "private"), "--state", str(world.root / "state"), *HALTING,
              "--cluster", world.cluster])
    assert raised.value.__notes__ == ["pcqr: train failed; charge refunded"]
    ledger = _ledger(world)
    (charge,) = ledger["charges"]
    assert charge[-1] is not None and "train failed before releasing anything" in charge[-1]
    assert ledger["sessions"] == [] and not (world.root / "state").exists()
