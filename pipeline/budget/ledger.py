"""The privacy-budget ledger: every job that reads a private dataset charges its (eps, delta) first.

Guarantee. For a dataset identity with a budget (E, D) (``pcqr budget set``), the charges in the
ledger never sum to more than (E, D): a job whose charge would pass the budget is refused with a
:class:`~pcqr.pipeline.errors.PcqrError` before it reads a private row, and nothing is recorded for it.
A job charges what it requests, not what it ends up using. Charged only with a result: a job that
fails after its charge BEFORE releasing anything has its charge marked refunded, whatever the
failure (invalid values found while reading its rows, a learner's exception, an interrupt: the
error, seen by the operator, is its only output), and its error ends "charge refunded"
(:func:`provisional_charge`; a session's charge: pcqr.pipeline.session.book.new_session, which keeps
it once a batch was released and says "charge kept: N batches were released"). A process killed
outright (SIGKILL, out of memory) keeps its charge: the safe side. With no budget set, charges are
still recorded, without a limit.

Composition. Basic composition (Dwork-Roth, *The Algorithmic Foundations of Differential
Privacy*, Thm 3.16): if job i is (eps_i, delta_i)-DP, the k jobs together are
(sum eps_i, sum delta_i)-DP; it also holds when each job is chosen after seeing the earlier
outputs (adaptive composition, Dwork-Roth section 3.5.2). The ledger adds the epsilons, adds the
deltas and compares each sum with the budget within a relative tolerance of 1e-9 (three charges of
1e-6 fit a budget of 3e-6 despite rounding). No tighter accountant: advanced composition
(Thm 3.20) needs its slack delta fixed in advance and only wins over many small jobs.

Concurrency. One SQLite file (stdlib :mod:`sqlite3`; WAL journal, synchronous FULL, busy timeout
60 s). A charge is ONE ``BEGIN IMMEDIATE`` transaction, which takes SQLite's write lock before it
reads the spent sums: across processes the read-compare-insert sequences are serialised and each
sees every earlier committed charge, so ten jobs started together against a budget that admits
three leave exactly three charges. WAL needs every process on one host: keep the ledger on a local
disk of the machine the drivers run on, not on a network file system.

Identity (:mod:`pcqr.pipeline.budget.fingerprint`). An order-independent hash of the DECODED rows: each row
encoded canonically (columns by name, values by type) and hashed, the hashes added mod 2**128 with
the row count: the same rows re-written with another compression, encoding, row order, file split
or file names are the same identity, hence the same budget. The rows are hashed on the Dask workers
(the driver never reads a row), with a per-file cache keyed by (file, size, mtime_ns). A
dataset's bottom-k sketches (table ``sketches``) are stored at its registration (first charge, or
``pcqr budget set``): a job on a dataset that largely overlaps a registered one (rows appended or
removed) is charged to that identity as well, in the same transaction, and the misuse guard
refuses public inputs holding private rows (:mod:`pcqr.pipeline.budget.overlap`, which states what the
sketches detect). The identity and the sketches are deterministic functions of the private data,
NOT private releases: keep them with the private data (the ledger, the data owner's terminal),
never in a public output such as the answer log.
"""
from __future__ import annotations

import datetime
import json
import math
import os
import sqlite3
import time
from contextlib import contextmanager
from types import TracebackType
from typing import Any, Callable, Iterator, Sequence

from pcqr.pipeline.errors import PcqrError

SCHEMA_VERSION = 1
BUSY_TIMEOUT_S = 60.0
RELATIVE_TOLERANCE = 1e-9
DEFAULT_LEDGER = os.path.join("~", ".local", "share", "pcqr", "ledger.sqlite")

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


def ledger_path(option: str | None) -> str:
    """The ledger file: ``--ledger PATH``, else ``$PCQR_LEDGER``, else ~/.local/share/pcqr/ledger.sqlite.

    Its parent directories are created.
    """
    path = os.path.abspath(os.path.expanduser(option or os.environ.get("PCQR_LEDGER") or DEFAULT_LEDGER))
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
    except OSError as exc:
        raise PcqrError(f"--ledger {path}: cannot create its directory ({exc.strerror})") from None
    return path


def pair(epsilon: float, delta: float) -> str:
    """``(eps, delta)`` as the ledger's messages print it: ``(1, 1e-06)``."""
    return f"({epsilon:.6g}, {delta:.6g})"


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds")


def _exceeds(total: float, bound: float) -> bool:
    return total > bound * (1.0 + RELATIVE_TOLERANCE)


class Ledger:
    """The ledger database at ``path`` (created with its schema if missing; see :func:`ledger_path`):
    budgets, charges and cached file hashes. Use it as a context manager, or call :meth:`close`."""

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

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._db.close()

    def transaction(self) -> _Immediate:
        """``with ledger.transaction():`` one ``BEGIN IMMEDIATE`` transaction (pcqr.pipeline.session.book)."""
        return _Immediate(self._db)

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
        with _Immediate(self._db):
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

    def set_budget(self, identity: str, label: str, epsilon: float, delta: float, name: str | None = None) -> None:
        """Record the total budget (eps, delta) of a dataset identity (replacing an earlier one).

        Refused when it is below what the identity has already spent, or when ``name``
        already names another dataset.
        """
        with _Immediate(self._db):
            spent = self.spent(identity)
            if _exceeds(spent[0], epsilon) or _exceeds(spent[1], delta):
                raise PcqrError(f"--epsilon/--delta {pair(epsilon, delta)} is below what {label} has already "
                                f"spent {pair(*spent)}; see pcqr budget show {label}")
            if name is not None:
                owner = self.find_name(name)
                if owner is not None and owner != identity:
                    raise PcqrError(f"--name {name}: already names another dataset ({owner})")
            self._db.execute(  # an earlier --name stays unless a new one is given
                "INSERT OR REPLACE INTO budgets (identity, label, name, epsilon, delta, set_at) VALUES "
                "(?, ?, COALESCE(?, (SELECT name FROM budgets WHERE identity = ?)), ?, ?, ?)",
                (identity, label, name, identity, epsilon, delta, _now()),
            )

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

    def charge(self, identity: str, label: str, job: str, epsilon: float, delta: float,
               parameters: dict[str, Any], also: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
        """Charge one job's (eps, delta) to ``identity``, or refuse it (nothing recorded).

        One ``BEGIN IMMEDIATE`` transaction sums the earlier charges (basic composition),
        compares with the budget and inserts the charge, so concurrent jobs in other
        processes are serialised. ``also``: (identity, label) of registered datasets the data
        overlaps (:mod:`pcqr.pipeline.budget.overlap`), charged the same in the same transaction (all or
        none). Returns the charge with the new totals and ``"limited"`` (whether a budget was set).
        """
        if not (math.isfinite(epsilon) and epsilon >= 0 and math.isfinite(delta) and 0 <= delta < 1):
            raise PcqrError(f"{job}: cannot charge {pair(epsilon, delta)} to {label}: --epsilon must be >= 0 "
                            "and --delta in [0, 1)")
        record = {"identity": identity, "label": label, "job": job, "time": _now(), "epsilon": epsilon,
                  "delta": delta, "parameters": parameters, "pid": os.getpid()}
        with _Immediate(self._db):
            overlapping = {**record, "parameters": {**parameters, "overlapping": label}}
            also_ids = [self._insert_charge(other, other_label, overlapping) for other, other_label in also]
            charge_id = self._insert_charge(identity, label, record)
            spent, budget = self.spent(identity), self.budget(identity)
        return {**record, "id": charge_id, "also_ids": also_ids, "spent_epsilon": spent[0], "spent_delta": spent[1],
                "budget_epsilon": None if budget is None else budget[0],
                "budget_delta": None if budget is None else budget[1], "limited": budget is not None}

    def _insert_charge(self, identity: str, label: str, record: dict[str, Any]) -> int:
        """Inside a transaction: refuse the charge if ``identity``'s budget does not admit it, else insert it."""
        epsilon, delta = record["epsilon"], record["delta"]
        spent, budget = self.spent(identity), self.budget(identity)
        total = (spent[0] + epsilon, spent[1] + delta)
        if budget is not None and (_exceeds(total[0], budget[0]) or _exceeds(total[1], budget[1])):
            raise PcqrError(f"privacy budget of {label} exceeded: spent {pair(*spent)} + this job "
                            f"{pair(epsilon, delta)} > budget {pair(*budget)}; see pcqr budget show {label}")
        cursor = self._db.execute(
            "INSERT INTO charges (identity, label, job, time, epsilon, delta, parameters, pid) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (identity, label, record["job"], record["time"], epsilon, delta,
             json.dumps(record["parameters"], sort_keys=True, default=str), record["pid"]),
        )
        return int(cursor.lastrowid or 0)

    def refund(self, charge_id: int, reason: str) -> None:
        """Mark a charge refunded: its job failed on invalid input before releasing anything (the
        failure message is the only output, and it is not counted as a release)."""
        with _Immediate(self._db):
            self._db.execute("UPDATE charges SET refunded = ? WHERE id = ? AND refunded IS NULL",
                             (f"{_now()} {reason}", charge_id))

    def charges(self, identity: str) -> list[dict[str, Any]]:
        """Every charge to ``identity``, oldest first (parameters decoded)."""
        rows = self._db.execute(
            "SELECT id, job, time, epsilon, delta, parameters, pid, label, refunded FROM charges WHERE identity = ? "
            "ORDER BY id",
            (identity,),
        ).fetchall()
        keys = ("id", "job", "time", "epsilon", "delta", "parameters", "pid", "label", "refunded")
        return [{**dict(zip(keys, row)), "parameters": json.loads(row[5])} for row in rows]

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
        with _Immediate(self._db):
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
        with _Immediate(self._db):
            self._db.execute("INSERT OR IGNORE INTO sketches (identity, kind, columns, label, rows, sketch, stored_at) "
                             "VALUES (?, ?, ?, ?, ?, ?, ?)", (identity, kind, columns, label, rows, data, _now()))


class _Immediate:
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


def charge_private_use(
    files: Sequence[str], uri: str, job: str, epsilon: float, delta: float, parameters: dict[str, Any],
    ledger_option: str | None = None, client: Any = None, echo: Callable[[str], None] | None = None,
    features: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Charge a job's (eps, delta) to the private dataset ``uri`` (whose ``files`` it reads) BEFORE
    it reads a row; raises PcqrError when the budget would be exceeded (nothing is charged).

    ``files``/``uri`` are ``Dataset.files``/``Dataset.uri`` (``uri`` labels the charge); ``job``
    the command's name; (``epsilon``, ``delta``) what the whole run requests; ``parameters`` its
    public options (recorded as JSON); ``ledger_option`` is ``--ledger``; ``client`` hashes the
    files on its workers; ``echo`` gets one status line; ``features``, the job's feature columns,
    get a feature sketch (:mod:`pcqr.pipeline.budget.overlap`). The charge also goes to every registered
    dataset the data overlaps (``overlaps``: the line saying so). Returns the charge, its new
    totals, ``limited`` and ``ledger`` (the path).
    """
    from pcqr.pipeline.budget.fingerprint import fingerprint_dataset
    from pcqr.pipeline.budget.overlap import register, related_identities, relation_note

    path = ledger_path(ledger_option)
    with Ledger(path) as ledger:
        found = fingerprint_dataset(files, client, ledger, features)
        related = related_identities(ledger, found, files, client)
        charged = ledger.charge(found.identity, uri, job, epsilon, delta, parameters,
                                [(r.identity, r.label) for r in related])
        register(ledger, found, uri)
        earlier = [i for i in ledger.labelled(uri) if i != found.identity and i not in {r.identity for r in related}]
    charged = {**charged, "ledger": path, "earlier_identities": earlier,
               "overlaps": relation_note(related) if related else None}
    if echo is not None:
        echo(charge_note(charged))
        if earlier and not charged["limited"]:
            echo(f"ledger: warning: {uri} has other contents on record ({len(earlier)} earlier identities): "
                 "a changed dataset that does not overlap them gets a new identity with no budget; "
                 "see pcqr budget show")
    return charged


@contextmanager
def provisional_charge(
    files: Sequence[str], uri: str, job: str, epsilon: float, delta: float, parameters: dict[str, Any],
    ledger_option: str | None = None, client: Any = None, features: Sequence[str] | None = None,
) -> Iterator[dict[str, Any]]:
    """Charge (see :func:`charge_private_use`) for a block that releases nothing itself: if it fails,
    the charge is refunded and the error goes on, saying so (:func:`failed_after_charge`)."""
    charged = charge_private_use(files, uri, job, epsilon, delta, parameters, ledger_option, client,
                                 features=features)
    try:
        yield charged
    except (Exception, KeyboardInterrupt) as exc:
        refund_charge(charged, refund_reason(job, exc))
        raise failed_after_charge(exc, job, "charge refunded") from None


def refund_reason(job: str, failure: BaseException) -> str:
    """What a refund records: the job failed (on invalid input, for a PcqrError) before releasing anything."""
    return f"{job} failed {'on invalid input ' if isinstance(failure, PcqrError) else ''}before releasing anything"


def failed_after_charge(failure: BaseException, job: str, outcome: str) -> BaseException:
    """The error to raise for a job that failed after its charge, saying what became of the charge
    (``outcome``): a PcqrError's one line gets it appended, any other exception a note."""
    if isinstance(failure, PcqrError):
        return PcqrError(f"{failure}; {outcome}")
    failure.add_note(f"pcqr: {job} failed; {outcome}")
    return failure


def refund_charge(charged: dict[str, Any], reason: str) -> None:
    """Undo a charge returned by :func:`charge_private_use` (its job released nothing)."""
    with Ledger(charged["ledger"]) as ledger:
        for charge_id in [charged["id"], *charged.get("also_ids", ())]:
            ledger.refund(int(charge_id), reason)


def charge_note(charged: dict[str, Any]) -> str:
    """The one status line for a charge."""
    label = charged["label"]
    head = (f"ledger: charged {pair(charged['epsilon'], charged['delta'])} to {label}: "
            f"spent {pair(charged['spent_epsilon'], charged['spent_delta'])}")
    if charged["limited"]:
        head = f"{head} of {pair(charged['budget_epsilon'], charged['budget_delta'])}"
    else:
        head = f"{head}; no budget set for {label} (pcqr budget set {label} --epsilon E --delta D)"
    return f"{head}; {charged['overlaps']}" if charged.get("overlaps") else head

