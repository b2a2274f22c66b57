"""The ledger on a PostgreSQL server: a team's one budget, which the analysts who spend it cannot
rewrite (issues 30 and 46).

``PCQR_LEDGER=postgresql://ROLE@HOST/DB`` (or ``--ledger``, or ``ledger:`` in cluster.yaml) selects
it. The driver is psycopg 3 (``pip install 'pcqr[postgresql]'``). A password is best kept out of
the URL, in ``~/.pgpass`` or ``PGPASSWORD``; messages print a URL without it
(:func:`pcqr.pipeline.budget.location.shown`). Every libpq parameter the URL sets is honoured
(``?connect_timeout=2``, ``?sslmode=require``, ``?options=...``); pcqr adds only what it leaves out.

Every change goes through a function of the schema (:mod:`pcqr.pipeline.budget.postgres_functions`),
which re-checks its rule and its caller on the server. :meth:`PostgresStore.transaction` holds the
ledger's advisory lock, so the policy's read-compare-write sequence is serialised with every other
process and host.

Roles. The schema's owner sets budgets. Any other role is an analyst, and is refused at connection
(one line) when it has, or can become (``SET ROLE``), a role with SUPERUSER, CREATEROLE, CREATEDB,
REPLICATION or BYPASSRLS, or the owner: such a role could make itself the owner, so the server
could not hold it to a budget (:data:`pcqr.pipeline.budget.postgres_schema.ESCALATIONS`).

Bounded waits (:class:`Timeouts`, ``pcqr: ledger-timeouts:`` in cluster.yaml). Connecting, waiting
for the ledger's lock and every statement have a limit; a wait for the lock longer than
:data:`REPORT_AFTER_S` says on stderr who holds it (role and backend pid), and one past the limit is
a one-line error naming them.

Connections drop, and servers restart. A read retries once on a new connection. A batch commit
(:meth:`PostgresStore.advance_session`) reconnects for up to :data:`RECONNECT_S` and then finds out
whether its compare-and-swap took effect: the row at the new position means it did, the row at the
old one means it runs again, and anything else means another run moved it. A charge, a refund or a
registration whose connection drops is not retried. Its one-line error says that its effect is
unknown and where to look (``pcqr budget show``); a charge is then at worst recorded and unused,
which is the safe side.
"""
from __future__ import annotations

import contextlib
import json
import sys
import time
from typing import Any, Callable, Iterator, TypeVar

from pcqr.pipeline.budget.bounds import charge_problem
from pcqr.pipeline.budget.chain import ENTRY_FIELDS, broken_entry
from pcqr.pipeline.budget.location import shown
from pcqr.pipeline.budget.postgres_connection import connect, driver, first_line, open_connection
from pcqr.pipeline.budget.postgres_functions import LOCK_KEY, MIGRATED_ROLE, SCHEMA
from pcqr.pipeline.budget.postgres_schema import ESCALATIONS, SCHEMA_VERSION, UPGRADABLE
from pcqr.pipeline.budget.store import SESSION_COLUMNS, LedgerStore, Position, Receipt
from pcqr.pipeline.budget.timeouts import Timeouts
from pcqr.pipeline.data.user_files import parse_json
from pcqr.pipeline.errors import PcqrError

#: How long a batch commit keeps trying to reach a server that dropped its connection.
RECONNECT_S = 60.0
#: A wait for the ledger's lock longer than this says on stderr who holds it.
REPORT_AFTER_S = 2.0
_CHARGE_COLUMNS = ("id", "job", "time", "epsilon", "delta", "parameters", "pid", "label", "role")
T = TypeVar("T")

_HOLDER = f"""SELECT a.usename, a.pid, extract(epoch FROM clock_timestamp() - a.xact_start)
FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.classid = 0 AND l.objid = {LOCK_KEY} AND l.objsubid = 1
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) LIMIT 1"""


class PostgresStore(LedgerStore):
    """The ledger in database ``url``'s schema ``pcqr`` (created by ``pcqr ledger init``)."""

    def __init__(self, url: str) -> None:
        self.location, self.name = url, shown(url)
        self._psycopg = driver()
        self._timeouts = Timeouts.configured()
        self._conn = connect(url, self._timeouts)
        self._role = str(self._conn.info.user)
        try:
            self._owner = self._check_schema_and_role()
        except BaseException:
            self._conn.close()
            raise

    def _check_schema_and_role(self) -> str:
        """The ledger's owner; refused: no ledger, another version, a role that could escalate."""
        found = self._conn.execute("SELECT pg_get_userbyid(nspowner) FROM pg_namespace WHERE nspname = %s",
                                   (SCHEMA,)).fetchone()
        if found is None:
            raise PcqrError(f"ledger {self.name}: this database holds no pcqr ledger; its budget owner creates one "
                            "with pcqr ledger init --admin-url URL --analyst ROLE")
        owner = str(found[0])
        try:
            version, escalations = self._conn.execute(
                f"SELECT (SELECT value FROM {SCHEMA}.meta WHERE key = 'schema_version')::int, ({ESCALATIONS})",
                {"role": self._role, "owner": owner}).fetchone()
        except self._psycopg.errors.InsufficientPrivilege:
            raise PcqrError(f"ledger {self.name}: role {self._role} may not read the ledger; its budget "
                            "owner grants it with pcqr ledger init --admin-url URL --analyst ROLE") from None
        if version in UPGRADABLE:
            raise PcqrError(f"ledger {self.name}: schema version {version} is older than this pcqr's "
                            f"({SCHEMA_VERSION}); its budget owner upgrades it with pcqr ledger init --admin-url URL "
                            "--analyst ROLE")
        if version != SCHEMA_VERSION:
            raise PcqrError(f"ledger {self.name}: schema version {version} is not this pcqr's "
                            f"({SCHEMA_VERSION}); upgrade pcqr")
        if self._role != owner and escalations:
            raise PcqrError(f"ledger {self.name}: role {self._role} holds rights no analyst of a server ledger may hold "
                            f"({escalations}): with them a role can make itself the budget owner or reach around the "
                            "ledger; the database's administrator revokes them")
        return owner

    def close(self) -> None:
        self._conn.close()

    @property
    def connection(self) -> Any:
        """The psycopg connection (the owner's operations, pcqr.pipeline.budget.team_ledger)."""
        return self._conn

    @property
    def role(self) -> str:
        return self._role

    def budget_setter(self) -> str | None:
        return None if self._role == self._owner else self._owner

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        with self._errors("a transaction"), self._conn.transaction():
            self._lock()
            self._in_transaction = True
            try:
                yield
            finally:
                self._in_transaction = False

    _in_transaction = False

    def _lock(self) -> None:
        """The ledger's advisory lock for this transaction: at once when free; else a wait of at most
        the lock timeout, saying on stderr who holds it after :data:`REPORT_AFTER_S`."""
        if self._conn.execute("SELECT pg_try_advisory_xact_lock(%s)", (LOCK_KEY,)).fetchone()[0]:
            return
        deadline = time.monotonic() + self._timeouts.lock
        patience = min(REPORT_AFTER_S, self._timeouts.lock)
        while True:
            try:
                with self._conn.transaction():  # a savepoint: a timed-out wait leaves the transaction usable
                    self._conn.execute("SELECT set_config('lock_timeout', %s, true)", (f"{round(1000 * patience)}ms",))
                    self._conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
                self._conn.execute("SELECT set_config('lock_timeout', %s, true)",
                                   (f"{round(1000 * self._timeouts.lock)}ms",))
                return
            except self._psycopg.errors.LockNotAvailable:
                holder, patience = self._holder(), deadline - time.monotonic()
                if patience <= 0:
                    raise PcqrError(f"ledger {self.name}: gave up after {self._timeouts.lock:g} s waiting for the "
                                    f"ledger's lock, held by {holder} (pcqr.ledger-timeouts.lock in cluster.yaml)"
                                    ) from None
                print(f"ledger {self.name}: waiting for the ledger's lock, held by {holder}; giving up after "
                      f"{self._timeouts.lock:g} s", file=sys.stderr, flush=True)

    def _holder(self) -> str:
        """Who holds the ledger's lock: role and backend pid (from pg_locks and pg_stat_activity)."""
        try:
            with self._conn.transaction():
                row = self._conn.execute(_HOLDER).fetchone()
        except self._psycopg.Error:
            row = None
        if row is None:
            return "another process"
        held = f", for {float(row[2]):.0f} s" if row[2] is not None else ""
        return f"role {row[0]} (backend pid {row[1]}{held})"

    # --- talking to the server ----------------------------------------------------------------
    @contextlib.contextmanager
    def _errors(self, what: str, retryable: bool = False) -> Iterator[None]:
        """Server errors as one-line PcqrErrors naming ``what`` was refused or lost; ``retryable``: a
        lost connection goes on as psycopg's OperationalError, for the caller to reconnect."""
        psycopg = self._psycopg
        try:
            yield
        except psycopg.errors.InsufficientPrivilege as exc:
            raise PcqrError(f"ledger {self.name}: the server refused {what} to role {self.role} "
                            f"({first_line(exc)})") from None
        except psycopg.errors.LockNotAvailable:
            raise PcqrError(f"ledger {self.name}: {what} waited {self._timeouts.lock:g} s for a lock held by "
                            f"{self._holder()} (pcqr.ledger-timeouts.lock in cluster.yaml)") from None
        except psycopg.errors.QueryCanceled:
            raise PcqrError(f"ledger {self.name}: {what} took longer than {self._timeouts.statement:g} s "
                            "(pcqr.ledger-timeouts.statement in cluster.yaml)") from None
        except psycopg.OperationalError as exc:
            if retryable and (self._conn.closed or self._conn.broken):
                raise
            raise PcqrError(f"ledger {self.name}: the connection was lost during {what} ({first_line(exc)}); "
                            "its effect is unknown: see pcqr budget show") from None
        except psycopg.Error as exc:
            if exc.sqlstate and exc.sqlstate.startswith("PX"):
                raise PcqrError(f"ledger {self.name}: the server refused {what}: {first_line(exc)}") from None
            raise

    def _read(self, sql: str, parameters: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Rows of one query; a dropped connection is reopened and the query asked once more."""
        return self._retrying(lambda: self._conn.execute(sql, parameters).fetchall())

    def _retrying(self, ask: Callable[[], T]) -> T:
        try:
            with self._errors("a read", retryable=True):
                return ask()
        except self._psycopg.OperationalError:
            if self._in_transaction:  # what the transaction read and wrote is gone with it
                with self._errors("a transaction"):
                    raise
        self._reconnect(self._timeouts.connect)
        with self._errors("a read"):
            return ask()

    def _reconnect(self, patience: float) -> None:
        """A new connection, tried until ``patience`` seconds have passed (a restarting server)."""
        with contextlib.suppress(Exception):
            self._conn.close()
        deadline = time.monotonic() + patience
        while True:
            try:
                self._conn = open_connection(self._psycopg, self.location, self._timeouts)
                return
            except self._psycopg.OperationalError as exc:
                if time.monotonic() > deadline:
                    raise PcqrError(f"ledger {self.name}: the server is unreachable "
                                    f"({first_line(exc, self.location)})") from None
                time.sleep(0.5)

    def _call(self, what: str, sql: str, parameters: tuple[Any, ...], locked: bool = False) -> list[tuple[Any, ...]]:
        """One function call; ``locked``: in a transaction of its own that holds the ledger's lock
        (the function takes it too), so a wait for it is reported and bounded here."""
        with self._errors(what), (self.transaction() if locked and not self._in_transaction else contextlib.nullcontext()):
            cursor = self._conn.execute(sql, parameters)
            return cursor.fetchall() if cursor.description else []

    # --- budgets and charges ------------------------------------------------------------------
    def budget(self, identity: str) -> tuple[float, float] | None:
        rows = self._read(f"SELECT epsilon, delta FROM {SCHEMA}.budgets WHERE identity = %s", (identity,))
        return None if not rows else (float(rows[0][0]), float(rows[0][1]))

    def registration(self, identity: str) -> dict[str, Any] | None:
        rows = self._read(f"SELECT label, name, epsilon, delta, set_at FROM {SCHEMA}.budgets WHERE identity = %s",
                          (identity,))
        return None if not rows else dict(zip(("label", "name", "epsilon", "delta", "set_at"), rows[0]))

    def find_name(self, name: str) -> str | None:
        rows = self._read(f"SELECT identity FROM {SCHEMA}.budgets WHERE name = %s", (name,))
        return None if not rows else str(rows[0][0])

    def charges(self, identity: str) -> list[dict[str, Any]]:
        rows = self._read(
            f"SELECT {', '.join('c.' + k for k in _CHARGE_COLUMNS)}, r.note FROM {SCHEMA}.charges c "
            f"LEFT JOIN {SCHEMA}.charges r ON r.refund_of = c.id "
            "WHERE c.kind = 'charge' AND c.identity = %s ORDER BY c.id", (identity,))
        return [{**dict(zip((*_CHARGE_COLUMNS, "refunded"), row)),
                 "parameters": parse_json(row[5], "the ledger's charge parameters")} for row in rows]

    def labelled(self, label: str) -> list[str]:
        rows = self._read(f"SELECT identity FROM {SCHEMA}.budgets WHERE label = %s UNION "
                          f"SELECT identity FROM {SCHEMA}.charges WHERE label = %s AND kind = 'charge'", (label, label))
        return sorted(str(r[0]) for r in rows)

    def spent(self, identity: str) -> tuple[float, float]:
        rows = self._read(f"SELECT epsilon, delta FROM {SCHEMA}.spent(%s)", (identity,))
        return float(rows[0][0]), float(rows[0][1])

    def identities(self) -> set[str]:
        rows = self._read(f"SELECT identity FROM {SCHEMA}.budgets UNION SELECT identity FROM {SCHEMA}.charges")
        return {str(r[0]) for r in rows}

    def write_budget(self, identity: str, label: str, epsilon: float, delta: float, name: str | None,
                     sketch: tuple[int, bytes] | None) -> None:
        rows, data = sketch if sketch is not None else (None, None)
        self._call("setting a budget", f"SELECT {SCHEMA}.set_budget(%s, %s, %s, %s, %s, %s, %s)",
                   (identity, label, name, epsilon, delta, rows, data), locked=True)

    def insert_charge(self, identity: str, label: str, record: dict[str, Any]) -> Receipt:
        rows = self._call("the charge", f"SELECT charge_id, refund_token FROM {SCHEMA}.charge(%s, %s, %s, %s, %s, %s, %s)",
                          (identity, label, record["job"], record["epsilon"], record["delta"],
                           json.dumps(record["parameters"], sort_keys=True, default=str), record["pid"]), locked=True)
        return Receipt(int(rows[0][0]), str(rows[0][1]))

    def mark_refunded(self, receipt: Receipt, invalid_input: bool) -> None:
        self._call("the refund", f"SELECT {SCHEMA}.refund(%s, %s, %s)", (receipt.id, receipt.refund_token,
                                                                          invalid_input), locked=True)

    # --- the dataset identity's caches --------------------------------------------------------
    def cached_hash(self, file: str, size: int, mtime_ns: int) -> str | None:
        return None  # never cached on the server: see pcqr.pipeline.budget.postgres_schema

    def cache_hash(self, file: str, size: int, mtime_ns: int, sha256: str) -> None:
        return None

    @property
    def trusts_its_links(self) -> bool:
        return False  # a link is one analyst machine's word about its files (pcqr.pipeline.budget.overlap)

    def sketch(self, identity: str, kind: str, columns: str) -> tuple[str, bytes] | None:
        rows = self._read(f"SELECT label, sketch FROM {SCHEMA}.sketches WHERE identity = %s AND kind = %s "
                          "AND columns = %s ORDER BY role IN (%s, %s) DESC, role = %s DESC, stored_at LIMIT 1",
                          (identity, kind, columns, MIGRATED_ROLE, self._owner, self._role))
        return None if not rows else (str(rows[0][0]), bytes(rows[0][1]))

    def sketches(self, kind: str) -> list[tuple[str, str, str, bytes]]:
        rows = self._read(f"SELECT identity, columns, label, sketch FROM {SCHEMA}.sketches WHERE kind = %s "
                          "ORDER BY stored_at", (kind,))
        return [(str(r[0]), str(r[1]), str(r[2]), bytes(r[3])) for r in rows]

    def store_sketch(self, identity: str, kind: str, columns: str, label: str, rows: int, data: bytes) -> None:
        self._call("storing a sketch", f"SELECT {SCHEMA}.store_sketch(%s, %s, %s, %s, %s, %s)",
                   (identity, kind, columns, label, rows, data))

    # --- sessions -----------------------------------------------------------------------------
    def session(self, session_id: str) -> dict[str, Any] | None:
        rows = self._read(f"SELECT {', '.join('s.' + c for c in SESSION_COLUMNS)}, s.role, c.epsilon, c.delta "
                          f"FROM {SCHEMA}.sessions s LEFT JOIN {SCHEMA}.charges c ON c.id = s.charge_id "
                          "WHERE s.session_id = %s", (session_id,))
        return None if not rows else dict(zip((*SESSION_COLUMNS, "role", "paid_epsilon", "paid_delta"), rows[0]))

    def insert_session(self, row: dict[str, Any]) -> None:
        self._call("registering the session",
                   f"SELECT {SCHEMA}.register_session(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                   (row["session_id"], row["identity"], row["charge_id"], row["cutoff"], row["last_hash"],
                    row["state_path"], row["fixed"], row["position"], row["seeded"], row["epsilon"], row["delta"]),
                   locked=True)

    def close_session(self, session_id: str, invalid_input: bool) -> None:
        self._call("closing the session", f"SELECT {SCHEMA}.close_session(%s, %s)", (session_id, invalid_input))

    def advance_session(self, session_id: str, at: Position, new: Position, record: str) -> bool:
        sql = f"SELECT {SCHEMA}.advance_session(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
        parameters = (session_id, at.bottoms, at.queries_seen, at.batches, at.last_hash,
                      new.bottoms, new.queries_seen, new.batches, new.last_hash, record)

        def swap(retryable: bool) -> bool:
            with self._errors("the batch commit", retryable):
                return bool(self._conn.execute(sql, parameters).fetchone()[0])

        try:
            return swap(retryable=True)
        except self._psycopg.OperationalError:
            pass
        self._reconnect(RECONNECT_S)  # the connection dropped: did the swap take effect before it did?
        row = self.session(session_id)
        if row is None or row["closed"] is not None:
            return False
        where = Position(int(row["bottoms"]), int(parse_json(row["position"], "the ledger's session position")
                                                  ["queries_seen"]), int(row["batches"]), str(row["last_hash"]))
        return where == new or (where == at and swap(retryable=False))

    # --- the audit ------------------------------------------------------------------------------
    def entries(self) -> list[dict[str, Any]]:
        """Every entry of the chain (charges and refunds), in order."""
        rows = self._read(f"SELECT {', '.join(ENTRY_FIELDS)}, hash FROM {SCHEMA}.charges ORDER BY id")
        return [dict(zip((*ENTRY_FIELDS, "hash"), row)) for row in rows]

    def verify_chain(self) -> dict[str, Any]:
        entries = self.entries()
        broken = broken_entry(entries)
        return {"chained": True, "entries": len(entries), "head_id": entries[-1]["id"] if entries else 0,
                "head_hash": entries[-1]["hash"] if entries else None,
                "broken": None if broken is None else {"id": broken[0], "why": broken[1]},
                "out_of_bounds": [e["id"] for e in entries if charge_problem(e["epsilon"], e["delta"]) is not None]}
