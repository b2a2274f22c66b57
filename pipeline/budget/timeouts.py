"""How long a server ledger may keep a job waiting (issue 46: a lock held by another analyst hung
every job, silently).

``pcqr: ledger-timeouts:`` in cluster.yaml (or ``DASK_PCQR__LEDGER_TIMEOUTS__LOCK=...``, or
``dask.config.set({"pcqr.ledger-timeouts.lock": ...})`` in Python) sets three limits, in seconds:
``connect`` (reaching the server; a URL's own ``?connect_timeout=`` comes first), ``lock`` (waiting
for the ledger's lock, which every charge, refund and registration takes, and for a session's row)
and ``statement`` (any one statement; a URL's ``?options=-c statement_timeout=...`` comes first).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from contextlib import AbstractContextManager
from typing import Any

from pcqr.pipeline.errors import PcqrError

KEY = "pcqr.ledger-timeouts"
#: The longest limit accepted: a day.
MOST_S = 86_400.0


@dataclass(frozen=True)
class Timeouts:
    """The limits (seconds) on one server ledger's connection."""

    connect: float = 10.0
    lock: float = 30.0
    statement: float = 60.0

    @classmethod
    def configured(cls) -> Timeouts:
        """The limits dask's configuration holds (defaults for those it does not), each checked."""
        import dask.config

        return cls.of(dask.config.get(KEY, default=None) or {}, KEY)

    @classmethod
    def of(cls, values: Any, origin: str) -> Timeouts:
        """The limits of a mapping (connect, lock, statement: seconds), or a one-line error naming
        ``origin`` and the key."""
        names = [f.name for f in fields(cls)]
        if not isinstance(values, dict) or set(values) - set(names):
            raise PcqrError(f"{origin}: expected a mapping of {', '.join(names)} to seconds, got "
                            f"{sorted(values) if isinstance(values, dict) else type(values).__name__}")
        for name, value in values.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                    math.isfinite(value) and 0 < value <= MOST_S):
                raise PcqrError(f"{origin}.{name}: expected a number of seconds in (0, {MOST_S:g}], got {value!r}")
        return cls(**{name: float(value) for name, value in values.items()})


def configured_by(values: Any, origin: str) -> AbstractContextManager[Any]:
    """``with configured_by(values, origin):`` the limits ``values`` (read from ``origin``: a
    cluster.yaml) hold inside the block, once checked."""
    import dask.config

    chosen = Timeouts.of(values, origin)
    return dask.config.set({KEY: {f.name: getattr(chosen, f.name) for f in fields(Timeouts) if f.name in values}})
