"""Where a session's notes and progress go: the command line prints them, the library logs them.

The session's code never prints. It tells a ``Reporter``: ``note`` for one-line status and warnings
(the command line writes them to stderr; the Python API sends them to the ``pcqr`` logger) and
``progress`` for long work (a bar on a terminal; nothing in a notebook unless asked).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager

LOGGER = logging.getLogger("pcqr")


class NoBar:
    """A progress bar that shows nothing."""

    def __enter__(self) -> NoBar:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, steps: int) -> None:
        return None


def _log_note(message: str) -> None:
    (LOGGER.warning if message.startswith("warning:") else LOGGER.info)(message)


def _no_bar(length: int, label: str) -> ContextManager[Any]:
    return NoBar()


@dataclass(frozen=True)
class Reporter:
    """``note(message)``: one line for the user; ``progress(length, label)``: a context manager
    whose value has ``update(steps)``."""

    note: Callable[[str], None] = field(default=_log_note)
    progress: Callable[[int, str], ContextManager[Any]] = field(default=_no_bar)


LOGGING = Reporter()
