"""Atomic file writes: a reader sees the old file or the whole new one, never half of it.

Write to a temporary name in the same directory, fsync it, rename it over the
target (atomic on POSIX), then fsync the directory so the rename itself is
durable. Temporary names start with ``.`` so dataset readers skip them. At an
``s3://`` location the object is written in one request
(:func:`pcqr.pipeline.data.object_store.put`), which has the same property.
"""
from __future__ import annotations

import errno
import os
import secrets
import tempfile

from pcqr.pipeline.data import object_store
from pcqr.pipeline.errors import PcqrError


def write_atomic(path: str, data: bytes) -> None:
    """Replace ``path`` (a local path or an ``s3://`` URI) with ``data`` atomically and durably."""
    if object_store.is_uri(path):
        object_store.put(path, data)
        return
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


def _check_folder(folder: str, path: str, option: str) -> None:
    """``folder`` (or its nearest existing ancestor) can hold what ``option path`` will write."""
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
    if object_store.is_uri(path):
        object_store.check_writable(path, option)
        return
    _check_folder(os.path.abspath(path), path, option)


def check_writable_file(path: str, option: str) -> None:
    """Refuse, before any work (and before any charge), an output file that cannot be written:
    a directory, under a file, or in a read-only folder; at a URI, a bucket pcqr cannot reach
    (nothing is created here)."""
    if object_store.is_uri(path):
        object_store.check_writable(path, option)
        return
    if os.path.isdir(path):
        raise PcqrError(f"{option} {path}: is a directory; give a file path")
    _check_folder(os.path.dirname(os.path.abspath(path)), path, option)
