"""The ledger's storage contract (pcqr.pipeline.budget.store), run against both stores: a SQLite file
and a real PostgreSQL server (tests/postgres_server.py starts one; under CI=true a missing server
fails). The policy (Ledger) and the session book see the same rows, refusals and compare-and-swap
whichever store holds them (issue 30, item 1)."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from pcqr.pipeline.budget.ledger import Ledger, refund_charge
from pcqr.pipeline.budget.sketch import Sketch
from pcqr.pipeline.budget.store import Position, Receipt
from pcqr.pipeline.errors import PcqrError

ROOT = Path(__file__).resolve().parents[1]
IDENTITY, OTHER = "rows:" + "ab" * 32, "rows:" + "cd" * 32
#: A row sketch for the budgets the tests set on made-up identities (a server ledger stores the
#: owner's row sketch with every budget: issue 46).
SKETCH = Sketch.of(np.arange(1, 4, dtype=np.uint64))


@dataclass(frozen=True)
class Backend:
    """One store for a test: where analysts charge (``location``) and where budgets are set (``owner``)."""

    kind: str
    location: str
    owner: str


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "sqlite":
        path = str(tmp_path / "ledger.sqlite")
        return Backend("sqlite", path, path)
    database = request.getfixturevalue("team_ledger")
    return Backend("postgresql", database.analyst_url, database.admin_url)


def _budget(backend: Backend, epsilon: float, delta: float, identity: str = IDENTITY, name: str | None = None) -> None:
    with Ledger(backend.owner) as owner:
        owner.set_budget(identity, "data/private", epsilon, delta, name, SKETCH, 3)


def test_charges_add_up_and_a_refused_charge_records_nothing(backend: Backend) -> None:
    _budget(backend, 3.0, 3e-6, name="rows")
    with Ledger(backend.location) as ledger:
        for _ in range(3):
            ledger.charge(IDENTITY, "data/private", "train", 1.0, 1e-6, {"k": 1})
        with pytest.raises(PcqrError, match=r"^privacy budget of data/private exceeded: spent \(3, 3e-06\)"):
            ledger.charge(IDENTITY, "data/private", "train", 0.5, 0.0, {})
        store = ledger.store
        assert store.spent(IDENTITY) == pytest.approx((3.0, 3e-6))
        charges = store.charges(IDENTITY)
        assert [c["job"] for c in charges] == ["train"] * 3 and charges[0]["parameters"] == {"k": 1}
        assert set(charges[0]) == {"id", "job", "time", "epsilon", "delta", "parameters", "pid", "label", "role",
                                   "refunded"}
        assert charges[0]["role"] == (None if backend.kind == "sqlite" else "ledger_analyst")
        assert charges[0]["pid"] == os.getpid() and charges[0]["refunded"] is None
        assert store.budget(IDENTITY) == (3.0, 3e-6) and store.find_name("rows") == IDENTITY
        assert store.registration(IDENTITY)["label"] == "data/private"  # type: ignore[index]
        assert store.labelled("data/private") == [IDENTITY] and store.identities() == {IDENTITY}


def test_a_charge_with_overlaps_is_all_or_nothing(backend: Backend) -> None:
    _budget(backend, 1.0, 0.0, identity=OTHER)
    with Ledger(backend.location) as ledger:
        ledger.charge(IDENTITY, "a", "train", 0.75, 0.0, {}, also=[(OTHER, "b")])
        with pytest.raises(PcqrError, match="privacy budget of b exceeded"):
            ledger.charge(IDENTITY, "a", "train", 0.5, 0.0, {}, also=[(OTHER, "b")])
        assert ledger.store.spent(IDENTITY) == (0.75, 0.0) and ledger.store.spent(OTHER) == (0.75, 0.0)


def test_a_refund_frees_the_budget_once_and_keeps_its_first_note(backend: Backend) -> None:
    _budget(backend, 1.0, 0.0)
    with Ledger(backend.location) as ledger:
        charged = ledger.charge(IDENTITY, "data/private", "learn", 1.0, 0.0, {})
    refund_charge({**charged, "ledger": backend.location}, ValueError("a crash"))
    refund_charge({**charged, "ledger": backend.location}, PcqrError("a second refund"))
    with Ledger(backend.location) as ledger:
        (charge,) = ledger.store.charges(IDENTITY)
        assert charge["refunded"].endswith(" learn failed before releasing anything")
        assert ledger.store.spent(IDENTITY) == (0.0, 0.0)
        ledger.charge(IDENTITY, "data/private", "learn", 1.0, 0.0, {})  # the budget is free again


def test_a_budget_below_what_was_spent_is_refused(backend: Backend) -> None:
    with Ledger(backend.location) as ledger:
        ledger.charge(IDENTITY, "data/private", "train", 2.0, 0.0, {})
    with pytest.raises(PcqrError, match=r"is below what data/private has already spent \(2, 0\)"):
        _budget(backend, 1.0, 0.0)


def test_sketches_keep_the_first_stored(backend: Backend) -> None:
    first, second = SKETCH.to_bytes(), Sketch.of(np.arange(7, 9, dtype=np.uint64)).to_bytes()
    with Ledger(backend.location) as ledger:
        for identity in (IDENTITY, OTHER):  # on a server, a role stores sketches of data it charged
            ledger.charge(identity, "data/private", "train", 1.0, 0.0, {})
        ledger.store.store_sketch(IDENTITY, "rows", "", "a", 10, first)
        ledger.store.store_sketch(IDENTITY, "rows", "", "a", 10, second)
        ledger.store.store_sketch(OTHER, "features", '["x0"]', "b", 5, second)
        assert ledger.store.sketch(IDENTITY, "rows", "") == ("a", first)
        assert ledger.store.sketches("features") == [(OTHER, '["x0"]', "b", second)]
        assert ledger.store.sketch(OTHER, "rows", "") is None


def session_row(charge_id: int) -> dict[str, object]:
    """A new session's row (position zero, T = 5) paid by charge ``charge_id`` (tests/test_team_ledger.py too)."""
    return {"session_id": "s1", "identity": IDENTITY, "charge_id": charge_id, "cutoff": 5, "bottoms": 0, "batches": 0,
            "last_hash": "", "prev_hash": "", "state_path": "/state", "fixed": "f" * 64,
            "position": '{"bottoms": 0, "queries_seen": 0, "next_batch": 0, "last_hash": ""}', "seeded": 0,
            "created_at": "t", "updated_at": "t", "epsilon": 1.0, "delta": 0.0}


def digest(n: int) -> str:
    """A batch's SHA-256 for the tests' positions: 64 hex digits."""
    return f"{n:064x}"


def _record(position: Position) -> str:
    return (f'{{"bottoms": {position.bottoms}, "queries_seen": {position.queries_seen}, '
            f'"next_batch": {position.batches}, "last_hash": "{position.last_hash}"}}')


def test_a_session_advances_by_compare_and_swap_only(backend: Backend) -> None:
    with Ledger(backend.location) as ledger:
        charged = ledger.charge(IDENTITY, "data/private", "train", 1.0, 0.0, {})
        store = ledger.store
        store.insert_session(session_row(charged["id"]))
        start, one, two = Position(0, 0, 0, ""), Position(2, 500, 1, digest(1)), Position(3, 1000, 2, digest(2))
        assert store.advance_session("s1", start, one, _record(one))
        assert not store.advance_session("s1", start, one, _record(one))  # a second copy at the old position
        row = store.session("s1")
        assert row is not None and (row["bottoms"], row["batches"], row["last_hash"], row["prev_hash"]) == \
            (2, 1, digest(1), "")
        assert not store.advance_session("s1", Position(2, 400, 1, digest(1)), two, _record(two))  # another position
        assert store.advance_session("s1", one, two, _record(two))
        store.close_session("s1", True)
        closed = store.session("s1")["closed"]  # type: ignore[index]
        assert closed.endswith(" train failed on invalid input before releasing anything")
        store.close_session("s1", False)
        three = Position(3, 1500, 3, digest(3))
        assert not store.advance_session("s1", two, three, _record(three))  # closed
        assert store.session("s1")["closed"] == closed  # type: ignore[index]  # the first note stays
        assert store.session("unknown") is None


CHILD = """
import os, sys, time
from pcqr.pipeline.budget.ledger import Ledger
from pcqr.pipeline.errors import PcqrError
location, identity, ready, go = sys.argv[1:5]
with Ledger(location) as ledger:
    open(ready, "w").close()
    while not os.path.exists(go):
        time.sleep(0.001)
    try:
        ledger.charge(identity, "data/private", "job", 1.0, 0.0, {})
    except PcqrError as exc:
        print(exc)
        sys.exit(3)
"""


def test_ten_processes_charging_at_once_get_exactly_what_the_budget_admits(backend: Backend, tmp_path: Path) -> None:
    _budget(backend, 3.0, 1e-9)
    go = str(tmp_path / "go")
    ready = [str(tmp_path / f"ready-{i}") for i in range(10)]
    children = [subprocess.Popen([sys.executable, "-c", CHILD, backend.location, IDENTITY, r, go], cwd=ROOT,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in ready]
    try:
        deadline = time.monotonic() + 60
        while not all(os.path.exists(r) for r in ready):  # every child holds an open ledger
            assert time.monotonic() < deadline and all(c.poll() is None for c in children)
            time.sleep(0.01)
        open(go, "w").close()
        outcomes = [(c.wait(timeout=120), *c.communicate()) for c in children]
    finally:
        for c in children:
            if c.poll() is None:
                c.kill()
    assert sorted(code for code, _, _ in outcomes) == [0] * 3 + [3] * 7, [err for _, _, err in outcomes]
    with Ledger(backend.location) as ledger:
        charges = ledger.store.charges(IDENTITY)
        assert len(charges) == 3 and {c["pid"] for c in charges} <= {c.pid for c in children}
        assert ledger.store.spent(IDENTITY) == (3.0, 0.0)


def test_a_receipt_without_its_token_refunds_nothing_on_the_server(backend: Backend) -> None:
    with Ledger(backend.location) as ledger:
        charged = ledger.charge(IDENTITY, "data/private", "learn", 1.0, 0.0, {})
        forged = Receipt(charged["id"], None if backend.kind == "sqlite" else "0" * 32)
        if backend.kind == "sqlite":  # the file's owner can rewrite anything: no token to check
            ledger.refund(forged, ValueError("forged"))
            assert ledger.store.spent(IDENTITY) == (0.0, 0.0)
            return
        with pytest.raises(PcqrError, match="refunded only by the process that made it"):
            ledger.refund(forged, ValueError("forged"))
        assert ledger.store.spent(IDENTITY) == (1.0, 0.0)
