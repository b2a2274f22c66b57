"""The answer loop's commits in a thread of their own: the four steps of
:mod:`pcqr.pipeline.session.commit`, batch after batch in order, while the coordinator tests the
next batches (issue 32: encoding, hashing and the durable writes took about two thirds of the loop).

What the coordinator hands over for batch N is fixed when it is handed over: the batch's log table,
its provenance, and a copy of the session as batch N leaves it (c, the coordinator's position and
noise state, the totals, input rows done) -- everything but the batch's hash, which only the
encoding gives. The thread encodes the batch with the hash of batch N - 1 (the chain), and then runs
steps 1-4 on that copy exactly as the loop did: so what is on disk at any instant is the state after
some committed batch, and a crash anywhere keeps every property :mod:`pcqr.pipeline.session.commit`
lists. The coordinator's state for batches tested but not yet committed lives only in memory; a
crash discards it, and the next run tests those queries again with the same keyed randomness.

Nothing is released by a batch until its step 4, and a step that fails (the ledger refuses a commit,
a disk is full) stops the thread: the coordinator gets the error at its next hand-over, and the
batches after the failed one are never committed.
"""
from __future__ import annotations

import queue
import threading
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from pcqr.pipeline.public_log.batches import append_batch, encode_batch, sha256
from pcqr.pipeline.session.book import SessionBook
from pcqr.pipeline.session.commit import publish, stage
from pcqr.pipeline.session.state import SessionState, save_session

#: Batches handed over and not yet committed, at most: the coordinator runs this far ahead.
DEPTH = 2


@dataclass(frozen=True)
class Handover:
    """One log batch for the committer: its table, its provenance, and the session as the batch
    leaves it (a copy the coordinator no longer touches; ``last_hash`` is set by the commit)."""

    log: pa.Table
    provenance: dict[str, Any]
    session: SessionState


class Committer:
    """Commits the batches handed to it, in order, in a thread; :meth:`drain` waits for all of them."""

    def __init__(self, state_dir: str, log_dir: str, book: SessionBook, last_hash: str, durable: bool = True) -> None:
        self.state_dir, self.log_dir, self.book, self.durable = state_dir, log_dir, book, durable
        self.last_hash = last_hash  # the hash of the last committed batch: the next one's chain link
        self._waiting: queue.Queue[Handover | None] = queue.Queue(DEPTH)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="pcqr-commit", daemon=True)
        self._thread.start()

    def put(self, handover: Handover) -> None:
        """Hand a batch over (waits while DEPTH batches are waiting: the thread takes every one, and
        commits none after a failed commit); raises the error of a failed commit."""
        self._raise()
        self._waiting.put(handover)

    def drain(self) -> None:
        """Wait until every batch handed over is committed (or a commit failed: raised here)."""
        self._waiting.join()
        self._raise()

    def close(self) -> None:
        """Commit the batches handed over (unless a commit failed: then none after it), stop, and
        wait for the thread. Called however the loop ends, so a loop stopped by an error or an
        interrupt still commits what it tested and handed over."""
        self._waiting.put(None)
        self._thread.join()

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        while (handover := self._waiting.get()) is not None:
            try:
                if self._error is None:
                    self._commit(handover)
            except BaseException as exc:  # noqa: BLE001 -- raised in the coordinator's thread
                self._error = exc
            finally:
                self._waiting.task_done()
        self._waiting.task_done()

    def _commit(self, handover: Handover) -> None:
        """Steps 1-4 of pcqr.pipeline.session.commit for one batch, as the loop ran them."""
        session = handover.session
        batch = session.next_batch - 1
        data = encode_batch(handover.log, handover.provenance, self.last_hash)
        if self.durable:
            stage(self.state_dir, batch, data)
        session.last_hash = sha256(data)
        self.book.commit(session)  # the ledger first: it is never behind what session.json or the log hold
        save_session(self.state_dir, session)  # the commit: c, threshold, rows done, this batch's hash
        if self.durable:
            publish(self.state_dir, self.log_dir, batch, data)
        else:
            append_batch(self.log_dir, batch, data)
        self.last_hash = session.last_hash
