"""Work started now and needed later: one call in a daemon thread, its result (or its exception)
taken where it is needed. A daemon thread, so that a command that fails before it takes the result
exits at once (pcqr.jobs.cli.finish)."""
from __future__ import annotations

import threading
from typing import Callable, Generic, TypeVar

T = TypeVar("T")


class Background(Generic[T]):
    """``call()`` running in a thread from construction; :meth:`result` waits for it and returns its
    value or raises its exception, in the caller's thread."""

    def __init__(self, call: Callable[[], T], name: str) -> None:
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(call,), name=name, daemon=True)
        self._thread.start()

    def _run(self, call: Callable[[], T]) -> None:
        try:
            self._value = call()
        except BaseException as exc:  # noqa: BLE001 -- raised in the caller's thread by result()
            self._error = exc

    def result(self) -> T:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]
