"""Atomic file writes: a reader sees the old file or the whole new one, never half of it.

Write to a temporary name in the same directory, fsync it, rename it over the
target (atomic on POSIX), then fsync the directory so the rename itself is
durable. Temporary names start with ``.`` so dataset readers skip them.
"""
from __future__ import annotations

import os
import tempfile


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


def fsync_directory(directory: str) -> None:
    """Make renames and creations in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
