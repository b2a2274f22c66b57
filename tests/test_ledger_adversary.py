"""A hostile analyst against the team ledger's server (issue 46; docs/privacy.md, Threat model).

The threat is README's set-up, seen from the other side: an analyst holding ``psql`` and their own
role's URL, who may read every table and call the ledger's functions with any argument, in any
order, on any session or charge. Each row of :data:`ATTACKS` connects as analyst alice (psycopg,
autocommit, a fresh connection) and tries one thing the server must refuse: a direct write, a
function of the owner's, a temporary table shadowing one the functions read, a refund, a session
step or a registration that is not hers or not valid, an argument out of the server's bounds, the
ledger's lock held to stall everyone else. Each row asserts that

1. the server refuses it with the expected SQLSTATE (42501, or PX001-PX006 of schema version 2),
   or, through pcqr's Python API, with a one-line PcqrError naming what it should;
2. nothing changed: every table of the schema, and its objects and grants, read as the superuser
   before and after, are equal (HARMLESS rows are accepted, and change nothing either);
3. ``pcqr budget verify`` still passes (no problem, the chain unbroken).

Beside the table: a row sketch an analyst plants before the owner sets the budget is replaced by
the owner's; the analysts hold SELECT and the seven functions, nothing else; and two analysts
charging the last of a budget at once get it once.

One database for the module, set up through pcqr's own API: an owner's budget, charges of alice
and bob, a session of alice's that released a batch, sessions of both at position zero. A refused
call changes nothing, so no row restores anything, and every row takes milliseconds (the lock's
rows wait for their one-second timeout). A server that accepts a row changes the set-up: each
registration row pays with a charge of its own, the rows that overflow such a server's sums
(1e308) come last, and the other tests before the table.
"""
from __future__ import annotations

import inspect
import itertools
import json
import math
import os
import re
import secrets
import threading
import time
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import dask.config
import numpy as np
import psycopg
import pytest
from psycopg import sql

from pcqr.pipeline.budget.ledger import Ledger
from pcqr.pipeline.budget.sketch import Sketch
from pcqr.pipeline.budget.store import Position
from pcqr.pipeline.budget.team_ledger import init_ledger, verify
from pcqr.pipeline.errors import PcqrError

Connection = psycopg.Connection[Any]

LOCK_KEY = 0x70637172  # the ledger's advisory lock: 1885565298
IDENTITY = "rows:" + "ab" * 32  # budgeted (BUDGET) by the owner; charged by alice and bob
OTHER = "rows:" + "cd" * 32  # no budget: only an argument's bounds can refuse a charge to it
NEVER = "rows:" + "ef" * 32  # charged by no one
PLANTED, RACED = "rows:" + "12" * 32, "rows:" + "34" * 32  # the planting test's, the race's
LABEL = "data/private"
BUDGET = (8.0, 1e-5)
PAST = 2.0  # a charge past what IDENTITY has left (SET_UP)
T = 5
ZERO, P1 = Position(0, 0, 0, ""), Position(1, 500, 1, "a1" * 32)  # at zero; after one batch
H2 = "b2" * 32
TRUE_SKETCH = Sketch.of(np.arange(1, 201, dtype=np.uint64) * np.uint64(7919))  # "the dataset's rows"
FAKE_SKETCH = Sketch.of(np.array([1, 2, 3], dtype=np.uint64))
#: The charges the set-up makes through pcqr's Python API: name -> (who, identity, job, epsilon, delta).
#: IDENTITY's come to 6.5 of its 8 once alice-refunded is refunded: PAST, 2 more, is past the budget.
SET_UP = {
    "alice-released": ("alice", IDENTITY, "train", 1.0, 1e-6),  # pays session alice-released, one batch out
    "alice-zero": ("alice", IDENTITY, "train", 0.5, 1e-6),  # pays session alice-zero, at zero
    "alice-spare": ("alice", IDENTITY, "train", 1.0, 1e-6),  # pays nothing
    "alice-learn": ("alice", IDENTITY, "learn", 1.0, 0.0),
    "alice-refunded": ("alice", IDENTITY, "train", 1.0, 1e-6),  # refunded by alice
    "alice-other": ("alice", OTHER, "train", 1.0, 1e-6),
    "bob-session": ("bob", IDENTITY, "train", 1.0, 1e-6),  # pays session bob-zero, at zero
    "bob-spare": ("bob", IDENTITY, "train", 1.0, 1e-6),
    "bob-token": ("bob", IDENTITY, "train", 1.0, 1e-6),
    "bob-other": ("bob", OTHER, "train", 1.0, 1e-6),
}
#: What an analyst may execute (the spec of schema version 2).
ANALYST_FUNCTIONS = {"spent", "charge", "refund", "store_sketch", "register_session", "close_session",
                     "advance_session"}
HARMLESS, PCQR_ERROR = "accepted, changes nothing", "PcqrError"
#: A lock's row releases the lock after this long: a server that makes the charge wait for ever
#: fails the row instead of hanging the suite.
RELEASE_S = 5.0


@dataclass(frozen=True)
class Paid:
    """A charge the set-up made: its id and refund token, and what it paid."""

    id: int
    token: str
    epsilon: float
    delta: float


@dataclass(frozen=True)
class World:
    """The module's ledger: URLs (owner, alice, bob, superuser), the superuser's connection, roles,
    and the set-up's charges."""

    owner: str
    alice: str
    bob: str
    superuser: str
    admin: Connection  # the superuser's, on the ledger's database
    roles: dict[str, str]
    paid: dict[str, Paid]
    refund_entry: int  # the chain entry that refunded paid["alice-refunded"]


Act = Callable[[World, Connection], object]


@dataclass(frozen=True)
class Attack:
    """One row: what alice tries (``act``, on her connection) and how the server answers: a SQLSTATE,
    PCQR_ERROR (a one-line PcqrError holding every string of ``says``) or HARMLESS."""

    name: str
    refusal: str
    act: Act
    says: Callable[[World, Connection], list[str]] = field(default=lambda w, conn: [])


# --- calling the server -------------------------------------------------------------------------

def call(conn: Connection, function: str, **arguments: object) -> list[tuple[Any, ...]]:
    """``SELECT * FROM pcqr.FUNCTION(name => value, ...)`` with those of ``arguments`` the function
    declares: named notation, so one row calls schema version 1's and version 2's signatures."""
    declared = conn.execute("SELECT proargnames FROM pg_proc WHERE pronamespace = 'pcqr'::regnamespace "
                            "AND proname = %s", (function,)).fetchone()
    names = [n for n in arguments if declared is None or declared[0] is None or n in declared[0]]
    query = sql.SQL("SELECT * FROM pcqr.{}({})").format(sql.Identifier(function), sql.SQL(", ").join(
        sql.SQL("{} => {}").format(sql.Identifier(n), sql.Placeholder()) for n in names))
    return conn.execute(query, [arguments[n] for n in names]).fetchall()


def record(position: Position, **extra: object) -> str:
    """A batch commit's record of ``position``."""
    return json.dumps({"bottoms": position.bottoms, "queries_seen": position.queries_seen,
                       "next_batch": position.batches, "last_hash": position.last_hash, **extra})


def pairs(*values_counts: tuple[int, int]) -> bytes:
    """Sketch bytes: little-endian uint64 (value, count) pairs."""
    return np.array(values_counts, dtype="<u8").reshape(-1, 2).tobytes()


_FRESH = itertools.count()
CHARGE = {"p_identity": OTHER, "p_label": LABEL, "p_job": "train", "p_epsilon": 0.5, "p_delta": 0.0,
          "p_parameters": "{}", "p_pid": 1}


def statement(text: str) -> Act:
    """One statement of the table's own text."""
    return lambda w, conn: conn.execute(text)


def in_transaction(text: str) -> Act:
    """One statement in a transaction (LOCK TABLE needs one)."""
    def act(w: World, conn: Connection) -> object:
        with conn.transaction():
            return conn.execute(text)
    return act


def charging(**changes: object) -> Act:
    """charge() with ``changes`` to :data:`CHARGE` (0.5 of OTHER, which has no budget)."""
    return lambda w, conn: call(conn, "charge", **{**CHARGE, **changes})


def storing(**changes: object) -> Act:
    """store_sketch() of a feature sketch of OTHER (which alice charged) under columns of the row's
    own, with ``changes``."""
    arguments = {"p_identity": OTHER, "p_kind": "features", "p_columns": json.dumps([f"c{next(_FRESH)}"]),
                 "p_label": LABEL, "p_rows": 3, "p_sketch": FAKE_SKETCH.to_bytes(), **changes}
    return lambda w, conn: call(conn, "store_sketch", **arguments)


#: Unused charges of (0, 0) by alice, one per registration row that names none (SET_UP adds them), so
#: that a server accepting one row's registration leaves the next row's charge unused.
SPARES: list[str] = []


def registering(charge: str | None = None, **changes: object) -> Act:
    """register_session() of a new session of IDENTITY at position zero, paid by the set-up's
    ``charge`` (by default a spare of its own) with its (epsilon, delta), with ``changes``."""
    session, payer = f"attack-{next(_FRESH)}", charge or f"spare-{len(SPARES)}"
    if charge is None:
        SPARES.append(payer)

    def act(w: World, conn: Connection) -> object:
        paid = w.paid[payer]
        return call(conn, "register_session", **{
            "p_session": session, "p_identity": IDENTITY, "p_charge": paid.id, "p_cutoff": T, "p_bottoms": 0,
            "p_batches": 0, "p_last_hash": "", "p_state_path": "/state", "p_fixed": "f" * 64,
            "p_position": record(ZERO), "p_seeded": 0, "p_epsilon": paid.epsilon, "p_delta": paid.delta, **changes})
    return act


def advancing(session: str, at: Position, new: Position, record_text: str | None = None, **changes: object) -> Act:
    """advance_session() from ``at`` to ``new`` (its record: ``new``'s unless given), with ``changes``."""
    arguments = {"p_session": session, "at_bottoms": at.bottoms, "at_seen": at.queries_seen, "at_batches": at.batches,
                 "at_hash": at.last_hash, "new_bottoms": new.bottoms, "new_seen": new.queries_seen,
                 "new_batches": new.batches, "new_hash": new.last_hash, "p_record": record_text or record(new),
                 **changes}
    return lambda w, conn: call(conn, "advance_session", **arguments)


ITS_TOKEN = "the charge's own token"


def refunding(charge: str, token: str | None = ITS_TOKEN) -> Act:
    """refund() of the set-up's ``charge`` with ``token`` (by default the charge's own)."""
    return lambda w, conn: refund(conn, w.paid[charge].id, w.paid[charge].token if token == ITS_TOKEN else token)


def refund(conn: Connection, charge: int | None, token: str | None) -> object:
    """refund() (version 1 takes a note where version 2 takes invalid_input)."""
    return call(conn, "refund", p_charge=charge, p_token=token, p_note="t failed before releasing anything",
                p_invalid_input=False)


def shadowing(statements: list[str], then: Act) -> Act:
    """Temporary objects named like the schema's (``statements``), then ``then``."""
    def act(w: World, conn: Connection) -> object:
        for text in statements:
            conn.execute(text)
        return then(w, conn)
    return act


def while_locked(take: Act) -> Act:
    """Alice takes the ledger's lock (``take``) and keeps it; bob charges through pcqr with a lock
    timeout of 1 s. Her connection closes after RELEASE_S whatever happens: a server that lets the
    charge wait for ever fails the row instead of hanging the suite."""
    def act(w: World, conn: Connection) -> object:
        take(w, conn)
        release = threading.Timer(RELEASE_S, conn.close)
        release.start()
        try:
            with dask.config.set({"pcqr.ledger-timeouts.lock": 1}), Ledger(w.bob) as ledger:
                return ledger.charge(OTHER, LABEL, "train", 0.0, 0.0, {})
        finally:
            release.cancel()
    return act


def charge_left_open(w: World, conn: Connection) -> object:
    """A charge of nothing in a transaction never committed: it holds the lock as long as she likes."""
    conn.execute("BEGIN")
    return call(conn, "charge", **{**CHARGE, "p_epsilon": 0.0})


def overflowing(w: World, conn: Connection) -> object:
    """Two charges of 1e308 to OTHER, then its spent (a server that accepts them overflows the sum)."""
    for _ in range(2):
        call(conn, "charge", **{**CHARGE, "p_epsilon": 1e308})
    return call(conn, "spent", p_identity=OTHER)


def holder(w: World, conn: Connection) -> list[str]:
    """What bob's refusal names: the lock, and who holds it (alice's role and her backend's pid)."""
    return [w.roles["alice"], f"pid {conn.info.backend_pid}", "lock"]


# --- the table ------------------------------------------------------------------------------------

UPDATES = {"meta": "UPDATE pcqr.meta SET value = '1'", "budgets": "UPDATE pcqr.budgets SET epsilon = 1e6",
           "charges": "UPDATE pcqr.charges SET epsilon = 0", "sketches": "UPDATE pcqr.sketches SET sketch = ''",
           "sessions": "UPDATE pcqr.sessions SET bottoms = 0, closed = NULL"}
POSITION_AT = {"c = 3": {"bottoms": 3}, "stream position 10": {"queries_seen": 10}, "batch 1": {"next_batch": 1}}
BAD_EPSILONS: dict[str, float | None] = {"-1": -1.0, "NaN": math.nan, "+inf": math.inf, "-inf": -math.inf,
                                         "NULL": None, "701": 701.0}
BAD_DELTAS: dict[str, float | None] = {"-1e-9": -1e-9, "NaN": math.nan, "+inf": math.inf, "-inf": -math.inf,
                                       "NULL": None, "1": 1.0}

ATTACKS = [
    # direct writes and the owner's functions: no privilege
    *(Attack(f"{verb} {table}", "42501", statement(text)) for table, update in UPDATES.items()
      for verb, text in (("INSERT INTO", f"INSERT INTO pcqr.{table} SELECT * FROM pcqr.{table}"), ("UPDATE", update),
                         ("DELETE FROM", f"DELETE FROM pcqr.{table}"), ("TRUNCATE", f"TRUNCATE pcqr.{table}"))),
    Attack("CREATE TABLE pcqr.x", "42501", statement("CREATE TABLE pcqr.x (a int)")),
    Attack("ALTER TABLE pcqr.charges", "42501", statement("ALTER TABLE pcqr.charges DROP CONSTRAINT charges_pkey")),
    Attack("SELECT FOR UPDATE on sessions", "42501", statement("SELECT * FROM pcqr.sessions FOR UPDATE")),
    Attack("LOCK TABLE charges", "42501", in_transaction("LOCK TABLE pcqr.charges IN EXCLUSIVE MODE")),
    Attack("GRANT INSERT ON charges to herself", HARMLESS,
           lambda w, conn: conn.execute(sql.SQL("GRANT INSERT ON pcqr.charges TO {}").format(
               sql.Identifier(w.roles["alice"])))),
    Attack("call set_budget", "42501", lambda w, conn: call(
        conn, "set_budget", p_identity=IDENTITY, p_label=LABEL, p_name=None, p_epsilon=1e6, p_delta=0.5, p_rows=None,
        p_sketch=None)),
    Attack("call append_entry", "42501", lambda w, conn: call(
        conn, "append_entry", p_kind="refund", p_identity=IDENTITY, p_label=LABEL, p_job="refund", p_time="t",
        p_epsilon=0.0, p_delta=0.0, p_parameters="{}", p_pid=1, p_refund_of=w.paid["alice-spare"].id, p_note="n",
        p_role=w.roles["alice"], p_token_hash=None)),
    Attack("call field", "42501", lambda w, conn: call(conn, "field", v="x")),
    # temporary tables and functions named like the ones the functions read
    Attack("temp budgets with a huge budget, then a charge past the real one", "PX001", shadowing(
        ["CREATE TEMP TABLE budgets (LIKE pcqr.budgets)",
         "INSERT INTO pg_temp.budgets SELECT identity, label, name, 1e6, 0.5, set_at FROM pcqr.budgets"],
        charging(p_identity=IDENTITY, p_epsilon=PAST))),
    Attack("empty temp charges, then a charge past the budget", "PX001", shadowing(
        ["CREATE TEMP TABLE charges (LIKE pcqr.charges)"], charging(p_identity=IDENTITY, p_epsilon=PAST))),
    Attack("temp charges holding a charge of -100, then a charge past the budget", "PX001", shadowing(
        ["CREATE TEMP TABLE charges (LIKE pcqr.charges)",
         f"INSERT INTO pg_temp.charges SELECT 1000, 'charge', '{IDENTITY}', 'x', 'train', 't', -100, 0, '{{}}', 1, "
         "NULL, NULL, 'x', NULL, 'x', 'x'"],
        charging(p_identity=IDENTITY, p_epsilon=PAST))),
    Attack("temp function spent, then a charge past the budget", "PX001", shadowing(
        ["CREATE FUNCTION pg_temp.spent(p_identity text, OUT epsilon float8, OUT delta float8) LANGUAGE sql "
         "AS $$ SELECT 0::float8, 0::float8 $$"], charging(p_identity=IDENTITY, p_epsilon=PAST))),
    Attack("empty temp sessions, then refund the charge of a session that released a batch", "PX003", shadowing(
        ["CREATE TEMP TABLE sessions (LIKE pcqr.sessions)"], refunding("alice-released"))),
    Attack("empty temp sessions, then register on a charge that pays a session", "PX004", shadowing(
        ["CREATE TEMP TABLE sessions (LIKE pcqr.sessions)"], registering("alice-released"))),
    # refunds
    Attack("refund without a token", "PX003", refunding("alice-spare", None)),
    Attack("refund with a wrong token", "PX003", refunding("alice-spare", "0" * 32)),
    Attack("refund a refund entry", "PX003", lambda w, conn: refund(conn, w.refund_entry,
                                                                     w.paid["alice-refunded"].token)),
    Attack("refund bob's charge with its token", "PX006", refunding("bob-token")),
    Attack("refund the charge of bob's session with its token", "PX006", refunding("bob-session")),
    Attack("refund the charge of a session that released a batch", "PX003", refunding("alice-released")),
    Attack("refund charge NULL", "PX005", lambda w, conn: refund(conn, None, "0" * 32)),
    Attack("refund a refunded charge again", HARMLESS, refunding("alice-refunded")),
    # sessions: steps
    Attack("advance c backwards", "PX002", advancing("alice-released", P1, Position(0, 1000, 2, H2))),
    Attack("advance the stream position backwards", "PX002", advancing("alice-released", P1, Position(1, 400, 2, H2))),
    Attack("advance past T", "PX002", advancing("alice-released", P1, Position(T + 1, 1000, 2, H2))),
    Attack("advance two batches", "PX002", advancing("alice-released", P1, Position(1, 1000, 3, H2))),
    Attack("advance with a record that disagrees", "PX002", advancing(
        "alice-released", P1, Position(2, 1000, 2, H2), record(Position(1, 1000, 2, H2)))),
    Attack("advance bob's session", "PX006", advancing("bob-zero", ZERO, Position(0, 500, 1, H2))),
    Attack("close bob's session", "PX006",
           lambda w, conn: call(conn, "close_session", p_session="bob-zero", p_note="t", p_invalid_input=False)),
    Attack("advance with a record over 1 MiB", "PX005", advancing(
        "alice-zero", ZERO, Position(0, 500, 1, H2), record(Position(0, 500, 1, H2), pad="x" * (1 << 20)))),
    Attack("advance to a hash that is not hex", "PX005", advancing("alice-zero", ZERO, Position(0, 500, 1, "h2"))),
    Attack("advance from a NULL position", "PX005",
           advancing("alice-zero", ZERO, Position(0, 500, 1, H2), at_batches=None)),
    # sessions: registrations
    Attack("register a session paid by bob's charge", "PX006", registering("bob-spare")),
    Attack("register a session paid by a charge of another identity", "PX004", registering("alice-other")),
    Attack("register a session paid by a refunded charge", "PX004", registering("alice-refunded")),
    Attack("register a session paid by a charge that pays a session", "PX004", registering("alice-released")),
    Attack("register a session paid by a learn charge", "PX004", registering("alice-learn")),
    Attack("register a session certifying another epsilon than its charge's", "PX004",
           registering(p_epsilon=2.0)),
    Attack("register a session certifying another delta than its charge's", "PX004",
           registering(p_delta=1e-3)),
    *(Attack(f"register a session at {where}", "PX004",
             registering(p_position=json.dumps({**json.loads(record(ZERO)), **moved})))
      for where, moved in POSITION_AT.items()),
    Attack("register a session with T = 0", "PX005", registering(p_cutoff=0)),
    Attack("register a session with T = 1000001", "PX005", registering(p_cutoff=1_000_001)),
    Attack("register a session with an id of 129 characters", "PX005", registering(p_session="s" * 129)),
    Attack("register a session with a newline in its state path", "PX005",
           registering(p_state_path="/state\nok")),
    Attack("register a session whose fixed digest is not hex", "PX005", registering(p_fixed="f")),
    Attack("register a session seeded 2", "PX005", registering(p_seeded=2)),
    Attack("register a session whose position is not JSON", "PX005", registering(p_position="{")),
    # arguments of charge (to OTHER, which has no budget)
    *(Attack(f"charge epsilon {name}", "PX005", charging(p_epsilon=value)) for name, value in BAD_EPSILONS.items()),
    *(Attack(f"charge delta {name}", "PX005", charging(p_delta=value)) for name, value in BAD_DELTAS.items()),
    Attack("charge a label of 4097 characters", "PX005", charging(p_label="x" * 4097)),
    Attack("charge an empty label", "PX005", charging(p_label="")),
    Attack("charge a NULL label", "PX005", charging(p_label=None)),
    Attack("charge a label with a newline", "PX005", charging(p_label="data\nspent (0, 0) of (8, 1e-05)")),
    Attack("charge a label with an escape sequence", "PX005", charging(p_label="data\x1b[2K")),
    Attack("charge a job that is not a job", "PX005", charging(p_job="train --epsilon 0")),
    Attack("charge a job of 33 characters", "PX005", charging(p_job="t" * 33)),
    Attack("charge parameters over 1 MiB", "PX005", charging(p_parameters=json.dumps({"x": "x" * (1 << 20)}))),
    Attack("charge parameters that are a list", "PX005", charging(p_parameters="[]")),
    Attack("charge parameters that are not JSON", "PX005", charging(p_parameters="{")),
    Attack("charge an identity that is not one", "PX005", charging(p_identity="rows:xyz")),
    Attack("charge an identity in upper case", "PX005", charging(p_identity="rows:" + "AB" * 32)),
    Attack("charge a NULL identity", "PX005", charging(p_identity=None)),
    Attack("charge pid -1", "PX005", charging(p_pid=-1)),
    # sketches
    Attack("store a sketch of 3 bytes", "PX005", storing(p_sketch=b"\x01\x02\x03")),
    Attack("store a sketch of 17 bytes", "PX005", storing(p_sketch=pairs((1, 1)) + b"\x00")),
    Attack("store a sketch of 65552 bytes", "PX005", storing(p_sketch=pairs(*((v, 1) for v in range(1, 4098))))),
    Attack("store a sketch with two equal values", "PX005", storing(p_sketch=pairs((5, 1), (5, 1)))),
    Attack("store a sketch with decreasing values", "PX005", storing(p_sketch=pairs((6, 1), (5, 1)))),
    Attack("store a sketch decreasing as unsigned 64-bit values", "PX005",
           storing(p_sketch=pairs((1 << 63, 1), (1, 1)))),
    Attack("store a sketch with a zero count", "PX005", storing(p_sketch=pairs((5, 0)))),
    Attack("store a NULL sketch", "PX005", storing(p_sketch=None)),
    Attack("store a legacy sketch", "PX005", storing(p_kind="legacy", p_columns="sha256:" + "0" * 64, p_sketch=b"")),
    Attack("store a sketch of -1 rows", "PX005", storing(p_rows=-1)),
    Attack("store a row sketch with columns", "PX005", storing(p_kind="rows")),
    Attack("store a feature sketch whose columns are not a JSON list", "PX005", storing(p_columns="x0")),
    Attack("store a sketch with a newline in its label", "PX005", storing(p_label="data\nx")),
    Attack("store a sketch of an identity alice never charged", "PX006",
           storing(p_identity=NEVER, p_kind="rows", p_columns="")),
    # the ledger's lock, held by alice while bob charges
    Attack("hold the ledger's advisory lock", PCQR_ERROR,
           while_locked(statement(f"SELECT pg_advisory_lock({LOCK_KEY})")), holder),
    Attack("hold the ledger's advisory lock shared", PCQR_ERROR,
           while_locked(statement(f"SELECT pg_advisory_lock_shared({LOCK_KEY})")), holder),
    Attack("hold the ledger's lock with a charge left uncommitted", PCQR_ERROR, while_locked(charge_left_open), holder),
    # last: a server that accepts these overflows OTHER's spent, and verify, for every later row
    Attack("charge epsilon 1e308", "PX005", charging(p_epsilon=1e308)),
    Attack("charge delta 1e308", "PX005", charging(p_delta=1e308)),
    Attack("charge epsilon 1e308 twice, then read spent", "PX005", overflowing),
]


# --- the module's ledger --------------------------------------------------------------------------

def set_budget(owner_url: str, identity: str, epsilon: float, delta: float) -> None:
    """The owner sets ``identity``'s budget with its row sketch (schema version 2: the server keeps the
    owner's, and refuses a budget of a rows: identity without one); version 1 takes no sketch. The one
    place to adjust when the owner's API settles."""
    with Ledger(owner_url) as owner:
        if "row_sketch" in inspect.signature(owner.set_budget).parameters:
            owner.set_budget(identity, LABEL, epsilon, delta, row_sketch=TRUE_SKETCH,
                             rows=int(TRUE_SKETCH.counts.sum()))
        else:
            owner.set_budget(identity, LABEL, epsilon, delta)


def register_as(url: str, session: str, paid: Paid) -> None:
    """Register a session of IDENTITY at position zero through pcqr (``store.insert_session``)."""
    with Ledger(url) as ledger:
        ledger.store.insert_session({
            "session_id": session, "identity": IDENTITY, "charge_id": paid.id, "cutoff": T, "bottoms": 0, "batches": 0,
            "last_hash": "", "prev_hash": "", "state_path": "/state", "fixed": "f" * 64, "position": record(ZERO),
            "seeded": 0, "created_at": "t", "updated_at": "t", "epsilon": paid.epsilon, "delta": paid.delta})


@pytest.fixture(scope="module")
def world(postgres_server: Any) -> Iterator[World]:
    """A new database on the suite's server: owner, alice and bob (``pcqr ledger init``), BUDGET on
    IDENTITY, SET_UP's charges, the sessions, and alice-refunded refunded; dropped at the end."""
    tag = f"{os.getpid()}_{secrets.token_hex(3)}"
    roles = {who: f"adv_{who}_{tag}" for who in ("owner", "alice", "bob")}
    database = f"adversary_{tag}"
    postgres_server.execute(*(f"CREATE ROLE {role} LOGIN PASSWORD 'p'" for role in roles.values()),
                            f"CREATE DATABASE {database} OWNER {roles['owner']}")
    urls = {who: postgres_server.url(role, "p", database) for who, role in roles.items()}
    try:
        for analyst in ("alice", "bob"):
            init_ledger(urls["owner"], roles[analyst])
        set_budget(urls["owner"], IDENTITY, *BUDGET)
        paid = {}
        spares = {name: ("alice", IDENTITY, "train", 0.0, 0.0) for name in SPARES}
        for name, (who, identity, job, epsilon, delta) in {**SET_UP, **spares}.items():
            with Ledger(urls[who]) as ledger:
                receipt = ledger.charge(identity, LABEL, job, epsilon, delta, {})["receipts"][0]
            paid[name] = Paid(receipt.id, receipt.refund_token, epsilon, delta)
        for session, who, charge in (("alice-released", "alice", "alice-released"),
                                     ("alice-zero", "alice", "alice-zero"), ("bob-zero", "bob", "bob-session")):
            register_as(urls[who], session, paid[charge])
        with Ledger(urls["alice"]) as ledger:
            assert ledger.store.advance_session("alice-released", ZERO, P1, record(P1))
        with closing(psycopg.connect(urls["alice"], autocommit=True)) as conn:
            refund(conn, paid["alice-refunded"].id, paid["alice-refunded"].token)
            (entry,) = conn.execute("SELECT id FROM pcqr.charges WHERE refund_of = %s",
                                    (paid["alice-refunded"].id,)).fetchall()
        superuser = postgres_server.superuser_url.replace("/postgres?", f"/{database}?")
        with closing(psycopg.connect(superuser, autocommit=True)) as admin:
            yield World(urls["owner"], urls["alice"], urls["bob"], superuser, admin, roles, paid, int(entry[0]))
    finally:
        postgres_server.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)",
                                *(f"DROP ROLE IF EXISTS {role}" for role in roles.values()))


#: The schema's objects, with their grants and (functions) their code's digest.
OBJECTS = """SELECT 'schema ' || coalesce(nspacl::text, '') FROM pg_namespace WHERE nspname = 'pcqr'
UNION ALL SELECT 'relation ' || relname || ' ' || relkind::text || ' ' || coalesce(relacl::text, '')
    FROM pg_class WHERE relnamespace = 'pcqr'::regnamespace
UNION ALL SELECT 'function ' || oid::regprocedure::text || ' ' || coalesce(proacl::text, '') || ' '
    || prosecdef::text || ' ' || coalesce(proconfig::text, '') || ' ' || md5(prosrc)
    FROM pg_proc WHERE pronamespace = 'pcqr'::regnamespace"""


def snapshot(world: World) -> set[str]:
    """Every row of every table of the schema ('TABLE (row)'), and its objects with their grants, read
    as the superuser in one query."""
    tables = [str(r[0]) for r in world.admin.execute(
        "SELECT relname FROM pg_class WHERE relkind = 'r' AND relnamespace = 'pcqr'::regnamespace")]
    rows = [sql.SQL("SELECT {} || ' ' || t::text FROM pcqr.{} AS t").format(sql.Literal(t), sql.Identifier(t))
            for t in tables]
    found = world.admin.execute(sql.SQL(" UNION ALL ").join([*rows, sql.SQL(OBJECTS)])).fetchall()
    assert len(found) == len({r[0] for r in found})
    return {str(r[0]) for r in found}


def changes(before: set[str], after: set[str]) -> dict[str, list[str]]:
    """The rows and objects gone and new (each cut to 300 characters)."""
    return {what: [r[:300] for r in sorted(rows)] for what, rows in (("gone", before - after), ("new", after - before))
            if rows}


def assert_verifies(world: World) -> None:
    """``pcqr budget verify`` as the owner: no problem, the chain unbroken."""
    found = verify(world.owner)
    assert found["problems"] == [] and found["broken"] is None, found


def assert_refused(refusal: Exception, expected: str, says: list[str]) -> None:
    """The server's SQLSTATE is ``expected``, or (PCQR_ERROR) pcqr's one line holds each of ``says``."""
    if expected == PCQR_ERROR:
        message = str(refusal)
        assert isinstance(refusal, PcqrError) and "\n" not in message, repr(refusal)
        assert all(s in message for s in says), (says, message)
    else:
        code = getattr(refusal, "sqlstate", None)
        assert code == expected, f"SQLSTATE {code}, not {expected}: {type(refusal).__name__}: {refusal}"


# --- the tests: these three first, since a server that accepts the table's last rows breaks verify ---

def test_an_analyst_holds_select_and_the_seven_functions_only(world: World) -> None:
    for who in ("alice", "bob"):
        role = world.roles[who]
        writes = world.admin.execute(
            "SELECT c.relname, p FROM pg_class c, unnest(ARRAY['INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', "
            "'TRIGGER']) p WHERE c.relnamespace = 'pcqr'::regnamespace AND c.relkind = 'r' "
            "AND has_table_privilege(%s, c.oid, p)", (role,)).fetchall()
        functions = {str(r[0]) for r in world.admin.execute(
            "SELECT proname FROM pg_proc WHERE pronamespace = 'pcqr'::regnamespace "
            "AND has_function_privilege(%s, oid, 'EXECUTE')", (role,))}
        creates = world.admin.execute("SELECT has_schema_privilege(%s, 'pcqr', 'CREATE')", (role,)).fetchone()
        assert (writes, functions, creates) == ([], ANALYST_FUNCTIONS, (False,)), who


def test_a_planted_row_sketch_never_hides_the_owners(world: World) -> None:
    """Alice charges a dataset nobody has budgeted (allowed) and stores a fake row sketch of it
    (allowed: she charged it); the owner then sets its budget with the true sketch, and alice stores
    another fake after. The server keeps each role's sketch: the owner's stays beside hers, every job's
    overlap check reads both, and a read of the identity's sketch gives the owner's."""
    with Ledger(world.alice) as ledger:
        ledger.charge(PLANTED, LABEL, "train", 0.0, 0.0, {})
    with closing(psycopg.connect(world.alice, autocommit=True)) as conn:
        call(conn, "store_sketch", p_identity=PLANTED, p_kind="rows", p_columns="", p_label=LABEL, p_rows=3,
             p_sketch=FAKE_SKETCH.to_bytes())
    set_budget(world.owner, PLANTED, 1.0, 1e-6)
    with closing(psycopg.connect(world.alice, autocommit=True)) as conn:  # after: hers is kept, not replaced
        call(conn, "store_sketch", p_identity=PLANTED, p_kind="rows", p_columns="", p_label=LABEL, p_rows=2,
             p_sketch=Sketch.of(np.array([5, 6], dtype=np.uint64)).to_bytes())
    stored = world.admin.execute("SELECT role, sketch FROM pcqr.sketches WHERE identity = %s AND kind = 'rows' "
                                 "ORDER BY role", (PLANTED,)).fetchall()
    assert sorted((role, bytes(data)) for role, data in stored) == sorted(
        [(world.roles["alice"], FAKE_SKETCH.to_bytes()), (world.roles["owner"], TRUE_SKETCH.to_bytes())])
    with Ledger(world.alice) as ledger:
        assert ledger.store.sketch(PLANTED, "rows", "") == (LABEL, TRUE_SKETCH.to_bytes())
        assert (PLANTED, "", LABEL, TRUE_SKETCH.to_bytes()) in ledger.store.sketches("rows")
    assert_verifies(world)


def test_two_analysts_charging_the_last_of_a_budget_at_once_get_it_once(world: World) -> None:
    set_budget(world.owner, RACED, 1.0, 1e-6)
    start = threading.Barrier(2)
    outcomes: dict[str, object] = {}

    def charge(who: str, url: str) -> None:
        try:
            with Ledger(url) as ledger:
                start.wait(timeout=30)
                outcomes[who] = ledger.charge(RACED, LABEL, "train", 1.0, 1e-6, {})
        except BaseException as exc:  # noqa: BLE001  # judged below
            outcomes[who] = exc

    threads = [threading.Thread(target=charge, args=(who, url)) for who, url in (("alice", world.alice),
                                                                                ("bob", world.bob))]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    refused = [o for o in outcomes.values() if isinstance(o, BaseException)]
    assert len(outcomes) == 2 and len(refused) == 1, outcomes
    assert isinstance(refused[0], PcqrError) and re.search(r"privacy budget .* exceeded", str(refused[0])), refused
    assert time.monotonic() - began < 30
    with Ledger(world.owner) as owner:
        assert owner.store.spent(RACED) == (1.0, 1e-6)
    assert_verifies(world)


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.name for a in ATTACKS])
def test_an_analyst_gains_nothing(world: World, attack: Attack) -> None:
    before = snapshot(world)
    with closing(psycopg.connect(world.alice, autocommit=True)) as conn:
        says = attack.says(world, conn)
        if attack.refusal == HARMLESS:
            attack.act(world, conn)
        else:
            with pytest.raises((psycopg.Error, PcqrError)) as refused:
                attack.act(world, conn)
            assert_refused(refused.value, attack.refusal, says)
    assert changes(before, snapshot(world)) == {}
    assert_verifies(world)
