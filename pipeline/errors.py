"""Errors a user can cause.

A :class:`PcqrError` is printed by the command line as one line (no traceback)
and exits with status 2. Its message names the file, column or parameter at
fault and what to do. Anything else that escapes is a bug and keeps its
traceback.
"""
from __future__ import annotations


class PcqrError(Exception):
    """A user-facing error: bad input, impossible parameters, bad config."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


class BudgetExhausted(PcqrError):
    """The session's sparse-vector cutoff T has been reached."""

    exit_code = 3
