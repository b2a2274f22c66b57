"""Atomic file writes: a reader sees the old file or the whole new one, never half of it.

Write to a temporary name in the same directory, fsync it, rename it over the
target (atomic on POSIX), then fsync the directory so the rename itself is
durable. Temporary names start with ``.`` so dataset readers skip them.
"""
from __future__ import annotations

import errno
import os
import secrets
import tempfile

from pcqr.pipeline.errors import PcqrError


def write_atomic(path: str, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically and durably."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    fsync_directory(directory)


def link_atomic(source: str, path: str) -> bool:
    """Make ``path`` a hard link to the (durable) file ``source``, atomically and durably: a link
    under a temporary name, renamed over ``path``, then the directory fsynced. No byte is
    rewritten. False (nothing changed) where the two cannot share a file (another filesystem, or
    one without hard links): the caller then writes the bytes."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{secrets.token_hex(8)}.tmp")
    try:
        os.link(source, tmp)
    except OSError as exc:
        if exc.errno in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP):
            return False
        raise
    try:
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    fsync_directory(directory)
    return True


def fsync_directory(directory: str) -> None:
    """Make renames and creations in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def refuse_remote(path: str, option: str) -> None:
    """Refuse an output at a URI (``s3://...``): pcqr writes its outputs on a local file system only
    so far, and ``os`` would take ``s3://bucket/x`` for a local folder named ``s3:`` (a silently
    wrong result)."""
    if "://" in str(path):
        raise PcqrError(f"{option} {path}: writing to object storage is not supported yet; give a local path")


def _check_folder(folder: str, path: str, option: str) -> None:
    """``folder`` (or its nearest existing ancestor) can hold what ``option path`` will write."""
    refuse_remote(path, option)
    while not os.path.exists(folder):
        folder = os.path.dirname(folder)
    if not os.path.isdir(folder):
        raise PcqrError(f"{option} {path}: cannot be created: {folder} is a file, not a directory")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise PcqrError(f"{option} {path}: cannot write to {folder} (read-only or no permission)")


def check_writable_directory(path: str, option: str) -> None:
    """Refuse, before any work, a directory this command will write into that cannot be written:
    under a file, or whose nearest existing folder is read-only (nothing is created here).

    Raises
    ------
    PcqrError
        One line naming the option and the directory.
    """
    _check_folder(os.path.abspath(path), path, option)


def check_writable_file(path: str, option: str) -> None:
    """Refuse, before any work (and before any charge), an output file that cannot be written:
    a directory, under a file, or in a read-only folder (nothing is created here)."""
    refuse_remote(path, option)
    if os.path.isdir(path):
        raise PcqrError(f"{option} {path}: is a directory; give a file path")
    _check_folder(os.path.dirname(os.path.abspath(path)), path, option)
