"""The order of writes that makes the answer loop crash-safe (issue 5), and recovery on resume.

One log batch N is committed in four durable steps (the files by :func:`pcqr.pipeline.data.atomic.write_atomic`:
temporary file, fsync, rename, fsync of the directory; the ledger by one transaction of its store, SQLite or PostgreSQL):

1. ``STATE/pending/batch-N.parquet``  -- the encoded batch, exactly the bytes the log will hold;
2. the ledger's row of the session    -- c, the stream position, N + 1 batches, the batch's
                                         SHA-256, moved from the run's position or refused
                                         (:meth:`pcqr.pipeline.session.book.SessionBook.commit`:
                                         THE AUTHORITY);
3. ``STATE/session.json``             -- c, the coordinator's stream position, the noise
                                         generator's state, next_batch = N + 1, last_hash =
                                         SHA-256 of those bytes, pending_batch = N, input rows
                                         done  (THE COMMIT of the private state);
4. ``LOG/batch-N.parquet``            -- the same bytes, now public;

then the pending file is removed. Before a session answers anything, the ledger checks its state
(:meth:`pcqr.pipeline.session.book.SessionBook.open`: a state one batch behind the ledger -- a crash
between steps 2 and 3 -- takes the ledger's position) and :func:`recover` repairs the log.

Why each property holds whatever instant the process dies (SIGKILL):

* An answer that reached the public log is never re-answered differently. Step 4 happens only
  after steps 2 and 3, so every published batch is committed: session.json records its rows as
  done (``input.done``), its hash as ``last_hash`` and its bottoms in c. A resumed run skips those
  rows of the same input, and a committed batch that did not reach the log is published from its
  pending file, byte for byte, never recomputed.
* c never goes backwards: c only changes in steps 2 and 3, atomically, to a larger or equal value;
  the ledger's c (step 2) is never behind session.json's or the log's, so a crash at any point
  never leaves the state ahead of the ledger in budget.
* A crash gives nobody a second draw. The coordinator's randomness was fixed when the session
  was created (pcqr.pipeline.gates.sparse_vector: T thresholds in STATE/thresholds.npy, one per instance, and
  a secret key from which query position i's uniform number U_i is derived), so the transcript is
  a deterministic function of (key, thresholds, data, query sequence). A crash before step 2
  discards the whole batch: nothing of it was published, the saved state is the one before the
  batch, and the re-run tests the same queries at the same positions with the same thresholds
  and U_i -- it releases exactly what the uninterrupted run would have. Killing and restarting a
  job, or resubmitting it after a failure, redraws nothing (issue 10), and instance c always uses
  threshold c, so a threshold is never reused after a bottom. (Universal mode's one A_SSPP
  selection draws its words from the session key's A_SSPP stream when the switch comes, so a
  re-run draws the same one, and its save fixes it before anyone sees it:
  pcqr.pipeline.session.query_release.UniversalSwitch, pcqr.pipeline.privacy.keyed_draws.)
* A batch whose commit is uncertain (state committed, log file missing) counts its bottoms: they
  are in c from steps 2 and 3, and recovery publishes the batch, so the log then shows them. A
  crash between steps 2 and 3 leaves the state one batch behind the ledger: the next run takes
  the ledger's position for that batch and recovery publishes it from its pending copy.
* No half-written Parquet file is ever visible: every write is a rename of a complete, fsynced
  temporary file whose name starts with ``.`` (skipped by Parquet dataset readers and by
  :func:`pcqr.pipeline.public_log.batches.batch_files`); recovery deletes leftover temporaries.

The answer loop runs these steps in a thread of its own (:mod:`pcqr.pipeline.session.committer`),
on a copy of the session as each batch leaves it, in the same order: every property below holds as
it is stated.

Cost per batch: one ledger transaction and a few directory fsyncs beyond the one durable write
of the batch bytes: step 4 hard-links the pending file into the log (the same fsynced bytes) and
drops its pending name; only where the two folders cannot share a file (another filesystem) are
the bytes written a second time.

A log in object storage (``--log s3://bucket/prefix``; the state stays on a local disk) keeps every
step but the fourth, which is a conditional put (:func:`pcqr.pipeline.data.object_store.put_once`,
``If-None-Match: *``): batch N's key is written once and never replaced. A put that finds the key
taken (a run killed after its put, before it dropped the pending copy; or a lost reply) compares
the bytes there with the committed ones: the same bytes are that batch, published; any other bytes
are refused as an altered log. The ledger stays the authority for what was committed, and the
hash chain and ``pcqr replay`` verify the log the same way as on a file system. A put is atomic
(a reader sees no object or the whole one), so there are no temporaries to clean in the bucket.
"""
from __future__ import annotations

import os
import re

from pcqr.pipeline.data import locations, object_store
from pcqr.pipeline.data.atomic import fsync_directory, link_atomic, write_atomic
from pcqr.pipeline.data.parquet_opener import parquet_bytes
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.public_log.batches import append_batch, batch_path, sha256

PENDING_DIR = "pending"
_TEMPORARY = re.compile(r"^\..*\.tmp$")


def pending_path(state_dir: str, batch: int) -> str:
    return os.path.join(state_dir, PENDING_DIR, os.path.basename(batch_path("", batch)))


def stage(state_dir: str, batch: int, data: bytes) -> None:
    """Step 1: the batch's bytes in the private state directory."""
    write_atomic(pending_path(state_dir, batch), data)


def publish(state_dir: str, log_dir: str, batch: int, data: bytes) -> None:
    """Step 4 (after the session was saved): the batch in the public log -- the pending file itself,
    hard-linked into the log (its bytes were fsynced at step 1: nothing is written twice), or a
    copy where the two folders cannot share a file -- then the pending name dropped."""
    staged = pending_path(state_dir, batch)
    if locations.is_uri(log_dir):
        publish_once(log_dir, batch, data)
    elif not link_atomic(staged, batch_path(log_dir, batch)):
        append_batch(log_dir, batch, data)
    _remove(staged)


def publish_once(log_dir: str, batch: int, data: bytes) -> None:
    """Batch ``batch`` in a log in object storage, under a key written once: a put that finds the key
    taken accepts the same bytes (this batch, published before) and refuses any other."""
    published = batch_path(log_dir, batch)
    if not object_store.put_once(published, data) and sha256(parquet_bytes(published)) != sha256(data):
        raise PcqrError(f"{published}: differs from the batch this session committed (altered log?); "
                        "see pcqr replay")


def recover(state_dir: str, log_dir: str | None, pending_batch: int | None, last_hash: str) -> str | None:
    """Make the log agree with the committed state before anything else happens.

    Returns a note for the user when something was repaired, else None. Raises PcqrError when
    the log holds a different batch than the state committed (it was altered).
    """
    note = None
    if pending_batch is not None and log_dir is not None:
        published = batch_path(log_dir, pending_batch)
        staged = pending_path(state_dir, pending_batch)
        if locations.exists(published):
            if sha256(parquet_bytes(published)) != last_hash:
                raise PcqrError(
                    f"{published}: differs from the batch this session committed (altered log?); "
                    "see pcqr replay"
                )
        elif os.path.exists(staged):
            data = parquet_bytes(staged, "staged log batch")
            if sha256(data) != last_hash:
                raise PcqrError(f"{staged}: does not match the session's committed batch hash")
            if locations.is_uri(log_dir):
                publish_once(log_dir, pending_batch, data)
            else:
                append_batch(log_dir, pending_batch, data)
            note = f"recovered batch {pending_batch}: committed before the previous run stopped, now in the log"
        else:
            raise PcqrError(
                f"{log_dir}: batch {pending_batch} was committed but is neither in the log nor pending"
            )
    _clean(os.path.join(state_dir, PENDING_DIR), keep=None)  # uncommitted batches: never public
    if log_dir is not None and not locations.is_uri(log_dir):
        _clean(log_dir, keep=None, only_temporary=True)
    return note


def _clean(directory: str, keep: str | None, only_temporary: bool = False) -> None:
    if not os.path.isdir(directory):
        return
    removed = False
    for name in os.listdir(directory):
        if name == keep or (only_temporary and not _TEMPORARY.match(name)):
            continue
        os.unlink(os.path.join(directory, name))
        removed = True
    if removed:
        fsync_directory(directory)


def _remove(path: str) -> None:
    """Drop a published batch's pending copy (no fsync: a leftover copy is removed by recovery)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return
