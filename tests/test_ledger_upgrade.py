"""A version 1 team ledger (pcqr 0.2.1, tests/ledger_schema_v1.json) upgraded in place by
``pcqr ledger init`` (issue 46): refused by this pcqr until then, upgraded in one transaction with its
chain and history kept, its analysts granted again, the sketches version 1 stored unchecked removed,
the budgets whose row sketch nobody can vouch for named, and what version 1 let an analyst break
(two charges of 1e308) reported by ``pcqr budget verify`` instead of a traceback."""
from __future__ import annotations

import json
import math
from contextlib import closing
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pcqr.jobs.cli import main
from pcqr.pipeline.budget.ledger import Ledger

V1 = json.loads((Path(__file__).parent / "ledger_schema_v1.json").read_text())
DATA, BROKEN = "rows:" + "ab" * 32, "rows:" + "cd" * 32
VALID = bytes.fromhex("01000000000000000100000000000000")  # one (value 1, count 1) pair


def _v1_ledger(db: Any) -> dict[str, str]:
    """The database as pcqr 0.2.1 left it: its schema, two analysts, a budget whose row sketch an
    analyst planted, a malformed sketch, two charges of 1e308 and a refunded charge."""
    bob = f"bob_{db.database}"
    urls = {"owner": db.admin_url, "alice": db.analyst_url, "bob": db.analyst(bob), "bob_role": bob}
    with closing(psycopg.connect(db.admin_url, autocommit=True)) as conn, conn.transaction():
        for statement in V1["statements"]:
            conn.execute(statement)
        for role in (db.analyst_role, bob):
            for statement in V1["grants"]:
                conn.execute(statement.replace("{analyst}", f'"{role}"'))
    with closing(psycopg.connect(urls["alice"], autocommit=True)) as alice:
        alice.execute("SELECT pcqr.store_sketch(%s, 'rows', '', 'data', 1, %s)", (DATA, VALID))
        alice.execute("SELECT pcqr.store_sketch(%s, 'rows', '', 'broken', 1, '\\x010203'::bytea)", (BROKEN,))
        for _ in range(2):
            alice.execute("SELECT pcqr.charge(%s, 'broken', 'train', 1e308, 0, '{}', 1)", (BROKEN,))
        charge_id, token = alice.execute("SELECT * FROM pcqr.charge(%s, 'data', 'learn', 1, 0, '{}', 1)",
                                         (DATA,)).fetchone()
        alice.execute("SELECT pcqr.refund(%s, %s, 'learn failed before releasing anything')", (charge_id, token))
    with closing(psycopg.connect(urls["owner"], autocommit=True)) as owner:
        owner.execute("SELECT pcqr.set_budget(%s, 'data', NULL, 5, 1e-5)", (DATA,))
    return urls


def test_a_version_1_ledger_is_refused_then_upgraded_in_place(postgres_database: Any,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    urls = _v1_ledger(postgres_database)
    with closing(psycopg.connect(urls["owner"], autocommit=True)) as owner:
        chain_before = owner.execute("SELECT id, hash FROM pcqr.charges ORDER BY id").fetchall()
    assert main(["budget", "verify", "--ledger", urls["alice"]]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "schema version 1 is older than this pcqr's (2); its budget owner upgrades it with pcqr ledger init" in line

    assert main(["ledger", "init", "--admin-url", urls["owner"], "--analyst", postgres_database.analyst_role,
                 "--json"]) == 0
    done = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert done["upgraded_from"] == 1 and not done["created"]
    assert sorted(done["analysts_granted_again"]) == sorted([postgres_database.analyst_role, urls["bob_role"]])
    assert done["malformed_sketches_removed"] == ["rows sketch of broken"]
    assert done["budgets_to_set_again"] == ["data"]  # its row sketch was stored by an analyst, unchecked

    with closing(psycopg.connect(urls["owner"], autocommit=True)) as owner:
        assert owner.execute("SELECT id, hash FROM pcqr.charges ORDER BY id").fetchall() == chain_before
    with Ledger(urls["bob"]) as bob:  # granted again: charges through the new functions
        bob.charge(DATA, "data", "train", 1.0, 0.0, {})
        assert bob.store.spent(DATA) == (1.0, 0.0)  # the refunded charge stays refunded
        assert math.isinf(bob.store.spent(BROKEN)[0])  # the overflow is Infinity, not an error
    assert main(["budget", "verify", "--ledger", urls["alice"], "--json"]) == 1
    found = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert found["broken"] is None
    assert found["problems"][:2] == [f"chain: entry {i} charges an epsilon or delta outside what the server accepts "
                                     "(written before version 2 checked it)" for i in (1, 2)]
    assert main(["ledger", "init", "--admin-url", urls["owner"], "--analyst", postgres_database.analyst_role,
                 "--json"]) == 0  # a second init changes nothing
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["upgraded_from"] is None
