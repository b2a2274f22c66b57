"""The privacy-budget ledger's storage contract: rows in, rows out; no privacy decision.

Two implementations keep the same rows behind the same methods:

* :class:`pcqr.pipeline.budget.sqlite_store.SQLiteStore` -- one SQLite file, the embedded default:
  one person on one machine, whose owner can also rewrite it;
* :class:`pcqr.pipeline.budget.postgres_store.PostgresStore` -- a PostgreSQL server (issue 30), for a
  team: analysts read the tables and change them only through functions the schema owns, which
  re-check every rule the policy checks, append charges to a hash chain and advance sessions by
  compare-and-swap on the server (:mod:`pcqr.pipeline.budget.postgres_schema`).

What a charge, a budget or a refund means, and when one is refused, is the policy's
(:mod:`pcqr.pipeline.budget.ledger`); what a session's row means is
:mod:`pcqr.pipeline.session.book`'s. Neither knows which store it talks to:
:func:`pcqr.pipeline.budget.ledger.open_store` picks one from the ledger's location
(:mod:`pcqr.pipeline.budget.location`), and tests/test_ledger_contract.py runs the same tests
against both.
"""
from __future__ import annotations

import abc
import datetime
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self


#: The columns of a session's row, in the order :meth:`LedgerStore.insert_session` takes them.
SESSION_COLUMNS = ("session_id", "identity", "charge_id", "cutoff", "bottoms", "batches", "last_hash", "prev_hash",
                   "state_path", "fixed", "position", "seeded", "created_at", "updated_at", "closed")


def now() -> str:
    """The ledger's timestamps: UTC, ISO 8601, microseconds."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds")


def failure_note(job: str, invalid_input: bool) -> str:
    """What a refund, and a session closed by its job's failure, record after their time: the
    fixed wording a server ledger writes itself (pcqr.pipeline.budget.postgres_functions), never a
    caller's text."""
    return f"{job} failed {'on invalid input ' if invalid_input else ''}before releasing anything"


@dataclass(frozen=True)
class Position:
    """Where a session is: c (bottoms used), the coordinator's stream position, batches committed and
    the last batch's SHA-256 (pcqr.pipeline.session.book)."""

    bottoms: int
    queries_seen: int
    batches: int
    last_hash: str

    def describe(self) -> str:
        return f"c = {self.bottoms} after {self.batches} batches"


@dataclass(frozen=True)
class Receipt:
    """A charge's row id, and the secret that lets the process that made it refund it (None where the
    store needs none: a SQLite file's owner can rewrite anything anyway)."""

    id: int
    refund_token: str | None = field(default=None, repr=False)  # never printed


class LedgerStore(abc.ABC):
    """One ledger's storage. Use it as a context manager, or call :meth:`close`.

    ``name`` is how messages print the ledger (:func:`pcqr.pipeline.budget.location.shown`); ``location`` reopens it.
    Writes outside :meth:`transaction` are each atomic; inside one, all of them or none.
    """

    location: str
    name: str

    @property
    def role(self) -> str | None:
        """The caller's role on a server ledger (None: a file, whose owner is its one user)."""
        return None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    @abc.abstractmethod
    def close(self) -> None: ...

    @abc.abstractmethod
    def transaction(self) -> AbstractContextManager[None]:
        """``with store.transaction():`` one transaction that holds the ledger's write lock from its
        first statement, so a read-compare-write sequence inside it is serialised with every other
        process's (not nested)."""

    # --- budgets and charges ------------------------------------------------------------------
    @abc.abstractmethod
    def budget(self, identity: str) -> tuple[float, float] | None:
        """The budget (eps, delta) set for ``identity``, or None."""

    @abc.abstractmethod
    def registration(self, identity: str) -> dict[str, Any] | None:
        """The budget row of ``identity`` (label, name, epsilon, delta, set_at), or None."""

    @abc.abstractmethod
    def find_name(self, name: str) -> str | None:
        """The identity registered under ``--name name``, or None."""

    @abc.abstractmethod
    def charges(self, identity: str) -> list[dict[str, Any]]:
        """Every charge to ``identity``, oldest first: id, job, time, epsilon, delta, parameters
        (decoded), pid, label, role (who charged, on a server; None in a file), refunded (the
        refund's note, or None)."""

    @abc.abstractmethod
    def labelled(self, label: str) -> list[str]:
        """Every identity with a budget or a charge under ``label``, sorted."""

    @abc.abstractmethod
    def spent(self, identity: str) -> tuple[float, float]:
        """What ``identity`` has spent: the sums of its unrefunded charges' epsilons and deltas."""

    @abc.abstractmethod
    def identities(self) -> set[str]:
        """Every identity with a budget or a charge."""

    @abc.abstractmethod
    def write_budget(self, identity: str, label: str, epsilon: float, delta: float, name: str | None,
                     sketch: tuple[int, bytes] | None) -> None:
        """Insert or replace ``identity``'s budget row (an earlier name stays unless ``name`` is given)
        and, with ``sketch`` (rows, bytes), its row sketch as the budget owner's, replacing any other."""

    def budget_setter(self) -> str | None:
        """None if this caller may set budgets, else who may (a server ledger's owner role)."""
        return None

    @abc.abstractmethod
    def insert_charge(self, identity: str, label: str, record: dict[str, Any]) -> Receipt:
        """Append one charge (``record``: job, time, epsilon, delta, parameters, pid)."""

    @abc.abstractmethod
    def mark_refunded(self, receipt: Receipt, invalid_input: bool) -> None:
        """Record the charge refunded, noted :func:`failure_note` of its job (a charge already
        refunded keeps its first note), and close the session it pays for."""

    # --- the dataset identity's caches --------------------------------------------------------
    @abc.abstractmethod
    def cached_hash(self, file: str, size: int, mtime_ns: int) -> str | None:
        """The fingerprint cached for ``file`` at this size and modification time, or None."""

    @abc.abstractmethod
    def cache_hash(self, file: str, size: int, mtime_ns: int, sha256: str) -> None:
        """Cache a file's fingerprint under (size, mtime_ns), dropping its older entries."""

    @abc.abstractmethod
    def sketch(self, identity: str, kind: str, columns: str) -> tuple[str, bytes] | None:
        """(label, bytes) of the sketch stored for ``identity``, or None."""

    @abc.abstractmethod
    def sketches(self, kind: str) -> list[tuple[str, str, str, bytes]]:
        """Every stored sketch of ``kind``: (identity, columns, label, bytes), oldest first."""

    @abc.abstractmethod
    def store_sketch(self, identity: str, kind: str, columns: str, label: str, rows: int, data: bytes) -> None:
        """Store a sketch (one already stored for the same identity, kind and columns is kept)."""

    @property
    def trusts_its_links(self) -> bool:
        """Whether the links to identities of earlier versions stored here may be believed (a file:
        its one user wrote them; a server: any analyst could have, pcqr.pipeline.budget.overlap)."""
        return True

    # --- sessions -----------------------------------------------------------------------------
    @abc.abstractmethod
    def session(self, session_id: str) -> dict[str, Any] | None:
        """A session's row (:data:`SESSION_COLUMNS`, ``position`` as its JSON text; ``role``, who
        registered it, None in a file; ``paid_epsilon`` and ``paid_delta``, its charge's), or None."""

    @abc.abstractmethod
    def insert_session(self, row: dict[str, Any]) -> None:
        """Register a new session (``row``: :data:`SESSION_COLUMNS` but ``closed``, and ``epsilon``
        and ``delta``, what it certifies: a server refuses a charge that paid anything else)."""

    @abc.abstractmethod
    def close_session(self, session_id: str, invalid_input: bool) -> None:
        """Mark a session closed (it answers nothing more), noted :func:`failure_note` of its
        charge's job; one already closed keeps its note."""

    @abc.abstractmethod
    def advance_session(self, session_id: str, at: Position, new: Position, record: str) -> bool:
        """Compare-and-swap: move an open session's row from ``at`` to ``new`` (one more batch,
        ``record`` its JSON) if it is still at ``at``, in one transaction; False if it was not."""

    # --- the audit ------------------------------------------------------------------------------
    def verify_chain(self) -> dict[str, Any]:
        """Check the charges' hash chain: entries, head id and hash, and the first broken entry (None
        if the chain holds). A store without a chain says so (``chained`` False)."""
        return {"chained": False}
