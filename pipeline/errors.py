"""Errors a user can cause.

A :class:`PcqrError` is printed by the command line as one line (no traceback)
and exits with status 2. Its message names the file, column or parameter at
fault and what to do. Anything else that escapes is a bug and keeps its
traceback. :func:`os_error_line` and :func:`cluster_failure` say which other exceptions are a user's
or the cluster's, not a bug, and give their one line.
"""
from __future__ import annotations

import errno
import sys


class PcqrError(Exception):
    """A user-facing error: bad input, impossible parameters, bad config."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


class BudgetExhausted(PcqrError):
    """The session's sparse-vector cutoff T has been reached."""

    exit_code = 3


# errno values of OSErrors a user causes (a path, its permissions, a full or read-only disk): one line
# naming the file. Any other OSError is a bug or the machine's and keeps its traceback.
USER_ERRNOS = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.EEXIST, errno.ENOTEMPTY, errno.EACCES,
                         errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.ENAMETOOLONG, errno.ELOOP})


def os_error_line(exc: OSError) -> str | None:
    """The line for an OSError a user caused (it names its file; exit 2), else None."""
    if exc.errno not in USER_ERRNOS or not exc.filename:
        return None
    where = f"{exc.filename} -> {exc.filename2}" if exc.filename2 else str(exc.filename)
    return f"{where}: {exc.strerror or exc}"


def cluster_failure(exc: Exception) -> str | None:
    """The line for a cluster that gave a task up (exit 3), else None. distributed is imported only if the
    command imported it (about half a second that commands without a cluster need not pay)."""
    scheduler = sys.modules.get("distributed.scheduler")
    if scheduler is None:
        return None
    if isinstance(exc, scheduler.KilledWorker):
        return (f"a task kept killing its workers and was given up ({exc}); nothing uncommitted was released; "
                "re-running the command retries (a session with committed batches resumes; a new session that "
                "released nothing was refunded and is created again)")
    if isinstance(exc, (scheduler.NoWorkerError, scheduler.NoValidWorkerError)):
        return (f"{exc} (distributed.scheduler.no-workers-timeout); nothing uncommitted was released; check the "
                "cluster's workers and re-run the command (pcqr answer resumes)")
    return None
