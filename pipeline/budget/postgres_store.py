"""The ledger on a PostgreSQL server: a team's one budget, which the analysts who spend it cannot
rewrite (issue 30).

``PCQR_LEDGER=postgresql://ROLE@HOST/DB`` (or ``--ledger``, or ``ledger:`` in cluster.yaml) selects
it. The driver is psycopg 3 (``pip install 'pcqr[postgresql]'``). A password is best kept out of
the URL, in ``~/.pgpass`` or ``PGPASSWORD``; messages print a URL without it
(:func:`pcqr.pipeline.budget.store.shown`).

Every change goes through a function of the schema (:mod:`pcqr.pipeline.budget.postgres_schema`),
which re-checks its rule on the server. :meth:`transaction` holds the ledger's advisory lock, so
the policy's read-compare-write sequence is serialised with every other process and host.

Connections drop, and servers restart. A read retries once on a new connection. A batch commit
(:meth:`advance_session`) reconnects for up to :data:`RECONNECT_S` and then finds out whether its
compare-and-swap took effect: the row at the new position means it did, the row at the old one
means it runs again, and anything else means another run moved it. A charge, a refund or a
registration whose connection drops is not retried. Its one-line error says that its effect is
unknown and where to look (``pcqr budget show``); a charge is then at worst recorded and unused,
which is the safe side.
"""
from __future__ import annotations

import contextlib
import json
import time
from typing import Any, Callable, Iterator, TypeVar

from pcqr.pipeline.budget.postgres_schema import ENTRY_FIELDS, LOCK_KEY, SCHEMA, SCHEMA_VERSION, broken_entry
from pcqr.pipeline.budget.location import shown
from pcqr.pipeline.budget.store import SESSION_COLUMNS, LedgerStore, Position, Receipt
from pcqr.pipeline.data.user_files import parse_json
from pcqr.pipeline.errors import PcqrError

CONNECT_TIMEOUT_S = 10
#: How long a batch commit keeps trying to reach a server that dropped its connection.
RECONNECT_S = 60.0
_CHARGE_COLUMNS = ("id", "job", "time", "epsilon", "delta", "parameters", "pid", "label")
T = TypeVar("T")


def driver() -> Any:
    """psycopg, or a one-line error saying how to install it."""
    try:
        import psycopg
    except ImportError:
        raise PcqrError("a postgresql:// ledger needs the PostgreSQL driver: pip install 'pcqr[postgresql]'") from None
    return psycopg


def connect(url: str) -> Any:
    """An autocommit connection to ``url``, or a one-line error naming the server (without password)."""
    psycopg = driver()
    try:
        return psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S, application_name="pcqr")
    except psycopg.Error as exc:
        raise PcqrError(f"ledger {shown(url)}: cannot connect ({_first_line(exc)})") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


class PostgresStore(LedgerStore):
    """The ledger in database ``url``'s schema ``pcqr`` (created by ``pcqr ledger init``)."""

    def __init__(self, url: str) -> None:
        self.location, self.name = url, shown(url)
        self._psycopg = driver()
        self._conn = connect(url)
        self._role = str(self._conn.info.user)
        try:
            self._check_schema()
        except BaseException:
            self._conn.close()
            raise

    def _check_schema(self) -> None:
        try:
            row = self._conn.execute(f"SELECT value FROM {SCHEMA}.meta WHERE key = 'schema_version'").fetchone()
        except self._psycopg.errors.UndefinedTable:
            raise PcqrError(f"ledger {self.name}: this database holds no pcqr ledger; its budget owner creates one "
                            "with pcqr ledger init --admin-url URL --analyst ROLE") from None
        except self._psycopg.errors.InsufficientPrivilege:
            raise PcqrError(f"ledger {self.name}: role {self._role} may not read the ledger; its budget "
                            "owner grants it with pcqr ledger init --admin-url URL --analyst ROLE") from None
        if row is None or int(row[0]) != SCHEMA_VERSION:
            raise PcqrError(f"ledger {self.name}: schema version {row and row[0]} is not this pcqr's "
                            f"({SCHEMA_VERSION}); upgrade pcqr")

    def close(self) -> None:
        self._conn.close()

    @property
    def connection(self) -> Any:
        """The psycopg connection (the owner's operations, pcqr.pipeline.budget.team_ledger)."""
        return self._conn

    @property
    def role(self) -> str:
        return self._role

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        with self._errors("a transaction"), self._conn.transaction():
            self._conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
            self._in_transaction = True
            try:
                yield
            finally:
                self._in_transaction = False

    _in_transaction = False

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
                            f"({_first_line(exc)})") from None
        except psycopg.OperationalError as exc:
            if retryable and (self._conn.closed or self._conn.broken):
                raise
            raise PcqrError(f"ledger {self.name}: the connection was lost during {what} ({_first_line(exc)}); "
                            "its effect is unknown: see pcqr budget show") from None
        except psycopg.Error as exc:
            if exc.sqlstate and exc.sqlstate.startswith("PX"):
                raise PcqrError(f"ledger {self.name}: the server refused {what}: {_first_line(exc)}") from None
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
        self._reconnect(CONNECT_TIMEOUT_S)
        with self._errors("a read"):
            return ask()

    def _reconnect(self, patience: float) -> None:
        """A new connection, tried until ``patience`` seconds have passed (a restarting server)."""
        with contextlib.suppress(Exception):
            self._conn.close()
        deadline = time.monotonic() + patience
        while True:
            try:
                self._conn = self._psycopg.connect(self.location, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S,
                                                   application_name="pcqr")
                return
            except self._psycopg.OperationalError as exc:
                if time.monotonic() > deadline:
                    raise PcqrError(f"ledger {self.name}: the server is unreachable ({_first_line(exc)})") from None
                time.sleep(0.5)

    def _call(self, what: str, sql: str, parameters: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with self._errors(what):
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

    def write_budget(self, identity: str, label: str, epsilon: float, delta: float, name: str | None) -> None:
        try:
            self._call("setting a budget", f"SELECT {SCHEMA}.set_budget(%s, %s, %s, %s, %s)",
                       (identity, label, name, epsilon, delta))
        except PcqrError as exc:
            if "refused setting a budget to role" in str(exc):
                raise PcqrError(f"ledger {self.name}: only the budget owner sets budgets, and role {self.role} is "
                                "an analyst; the owner runs pcqr budget set with the owner's URL (--ledger)") from None
            raise

    def insert_charge(self, identity: str, label: str, record: dict[str, Any]) -> Receipt:
        rows = self._call("the charge", f"SELECT charge_id, refund_token FROM {SCHEMA}.charge(%s, %s, %s, %s, %s, %s, %s)",
                          (identity, label, record["job"], record["epsilon"], record["delta"],
                           json.dumps(record["parameters"], sort_keys=True, default=str), record["pid"]))
        return Receipt(int(rows[0][0]), str(rows[0][1]))

    def mark_refunded(self, receipt: Receipt, note: str) -> None:
        self._call("the refund", f"SELECT {SCHEMA}.refund(%s, %s, %s)", (receipt.id, receipt.refund_token, note))

    # --- the dataset identity's caches --------------------------------------------------------
    def cached_hash(self, file: str, size: int, mtime_ns: int) -> str | None:
        return None  # never cached on the server: see pcqr.pipeline.budget.postgres_schema

    def cache_hash(self, file: str, size: int, mtime_ns: int, sha256: str) -> None:
        return None

    def sketch(self, identity: str, kind: str, columns: str) -> tuple[str, bytes] | None:
        rows = self._read(f"SELECT label, sketch FROM {SCHEMA}.sketches WHERE identity = %s AND kind = %s "
                          "AND columns = %s", (identity, kind, columns))
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
        rows = self._read(f"SELECT {', '.join(SESSION_COLUMNS)} FROM {SCHEMA}.sessions WHERE session_id = %s",
                          (session_id,))
        return None if not rows else dict(zip(SESSION_COLUMNS, rows[0]))

    def insert_session(self, row: dict[str, Any]) -> None:
        self._call("registering the session",
                   f"SELECT {SCHEMA}.register_session(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                   (row["session_id"], row["identity"], row["charge_id"], row["cutoff"], row["bottoms"],
                    row["batches"], row["last_hash"], row["state_path"], row["fixed"], row["position"], row["seeded"]))

    def close_session(self, session_id: str, note: str) -> None:
        self._call("closing the session", f"SELECT {SCHEMA}.close_session(%s, %s)", (session_id, note))

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
                "broken": None if broken is None else {"id": broken[0], "why": broken[1]}}
