"""The ledger's ``sessions`` table: the authority for a session's identity and its abstention count.

The private state directory (session.json) is a file the operator can edit, copy or restore; the
ledger is not bypassed by any of that. Every session is registered in the ledger when it is
created (``pcqr train``, or a one-shot ``pcqr answer``), with the charge that pays for it, its
cutoff T and a digest of everything fixed at creation (parameters, models' features, the session
key and the T pre-drawn thresholds). Its row then holds the session's *position*: c (bottoms
used), the coordinator's stream position, the number of log batches committed and the last
batch's SHA-256.

Guarantee: **across every copy of a state directory, the answers released by a session hold at
most T abstentions and are paid by its one charge.** Why:

* Each batch commit (pcqr.pipeline.session.commit, :meth:`SessionBook.commit`) is a compare-and-swap on the
  row, in one transaction of the ledger's store (on a server ledger, inside a function the schema
  owns, which also refuses a step that is not one batch forward with c at most T): it succeeds only if the row is still at the
  position the run started the batch from, and moves it to the batch's end. So the committed
  batches of a session form ONE chain in the ledger, whatever number of processes or copies
  try; a run whose position is not the ledger's is refused before its batch is saved or
  published (the order is: pending copy, ledger, session.json, public log). Every published batch
  is in that chain, so the abstentions published are at most the ledger's c, which never exceeds T
  (the commit refuses a c above the ledger's T).
* A resumed run (:meth:`SessionBook.open`) must start from the ledger's position. A state whose c,
  stream position, batch count or last hash differs is refused in one line (an edited count, a
  restored backup, the second of two copies), with one exception: a state exactly one batch
  behind, whose last hash is the one the ledger's last batch follows, is the normal crash between
  the ledger's commit and session.json's; the run then takes the ledger's recorded position for
  that batch (roll forward) and :func:`pcqr.pipeline.session.commit.recover` publishes the batch from its
  pending copy. Rolling forward only ever adopts the ledger's own chain, so it is safe whoever
  asks (a copy that rolls forward becomes the same session at the same position, and its next
  commit races the other copy's through the same compare-and-swap).
* A state whose session_id the ledger does not know (another ledger, or forged), whose charge
  was refunded, or whose fixed parameters or randomness differ from those registered, answers
  nothing.

We chose "refuse" over "continue from the ledger's count" for copies: continuing would put two
processes in the same sparse-vector instance with the same threshold and the same per-query
uniforms U_i on different queries, which the AboveThreshold proof does not cover.

Seeded (``--insecure-seed``) sessions follow the same rules (``seeded`` records them).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from types import TracebackType
from typing import Any, Iterator

import numpy as np

from pcqr.pipeline.session.commit import PENDING_DIR
from pcqr.pipeline.data.user_files import parse_json
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.budget.bounds import exceeds
from pcqr.pipeline.budget.ledger import Ledger, failed_after_charge, refund_charge
from pcqr.pipeline.budget.location import ledger_exists, ledger_location, shown
from pcqr.pipeline.budget.store import Position, now
from pcqr.pipeline.session.state import MODELS_FILE, SESSION_FILE, THRESHOLDS_FILE, SessionState

#: The fields of session.json a batch commit changes: what the ledger records per commit, and
#: what a state one batch behind takes from it.
MUTABLE = ("next_batch", "last_hash", "pending_batch", "noise_state", "totals", "input", "answered_inputs")
#: The fields fixed when the session is created (their digest is registered).
FIXED = ("session_id", "params", "learner", "features", "private_rows", "seed", "mode", "agnostic",
         "relabeller", "label", "universal", "dedupe_seed", "private_fingerprint")


def position_of(session: SessionState) -> Position:
    return Position(session.sparse_vector.bottoms, session.sparse_vector.queries_seen, session.next_batch,
                    session.last_hash)


#: Parameters added after sessions were registered, with the value every earlier session has: a
#: session whose parameter has that value may have been registered without it (issue 13).
LATER_PARAMS = (("noise_split", "equal"), ("gate", "stability"), ("profile", "paper"))


def fixed_digest(session: SessionState) -> str:
    """SHA-256 of what is fixed at creation: the public parameters and the private randomness
    (and the guess gate's public guess, for sessions that have one)."""
    return fixed_digests(session)[0]


def fixed_digests(session: SessionState) -> list[str]:
    """The digest registered now, then those a session with the same values registered before the
    LATER_PARAMS existed (each dropped only while it holds the old value: nothing edited matches)."""
    record = session.to_dict()
    fixed = {name: record.get(name) for name in FIXED}
    if session.guess is not None:
        fixed["guess"] = session.guess
    fixed["key"] = session.sparse_vector.key.hex()
    thresholds = np.asarray(session.sparse_vector.thresholds, dtype="<i8").tobytes()
    fixed["thresholds"] = hashlib.sha256(thresholds).hexdigest()
    digests = [_digest(fixed)]
    params = dict(fixed["params"] or {})
    for name, old in LATER_PARAMS:
        if params.get(name) != old:
            break
        del params[name]
        digests.append(_digest({**fixed, "params": dict(params)}))
    return digests


def _digest(fixed: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(fixed, sort_keys=True, default=str).encode()).hexdigest()


def _record(session: SessionState) -> str:
    """The JSON the ledger keeps per commit: the position and the other mutable fields."""
    record = session.to_dict()
    mutable = {name: record.get(name) for name in MUTABLE}
    mutable["bottoms"], mutable["queries_seen"] = session.sparse_vector.bottoms, session.sparse_vector.queries_seen
    return json.dumps(mutable, sort_keys=True, default=str)


def register_session(ledger_file: str, session: SessionState, charged: dict[str, Any], state_dir: str) -> None:
    """Record a new session (position zero) with the charge that pays for it (``charged["id"]``), once
    it is trained and before its session.json is first written: a crash before this leaves a charge
    and no session (over-charged, never free); one after it, a session with no state."""
    stamp = now()
    with Ledger(ledger_file) as ledger:
        ledger.store.insert_session({
            "session_id": session.session_id, "identity": charged["identity"], "charge_id": int(charged["id"]),
            "cutoff": session.params.cutoff, "bottoms": session.sparse_vector.bottoms, "batches": session.next_batch,
            "last_hash": session.last_hash, "prev_hash": "", "state_path": os.path.abspath(state_dir),
            "fixed": fixed_digest(session), "position": _record(session), "seeded": int(not session.private),
            "created_at": stamp, "updated_at": stamp, "epsilon": charged["epsilon"], "delta": charged["delta"]})


def close_session(ledger_file: str, session_id: str, failure: BaseException) -> None:
    """Mark a session closed (its job failed with ``failure`` before releasing anything): it answers
    nothing more."""
    with Ledger(ledger_file) as ledger:
        ledger.store.close_session(session_id, isinstance(failure, PcqrError))


def session_row(ledger: Ledger, session_id: str) -> dict[str, Any] | None:
    """A session's row (``position`` decoded), or None."""
    found = ledger.store.session(session_id)
    if found is None:
        return None
    found["position"] = parse_json(found["position"], "the ledger's session position")
    return found


def _position(row: dict[str, Any]) -> Position:
    return Position(int(row["bottoms"]), int(row["position"]["queries_seen"]), int(row["batches"]),
                    str(row["last_hash"]))


class SessionBook:
    """A session's ledger row, held open for one run: verified when opened, advanced by each commit.

    Use :meth:`open` (an existing session) or :meth:`created` (one this run registered), as a
    context manager.
    """

    def __init__(self, ledger: Ledger, session: SessionState, state_dir: str, at: Position) -> None:
        self.ledger, self.session_id, self.state_dir, self.at = ledger, session.session_id, state_dir, at

    def __enter__(self) -> SessionBook:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.ledger.close()

    @classmethod
    def created(cls, ledger_file: str, session: SessionState, state_dir: str) -> SessionBook:
        """The book of a session this run has just registered."""
        return cls(Ledger(ledger_file), session, state_dir, position_of(session))

    @classmethod
    def open(cls, ledger_option: str | None, session: SessionState, state_dir: str) -> tuple[SessionBook, str | None]:
        """Check a loaded session against the ledger (``--ledger``) before it answers anything.

        Returns the book and a note when the state was one batch behind and took the ledger's
        position (``session`` is updated in memory and saved). Raises a one-line PcqrError when
        the ledger does not know the session, closed it, registered other fixed values, holds
        another position, recorded another role as its registrant, or records a charge that paid
        less than the session's certificate.
        """
        from pcqr.pipeline.session.state import save_session

        path = ledger_location(ledger_option)
        if not ledger_exists(path):  # refused without creating an empty ledger there
            _check_known(None, session, state_dir, shown(path))
        ledger = Ledger(path)
        try:
            row = session_row(ledger, session.session_id)
            _check_known(row, session, state_dir, ledger.path)
            assert row is not None
            _check_paid(row, session, state_dir, ledger)
            here, there = position_of(session), _position(row)
            note = None
            if here != there:
                if not (here.batches + 1 == there.batches and here.last_hash == row["prev_hash"]
                        and here.bottoms <= there.bottoms):
                    raise PcqrError(
                        f"--state {state_dir}: the state says {here.describe()}, the ledger {ledger.path} records "
                        f"{there.describe()} for session {session.session_id} (an edited, copied or restored "
                        "state directory); the ledger is the authority, the state is refused")
                _roll_forward(session, row["position"])
                save_session(state_dir, session)
                note = (f"batch {there.batches - 1} was committed to the ledger before the previous run stopped; "
                        "the state now takes the ledger's position")
            return cls(ledger, session, state_dir, there), note
        except BaseException:
            ledger.close()
            raise

    def commit(self, session: SessionState) -> None:
        """Move the ledger's row from this run's position to ``session``'s (one more batch), or refuse:
        compare-and-swap in one transaction. Called after the batch is staged, before session.json."""
        new = position_of(session)
        if new.batches != self.at.batches + 1 or not self.at.bottoms <= new.bottoms <= session.params.cutoff:
            raise PcqrError(f"--state {self.state_dir}: a commit to {new.describe()} from {self.at.describe()} "
                            f"with cutoff {session.params.cutoff} is not a valid step (a bug: please report it)")
        if not self.ledger.store.advance_session(self.session_id, self.at, new, _record(session)):
            row = session_row(self.ledger, self.session_id)
            there = "no longer holds it" if row is None else (
                f"closed it ({row['closed']})" if row["closed"] is not None else
                f"records {_position(row).describe()}, this run was at {self.at.describe()}")
            raise PcqrError(
                f"--state {self.state_dir}: the ledger {self.ledger.path} {there} for session {self.session_id} "
                "(another copy of this state committed first?); this run is refused, nothing more is released")
        self.at = new

    def released_batches(self) -> int:
        """Batches the ledger records as committed for this session (read again, not cached)."""
        row = session_row(self.ledger, self.session_id)
        return 0 if row is None else int(row["batches"])


def _check_known(row: dict[str, Any] | None, session: SessionState, state_dir: str, path: str) -> None:
    if row is None:
        raise PcqrError(f"--state {state_dir}: session {session.session_id} is not in the ledger {path} "
                        "(a state from another ledger, or forged); pass the --ledger it was trained with")
    if row["closed"] is not None:
        raise PcqrError(f"--state {state_dir}: session {session.session_id} was closed in the ledger {path} "
                        f"({row['closed']}); start a new session")
    if row["fixed"] not in fixed_digests(session) or int(row["cutoff"]) != session.params.cutoff:
        raise PcqrError(f"--state {state_dir}: its parameters or fixed randomness differ from those the ledger "
                        f"{path} registered for session {session.session_id} (edited state?)")


def _check_paid(row: dict[str, Any], session: SessionState, state_dir: str, ledger: Ledger) -> None:
    """Refuse a session this role did not register (a server commits only its registrant's batches),
    or whose certificate is more than its charge paid (a state, or a registration, made by hand)."""
    role = ledger.store.role
    if row["role"] is not None and row["role"] != role:
        raise PcqrError(f"--state {state_dir}: session {session.session_id} was registered by role {row['role']}, "
                        f"and only that role may answer with it (this is role {role})")
    proven = session.plan().certificate()
    paid = (row["paid_epsilon"], row["paid_delta"])
    if paid[0] is None or exceeds((proven["proven_epsilon"], proven["proven_delta"]), paid):
        raise PcqrError(f"--state {state_dir}: its parameters certify ({proven['proven_epsilon']:.6g}, "
                        f"{proven['proven_delta']:.6g}), more than the charge the ledger {ledger.path} records for "
                        f"session {session.session_id} paid; the state is refused")


def _roll_forward(session: SessionState, record: dict[str, Any]) -> None:
    """Take the ledger's record of the last committed batch (the state is one batch behind)."""
    session.next_batch = int(record["next_batch"])
    session.last_hash = str(record["last_hash"])
    session.pending_batch = record["pending_batch"]
    session.noise_state = record["noise_state"]
    session.totals = dict(record["totals"])
    session.input = record["input"]
    if "answered_inputs" in record:  # absent from records written before it: the state's own stay
        session.answered_inputs = list(record["answered_inputs"])
    session.sparse_vector.bottoms = int(record["bottoms"])
    session.sparse_vector.queries_seen = int(record["queries_seen"])


class NewSession:
    """The charge of a session being created, while the job that creates it runs (:func:`new_session`)."""

    def __init__(self, charged: dict[str, Any], state_dir: str, job: str) -> None:
        self.charged, self.state_dir, self.job = charged, state_dir, job
        self.book: SessionBook | None = None

    def register(self, session: SessionState) -> SessionBook:
        """Register the trained session with this charge (before session.json is written); its book."""
        register_session(self.charged["ledger"], session, self.charged, self.state_dir)
        self.book = SessionBook.created(self.charged["ledger"], session, self.state_dir)
        return self.book

    def settle(self, failure: BaseException) -> str:
        """The job failed: keep the charge if a batch was committed (released), else close the session,
        refund the charge and remove the session's files. Returns what happened, for the error."""
        released = self.book.released_batches() if self.book is not None else 0
        if released:
            return f"charge kept: {released} batch{'es were' if released > 1 else ' was'} released"
        if self.book is not None:  # closed first: a crash before the refund leaves a charge, never a free session
            close_session(self.charged["ledger"], self.book.session_id, failure)
        refund_charge(self.charged, failure)
        for name in (SESSION_FILE, THRESHOLDS_FILE, MODELS_FILE):  # session.json first: no half session
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self.state_dir, name))
        shutil.rmtree(os.path.join(self.state_dir, PENDING_DIR), ignore_errors=True)
        return "charge refunded"

    def close(self) -> None:
        if self.book is not None:
            self.book.ledger.close()


@contextlib.contextmanager
def new_session(charged: dict[str, Any], state_dir: str, job: str) -> Iterator[NewSession]:
    """The block of a job that creates a session after ``charged`` (pcqr.pipeline.budget.charging.charge_private_use).

    Charged only with a result (issue 11): if the block fails, the charge is refunded unless a batch
    was committed -- the ledger says how many -- and the error says which ("charge refunded" /
    "charge kept: N batches were released"): a PcqrError's one line gets it appended, any other
    exception a note. Training alone releases nothing (the models stay in the private state).
    """
    pending = NewSession(charged, state_dir, job)
    try:
        yield pending
    except (Exception, KeyboardInterrupt) as exc:
        raise failed_after_charge(exc, job, pending.settle(exc)) from None
    finally:
        pending.close()
