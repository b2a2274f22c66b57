"""The session a log belongs to (issue 47: one session per log).

A log is one session's: its hash chain starts at batch 0 and the session's ledger row vouches for its
end. Two sessions given one ``--log`` used to write the same batch numbers: on a local disk the
later file replaced the earlier one (the first session's published answers gone, both runs exit 0),
in a bucket the loser was refused as an "altered log" forever. Now a session *claims* its log
before it asks any query: the claim is a file, :data:`CLAIM_FILE`, holding the session's id, created
once and never replaced (a hard link made under its final name, which fails when the name is taken,
on a disk; a conditional put, ``If-None-Match: *``, in a bucket). Of two sessions racing for one
empty log exactly one claims it; the other is refused in one line naming both sessions and the way
out, before anything is asked, and may be given a new ``--log``. A log written before claims
existed names its session in batch 0's provenance (:func:`owner`).

The claim is public: a session's id is in every batch's provenance already.
"""
from __future__ import annotations

import contextlib
import os
import re
import secrets
from typing import Iterator

from pcqr.pipeline.data import locations, object_store
from pcqr.pipeline.data.atomic import fsync_directory, write_atomic
from pcqr.pipeline.data.parquet_opener import schema_of
from pcqr.pipeline.data.user_files import parse_json
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.spelling import spelled, spelled_with
from pcqr.pipeline.public_log.batches import CLAIM_FILE, PROVENANCE_KEY, batch_files, batch_path

_SESSION_ID = re.compile(r"^[0-9a-f]{32}$")
_CLAIM_LIMIT = 4096


def owner(log_dir: str) -> str | None:
    """The id of the session whose log ``log_dir`` is: its claim's, else (a log written before
    claims) batch 0's provenance's; None for a log no session has claimed or written."""
    claimed = _claimed(log_dir)
    if claimed is not None:
        return claimed
    first = batch_path(log_dir, 0)
    if not locations.exists(first):
        return None
    try:
        provenance = parse_json((schema_of(first).metadata or {}).get(PROVENANCE_KEY, b"{}"), first)
    except PcqrError:
        provenance = None
    session = provenance.get("session_id") if isinstance(provenance, dict) else None
    # unreadable: some session's, which is not this one's (pcqr replay names what is wrong with it)
    return session if isinstance(session, str) else "unknown"


def check_owner(log_dir: str, session_id: str | None, option: str = "--log") -> None:
    """Refuse a log that holds, or is claimed by, another session (``session_id`` None: a session
    not created yet, for which every claimed or written log is another's)."""
    found = owner(log_dir)
    if found is not None and found != session_id:
        raise _taken(log_dir, found, session_id, option)


def claim(log_dir: str, session_id: str, option: str = "--log") -> None:
    """Claim ``log_dir`` for the session (before it asks any query); nothing if the session holds the
    claim already. Refused, naming both sessions, when another session holds it."""
    if not _SESSION_ID.match(session_id):
        raise ValueError("a session id is 32 lowercase hex digits")
    data = f'{{"session_id": "{session_id}"}}\n'.encode()
    path = locations.join(log_dir, CLAIM_FILE)
    if locations.is_uri(log_dir):
        created = object_store.put_once(path, data)
    else:
        created = _link_once(path, data)
    if not created:
        check_owner(log_dir, session_id, option)


@contextlib.contextmanager
def claimed(log_dir: str, session_id: str) -> Iterator[None]:
    """The block runs with the session's claim on ``log_dir``; if it fails before the log holds a
    batch, the claim is given back (and the folder removed if it is left empty), so the session, or a
    retry as a new session, may take that folder again."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(OSError, PcqrError):
            _unclaim(log_dir, session_id)
        raise


def _unclaim(log_dir: str, session_id: str) -> None:
    if batch_files(log_dir) or _claimed(log_dir) != session_id:
        return
    path = locations.join(log_dir, CLAIM_FILE)
    if locations.is_uri(log_dir):
        object_store.delete(path)
        return
    os.unlink(path)
    with contextlib.suppress(OSError):  # only if empty
        os.rmdir(log_dir)


def _claimed(log_dir: str) -> str | None:
    path = locations.join(log_dir, CLAIM_FILE)
    if not locations.exists(path):
        return None
    recorded = parse_json(locations.read_file(path, "--log", _CLAIM_LIMIT), path)
    session = recorded.get("session_id") if isinstance(recorded, dict) else None
    if not isinstance(session, str) or not _SESSION_ID.match(session):
        raise PcqrError(f"{path}: not a session claim pcqr wrote (a JSON object with a session_id); "
                        "the log's folder was edited: give this session a new --log")
    return session


def _link_once(path: str, data: bytes) -> bool:
    """``data`` at ``path`` unless a file is there: written under a temporary name, then hard-linked
    under ``path`` (a link fails when the name is taken: no replace, whoever wins a race); False
    when the name was taken."""
    folder = os.path.dirname(os.path.abspath(path))
    temporary = os.path.join(folder, f".{os.path.basename(path)}.{secrets.token_hex(8)}.tmp")
    write_atomic(temporary, data)
    try:
        os.link(temporary, path)
    except FileExistsError:
        return False
    finally:
        os.unlink(temporary)
    fsync_directory(folder)
    return True


def _taken(log_dir: str, found: str, session_id: str | None, option: str) -> PcqrError:
    mine = f"this session ({session_id})" if session_id else "a new session"
    return PcqrError(f"{spelled_with(option, log_dir)}: holds the log of session {found}; {mine} cannot write there "
                     f"(each session writes its own log): give it a new, empty folder as {spelled(option)}, or "
                     f"answer through session {found}'s own {spelled('--state')}")
