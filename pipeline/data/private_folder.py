"""A private temporary folder: where the Python API keeps private rows and a session's state when the
caller named no folder of their own.

Private rows live only where their owner put them. When ``PrivateClassifier.fit`` gets its rows in
memory, the Dask workers still read them from a Parquet file; that file, and the session's state
(the k models, trained on private rows), go in a folder created for the purpose:

* created private: the folder mode 0700 (``tempfile.mkdtemp``), every file in it 0600 (the process's
  umask is not trusted: :func:`private_file` sets the mode before any byte is written);
* removed on :meth:`PrivateFolder.close`, when its owner is garbage-collected, at interpreter exit
  (``weakref.finalize``), and by the owner's failure path;
* under ``$TMPDIR`` (Python's ``tempfile.gettempdir()``), so an operator who points ``TMPDIR`` at an
  encrypted or memory-backed disk keeps it there.

A process killed by SIGKILL cannot remove anything: the folder then stays, 0700, until the
operator's temporary-file cleaning removes it (its name starts with ``pcqr-private-``).
"""
from __future__ import annotations

import glob
import os
import shutil
import tempfile
import weakref
from typing import Any

PREFIX = "pcqr-private-"


def _remove(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)


class PrivateFolder:
    """A new 0700 folder under ``$TMPDIR`` (or ``parent``), removed with everything in it on
    :meth:`close`, when ``owner`` (default: this object) is garbage-collected, or at interpreter exit.

    Parameters
    ----------
    owner : object, optional
        The object whose lifetime bounds the folder's (the folder goes when it is collected).
    parent : str, optional
        Where to make it instead of ``$TMPDIR``: a folder whose owner removes what a killed process
        left (:func:`remove_leftovers`), e.g. a session's state folder, which one process holds at a time.
    """

    def __init__(self, owner: Any = None, parent: str | None = None) -> None:
        self.path = tempfile.mkdtemp(prefix=PREFIX, dir=parent)  # mode 0700, whatever the umask
        self._finalizer = weakref.finalize(self if owner is None else owner, _remove, self.path)

    def join(self, *names: str) -> str:
        """A path inside the folder."""
        return os.path.join(self.path, *names)

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def close(self) -> None:
        """Remove the folder and everything in it (idempotent)."""
        self._finalizer()

    def __enter__(self) -> PrivateFolder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PrivateFolder({self.path!r}{', removed' if self.closed else ''})"


def private_file(path: str) -> None:
    """Create ``path`` empty with mode 0600 (or set an existing file's mode to 0600), so that what is
    written into it next is never readable by another user, whatever the umask."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


def remove_leftovers(parent: str) -> None:
    """Remove the private folders that processes killed before their clean-up left in ``parent`` (call
    it only where no other live process can own one: a state folder, under its lock)."""
    for path in glob.glob(os.path.join(glob.escape(parent), f"{PREFIX}*")):
        _remove(path)
