"""The budget owner's operations on a server ledger: create it and grant analysts
(``pcqr ledger init``), move a SQLite ledger into it (``pcqr ledger migrate``), and check it
(``pcqr budget verify``, either backend).

``init`` refuses an analyst role that is the owner, a superuser, or a member of the owner role:
the server could not keep such a role from rewriting the ledger. ``migrate`` copies every budget,
charge, refund, sketch and session of the file in ONE transaction of the owner. Charges and refunds
are appended to the chain in the file's order, keeping their times; they are recorded with role
``migrated`` and no refund token. Before the transaction commits, ``migrate`` reads everything back
through both stores' own reads and compares it with the file, so a difference rolls the whole
migration back. It then marks the file moved (:meth:`SQLiteStore.mark_moved`), and every later use
of the file is refused, naming the server. A second migration is refused on both sides: the file
says where it went, and the server's ``meta`` row says where its history came from.
"""
from __future__ import annotations

import math
import os
from typing import Any

from pcqr.pipeline.budget.bounds import RELATIVE_TOLERANCE, exceeds
from pcqr.pipeline.budget.ledger import Ledger
from pcqr.pipeline.budget.postgres_functions import MIGRATED_ROLE, SCHEMA
from pcqr.pipeline.budget.postgres_schema import (
    ANALYSTS, ESCALATIONS, MALFORMED_SKETCHES, SCHEMA_VERSION, UPGRADABLE, grants, statements, upgrade_statements,
)
from pcqr.pipeline.budget.postgres_connection import connect
from pcqr.pipeline.budget.postgres_store import PostgresStore
from pcqr.pipeline.budget.sqlite_store import SQLiteStore
from pcqr.pipeline.budget.location import check_server_url, is_server, shown
from pcqr.pipeline.budget.store import SESSION_COLUMNS, now
from pcqr.pipeline.errors import PcqrError

def init_ledger(admin_url: str, analyst: str) -> dict[str, Any]:
    """Create the ledger's schema in ``admin_url``'s database (once; a version 1 ledger is upgraded in
    place) and grant ``analyst`` an analyst's rights (again for each analyst role). Returns what was
    done."""
    if not is_server(admin_url):
        raise PcqrError(f"--admin-url {shown(admin_url)}: give the server's postgresql:// URL, as the budget owner")
    admin_url = check_server_url(admin_url, "--admin-url")
    conn = connect(admin_url)  # first: without the driver, one line saying how to install it
    try:
        owner = str(conn.info.user)
        check_analyst(conn, analyst, owner, "--analyst")
        with conn.transaction():
            found = conn.execute("SELECT pg_get_userbyid(nspowner) FROM pg_namespace WHERE nspname = %s",
                                 (SCHEMA,)).fetchone()
            done: dict[str, Any] = {"created": found is None, "upgraded_from": None}
            if found is None:
                for statement in statements():
                    conn.execute(statement)  # type: ignore[arg-type]  # our own text, no user input
            elif found[0] != owner:
                raise PcqrError(f"--admin-url {shown(admin_url)}: the ledger belongs to role {found[0]}, "
                                f"not {owner}; run pcqr ledger init with its owner's URL")
            else:
                done.update(_upgrade(conn))
            _grant(conn, analyst)
    finally:
        conn.close()
    PostgresStore(admin_url).close()  # the schema is one this pcqr can use
    return {"ledger": shown(admin_url), "owner": owner, "analyst": analyst, **done}


def check_analyst(conn: Any, analyst: str, owner: str, option: str) -> None:
    """Refuse (one line naming ``option``) a role that does not exist, is the owner, or could make
    itself the owner (:data:`pcqr.pipeline.budget.postgres_schema.ESCALATIONS`)."""
    if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (analyst,)).fetchone() is None:
        raise PcqrError(f"{option} {analyst}: no such role on the server; create it first "
                        f"(CREATE ROLE {analyst} LOGIN PASSWORD '...')")
    if analyst == MIGRATED_ROLE:
        raise PcqrError(f"{option} {analyst}: is the name the ledger gives to rows a migration moved in; give "
                        "another role")
    if analyst == owner:
        raise PcqrError(f"{option} {analyst}: is the budget owner, who sets budgets and can rewrite charges; "
                        "give an analyst role of its own")
    escalations = conn.execute(ESCALATIONS, {"role": analyst, "owner": owner}).fetchone()[0]
    if escalations:
        raise PcqrError(f"{option} {analyst}: holds rights no analyst of a server ledger may hold ({escalations}): "
                        "with them a role can make itself the budget owner or reach around the ledger; give a role "
                        "without them (ALTER ROLE ... NOCREATEROLE, REVOKE ... FROM ...)")


def _grant(conn: Any, analyst: str) -> None:
    """Give role ``analyst`` exactly an analyst's rights (its name quoted as an identifier)."""
    from psycopg import sql

    for statement in grants(sql.Identifier(analyst).as_string(conn)):
        conn.execute(statement)  # type: ignore[arg-type]  # our own text, the name quoted


def _upgrade(conn: Any) -> dict[str, Any]:
    """Bring the ledger to this pcqr's schema version, inside the caller's transaction: what changed."""
    version = int(conn.execute(f"SELECT value FROM {SCHEMA}.meta WHERE key = 'schema_version'").fetchone()[0])
    if version == SCHEMA_VERSION:
        return {}
    if version not in UPGRADABLE:
        raise PcqrError(f"ledger schema version {version} is not one this pcqr ({SCHEMA_VERSION}) upgrades; "
                        "upgrade pcqr")
    analysts = [str(r[0]) for r in conn.execute(ANALYSTS).fetchall()]
    for statement in upgrade_statements():
        conn.execute(statement)  # type: ignore[arg-type]  # our own text, no user input
    for analyst in analysts:
        _grant(conn, analyst)
    removed = conn.execute(f"DELETE FROM {SCHEMA}.sketches WHERE {MALFORMED_SKETCHES} RETURNING kind, label").fetchall()
    unsketched = conn.execute(
        f"SELECT b.label FROM {SCHEMA}.budgets b WHERE b.identity LIKE 'rows:%' AND NOT EXISTS (SELECT 1 FROM "
        f"{SCHEMA}.sketches s WHERE s.identity = b.identity AND s.kind = 'rows' AND {SCHEMA}.is_owners(s.role)) "
        "ORDER BY b.label").fetchall()
    return {"upgraded_from": version, "analysts_granted_again": analysts,
            "malformed_sketches_removed": [f"{r[0]} sketch of {r[1]}" for r in removed],
            "budgets_to_set_again": [str(r[0]) for r in unsketched]}


def migrate(source: str, url: str, analyst: str | None = None) -> dict[str, Any]:
    """Move the SQLite ledger ``source`` into the empty server ledger ``url`` (its owner's URL),
    checked before it commits; the file is then marked moved. Its sessions continue under the
    analyst role ``analyst`` (a SQLite ledger is one person's; a server lets only a session's role
    commit its batches), required when one is still open. Returns the counts moved."""
    if not is_server(url):
        raise PcqrError(f"--to {shown(url)}: give the server ledger's postgresql:// URL (its owner's)")
    url = check_server_url(url, "--to")
    if is_server(source) or not os.path.isfile(source):
        raise PcqrError(f"--from {shown(source)}: no such SQLite ledger file")
    with SQLiteStore(os.path.abspath(source)) as old, PostgresStore(url) as new:
        conn = new.connection
        owner = conn.execute("SELECT pg_get_userbyid(nspowner) FROM pg_namespace WHERE nspname = %s",
                             (SCHEMA,)).fetchone()[0]
        if owner != new.role:
            raise PcqrError(f"--to {new.name}: role {new.role} is not the ledger's owner ({owner}); a migration "
                            "writes history, which only the budget owner may do")
        with new.transaction():
            done = conn.execute(f"SELECT value FROM {SCHEMA}.meta WHERE key = 'migrated_from'").fetchone()
            if done is not None:
                raise PcqrError(f"--to {new.name}: already holds a migrated ledger ({done[0]}); a second migration "
                                "is refused")
            if conn.execute(f"SELECT EXISTS (SELECT 1 FROM {SCHEMA}.charges) OR EXISTS (SELECT 1 FROM {SCHEMA}.budgets)"
                            f" OR EXISTS (SELECT 1 FROM {SCHEMA}.sessions)").fetchone()[0]:
                raise PcqrError(f"--to {new.name}: already holds budgets or charges; migrate into a new ledger")
            counts = _copy(old, conn, _sessions_role(old, conn, analyst, owner))
            _check_copy(old, new)
            skipped = conn.execute(f"DELETE FROM {SCHEMA}.sketches WHERE {MALFORMED_SKETCHES} RETURNING kind, label")
            counts["malformed_sketches_skipped"] = [f"{r[0]} sketch of {r[1]}" for r in skipped.fetchall()]
            conn.execute(f"INSERT INTO {SCHEMA}.meta (key, value) VALUES ('migrated_from', %s), ('migrated_at', %s)",
                         (old.path, now()))
        old.mark_moved(new.name)
    return {"from": os.path.abspath(source), "to": shown(url), **counts}


def _sessions_role(old: SQLiteStore, conn: Any, analyst: str | None, owner: str) -> str:
    """The role the file's sessions are migrated under: ``analyst``, a granted analyst role, or, when
    the file holds no open session, :data:`MIGRATED_ROLE` (no one's)."""
    if analyst is None:
        open_sessions = [s["session_id"] for s in old.table("sessions") if s["closed"] is None]
        if open_sessions:
            raise PcqrError(f"--from {old.path}: holds {len(open_sessions)} open session(s); name the analyst role "
                            "that continues them with --analyst ROLE (a server commits a session's batches for "
                            "the role that registered it alone)")
        return MIGRATED_ROLE
    check_analyst(conn, analyst, owner, "--analyst")
    if analyst not in {str(r[0]) for r in conn.execute(ANALYSTS).fetchall()}:
        raise PcqrError(f"--analyst {analyst}: is not an analyst of this ledger; grant it first with "
                        "pcqr ledger init --admin-url URL --analyst ROLE")
    return analyst


def _copy(old: SQLiteStore, conn: Any, session_role: str) -> dict[str, Any]:
    for b in old.table("budgets"):
        conn.execute(f"INSERT INTO {SCHEMA}.budgets (identity, label, name, epsilon, delta, set_at) "
                     "VALUES (%s, %s, %s, %s, %s, %s)",
                     (b["identity"], b["label"], b["name"], b["epsilon"], b["delta"], b["set_at"]))
    ids: dict[int, int] = {}
    charges = sorted(old.table("charges"), key=lambda c: int(c["id"]))
    for c in charges:
        ids[int(c["id"])] = _append(conn, "charge", c, c["job"], c["time"], c["epsilon"], c["delta"],
                                    c["parameters"], None, None)
        if c["refunded"] is not None:
            _append(conn, "refund", c, "refund", c["refunded"].split(" ", 1)[0], 0.0, 0.0, "{}", ids[int(c["id"])],
                    c["refunded"])
    for s in old.table("sketches"):
        conn.execute(f"INSERT INTO {SCHEMA}.sketches (identity, kind, columns, label, rows, sketch, stored_at, role) "
                     "VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                     (s["identity"], s["kind"], s["columns"], s["label"], s["rows"], s["sketch"], s["stored_at"],
                      MIGRATED_ROLE))
    sessions = old.table("sessions")
    for s in sessions:
        row = {**s, "charge_id": ids.get(int(s["charge_id"]))}
        if row["charge_id"] is None:
            raise PcqrError(f"--from {old.path}: session {s['session_id']} is paid by charge {s['charge_id']}, which "
                            "the file does not hold (a damaged ledger); nothing was migrated")
        conn.execute(f"INSERT INTO {SCHEMA}.sessions ({', '.join(SESSION_COLUMNS)}, role) "
                     f"VALUES ({', '.join(['%s'] * (len(SESSION_COLUMNS) + 1))})",
                     (*(row[c] for c in SESSION_COLUMNS), session_role))
    return {"budgets": len(old.table("budgets")), "charges": len(charges),
            "refunds": sum(c["refunded"] is not None for c in charges), "sessions": len(sessions)}


def _append(conn: Any, kind: str, c: dict[str, Any], job: str, time: str, epsilon: float, delta: float,
            parameters: str, refund_of: int | None, note: str | None) -> int:
    return int(conn.execute(
        f"SELECT {SCHEMA}.append_entry(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, NULL)",
        (kind, c["identity"], c["label"], job, time, epsilon, delta, parameters, c["pid"], refund_of, note,
         MIGRATED_ROLE)).fetchone()[0])


def _check_copy(old: SQLiteStore, new: PostgresStore) -> None:
    """Read everything back through both stores' reads: any difference refuses the migration."""
    def differs(what: str) -> PcqrError:
        return PcqrError(f"--to {new.name}: the migrated ledger differs from {old.path} in {what}; nothing was "
                         "migrated (please report it)")

    identities = old.identities()
    if new.identities() != identities:
        raise differs("its datasets")
    for identity in sorted(identities):
        if old.registration(identity) != new.registration(identity):
            raise differs(f"the budget of {identity}")
        keep = ("job", "time", "epsilon", "delta", "parameters", "pid", "label", "refunded")
        if [{k: c[k] for k in keep} for c in old.charges(identity)] != \
                [{k: c[k] for k in keep} for c in new.charges(identity)]:
            raise differs(f"the charges of {identity}")
        if not all(math.isclose(a, b, rel_tol=RELATIVE_TOLERANCE, abs_tol=1e-300)
                   for a, b in zip(old.spent(identity), new.spent(identity))):
            raise differs(f"what {identity} has spent")
    for kind in {row["kind"] for row in old.table("sketches")}:
        if sorted(old.sketches(kind)) != sorted(new.sketches(kind)):
            raise differs(f"its {kind} sketches")
    for s in old.table("sessions"):
        moved = new.session(s["session_id"])
        if moved is None or any(moved[c] != s[c] for c in SESSION_COLUMNS if c != "charge_id"):
            raise differs(f"session {s['session_id']}")
    chain = new.verify_chain()
    if chain["broken"] is not None:
        raise differs(f"its chain (entry {chain['broken']['id']}: {chain['broken']['why']})")


def verify(location: str) -> dict[str, Any]:
    """Check a ledger: its chain (server ledgers), every budget against what was spent under it, and
    every session's c against its T. ``problems`` lists what fails (empty: it holds)."""
    with Ledger(location) as ledger:
        store = ledger.store
        chain = store.verify_chain()
        problems = [] if not chain.get("broken") else [
            f"chain: entry {chain['broken']['id']}: {chain['broken']['why']}"]
        problems += [f"chain: entry {i} charges an epsilon or delta outside what the server accepts (written before "
                     "version 2 checked it)" for i in chain.pop("out_of_bounds", [])]
        identities = sorted(store.identities())
        for identity in identities:
            budget, spent = store.budget(identity), store.spent(identity)
            if budget is not None and exceeds(spent, budget):
                problems.append(f"{identity}: spent {spent} is more than its budget {budget}")
    return {"ledger": ledger.path, **chain, "datasets": len(identities), "problems": problems}
