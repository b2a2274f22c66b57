"""The privacy-budget ledger's storage: one SQLite file, its schema and its rows; no privacy decision.

What a charge, a budget or a refund means, and when one is refused, is the policy's
(pcqr.pipeline.budget.ledger, which builds on this). Here: the connection (WAL journal, synchronous
FULL, busy timeout 60 s: see the policy's docstring for why), the schema and its migration, one
``BEGIN IMMEDIATE`` transaction (``transaction()``), and typed reads and writes of the tables
``budgets``, ``charges``, ``file_hashes``, ``sketches`` (and raw statements for ``sessions``,
pcqr.pipeline.session.book).
"""
from __future__ import annotations

import datetime
import json
import math
import sqlite3
import time
from types import TracebackType
from typing import Any, Self, Sequence

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
"""


def now() -> str:
    """The ledger's timestamps: UTC, ISO 8601, microseconds."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds")



class LedgerStore:
    """The ledger database at ``path`` (created with its schema if missing): rows in, rows out."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            self._db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        except sqlite3.DatabaseError as exc:
            raise PcqrError(f"ledger {path}: cannot open it ({exc}); pass another --ledger") from None
        try:
            self._db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            self._set_wal()
            self._db.execute("PRAGMA synchronous = FULL")
            self._create_schema()
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise PcqrError(f"ledger {path}: not a usable SQLite database ({exc}); pass another --ledger") from None
        except BaseException:
            self._db.close()
            raise

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._db.close()

    def transaction(self) -> Immediate:
        """``with ledger.transaction():`` one ``BEGIN IMMEDIATE`` transaction (not nested)."""
        return Immediate(self._db)

    def execute(self, sql: str, parameters: Sequence[Any] = ()) -> sqlite3.Cursor:
        """One SQL statement on the ledger (pcqr.pipeline.session.book's queries)."""
        return self._db.execute(sql, parameters)

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

    def budget(self, identity: str) -> tuple[float, float] | None:
        """The budget (eps, delta) set for ``identity``, or None."""
        row = self._db.execute("SELECT epsilon, delta FROM budgets WHERE identity = ?", (identity,)).fetchone()
        return None if row is None else (float(row[0]), float(row[1]))

    def registration(self, identity: str) -> dict[str, Any] | None:
        """The budget row of ``identity`` (label, name, epsilon, delta, set_at), or None."""
        row = self._db.execute("SELECT label, name, epsilon, delta, set_at FROM budgets WHERE identity = ?",
                               (identity,)).fetchone()
        return None if row is None else dict(zip(("label", "name", "epsilon", "delta", "set_at"), row))

    def find_name(self, name: str) -> str | None:
        """The identity registered under ``--name name``, or None."""
        row = self._db.execute("SELECT identity FROM budgets WHERE name = ?", (name,)).fetchone()
        return None if row is None else str(row[0])

    def charges(self, identity: str) -> list[dict[str, Any]]:
        """Every charge to ``identity``, oldest first (parameters decoded)."""
        rows = self._db.execute(
            "SELECT id, job, time, epsilon, delta, parameters, pid, label, refunded FROM charges WHERE identity = ? "
            "ORDER BY id",
            (identity,),
        ).fetchall()
        keys = ("id", "job", "time", "epsilon", "delta", "parameters", "pid", "label", "refunded")
        return [{**dict(zip(keys, row)), "parameters": parse_json(row[5], "the ledger's charge parameters")} for row in rows]

    def labelled(self, label: str) -> list[str]:
        """Every identity with a budget or a charge under ``label`` (a path whose contents changed has several)."""
        rows = self._db.execute("SELECT identity FROM budgets WHERE label = ? UNION "
                                "SELECT identity FROM charges WHERE label = ?", (label, label)).fetchall()
        return sorted(str(r[0]) for r in rows)

    def spent(self, identity: str) -> tuple[float, float]:
        """What ``identity`` has spent: the sum of its charges' epsilons and of their deltas."""
        rows = self._db.execute("SELECT epsilon, delta FROM charges WHERE identity = ? AND refunded IS NULL",
                                (identity,)).fetchall()
        return math.fsum(r[0] for r in rows), math.fsum(r[1] for r in rows)

    def cached_hash(self, file: str, size: int, mtime_ns: int) -> str | None:
        """The SHA-256 cached for ``file`` at this size and modification time, or None."""
        row = self._db.execute("SELECT sha256 FROM file_hashes WHERE file = ? AND size = ? AND mtime_ns = ?",
                               (file, size, mtime_ns)).fetchone()
        return None if row is None else str(row[0])

    def cache_hash(self, file: str, size: int, mtime_ns: int, sha256: str) -> None:
        """Cache a file's SHA-256 under (size, mtime_ns), dropping its older entries."""
        with Immediate(self._db):
            self._db.execute("DELETE FROM file_hashes WHERE file = ?", (file,))
            self._db.execute("INSERT INTO file_hashes (file, size, mtime_ns, sha256) VALUES (?, ?, ?, ?)",
                             (file, size, mtime_ns, sha256))

    def identities(self) -> set[str]:
        """Every identity with a budget or a charge."""
        rows = self._db.execute("SELECT identity FROM budgets UNION SELECT identity FROM charges").fetchall()
        return {str(r[0]) for r in rows}

    def sketch(self, identity: str, kind: str, columns: str) -> tuple[str, bytes] | None:
        """(label, bytes) of the sketch stored for ``identity`` (:mod:`pcqr.pipeline.budget.overlap`), or None."""
        row = self._db.execute("SELECT label, sketch FROM sketches WHERE identity = ? AND kind = ? AND columns = ?",
                               (identity, kind, columns)).fetchone()
        return None if row is None else (str(row[0]), bytes(row[1]))

    def sketches(self, kind: str) -> list[tuple[str, str, str, bytes]]:
        """Every stored sketch of ``kind``: (identity, columns, label, bytes)."""
        rows = self._db.execute("SELECT identity, columns, label, sketch FROM sketches WHERE kind = ? "
                                "ORDER BY stored_at", (kind,)).fetchall()
        return [(str(r[0]), str(r[1]), str(r[2]), bytes(r[3])) for r in rows]

    def store_sketch(self, identity: str, kind: str, columns: str, label: str, rows: int, data: bytes) -> None:
        """Store a sketch of ``identity`` (one already stored for the same kind and columns is kept)."""
        with Immediate(self._db):
            self._db.execute("INSERT OR IGNORE INTO sketches (identity, kind, columns, label, rows, sketch, stored_at) "
                             "VALUES (?, ?, ?, ?, ?, ?, ?)", (identity, kind, columns, label, rows, data, now()))

    def write_budget(self, identity: str, label: str, epsilon: float, delta: float, name: str | None) -> None:
        """Insert or replace ``identity``'s budget row (an earlier name stays unless ``name`` is given)."""
        self._db.execute(
            "INSERT OR REPLACE INTO budgets (identity, label, name, epsilon, delta, set_at) VALUES "
            "(?, ?, COALESCE(?, (SELECT name FROM budgets WHERE identity = ?)), ?, ?, ?)",
            (identity, label, name, identity, epsilon, delta, now()),
        )

    def insert_charge(self, identity: str, label: str, record: dict[str, Any]) -> int:
        """Insert one charge row; returns its id."""
        cursor = self._db.execute(
            "INSERT INTO charges (identity, label, job, time, epsilon, delta, parameters, pid) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (identity, label, record["job"], record["time"], record["epsilon"], record["delta"],
             json.dumps(record["parameters"], sort_keys=True, default=str), record["pid"]),
        )
        return int(cursor.lastrowid or 0)

    def mark_refunded(self, charge_id: int, note: str) -> None:
        """Mark a charge refunded with ``note`` (a charge already refunded keeps its first note)."""
        with Immediate(self._db):
            self._db.execute("UPDATE charges SET refunded = ? WHERE id = ? AND refunded IS NULL", (note, charge_id))


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
