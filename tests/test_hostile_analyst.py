"""Issue 46's reproductions, end to end: an analyst with ``psql`` and their own role's URL against the
README's team ledger, then pcqr's own commands. Each test failed on the version 1 server (the
attack worked) and must be refused or bounded now. The table of every direct call an analyst can try
is tests/test_ledger_adversary.py; the URL and password rules are tests/test_ledger_location.py."""
from __future__ import annotations

import json
import socket
import threading
import time
from contextlib import closing
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import dask.config
import numpy as np
import psycopg
import pyarrow.parquet as pq
import pytest

from pcqr.jobs.cli import main
from pcqr.pipeline.budget.ledger import Ledger
from pcqr.pipeline.budget.postgres_functions import LOCK_KEY
from pcqr.pipeline.errors import PcqrError
from tests.conftest import write_session_data

# A stability session that trains in a second (tests/test_team_ledger.py's mechanics), at eps 5.
TRAIN = ["--delta", "1e-5", "--cutoff", "20", "--subsamples", "50", "--gate", "stability", "--learner", "stump"]
FAKE_SKETCH = np.array([[1, 1]], dtype="<u8").tobytes()  # one (value, count) pair: of the documented form


@pytest.fixture
def team(team_ledger: Any) -> SimpleNamespace:
    """The fixture's owner and analyst (alice), and a second analyst role (bob) granted by the owner."""
    from pcqr.pipeline.budget.team_ledger import init_ledger

    bob_role = f"bob_{team_ledger.database}"
    bob = team_ledger.analyst(bob_role)
    init_ledger(team_ledger.admin_url, bob_role)
    return SimpleNamespace(owner=team_ledger.admin_url, alice=team_ledger.analyst_url, bob=bob, bob_role=bob_role,
                           alice_role=team_ledger.analyst_role, db=team_ledger)


def _psql(url: str, statement: str, *args: object) -> list[tuple[Any, ...]]:
    with closing(psycopg.connect(url, autocommit=True)) as conn:
        cursor = conn.execute(statement, args)  # type: ignore[arg-type]  # the tests' own text
        return cursor.fetchall() if cursor.description else []


def _error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines and lines[-1].startswith("pcqr: error: "), lines
    return lines[-1]


def test_a_planted_sketch_does_not_hide_a_budgeted_dataset(team: SimpleNamespace, tmp_path: Path,
                                                           thread_cluster_yaml: str,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """Item 1: the analyst plants a fake row sketch under the dataset's identity before the owner's
    `budget set`; trainings on the same rows minus one must still be charged to its budget."""
    write_session_data(tmp_path)
    private, minus_one = tmp_path / "private", tmp_path / "minus-one"
    table = pq.read_table(private)
    minus_one.mkdir()
    pq.write_table(table.slice(1), minus_one / "p.parquet")
    assert main(["budget", "show", str(private), "--ledger", str(tmp_path / "scratch.sqlite"), "--json"]) == 0
    identity = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["identity"]
    plant = "SELECT pcqr.store_sketch(%s, 'rows', '', 'd5/private', 200000, %s)"
    with pytest.raises(psycopg.Error) as refused:  # no charge of its own on those rows
        _psql(team.alice, plant, identity, FAKE_SKETCH)
    assert refused.value.sqlstate == "PX006"
    _psql(team.alice, "SELECT pcqr.charge(%s, 'd5/private', 'train', 0, 0, '{}', 1)", identity)
    _psql(team.alice, plant, identity, FAKE_SKETCH)  # first stored: kept against later analysts
    assert main(["budget", "set", str(private), "--epsilon", "2", "--delta", "1e-5", "--ledger", team.owner]) == 0
    capsys.readouterr()
    for state in ("s1", "s2"):
        line = _error(capsys, ["train", "--private", str(minus_one), "--state", str(tmp_path / state), "--epsilon",
                               "5", *TRAIN, "--cluster", thread_cluster_yaml, "--ledger", team.alice])
        assert "privacy budget of" in line and "exceeded" in line
    with Ledger(team.alice) as ledger:
        assert ledger.store.spent(identity) == (0.0, 0.0)
        assert ledger.store.sketch(identity, "rows", "") != ("d5/private", FAKE_SKETCH)  # the owner's replaced it
        assert ledger.store.verify_chain()["broken"] is None


def test_an_analyst_can_neither_move_nor_close_another_analysts_session(team: SimpleNamespace, tmp_path: Path,
                                                                        thread_cluster_yaml: str,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """Item 3: alice moves bob's session to c = T with a bogus hash, closes it with a note of her
    choosing, and registers a session paid by bob's charge; bob's next answer must go on unharmed."""
    write_session_data(tmp_path)
    state = tmp_path / "state"
    assert main(["train", "--private", str(tmp_path / "private"), "--state", str(state), "--epsilon", "100",
                 "--delta", "1e-3", "--cutoff", "20", "--subsamples", "50", "--gate", "stability", "--learner", "stump",
                 "--cluster", thread_cluster_yaml, "--ledger", team.bob]) == 0
    session_id = json.loads((state / "session.json").read_text())["session_id"]
    (row,) = _psql(team.alice, "SELECT bottoms, (position::jsonb->>'queries_seen')::bigint, batches, last_hash, "
                               "charge_id, identity, cutoff FROM pcqr.sessions WHERE session_id = %s", session_id)
    bottoms, seen, batches, last_hash, _, identity, cutoff = row
    ((unrelated,),) = _psql(team.bob, "SELECT charge_id FROM pcqr.charge(%s, 'x', 'train', 0, 0, '{}', 1)", identity)
    bogus = "b" * 64
    record = json.dumps({"bottoms": cutoff, "queries_seen": seen + 1, "next_batch": batches + 1, "last_hash": bogus})
    attacks = [
        ("SELECT pcqr.advance_session(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
         (session_id, bottoms, seen, batches, last_hash, cutoff, seen + 1, batches + 1, bogus, record)),
        ("SELECT pcqr.close_session(%s, false)", (session_id,)),
        ("SELECT pcqr.register_session('alice-s', %s, %s, 1000000, '', '/x', %s, "
         "'{\"bottoms\": 0, \"queries_seen\": 0, \"next_batch\": 0}', 0, 0, 0)", (identity, unrelated, "f" * 64)),
    ]
    for statement, args in attacks:
        with pytest.raises(psycopg.Error) as refused:
            _psql(team.alice, statement, *args)
        assert refused.value.sqlstate == "PX006", statement
    capsys.readouterr()
    assert main(["answer", "--state", str(state), "--queries", str(tmp_path / "queries"), "--log",
                 str(tmp_path / "log"), "--batch-size", "500", "--cluster", thread_cluster_yaml, "--ledger", team.bob,
                 "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["answered"] + summary["abstained"] == 2000
    line = _error(capsys, ["answer", "--state", str(state), "--queries", str(tmp_path / "queries"), "--log",
                           str(tmp_path / "log-alice"), "--cluster", thread_cluster_yaml, "--ledger", team.alice])
    assert f"registered by role {team.bob_role}, and only that role may answer with it" in line


def test_a_role_that_can_escalate_is_refused_at_init_and_at_every_connection(
        team: SimpleNamespace, capsys: pytest.CaptureFixture[str]) -> None:
    """Item 4: an analyst with CREATEROLE could grant itself the owner's role; `ledger init` refuses
    it, and a grant the DBA makes later refuses every command of that role."""
    server = team.db.server
    carol = f"carol_{team.db.database}"
    server.execute(f"CREATE ROLE {carol} LOGIN PASSWORD 'p' CREATEROLE")
    line = _error(capsys, ["ledger", "init", "--admin-url", team.owner, "--analyst", carol])
    assert f"--analyst {carol}: holds rights no analyst of a server ledger may hold ({carol} has CREATEROLE)" in line
    group = f"admins_{team.db.database}"
    server.execute(f"CREATE ROLE {group} CREATEDB", f"GRANT {group} TO {team.bob_role}")
    line = _error(capsys, ["budget", "verify", "--ledger", team.bob])
    assert f"role {team.bob_role} holds rights no analyst of a server ledger may hold ({group} has CREATEDB)" in line
    server.execute(f"REVOKE {group} FROM {team.bob_role}")
    assert main(["budget", "verify", "--ledger", team.bob]) == 0


def test_a_held_lock_is_a_bounded_wait_that_names_its_holder(team: SimpleNamespace,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Item 5: alice holds the ledger's advisory lock in psql; bob's charge waits at most the lock
    timeout, says after about 2 s who holds it, and fails in one line naming alice and her pid."""
    identity = "rows:" + "ab" * 32
    outcome: list[BaseException | None] = []

    def charge() -> None:
        try:
            with dask.config.set({"pcqr.ledger-timeouts.lock": 3}), Ledger(team.bob) as ledger:
                ledger.charge(identity, "data", "train", 1.0, 0.0, {})
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 (the thread reports whatever ended it)
            outcome.append(exc)

    with closing(psycopg.connect(team.alice, autocommit=True)) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (LOCK_KEY,))
        pid = holder.info.backend_pid
        waiter = threading.Thread(target=charge, daemon=True)
        waiter.start()
        waiter.join(timeout=30)
        assert not waiter.is_alive(), "the charge still waits after 30 s"
    (failure,) = outcome
    assert isinstance(failure, PcqrError)
    assert f"gave up after 3 s waiting for the ledger's lock, held by role {team.alice_role} (backend pid {pid}" \
        in str(failure)
    assert f"waiting for the ledger's lock, held by role {team.alice_role} (backend pid {pid}" in capsys.readouterr().err
    with Ledger(team.bob) as ledger:
        assert ledger.store.charges(identity) == []


def test_a_server_that_never_answers_fails_within_the_urls_connect_timeout() -> None:
    """Item 5: ``?connect_timeout=2`` in the URL is honoured (it was overridden by pcqr's 10 s)."""
    with socket.socket() as silent:  # accepts connections (the kernel's backlog) and never says a word
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        started = time.monotonic()
        with pytest.raises(PcqrError, match="cannot connect"):
            Ledger(f"postgresql://u:secret@127.0.0.1:{port}/db?connect_timeout=2")
        assert time.monotonic() - started < 8  # 2 s asked; pcqr's own default is 10 s


def test_the_cluster_yaml_sets_the_ledgers_time_limits_and_a_bad_one_is_one_line(
        team: SimpleNamespace, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Item 5: ``pcqr: ledger-timeouts:`` in cluster.yaml bounds the wait for the lock (1 s here, with
    alice holding it), and a value that is not a number of seconds is refused naming the file and key."""
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("pcqr:\n  ledger-timeouts:\n    lock: -1\n")
    line = _error(capsys, ["budget", "show", "rows", "--ledger", team.bob, "--cluster", str(cluster)])
    assert line == (f"pcqr: error: {cluster}: pcqr.ledger-timeouts.lock: expected a number of seconds in "
                    "(0, 86400], got -1")
    cluster.write_text("pcqr:\n  ledger-timeouts:\n    lock: 1\n")
    write_session_data(tmp_path, rows=2000, queries=10)
    with closing(psycopg.connect(team.alice, autocommit=True)) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (LOCK_KEY,))
        line = _error(capsys, ["budget", "set", str(tmp_path / "private"), "--epsilon", "1", "--delta", "0",
                               "--ledger", team.owner, "--cluster", str(cluster)])
    assert f"gave up after 1 s waiting for the ledger's lock, held by role {team.alice_role}" in line
