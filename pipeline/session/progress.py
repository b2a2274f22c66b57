"""Where a session's notes and progress go: the command line prints them, the library logs them.

The session's code never prints. It tells a ``Reporter``: ``note`` for one-line status and warnings
(the command line writes them to stderr; the Python API sends them to the ``pcqr`` logger) and
``phase`` for work that may be long (issue 47: a fit ran 198 s without a word)::

    with reporter.phase("training models", total=k, unit="models") as phase:
        ...
        phase.update(done)          # thread-safe; a phase without a total counts nothing

How a phase shows (the reporter's ``shows``): on a terminal (:class:`Console`) one live line, redrawn
in place: a bar for a counted phase, a spinner and the time for one without a count, left as its
last line when a phase of 2 s or more ends; on stderr that is not a terminal (CI logs, nohup) a line
whenever nothing was written for :data:`HEARTBEAT_S` seconds while a phase runs (``training models:
37 of 120 models, 45 s``: :class:`Heartbeat`, which counts the silence across consecutive phases);
in the library the same line on the ``pcqr`` logger (:func:`logged`: INFO for :data:`LOGGING`, the
default; WARNING for :data:`ESTIMATOR`, PrivateClassifier's, so that a notebook with no logging set
up shows it). Short work says nothing; the thread that beats for a phase stops when it ends.
"""
from __future__ import annotations

import logging
import math
import shutil
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, ContextManager, Iterator, TextIO

LOGGER = logging.getLogger("pcqr")
#: Seconds between two lines of a phase off a terminal (a CI log, the ``pcqr`` logger).
HEARTBEAT_S = 15.0
#: Seconds between two drawings of a terminal's live line.
REDRAW_S = 0.2
#: A terminal keeps the last line of a phase that lasted at least this long (shorter ones are erased).
KEEP_S = 2.0
BAR_WIDTH = 30
SPINNER = "|/-\\"
CLEAR = "\x1b[K"  # erase to the end of the line


def duration(seconds: float) -> str:
    """``45 s``, ``4 min 05 s``, ``2 h 04 min``."""
    whole = int(seconds)
    if whole < 100:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


class Phase:
    """One step of long work: its label, how much of ``total`` is done (None: no count), since when.
    ``update`` may be called from any thread."""

    def __init__(self, label: str, total: int | None = None, unit: str = "",
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.label, self.total, self.unit = label, total, unit
        self._clock = clock
        self.started = clock()
        self._done = 0
        self._lock = threading.Lock()

    def update(self, steps: int = 1) -> None:
        """``steps`` more done."""
        with self._lock:
            self._done += steps

    @property
    def done(self) -> int:
        return self._done

    def elapsed(self) -> float:
        return self._clock() - self.started

    def _count(self, sep: str) -> str:
        return f"{self.done:,}{sep}{self.total:,}{f' {self.unit}' if self.unit else ''}"

    def line(self) -> str:
        """The phase as one line: ``training models: 37 of 120 models, 45 s``, ``checking queries: 45 s``."""
        counted = "" if self.total is None else f"{self._count(' of ')}, "
        return f"{self.label}: {counted}{duration(self.elapsed())}"

    def live(self, tick: int) -> str:
        """The phase as a terminal's live line: a bar when counted, else a spinner, then the time."""
        if self.total is None:
            return f"{self.label} {SPINNER[tick % len(SPINNER)]} {duration(self.elapsed())}"
        filled = min(BAR_WIDTH, BAR_WIDTH * self.done // self.total) if self.total > 0 else BAR_WIDTH
        bar = "#" * filled + "-" * (BAR_WIDTH - filled)
        return f"{self.label} [{bar}] {self._count('/')} {duration(self.elapsed())}"


Shows = Callable[[Phase], ContextManager[None]]
"""How a reporter shows a phase while its block runs."""


@contextmanager
def _beating(phase: Phase, beat: Callable[[], None], interval: float) -> Iterator[None]:
    """``beat()`` every ``interval`` seconds while the block runs, from a thread that ends with it."""
    def run(stop: threading.Event) -> None:
        while not stop.wait(interval):
            beat()

    with _alongside(phase, run):
        yield


@contextmanager
def _alongside(phase: Phase, run: Callable[[threading.Event], None]) -> Iterator[None]:
    """``run(stop)`` in a daemon thread named for the phase while the block runs; ``stop`` is set
    and the thread joined when the block ends."""
    stop = threading.Event()
    thread = threading.Thread(target=run, args=(stop,), name=f"pcqr progress: {phase.label}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


class Heartbeat:
    """A line (``emit(phase.line())``) whenever the user has heard nothing for ``interval`` seconds
    (None: :data:`HEARTBEAT_S` when a phase starts) while a phase runs: the innermost running phase
    says where the work is. The silence is counted across phases: a phase that starts within
    ``interval`` of the last one's end continues it, so that a run of short phases is not silent for
    longer than one long one would be; after a longer pause it starts again. :meth:`said` resets it
    (a note was written). Call it with a phase for its block (:data:`Shows`); one thread per phase."""

    def __init__(self, emit: Callable[[str], None], interval: float | None = None) -> None:
        self.emit, self.interval = emit, interval
        self._lock = threading.Lock()
        self._running: list[Phase] = []
        self._quiet_since = 0.0
        self._ended = -math.inf

    def said(self) -> None:
        """A line went out: the silence starts again."""
        with self._lock:
            self._quiet_since = time.monotonic()

    @contextmanager
    def __call__(self, phase: Phase) -> Iterator[None]:
        interval = HEARTBEAT_S if self.interval is None else self.interval
        with self._lock:
            now = time.monotonic()
            if not self._running and now - self._ended > interval:
                self._quiet_since = now
            self._running.append(phase)
        try:
            with _alongside(phase, lambda stop: self._beat(phase, stop, interval)):
                yield
        finally:
            with self._lock:
                self._running.remove(phase)
                self._ended = time.monotonic()

    def _beat(self, phase: Phase, stop: threading.Event, interval: float) -> None:
        while True:
            with self._lock:
                innermost = self._running[-1] is phase
                wait = self._quiet_since + interval - time.monotonic()
            if innermost and wait <= 0:
                self.emit(phase.line())
                self.said()
                continue
            if stop.wait(max(wait, interval / 10)):  # an outer phase looks again soon after an inner one ends
                return


def logged(level: int = logging.INFO, interval: float | None = None) -> Shows:
    """A phase's line on the ``pcqr`` logger at ``level`` after every ``interval`` seconds of silence
    (:class:`Heartbeat`)."""
    return Heartbeat(lambda line: LOGGER.log(level, line), interval)


class Console:
    """Notes and phases on one stream (stderr unless ``stream`` says otherwise, looked up at each
    use). On a terminal, the innermost running phase is one line redrawn every ``redraw`` seconds,
    erased before a note and, when the phase ends, erased or (if it lasted ``keep`` seconds and did not
    fail) replaced by its last line; elsewhere, a line whenever nothing was written for ``interval``
    seconds while a phase runs (:attr:`heartbeat`; None: :data:`HEARTBEAT_S`)."""

    def __init__(self, stream: Callable[[], TextIO] = lambda: sys.stderr, interval: float | None = None,
                 redraw: float = REDRAW_S, keep: float = KEEP_S) -> None:
        self.stream, self.redraw, self.keep = stream, redraw, keep
        self.heartbeat = Heartbeat(self.note, interval)
        self._lock = threading.RLock()
        self._live: list[Phase] = []
        self._drawn: Phase | None = None  # the phase on the line now
        self._seen: set[int] = set()  # the phases drawn at least once (their last line stays)
        self._tick = 0

    def note(self, message: str) -> None:
        """``message`` on a line of its own."""
        with self._lock:
            self._erase()
            self._write(f"{message}\n")
        self.heartbeat.said()

    def shows(self, phase: Phase) -> ContextManager[None]:
        """Show ``phase`` while its block runs (:data:`Shows`)."""
        if getattr(self.stream(), "isatty", lambda: False)():
            return self._live_line(phase)
        return self.heartbeat(phase)

    @contextmanager
    def _live_line(self, phase: Phase) -> Iterator[None]:
        with self._lock:
            self._live.append(phase)
        done = False
        try:
            with _beating(phase, self._draw, self.redraw):
                yield
            done = True
        finally:
            with self._lock:
                self._live.remove(phase)
                if id(phase) in self._seen:
                    self._seen.discard(id(phase))
                    self._erase()
                    if done and phase.elapsed() >= self.keep:  # a failed phase: its error says what happened
                        self._write(f"{phase.line()}\n")

    def _draw(self) -> None:
        with self._lock:
            if not self._live:
                return
            self._tick += 1
            phase = self._live[-1]
            width = max(20, shutil.get_terminal_size().columns - 1)  # a wrapped line cannot be redrawn
            self._write(f"\r{phase.live(self._tick)[:width]}{CLEAR}")
            self._drawn = phase
            self._seen.add(id(phase))

    def _erase(self) -> None:
        if self._drawn is not None:
            self._write(f"\r{CLEAR}")
            self._drawn = None

    def _write(self, text: str) -> None:
        stream = self.stream()
        stream.write(text)
        stream.flush()


def _log_note(message: str) -> None:
    (LOGGER.warning if message.startswith("warning:") else LOGGER.info)(message)


@dataclass(frozen=True)
class Reporter:
    """``note(message)``: one line for the user; ``phase(label, total=None, unit="")``: a context
    manager around long work, whose value has ``update(steps)``; ``shows``: how a phase is shown."""

    note: Callable[[str], None] = field(default=_log_note)
    shows: Shows = field(default=logged(logging.INFO))

    @contextmanager
    def phase(self, label: str, total: int | None = None, unit: str = "") -> Iterator[Phase]:
        """Show ``label`` (and how much of ``total`` is done) while the block runs."""
        shown = Phase(label, total, unit)
        with self.shows(shown):
            yield shown

    def progress(self, length: int, label: str) -> ContextManager[Phase]:
        """``phase(label, total=length)`` (the older call)."""
        return self.phase(label, length)


LOGGING = Reporter()
"""The library's default: notes and a phase's line every :data:`HEARTBEAT_S` on the ``pcqr`` logger (INFO)."""
ESTIMATOR = Reporter(shows=logged(logging.WARNING))
"""PrivateClassifier's: as :data:`LOGGING`, but a phase's lines at WARNING, which Python shows on stderr
when nothing is configured (``logging.lastResort``), as in a notebook; a phase within
:data:`HEARTBEAT_S` says nothing. ``logging.getLogger("pcqr").setLevel(logging.ERROR)`` silences them."""
