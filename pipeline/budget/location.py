"""Where the ledger is: the one reading of a ledger setting (``--ledger``, ``$PCQR_LEDGER``, cluster.yaml's
``pcqr: ledger:``, else the home folder's file), and how messages and hints print it.

A ``postgresql://`` URL names a team's server ledger (:mod:`pcqr.pipeline.budget.postgres_store`);
anything else a SQLite file (:mod:`pcqr.pipeline.budget.sqlite_store`). Every command and Python
API entry point reads the setting here first, before anything is read or charged.
"""
from __future__ import annotations

import os
import shlex
import urllib.parse

from pcqr.pipeline.errors import PcqrError

#: How a ledger location names a PostgreSQL server.
SERVER_SCHEMES = ("postgresql://", "postgres://")


def is_server(location: str) -> bool:
    """Whether a ledger location names a PostgreSQL server (else it is a SQLite file's path)."""
    return location.lower().startswith(SERVER_SCHEMES)


def shown(location: str) -> str:
    """A ledger location as messages print it: a server URL without its password (which would
    otherwise reach a terminal, a log or a pasted command). A URL too malformed to parse shows no
    credentials at all."""
    if not is_server(location):
        return location
    try:
        parts = urllib.parse.urlsplit(location)
        password = parts.password
    except ValueError:
        scheme, _, rest = location.partition("://")
        return f"{scheme}://***@{rest.rsplit('@', 1)[1]}" if "@" in rest else location
    if password is None:
        return location
    netloc = parts.netloc.rsplit("@", 1)
    user = urllib.parse.unquote(netloc[0].split(":", 1)[0])
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{urllib.parse.quote(user)}:***@{netloc[1]}"))


def check_server_url(location: str, option: str = "--ledger") -> str:
    """A server ledger's URL, or a one-line error naming ``option`` when it cannot be parsed."""
    try:
        parts = urllib.parse.urlsplit(location)
        parts.port  # noqa: B018 (parsing it is the check)
    except ValueError as exc:
        raise PcqrError(f"{option} {shown(location)}: not a valid postgresql:// URL ({exc})") from None
    return location



DEFAULT_LEDGER = os.path.join("~", ".local", "share", "pcqr", "ledger.sqlite")


LEDGER_VARIABLE = "PCQR_LEDGER"


def ledger_setting(option: str | None) -> str:
    """The ledger as the user named it: ``--ledger PATH|URL``, else ``$PCQR_LEDGER``, else
    ~/.local/share/pcqr/ledger.sqlite. A ``postgresql://`` URL names a server ledger, anything else
    a SQLite file. An empty ``--ledger`` or a ``PCQR_LEDGER`` that is set but empty is refused (it
    would otherwise fall back to the home folder's ledger, unnoticed): every command that takes
    ``--ledger`` and every Python API entry point calls this first, before anything is read or charged.
    A server URL that cannot be parsed is refused the same way, naming where it came from."""
    if option is not None:
        if not option.strip():
            raise PcqrError("--ledger is empty: give the ledger file's path or a postgresql:// URL")
        return check_server_url(option) if is_server(option) else option
    named = os.environ.get(LEDGER_VARIABLE)
    if named is not None and not named.strip():
        raise PcqrError(f"{LEDGER_VARIABLE} is set but empty: set it to the ledger file's path or a postgresql:// "
                        f"URL, or unset it to use {DEFAULT_LEDGER}")
    if named is not None and is_server(named):
        return check_server_url(named, LEDGER_VARIABLE)
    return named or DEFAULT_LEDGER


def ledger_location(option: str | None) -> str:
    """The ledger (:func:`ledger_setting`): a server URL as given, a file's path made absolute (its
    parent directories are created)."""
    setting = ledger_setting(option)
    if is_server(setting):
        return setting
    path = os.path.abspath(os.path.expanduser(setting))
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
    except OSError as exc:
        raise PcqrError(f"--ledger {path}: cannot create its directory ({exc.strerror})") from None
    return path


def ledger_exists(location: str) -> bool:
    """Whether a ledger is there already (a server ledger is created by ``pcqr ledger init``)."""
    return is_server(location) or os.path.exists(location)


def budget_command(verb: str, dataset: str, ledger: str | None, *options: str) -> str:
    """A ``pcqr budget`` command line for the user to paste: every word shell-quoted (a path with a
    space or a quote pastes back as one word), with ``--ledger`` unless ``ledger`` is the one the
    command finds by itself ($PCQR_LEDGER, else the default); a server URL without its password."""
    words = ["pcqr", "budget", verb, dataset, *options]
    if ledger is not None and shown(_absolute(ledger)) != shown(_absolute(ledger_setting(None))):
        words += ["--ledger", shown(ledger)]
    return shlex.join(words)


def _absolute(location: str) -> str:
    return location if is_server(location) else os.path.abspath(os.path.expanduser(location))


