"""The team ledger on a real PostgreSQL server (issue 30): what the server refuses an analyst, the
hash chain and `pcqr budget verify`, `pcqr ledger init` and `pcqr ledger migrate`, the rollback
attack on both backends, and a dropped connection or a restarted server in the middle of
`pcqr answer`."""
from __future__ import annotations

import json
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psycopg
import pyarrow.parquet as pq
import pytest

from pcqr.jobs.cli import main
from pcqr.pipeline.budget.ledger import Ledger
from pcqr.pipeline.budget.postgres_store import PostgresStore
from pcqr.pipeline.budget.store import Position
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.public_log.batches import batch_files
from tests.conftest import write_session_data
from tests.test_ledger_contract import IDENTITY, SKETCH, digest, session_row

# T = 5 with k = 1100 and the smallest certifiable w: the boundary queries among 2,000 abstain, so
# one run spends all T (tests/test_budget_authority.py).
HALTING = ["--epsilon", "4", "--delta", "1e-6", "--cutoff", "5", "--subsamples", "1100", "--gate", "stability",
           "--learner", "stump"]
T = 5


@pytest.fixture
def team(team_ledger: Any) -> SimpleNamespace:
    """A server ledger created by its owner, with one analyst role granted."""
    return SimpleNamespace(owner=team_ledger.admin_url, analyst=team_ledger.analyst_url,
                           superuser=team_ledger.superuser_url, role=team_ledger.analyst_role, db=team_ledger)


def _one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str], code: int = 2) -> str:
    assert main(argv) == code
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pcqr: error: "), lines
    return lines[0]


# --- separation of duties -------------------------------------------------------------------

@pytest.mark.parametrize("statement", [
    "UPDATE pcqr.charges SET epsilon = 0",
    "DELETE FROM pcqr.charges",
    "TRUNCATE pcqr.charges",
    "INSERT INTO pcqr.budgets VALUES ('x', 'x', NULL, 100, 0, 't')",
    "UPDATE pcqr.budgets SET epsilon = 1000",
    "UPDATE pcqr.sessions SET bottoms = 0",
    "DELETE FROM pcqr.sessions",
    "SELECT pcqr.set_budget('x', 'x', NULL, 100, 0, NULL, NULL)",
    "SELECT pcqr.append_entry('refund', 'x', 'x', 'x', 't', 0, 0, '{}', 1, 1, 'n', 'r', NULL)",
    "CREATE TABLE pcqr.mine (x int)",
])
def test_the_server_refuses_an_analyst_every_direct_write(team: SimpleNamespace, statement: str) -> None:
    with Ledger(team.owner) as owner:
        owner.set_budget(IDENTITY, "data", 1.0, 0.0, row_sketch=SKETCH, rows=3)
    with Ledger(team.analyst) as ledger:
        ledger.charge(IDENTITY, "data", "train", 1.0, 0.0, {})
    with closing(psycopg.connect(team.analyst, autocommit=True)) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(statement)
    with Ledger(team.owner) as owner:
        assert owner.store.spent(IDENTITY) == (1.0, 0.0) and owner.store.budget(IDENTITY) == (1.0, 0.0)


def test_pcqr_budget_set_as_an_analyst_is_refused_in_one_line(team: SimpleNamespace, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import pcqr.pipeline.budget.overlap as overlap

    write_session_data(tmp_path, rows=2000, queries=10)
    with monkeypatch.context() as patched:  # refused before any row is hashed: no work whose result is refused
        patched.setattr(overlap, "fingerprint_dataset", lambda *a, **k: pytest.fail("hashed the rows"))
        line = _one_line_error(capsys, ["budget", "set", str(tmp_path / "private"), "--epsilon", "9", "--delta", "0",
                                        "--ledger", team.analyst])
    assert "only the budget owner (role ledger_owner) sets budgets" in line and ":p@" not in line
    assert "postgresql://ledger_analyst@127.0.0.1" in line
    assert main(["budget", "set", str(tmp_path / "private"), "--epsilon", "9", "--delta", "0",
                 "--ledger", team.owner]) == 0


def test_the_server_refuses_a_second_session_on_one_charge_and_a_step_that_is_not_one_batch(
        team: SimpleNamespace) -> None:
    with Ledger(team.analyst) as ledger:
        charged = ledger.charge(IDENTITY, "data", "train", 1.0, 0.0, {})
        row = session_row(charged["id"])
        ledger.store.insert_session(row)
        with pytest.raises(PcqrError, match="does not pay for a new session"):
            ledger.store.insert_session({**row, "session_id": "s2"})
        with pytest.raises(PcqrError, match="must be registered at position zero"):
            ledger.store.insert_session({**row, "session_id": "s3", "position": '{"bottoms": 3, "queries_seen": 0}'})
        start = Position(0, 0, 0, "")
        for new, record in [(Position(6, 10, 1, digest(1)), None),  # past T
                            (Position(1, 10, 2, digest(1)), None),  # two batches at once
                            (Position(1, 10, 1, digest(1)), json.dumps({"bottoms": 0, "queries_seen": 10, "next_batch": 1,
                                                                 "last_hash": digest(1)}))]:  # a record that disagrees
            record = record or json.dumps({"bottoms": new.bottoms, "queries_seen": new.queries_seen,
                                           "next_batch": new.batches, "last_hash": new.last_hash})
            with pytest.raises(PcqrError, match="is not valid"):
                ledger.store.advance_session("s1", start, new, record)
        assert ledger.store.session("s1")["batches"] == 0  # type: ignore[index]


# --- the chain --------------------------------------------------------------------------------

def test_budget_verify_finds_an_edit_made_behind_the_functions(team: SimpleNamespace,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    with Ledger(team.analyst) as ledger:
        for epsilon in (1.0, 2.0, 0.5):
            charged = ledger.charge(IDENTITY, "data", "train", epsilon, 0.0, {})
    with Ledger(team.analyst) as ledger:
        ledger.refund(charged["receipts"][0], ValueError("failed before releasing anything"))
    assert main(["budget", "verify", "--ledger", team.analyst, "--json"]) == 0
    found = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert found["chained"] and found["entries"] == 4 and found["broken"] is None and found["problems"] == []
    with closing(psycopg.connect(team.superuser, autocommit=True)) as conn:  # outside what the server protects
        conn.execute("UPDATE pcqr.charges SET epsilon = 0.25 WHERE id = 2")
    line = _one_line_error(capsys, ["budget", "verify", "--ledger", team.analyst], code=1)
    assert "chain: entry 2: its contents do not match its hash" in line


def test_budget_verify_of_a_sqlite_ledger_says_it_has_no_chain(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    path = str(tmp_path / "l.sqlite")
    with Ledger(path) as ledger:
        ledger.set_budget(IDENTITY, "data", 1.0, 0.0)
        ledger.charge(IDENTITY, "data", "train", 1.0, 0.0, {})
    assert main(["budget", "verify", "--ledger", path, "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["chained"] is False
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("UPDATE budgets SET epsilon = 0.5")
    assert "is more than its budget" in _one_line_error(capsys, ["budget", "verify", "--ledger", path], code=1)


# --- pcqr ledger init -------------------------------------------------------------------------

def test_ledger_init_refuses_roles_that_could_rewrite_the_ledger(team: SimpleNamespace,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    owner = team.db.owner
    for analyst, needle in [("nobody_here", "no such role"), (owner, "is the budget owner"),
                            (team.superuser.split("//")[1].split("@")[0].split(":")[0], "has SUPERUSER")]:
        line = _one_line_error(capsys, ["ledger", "init", "--admin-url", team.owner, "--analyst", analyst])
        assert f"--analyst {analyst}: " in line and needle in line
    second_role = f"second_{team.db.database}"
    second = team.db.analyst(second_role)
    assert main(["ledger", "init", "--admin-url", team.owner, "--analyst", second_role, "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["created"] is False
    with Ledger(second) as ledger:
        ledger.charge(IDENTITY, "data", "train", 1.0, 0.0, {})
    line = _one_line_error(capsys, ["ledger", "init", "--admin-url", team.analyst, "--analyst", second_role])
    assert "belongs to role" in line


def test_an_uninitialised_database_is_refused_naming_ledger_init(postgres_database: Any) -> None:
    with pytest.raises(PcqrError, match="holds no pcqr ledger; its budget owner creates one with pcqr ledger init"):
        Ledger(postgres_database.analyst_url)


# --- pcqr ledger migrate ----------------------------------------------------------------------

def _sqlite_ledger(path: str) -> None:
    with Ledger(path) as ledger:
        ledger.set_budget(IDENTITY, "data/private", 5.0, 1e-5, name="rows")
        kept = ledger.charge(IDENTITY, "data/private", "train", 1.0, 1e-6, {"k": 3})
        refunded = ledger.charge(IDENTITY, "data/private", "learn", 2.0, 0.0, {})
        ledger.refund(refunded["receipts"][0], ValueError("learn failed before releasing anything"))
        ledger.store.store_sketch(IDENTITY, "rows", "", "data/private", 10, SKETCH.to_bytes())
        ledger.store.insert_session(session_row(kept["id"]))


def test_migrate_moves_everything_checks_it_and_refuses_a_second_time(team: SimpleNamespace, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    path = str(tmp_path / "ledger.sqlite")
    _sqlite_ledger(path)
    with Ledger(path) as ledger:
        before = (ledger.store.charges(IDENTITY), ledger.store.spent(IDENTITY), ledger.store.registration(IDENTITY))
    line = _one_line_error(capsys, ["ledger", "migrate", "--from", path, "--to", team.analyst])
    assert "is not the ledger's owner" in line
    line = _one_line_error(capsys, ["ledger", "migrate", "--from", path, "--to", team.owner])
    assert "holds 1 open session(s); name the analyst role that continues them with --analyst ROLE" in line
    assert main(["ledger", "migrate", "--from", path, "--to", team.owner, "--analyst", team.role, "--json"]) == 0
    done = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (done["charges"], done["refunds"], done["budgets"], done["sessions"]) == (2, 1, 1, 1)
    with Ledger(team.analyst) as ledger:
        after = (ledger.store.charges(IDENTITY), ledger.store.spent(IDENTITY), ledger.store.registration(IDENTITY))
        assert ledger.store.sketch(IDENTITY, "rows", "") == ("data/private", SKETCH.to_bytes())
        assert ledger.store.session("s1")["charge_id"] == after[0][0]["id"]  # type: ignore[index]
        assert ledger.store.verify_chain()["broken"] is None
    keep = ("job", "time", "epsilon", "delta", "parameters", "pid", "label", "refunded")
    assert [{k: c[k] for k in keep} for c in after[0]] == [{k: c[k] for k in keep} for c in before[0]]
    assert after[1:] == before[1:]
    with pytest.raises(PcqrError, match="moved to the server postgresql://ledger_owner@"):
        Ledger(path)  # the file now names the server
    assert "moved to the server" in _one_line_error(capsys, ["ledger", "migrate", "--from", path, "--to", team.owner])
    other = str(tmp_path / "other.sqlite")
    _sqlite_ledger(other)
    line = _one_line_error(capsys, ["ledger", "migrate", "--from", other, "--to", team.owner])
    assert "already holds a migrated ledger" in line and "a second migration is refused" in line


def test_migrate_into_a_ledger_in_use_is_refused_and_changes_nothing(team: SimpleNamespace, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    with Ledger(team.analyst) as ledger:
        ledger.charge("rows:" + "ee" * 32, "other", "train", 1.0, 0.0, {})
    path = str(tmp_path / "ledger.sqlite")
    _sqlite_ledger(path)
    assert "already holds budgets or charges" in _one_line_error(
        capsys, ["ledger", "migrate", "--from", path, "--to", team.owner])
    with Ledger(path) as ledger:  # not marked moved
        assert len(ledger.store.charges(IDENTITY)) == 2
    with Ledger(team.analyst) as ledger:
        assert ledger.store.identities() == {"rows:" + "ee" * 32}


# --- the rollback attack (issue 30's hostile analyst) -----------------------------------------

def _answer(root: Path, state: str, log: str, cluster: str, ledger: str) -> list[str]:
    return ["answer", "--state", str(root / state), "--queries", str(root / "queries"), "--log", str(root / log),
            "--batch-size", "500", "--cluster", cluster, "--ledger", ledger, "--json"]


def _abstained(log: Path) -> int:
    return sum(pq.read_table(path).column("status").to_pylist().count("abstained") for _, path in batch_files(str(log)))


def _rollback_attack(root: Path, cluster: str, ledger: str, copy_ledger: bool) -> int:
    """Copy the state (and the ledger file), answer, put the copies back, answer other queries into
    a new log: the abstentions both logs hold."""
    assert main(["train", "--private", str(root / "private"), "--state", str(root / "state"), *HALTING,
                 "--cluster", cluster, "--ledger", ledger]) == 0
    shutil.copytree(root / "state", root / "backup")
    if copy_ledger:
        shutil.copy(ledger, root / "ledger.backup")
    main(_answer(root, "state", "log", cluster, ledger))
    shutil.rmtree(root / "state")
    shutil.copytree(root / "backup", root / "state")
    if copy_ledger:
        for suffix in ("", "-wal", "-shm"):
            Path(ledger + suffix).unlink(missing_ok=True)
        shutil.copy(root / "ledger.backup", ledger)
    main(_answer(root, "state", "log-again", cluster, ledger))
    return _abstained(root / "log") + (_abstained(root / "log-again") if (root / "log-again").exists() else 0)


def test_the_rollback_attack_gains_nothing_against_the_server(team: SimpleNamespace, tmp_path: Path,
                                                              thread_cluster_yaml: str,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    write_session_data(tmp_path)
    assert _rollback_attack(tmp_path, thread_cluster_yaml, team.analyst, copy_ledger=False) == T
    assert "edited, copied or restored" in capsys.readouterr().err
    assert not (tmp_path / "log-again").exists()
    with Ledger(team.analyst) as ledger:
        (identity,) = ledger.store.identities()
        assert len(ledger.store.charges(identity)) == 1


def test_the_rollback_attack_on_a_sqlite_file_is_the_documented_limit(tmp_path: Path, thread_cluster_yaml: str) -> None:
    """docs/privacy.md: whoever can write a SQLite ledger can roll it back; the attack gets T again."""
    write_session_data(tmp_path)
    assert _rollback_attack(tmp_path, thread_cluster_yaml, str(tmp_path / "ledger.sqlite"), copy_ledger=True) == 2 * T


# --- a dropped connection, a restarted server --------------------------------------------------

@pytest.mark.parametrize("failure", ["dropped", "restarted"])
def test_answer_survives_a_lost_connection_at_a_commit(team: SimpleNamespace, tmp_path: Path, thread_cluster_yaml: str,
                                                       postgres_server: Any, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str], failure: str) -> None:
    write_session_data(tmp_path)
    train = ["train", "--private", str(tmp_path / "private"), "--state", str(tmp_path / "state"),
             "--epsilon", "100", "--delta", "1e-3", "--cutoff", "20", "--subsamples", "50", "--gate", "stability",
             "--learner", "stump", "--cluster", thread_cluster_yaml, "--ledger", team.analyst]
    assert main(train) == 0
    original, calls, reconnect, reconnects = PostgresStore.advance_session, [], PostgresStore._reconnect, []

    def interrupted(self: PostgresStore, *args: Any) -> bool:
        calls.append(1)
        if len(calls) == 2:  # the second batch's commit finds its connection gone
            if failure == "dropped":
                postgres_server.kill_connections(team.db.database)
            else:
                postgres_server.restart()
        return original(self, *args)

    def counted(self: PostgresStore, patience: float) -> None:
        reconnects.append(patience)
        reconnect(self, patience)

    monkeypatch.setattr(PostgresStore, "advance_session", interrupted)
    monkeypatch.setattr(PostgresStore, "_reconnect", counted)
    assert main(_answer(tmp_path, "state", "log", thread_cluster_yaml, team.analyst)) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["answered"] + summary["abstained"] == 2000 and len(calls) == 4 and len(reconnects) == 1
    assert main(["replay", str(tmp_path / "log"), "--out", str(tmp_path / "replayed.parquet")]) == 0
    with Ledger(team.analyst) as ledger:
        (session_id,) = [json.loads((tmp_path / "state" / "session.json").read_text())["session_id"]]
        assert ledger.store.session(session_id)["batches"] == 4 == len(batch_files(str(tmp_path / "log")))  # type: ignore[index]


def test_a_commit_whose_answer_was_lost_finds_it_took_effect(team: SimpleNamespace, postgres_server: Any) -> None:
    """The swap committed on the server but the connection dropped before the client heard: the
    retry finds the row at the new position and reports success, not a conflict."""
    with Ledger(team.analyst) as ledger:
        charged = ledger.charge(IDENTITY, "data", "train", 1.0, 0.0, {})
        ledger.store.insert_session(session_row(charged["id"]))
    start, one = Position(0, 0, 0, ""), Position(1, 500, 1, digest(1))
    record = json.dumps({"bottoms": 1, "queries_seen": 500, "next_batch": 1, "last_hash": digest(1)})
    with closing(PostgresStore(team.analyst)) as store, closing(PostgresStore(team.analyst)) as other:
        assert other.advance_session("s1", start, one, record)  # what the server did before the drop
        postgres_server.kill_connections(team.db.database)
        assert store.advance_session("s1", start, one, record)
        two = Position(1, 900, 2, digest(2))
        assert not store.advance_session("s1", start, two, record)  # a genuine conflict stays one


def test_the_cluster_yaml_names_the_team_ledger_after_the_option_and_the_environment(
        team: SimpleNamespace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("PCQR_LEDGER", raising=False)
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(f"pcqr:\n  ledger: {team.analyst}\n  cluster:\n    backend: local\n")
    with Ledger(team.analyst) as ledger:
        ledger.charge(IDENTITY, "data", "train", 1.0, 0.0, {})
    assert main(["budget", "verify", "--cluster", str(cluster), "--json"]) == 0
    found = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert found["chained"] and found["entries"] == 1 and found["ledger"].endswith(team.db.database)
    local = str(tmp_path / "mine.sqlite")
    monkeypatch.setenv("PCQR_LEDGER", local)  # the environment comes before the cluster's file
    assert main(["budget", "verify", "--cluster", str(cluster), "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["ledger"] == local
    cluster.write_text("pcqr:\n  ledger: 3\n")
    monkeypatch.delenv("PCQR_LEDGER")
    assert "pcqr.ledger: expected a ledger file's path" in _one_line_error(
        capsys, ["budget", "verify", "--cluster", str(cluster)])


@pytest.mark.slow  # (a dozen pcqr processes; its file then starts first)
def test_the_readme_team_ledger_section_runs_as_written(postgres_database: Any, tmp_path: Path) -> None:
    """README "Team ledger": its block, verbatim, in a folder holding generated data and a SQLite
    ledger to migrate, against this test's server (SUPERUSER_URL, OWNER_URL, ALICE_URL)."""
    import os
    import subprocess

    from tests.forked_pcqr import ForkedPcqr
    from tests.test_readme import ROOT, block_run_by

    host = f"127.0.0.1:{postgres_database.server.port}"
    tools = tmp_path / "bin"
    tools.mkdir()
    env = {**os.environ, "SUPERUSER_URL": postgres_database.superuser_url,
           "OWNER_URL": f"postgresql://budget_owner:owner-secret@{host}/pcqr_ledger",
           "ALICE_URL": f"postgresql://alice:alice-secret@{host}/pcqr_ledger",
           "PCQR_LEDGER": str(tmp_path / "ledger.sqlite"),
           "DASK_PCQR__CLUSTER__PROCESSES": "false", "DASK_PCQR__CLUSTER__N_WORKERS": "1"}  # a fast cluster
    work = tmp_path
    data = str(work / "data")
    assert main(["generate", "--rows", "5000", "--queries", "500", "--seed", "5", "--out", data]) == 0
    assert main(["budget", "set", f"{data}/private", "--epsilon", "20", "--delta", "1e-4",
                 "--ledger", env["PCQR_LEDGER"]]) == 0
    script = "set -e\n" + "\n".join(block_run_by("tests/test_team_ledger.py"))
    try:
        with ForkedPcqr(tools, env, ROOT) as forked:  # each pcqr forked from one preloaded interpreter
            result = subprocess.run(["bash", "-c", script], cwd=work, env={**env, "PATH": forked.path},
                                    capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
        assert "Traceback" not in result.stderr and "owner-secret" not in result.stdout + result.stderr
        assert "chained    True" in result.stdout and "problems   0" in result.stdout
        assert (work / "answers").is_dir()
        with Ledger(env["ALICE_URL"]) as ledger:
            (identity,) = ledger.store.identities()
            assert [c["job"] for c in ledger.store.charges(identity)] == ["train"]
            assert ledger.store.budget(identity) == (8.0, 1e-5)
    finally:
        with closing(psycopg.connect(postgres_database.superuser_url, autocommit=True)) as conn:
            conn.execute("DROP DATABASE IF EXISTS pcqr_ledger WITH (FORCE)")
            conn.execute("DROP ROLE IF EXISTS alice")
            conn.execute("DROP ROLE IF EXISTS budget_owner")


def test_the_python_api_charges_the_team_ledger(team: SimpleNamespace, thread_cluster_yaml: str) -> None:
    """pcqr.set_budget as the owner, then a scikit-learn cross-validation of PrivateClassifier as an
    analyst: every fit charged to the server, and none past the budget."""
    import numpy as np
    from sklearn.model_selection import cross_val_score

    import pcqr

    rng = np.random.default_rng(4)
    X = rng.normal(size=(6000, 3))
    y = (X[:, 0] > 0.1).astype(int)
    options = {"epsilon": 100, "delta": 1e-3, "cutoff": 20, "subsamples": 50, "cluster": thread_cluster_yaml,
               "seed": 3, "insecure_seed": True}
    pcqr.set_budget(X, y, epsilon=300, delta=3e-3, ledger=team.owner, name="rows")
    scores = cross_val_score(pcqr.PrivateClassifier(ledger=team.analyst, **options), X, y, cv=3)
    assert np.all(np.isfinite(scores)) and scores.mean() > 0.8
    with pytest.raises(PcqrError, match="privacy budget of .* exceeded"):
        pcqr.PrivateClassifier(ledger=team.analyst, **options).fit(X, y)
    with Ledger(team.analyst) as ledger:
        identity = ledger.store.find_name("rows")
        assert identity is not None and ledger.store.spent(identity) == (300.0, pytest.approx(3e-3))
        assert ledger.store.verify_chain()["broken"] is None


def test_a_server_down_past_the_wait_is_one_line_and_the_rerun_loses_nothing(
        team: SimpleNamespace, tmp_path: Path, thread_cluster_yaml: str, postgres_server: Any,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The server stops in the middle of `pcqr answer` and stays down past the commit's wait: one
    line, exit 2; started again, the same command resumes and the log is whole."""
    import pcqr.pipeline.budget.postgres_store as postgres_store

    write_session_data(tmp_path)
    assert main(["train", "--private", str(tmp_path / "private"), "--state", str(tmp_path / "state"),
                 "--epsilon", "100", "--delta", "1e-3", "--cutoff", "20", "--subsamples", "50", "--gate", "stability",
                 "--learner", "stump", "--cluster", thread_cluster_yaml, "--ledger", team.analyst]) == 0
    capsys.readouterr()  # the training's notes (its delta is above 1/n: a warning line)
    original, calls = PostgresStore.advance_session, []

    def stopping(self: PostgresStore, *args: Any) -> bool:
        calls.append(1)
        if len(calls) == 2:
            postgres_server.stop()
        return original(self, *args)

    monkeypatch.setattr(postgres_store, "RECONNECT_S", 1.0)
    monkeypatch.setattr(PostgresStore, "advance_session", stopping)
    try:
        line = _one_line_error(capsys, _answer(tmp_path, "state", "log", thread_cluster_yaml, team.analyst))
    finally:
        postgres_server.start()
    assert "the server is unreachable" in line and ":p@" not in line
    assert len(batch_files(str(tmp_path / "log"))) == 1  # the first batch; the second was not committed
    monkeypatch.setattr(PostgresStore, "advance_session", original)
    assert main(_answer(tmp_path, "state", "log", thread_cluster_yaml, team.analyst)) == 0
    assert len(batch_files(str(tmp_path / "log"))) == 4
    assert main(["replay", str(tmp_path / "log"), "--out", str(tmp_path / "replayed.parquet")]) == 0
    assert pq.read_table(tmp_path / "replayed.parquet").num_rows == 2000


def test_an_unreachable_server_is_one_line_without_its_password(capsys: pytest.CaptureFixture[str]) -> None:
    line = _one_line_error(capsys, ["budget", "verify", "--ledger", "postgresql://someone:secret@127.0.0.1:1/x"])
    assert "ledger postgresql://someone@127.0.0.1:1/x: cannot connect" in line and "secret" not in line


@pytest.mark.parametrize("argv", [
    ["budget", "verify", "--ledger", "postgresql://someone@127.0.0.1:1/x"],
    ["ledger", "init", "--admin-url", "postgresql://someone@127.0.0.1:1/x", "--analyst", "alice"],
    ["ledger", "migrate", "--from", "FILE", "--to", "postgresql://someone@127.0.0.1:1/x"],
])
def test_without_the_driver_a_server_ledger_says_how_to_install_it(argv: list[str], tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """`pip install pcqr` has no psycopg (the postgresql extra does): one line, never a traceback."""
    import sys

    with Ledger(str(tmp_path / "l.sqlite")):
        pass
    argv = [str(tmp_path / "l.sqlite") if word == "FILE" else word for word in argv]
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg now raises ImportError
    line = _one_line_error(capsys, argv)
    assert "needs the PostgreSQL driver: pip install 'pcqr[postgresql]'" in line


@pytest.mark.parametrize("url, needle", [("postgresql://u:secret@[bad", "its host or port cannot be read"),
                                         ("postgresql://h:notaport/db", "its host or port cannot be read")])
def test_a_malformed_server_url_is_refused_while_the_options_are_parsed(
        url: str, needle: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    write_session_data(tmp_path, rows=2000, queries=10)
    line = _one_line_error(capsys, ["train", "--private", str(tmp_path / "private"), "--state",
                                    str(tmp_path / "state"), "--ledger", url])
    assert line.startswith("pcqr: error: --ledger postgresql://") and needle in line and "secret" not in line
    assert not (tmp_path / "state").exists()
    monkeypatch.setenv("PCQR_LEDGER", url)
    assert "PCQR_LEDGER postgresql://" in _one_line_error(capsys, ["budget", "verify"])
