"""The ledger in one SQLite file: the embedded default, for one person on one machine.

The connection runs in WAL mode with ``synchronous FULL`` and a 60 s busy timeout (the policy's
docstring, pcqr.pipeline.budget.ledger, says why). :meth:`SQLiteStore.transaction` is one
``BEGIN IMMEDIATE`` transaction, which takes SQLite's write lock before its first read. The
tables are ``budgets``, ``charges``, ``file_hashes``, ``sketches`` and ``sessions``, and ``moved``
records a migration to a server (``pcqr ledger migrate``). After a migration the file refuses
every use and names the server.

Whoever can write the file can rewrite it. Restoring an old copy of the ledger with an old state
folder defeats every budget (docs/privacy.md, threat model). A team's ledger belongs on a server
(pcqr.pipeline.budget.postgres_store).
"""
from __future__ import annotations

import json
import math
import sqlite3
import time
from types import TracebackType
from typing import Any

from pcqr.pipeline.budget.store import SESSION_COLUMNS, LedgerStore, Position, Receipt, failure_note, now
from pcqr.pipeline.data.user_files import parse_json
from pcqr.pipeline.errors import PcqrError

SCHEMA_VERSION = 1
BUSY_TIMEOUT_S = 60.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS budgets (
    identity TEXT PRIMARY KEY, label TEXT NOT NULL, name TEXT UNIQUE,
    epsilon REAL NOT NULL, delta REAL NOT NULL, set_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS charges (
    id INTEGER PRIMARY KEY AUTOINCREMENT, identity TEXT NOT NULL, label TEXT NOT NULL,
    job TEXT NOT NULL, time TEXT NOT NULL, epsilon REAL NOT NULL, delta REAL NOT NULL,
    parameters TEXT NOT NULL, pid INTEGER NOT NULL, refunded TEXT);
CREATE INDEX IF NOT EXISTS charges_by_identity ON charges (identity);
CREATE TABLE IF NOT EXISTS file_hashes (
    file TEXT NOT NULL, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, sha256 TEXT NOT NULL,
    PRIMARY KEY (file, size, mtime_ns));
CREATE TABLE IF NOT EXISTS sketches (
    identity TEXT NOT NULL, kind TEXT NOT NULL, columns TEXT NOT NULL, label TEXT NOT NULL,
    rows INTEGER NOT NULL, sketch BLOB NOT NULL, stored_at TEXT NOT NULL,
    PRIMARY KEY (identity, kind, columns));
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY, identity TEXT NOT NULL, charge_id INTEGER NOT NULL,
    cutoff INTEGER NOT NULL, bottoms INTEGER NOT NULL, batches INTEGER NOT NULL,
    last_hash TEXT NOT NULL, prev_hash TEXT NOT NULL, state_path TEXT NOT NULL,
    fixed TEXT NOT NULL, position TEXT NOT NULL, seeded INTEGER NOT NULL,
    created_at TEXT NOT NULL, updated_at TEXT NOT NULL, closed TEXT);
CREATE TABLE IF NOT EXISTS moved (
    destination TEXT NOT NULL, moved_at TEXT NOT NULL);
"""
_CHARGE_KEYS = ("id", "job", "time", "epsilon", "delta", "parameters", "pid", "label", "refunded")


class SQLiteStore(LedgerStore):
    """The ledger database at ``path`` (created with its schema if missing)."""

    def __init__(self, path: str) -> None:
        self.location = self.name = self.path = path
        try:
            # used by one thread at a time, not always the one that opened it: pcqr answer's commits run in
            # a thread of their own (pcqr.pipeline.session.committer)
            self._db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
        except sqlite3.DatabaseError as exc:
            raise PcqrError(f"ledger {path}: cannot open it ({exc}); pass another --ledger") from None
        try:
            self._db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            self._set_wal()
            self._db.execute("PRAGMA synchronous = FULL")
            self._create_schema()
            self._refuse_if_moved()
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise PcqrError(f"ledger {path}: not a usable SQLite database ({exc}); pass another --ledger") from None
        except BaseException:
            self._db.close()
            raise

    def close(self) -> None:
        self._db.close()

    def transaction(self) -> Immediate:
        return Immediate(self._db)

    def _set_wal(self) -> None:
        """WAL journal; switching needs a moment alone with the file, so retry while it is busy."""
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        while True:
            try:
                self._db.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def _create_schema(self) -> None:
        with Immediate(self._db):
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise PcqrError(f"ledger {self.path}: schema version {version} is newer than this pcqr's "
                                f"({SCHEMA_VERSION}); upgrade pcqr")
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    self._db.execute(statement)
            columns = {row[1] for row in self._db.execute("PRAGMA table_info(charges)")}
            if "refunded" not in columns:  # ledgers written before refunds existed
                self._db.execute("ALTER TABLE charges ADD COLUMN refunded TEXT")
            self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _refuse_if_moved(self) -> None:
        row = self._db.execute("SELECT destination, moved_at FROM moved").fetchone()
        if row is not None:
            raise PcqrError(f"ledger {self.path}: moved to the server {row[0]} at {row[1]} (pcqr ledger migrate); "
                            f"set PCQR_LEDGER to that URL")

    def mark_moved(self, destination: str) -> None:
        """Record that this ledger now lives on a server: every later open is refused, naming it."""
        with Immediate(self._db):
            self._db.execute("INSERT INTO moved (destination, moved_at) VALUES (?, ?)", (destination, now()))

    def table(self, name: str) -> list[dict[str, Any]]:
        """Every row of one table, oldest first (``pcqr ledger migrate`` reads them all)."""
        cursor = self._db.execute(f"SELECT * FROM {name} ORDER BY rowid")
        keys = [d[0] for d in cursor.description]
        return [dict(zip(keys, row)) for row in cursor.fetchall()]

    # --- budgets and charges ------------------------------------------------------------------
    def budget(self, identity: str) -> tuple[float, float] | None:
        row = self._db.execute("SELECT epsilon, delta FROM budgets WHERE identity = ?", (identity,)).fetchone()
        return None if row is None else (float(row[0]), float(row[1]))

    def registration(self, identity: str) -> dict[str, Any] | None:
        row = self._db.execute("SELECT label, name, epsilon, delta, set_at FROM budgets WHERE identity = ?",
                               (identity,)).fetchone()
        return None if row is None else dict(zip(("label", "name", "epsilon", "delta", "set_at"), row))

    def find_name(self, name: str) -> str | None:
        row = self._db.execute("SELECT identity FROM budgets WHERE name = ?", (name,)).fetchone()
        return None if row is None else str(row[0])

    def charges(self, identity: str) -> list[dict[str, Any]]:
        rows = self._db.execute(f"SELECT {', '.join(_CHARGE_KEYS)} FROM charges WHERE identity = ? ORDER BY id",
                                (identity,)).fetchall()
        return [{**dict(zip(_CHARGE_KEYS, row)), "parameters": parse_json(row[5], "the ledger's charge parameters"),
                 "role": None} for row in rows]

    def labelled(self, label: str) -> list[str]:
        rows = self._db.execute("SELECT identity FROM budgets WHERE label = ? UNION "
                                "SELECT identity FROM charges WHERE label = ?", (label, label)).fetchall()
        return sorted(str(r[0]) for r in rows)

    def spent(self, identity: str) -> tuple[float, float]:
        rows = self._db.execute("SELECT epsilon, delta FROM charges WHERE identity = ? AND refunded IS NULL",
                                (identity,)).fetchall()
        return math.fsum(r[0] for r in rows), math.fsum(r[1] for r in rows)

    def identities(self) -> set[str]:
        rows = self._db.execute("SELECT identity FROM budgets UNION SELECT identity FROM charges").fetchall()
        return {str(r[0]) for r in rows}

    def write_budget(self, identity: str, label: str, epsilon: float, delta: float, name: str | None,
                     sketch: tuple[int, bytes] | None) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO budgets (identity, label, name, epsilon, delta, set_at) VALUES "
            "(?, ?, COALESCE(?, (SELECT name FROM budgets WHERE identity = ?)), ?, ?, ?)",
            (identity, label, name, identity, epsilon, delta, now()),
        )
        if sketch is not None:
            self._db.execute("INSERT OR REPLACE INTO sketches (identity, kind, columns, label, rows, sketch, stored_at) "
                             "VALUES (?, 'rows', '', ?, ?, ?, ?)", (identity, label, sketch[0], sketch[1], now()))

    def insert_charge(self, identity: str, label: str, record: dict[str, Any]) -> Receipt:
        cursor = self._db.execute(
            "INSERT INTO charges (identity, label, job, time, epsilon, delta, parameters, pid) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (identity, label, record["job"], record["time"], record["epsilon"], record["delta"],
             json.dumps(record["parameters"], sort_keys=True, default=str), record["pid"]),
        )
        return Receipt(int(cursor.lastrowid or 0))

    def mark_refunded(self, receipt: Receipt, invalid_input: bool) -> None:
        with Immediate(self._db):
            row = self._db.execute("SELECT job FROM charges WHERE id = ?", (receipt.id,)).fetchone()
            if row is None:
                return
            note = f"{now()} {failure_note(str(row[0]), invalid_input)}"
            self._db.execute("UPDATE sessions SET closed = ?, updated_at = ? WHERE charge_id = ? AND closed IS NULL",
                             (note, now(), receipt.id))
            self._db.execute("UPDATE charges SET refunded = ? WHERE id = ? AND refunded IS NULL", (note, receipt.id))

    # --- the dataset identity's caches --------------------------------------------------------
    def cached_hash(self, file: str, size: int, mtime_ns: int) -> str | None:
        row = self._db.execute("SELECT sha256 FROM file_hashes WHERE file = ? AND size = ? AND mtime_ns = ?",
                               (file, size, mtime_ns)).fetchone()
        return None if row is None else str(row[0])

    def cache_hash(self, file: str, size: int, mtime_ns: int, sha256: str) -> None:
        with Immediate(self._db):
            self._db.execute("DELETE FROM file_hashes WHERE file = ?", (file,))
            self._db.execute("INSERT INTO file_hashes (file, size, mtime_ns, sha256) VALUES (?, ?, ?, ?)",
                             (file, size, mtime_ns, sha256))

    def sketch(self, identity: str, kind: str, columns: str) -> tuple[str, bytes] | None:
        row = self._db.execute("SELECT label, sketch FROM sketches WHERE identity = ? AND kind = ? AND columns = ?",
                               (identity, kind, columns)).fetchone()
        return None if row is None else (str(row[0]), bytes(row[1]))

    def sketches(self, kind: str) -> list[tuple[str, str, str, bytes]]:
        rows = self._db.execute("SELECT identity, columns, label, sketch FROM sketches WHERE kind = ? "
                                "ORDER BY stored_at", (kind,)).fetchall()
        return [(str(r[0]), str(r[1]), str(r[2]), bytes(r[3])) for r in rows]

    def store_sketch(self, identity: str, kind: str, columns: str, label: str, rows: int, data: bytes) -> None:
        with Immediate(self._db):
            self._db.execute("INSERT OR IGNORE INTO sketches (identity, kind, columns, label, rows, sketch, stored_at) "
                             "VALUES (?, ?, ?, ?, ?, ?, ?)", (identity, kind, columns, label, rows, data, now()))

    # --- sessions -----------------------------------------------------------------------------
    def session(self, session_id: str) -> dict[str, Any] | None:
        row = self._db.execute(f"SELECT {', '.join('s.' + c for c in SESSION_COLUMNS)}, c.epsilon, c.delta "
                               "FROM sessions s LEFT JOIN charges c ON c.id = s.charge_id WHERE s.session_id = ?",
                               (session_id,)).fetchone()
        return None if row is None else {**dict(zip((*SESSION_COLUMNS, "paid_epsilon", "paid_delta"), row)),
                                         "role": None}

    def insert_session(self, row: dict[str, Any]) -> None:
        columns = SESSION_COLUMNS[:-1]
        self._db.execute(f"INSERT INTO sessions ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
                         tuple(row[c] for c in columns))

    def close_session(self, session_id: str, invalid_input: bool) -> None:
        with Immediate(self._db):
            row = self._db.execute("SELECT c.job FROM sessions s JOIN charges c ON c.id = s.charge_id "
                                   "WHERE s.session_id = ?", (session_id,)).fetchone()
            job = str(row[0]) if row is not None else "the job"
            self._db.execute("UPDATE sessions SET closed = ? WHERE session_id = ? AND closed IS NULL",
                             (f"{now()} {failure_note(job, invalid_input)}", session_id))

    def advance_session(self, session_id: str, at: Position, new: Position, record: str) -> bool:
        cursor = self._db.execute(
            "UPDATE sessions SET bottoms = ?, batches = ?, last_hash = ?, prev_hash = ?, position = ?, updated_at = ? "
            "WHERE session_id = ? AND closed IS NULL AND bottoms = ? AND batches = ? AND last_hash = ? "
            "AND json_extract(position, '$.queries_seen') = ? AND ? <= cutoff",
            (new.bottoms, new.batches, new.last_hash, at.last_hash, record, now(), session_id,
             at.bottoms, at.batches, at.last_hash, at.queries_seen, new.bottoms))
        return cursor.rowcount == 1


class Immediate:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on any exception)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if kind is None:
            self._db.execute("COMMIT")
        elif self._db.in_transaction:  # SQLite may have rolled back already
            self._db.execute("ROLLBACK")

