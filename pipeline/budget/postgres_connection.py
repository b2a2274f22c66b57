"""Connections to a server ledger: psycopg (the ``postgresql`` extra), the URL's own libpq parameters
first, then pcqr's time limits (:mod:`pcqr.pipeline.budget.timeouts`) and ``search_path``, and
errors that never print a password (:func:`pcqr.pipeline.budget.location.shown`)."""
from __future__ import annotations

from typing import Any

from pcqr.pipeline.budget.location import shown
from pcqr.pipeline.budget.timeouts import Timeouts
from pcqr.pipeline.errors import PcqrError


def driver() -> Any:
    """psycopg, or a one-line error saying how to install it."""
    try:
        import psycopg
    except ImportError:
        raise PcqrError("a postgresql:// ledger needs the PostgreSQL driver: pip install 'pcqr[postgresql]'") from None
    return psycopg


def connect(url: str, timeouts: Timeouts | None = None) -> Any:
    """An autocommit connection to ``url`` (:func:`open_connection`), or a one-line error naming the server
    (without password)."""
    psycopg = driver()
    try:
        return open_connection(psycopg, url, timeouts or Timeouts.configured())
    except psycopg.Error as exc:
        raise PcqrError(f"ledger {shown(url)}: cannot connect ({first_line(exc, url)})") from None


def open_connection(psycopg: Any, url: str, timeouts: Timeouts) -> Any:
    """An autocommit connection to ``url`` whose statements and lock waits are bounded; the URL's own
    libpq parameters and ``options`` come first."""
    given = psycopg.conninfo.conninfo_to_dict(url)
    options = str(given.get("options") or "")
    settings = (("statement_timeout", f"{round(1000 * timeouts.statement)}ms"),
                ("lock_timeout", f"{round(1000 * timeouts.lock)}ms"),
                ("search_path", "pg_catalog"))  # no object an analyst created elsewhere is ever picked up
    limits = " ".join(f"-c {name}={value}" for name, value in settings if name not in options)
    added = {"connect_timeout": str(max(1, round(timeouts.connect))), "application_name": "pcqr"}
    added = {k: v for k, v in added.items() if k not in given}
    return psycopg.connect(psycopg.conninfo.make_conninfo(url, **added, options=f"{options} {limits}".strip()),
                           autocommit=True)


def first_line(exc: BaseException, url: str = "") -> str:
    """The first line of a driver's error, with anything of the URL's password taken out."""
    text = str(exc).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    return line.replace(url, shown(url)) if url else line
