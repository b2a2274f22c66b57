"""One process at a time on a private state directory (issue 10, point 4).

Every command that writes a state (``pcqr train``, ``pcqr answer``, ``pcqr replay --into``, and
``pcqr run``/``submit``/``demo`` through them) holds :func:`lock_state` for its whole run, taken
before the session is read or created and before the ledger is charged. Without it two processes
on one state each read the sparse-vector count c and each spend up to T abstentions, and each
overwrites the other's log batches.

The lock is ``flock(LOCK_EX)`` on ``DIR/lock``. The kernel releases it when the holder's file
descriptor is closed, so also when the holder exits or is killed (SIGKILL included): a lock is
never left stale. The holder writes its pid, host and command into the file only so that a
refused process can name it; the lock itself is the flock, not the file's contents.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import sys
import threading
import time
from typing import Iterator

from pcqr.pipeline.data.user_files import parse_json
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.spelling import spelled, spelled_with

LOCK_FILE = "lock"

_held: dict[str, int] = {}  # lock paths this process holds -> nesting depth
_held_guard = threading.Lock()


def _holder(fd: int) -> str:
    """Who holds the lock, as read from the lock file: "pcqr process PID (COMMAND)".

    The holder writes its record just after taking the lock, so the record may be missing or
    still the previous (dead) holder's for a moment; it is read again for up to a second until
    it names a live process on this host.
    """
    record: dict[str, object] = {}
    for _ in range(20):
        try:
            found = parse_json(os.pread(fd, 4096, 0) or b"{}", "the lock file")
            record = found if isinstance(found, dict) else {}
        except (OSError, PcqrError):
            record = {}
        pid = record.get("pid")
        if isinstance(pid, int) and (record.get("host") != socket.gethostname() or _alive(pid)):
            break
        time.sleep(0.05)
    else:
        return "another pcqr process"
    host = record.get("host")
    where = f" on {host}" if host != socket.gethostname() else ""
    return f"pcqr process {record['pid']}{where} ({record.get('command', 'pcqr')})"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _missing(state_dir: str) -> list[str]:
    """The directories ``os.makedirs(state_dir)`` would create, deepest first."""
    missing, folder = [], os.path.abspath(state_dir)
    while not os.path.exists(folder):
        missing.append(folder)
        folder = os.path.dirname(folder)
    return missing


def _open(path: str, state_dir: str, option: str, create: bool) -> tuple[int, list[str]]:
    """The lock file's descriptor, and the directories made for it (``create``), deepest first."""
    made = _missing(state_dir) if create else []
    if made:
        try:
            os.makedirs(state_dir, exist_ok=True)
        except OSError as exc:
            raise PcqrError(f"{spelled_with(option, state_dir)}: cannot create the state directory "
                            f"({exc.strerror})") from None
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600), made
    except FileNotFoundError:
        raise PcqrError(f"{spelled_with(option, state_dir)}: no session here (no such directory; run 'pcqr train' "
                        "first)") from None
    except OSError as exc:
        raise PcqrError(f"{spelled_with(option, state_dir)}: cannot open its lock file {LOCK_FILE} "
                        f"({exc.strerror})") from None


def _acquire(state_dir: str, wait: bool, option: str, create: bool) -> tuple[int, list[str]]:
    """A descriptor of ``DIR/lock`` holding LOCK_EX, the file still at that path; and the
    directories made for it, deepest first (the state directory and any missing parents)."""
    path = os.path.join(state_dir, LOCK_FILE)
    noted = False
    while True:
        fd, made = _open(path, state_dir, option, create)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise PcqrError(f"{spelled_with(option, state_dir)}: cannot lock {LOCK_FILE} "
                                    f"({exc.strerror})") from None
                holder = _holder(fd)
                if not wait:
                    raise PcqrError(f"{spelled_with(option, state_dir)} is in use by {holder}; "
                                    f"wait for it to finish or pass {spelled('--wait')}") from None
                if not noted:
                    print(f"waiting for {option} {state_dir}: in use by {holder}", file=sys.stderr, flush=True)
                    noted = True
                fcntl.flock(fd, fcntl.LOCK_EX)
            # A holder that created the directory and failed removes the lock file (and the
            # directory); a lock taken on the removed file protects nothing, so open again.
            try:
                current = os.stat(path)
            except FileNotFoundError:
                current = None
            mine = os.fstat(fd)
            if current is not None and (current.st_dev, current.st_ino) == (mine.st_dev, mine.st_ino):
                return fd, made
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


def _record(fd: int, command: str) -> None:
    """Name the holder in the lock file (for a refused process's message only)."""
    data = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "command": command}).encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


def _only_lock(state_dir: str) -> bool:
    try:
        return os.listdir(state_dir) == [LOCK_FILE]
    except OSError:
        return False


@contextlib.contextmanager
def lock_state(state_dir: str, wait: bool, *, create: bool = False, command: str = "pcqr",
               option: str = "--state") -> Iterator[None]:
    """Hold the exclusive lock of a private state directory for the ``with`` block.

    Parameters
    ----------
    state_dir
        The state directory (``--state DIR``).
    wait
        Block until the holder releases the lock (one note on stderr says so) instead of
        refusing at once.
    create
        The command creates a session: make the directory if it is missing. Without ``create``
        a missing directory is an error. If the block fails while the directory holds nothing
        but the lock file, the lock file (and the directory and its parents, if this call made
        them) is removed, so a refused command leaves nothing behind.
    command
        What the holder is (``"pcqr answer"``), named to a refused process.
    option
        The option that named the directory, for error messages (``--state``, ``--into``).

    Raises
    ------
    PcqrError
        ``"--state DIR is in use by pcqr process PID (pcqr answer); wait for it to finish or pass
        --wait"`` when another process holds the lock and ``wait`` is false; one line, too, when
        the directory is missing (without ``create``) or cannot be created or locked.

    The lock is re-entrant within a process: ``pcqr replay --into`` holds it and runs
    ``pcqr answer`` on the same directory, which then proceeds. It is released when the block
    ends or the process dies, however it dies.
    """
    if "://" in str(state_dir):  # os would make a local folder named "s3:": refused, and never supported
        raise PcqrError(f"{spelled_with(option, state_dir)}: the state folder holds the session's secret key and its "
                        "private models, so it stays on a local disk the owner controls; give a local path")
    path = os.path.realpath(os.path.join(state_dir, LOCK_FILE))
    with _held_guard:
        if path in _held:
            _held[path] += 1
            nested = True
        else:
            nested = False
    if nested:
        try:
            yield
        finally:
            with _held_guard:
                _held[path] -= 1
        return
    fd, made = _acquire(state_dir, wait, option, create)
    with _held_guard:
        _held[path] = 1
    try:
        _record(fd, command)
        yield
    except BaseException:
        if _only_lock(state_dir):  # the command failed before writing anything: leave nothing
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(state_dir, LOCK_FILE))
                for folder in made:  # the state directory, then the parents made for it
                    os.rmdir(folder)
        raise
    finally:
        with _held_guard:
            del _held[path]
        os.close(fd)
