"""Where the ledger is: the one reading of a ledger setting (``--ledger``, ``$PCQR_LEDGER``, cluster.yaml's
``pcqr: ledger:``, else the home folder's file), and how messages and hints print it.

A ``postgresql://`` or ``postgres://`` URL (any case) names a team's server ledger
(:mod:`pcqr.pipeline.budget.postgres_store`); any other ``scheme://`` and any libpq keyword/value string
(``host=... password=...``) is refused, never taken for a file name (a typo would otherwise create a
SQLite ledger beside the team's, named after the password, and bypass the team's budget); anything
else is a SQLite file's path (:mod:`pcqr.pipeline.budget.sqlite_store`). Every command and Python API
entry point reads the setting here first, before anything is read, created or charged.

No password is printed: messages show a server as :func:`shown` prints it (user, host, port and
database only), hints as :func:`budget_command` writes them (the URL without its password), and a
URL that libpq and Python would read differently is refused before either reads it.
"""
from __future__ import annotations

import os
import re
import shlex
import urllib.parse
from typing import NamedTuple

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.spelling import spelled

#: How a ledger location names a PostgreSQL server (compared in lower case).
SERVER_SCHEMES = ("postgresql://", "postgres://")
#: A URL scheme (RFC 3986), after optional spaces.
_SCHEME = re.compile(r"\s*([A-Za-z][A-Za-z0-9+.-]*)://")
#: libpq's connection keywords (PostgreSQL 18's list, with the older ``requiressl`` and ``tty``): a
#: setting that starts with one of them and ``=`` is a keyword/value connection string, not a path.
LIBPQ_KEYWORDS = (
    "host", "hostaddr", "port", "dbname", "user", "password", "passfile", "require_auth", "channel_binding",
    "connect_timeout", "client_encoding", "options", "application_name", "fallback_application_name",
    "keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count", "tcp_user_timeout",
    "replication", "gssencmode", "sslmode", "sslnegotiation", "sslcompression", "sslcert", "sslkey",
    "sslpassword", "sslcertmode", "sslrootcert", "sslcrl", "sslcrldir", "sslsni", "requirepeer",
    "ssl_min_protocol_version", "ssl_max_protocol_version", "min_protocol_version", "max_protocol_version",
    "krbsrvname", "gsslib", "gssdelegation", "service", "target_session_attrs", "load_balance_hosts",
    "scram_client_key", "scram_server_key", "oauth_issuer", "oauth_client_id", "oauth_client_secret",
    "oauth_scope", "requiressl", "tty",
)
_KEYWORD_STRING = re.compile(r"\s*(?:%s)\s*=" % "|".join(LIBPQ_KEYWORDS), re.IGNORECASE)
#: The query parameters :func:`shown` keeps (where the server is, as whom, which database) ...
_SHOWN_PARAMETERS = frozenset({"host", "port", "dbname", "user"})
#: ... and those a hint drops (secrets; compared in lower case, after percent-decoding).
_SECRET_PARAMETERS = frozenset({"password", "sslpassword", "oauth_client_secret"})
#: A percent sign not starting a %XX escape, or the %00 libpq refuses: libpq's error would print the value.
_BAD_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})|%00")
#: A space or control character: no URL holds one raw (Python drops some silently, libpq does not).
_BLANK = re.compile(r"[\x00-\x20\x7f]")
#: Why libpq and Python would read a server URL differently (the reason :func:`check_server_url` gives).
_AMBIGUOUS = ("an @, /, ? or # in the user name, password or database name is read differently by libpq and "
              "Python: percent-encode it (@ as %40, / as %2F, ? as %3F, # as %23)")


class _Server(NamedTuple):
    """A server URL cut as libpq cuts it: ``scheme://[userinfo@]hostport[/database][?query]``."""

    scheme: str  # in lower case, without ://
    user: str | None  # the user info before its first ':' (None: no user info)
    password: bool  # whether the user info holds a password (after a ':')
    hostport: str
    path: str  # "" or "/database"
    parameters: tuple[str, ...]  # the query's key=value pairs, as written


def is_server(location: str) -> bool:
    """Whether a ledger location names a PostgreSQL server (else it is a SQLite file's path, or refused)."""
    return location.strip().lower().startswith(SERVER_SCHEMES)


def _split(url: str) -> tuple[_Server | None, str]:
    """``url`` (a server URL) cut into its parts, or None and why it cannot be read safely: a URL
    that libpq (which ends the user info at the FIRST ``@`` before any ``/``) and Python (the LAST
    ``@`` before any ``/``, ``?`` or ``#``) would read differently, whose percent-escapes or query
    libpq would refuse in an error quoting the value, or whose host or port Python cannot read."""
    scheme, _, rest = url.strip().partition("://")
    if _BLANK.search(rest):
        return None, "it holds a space or a control character: percent-encode it (a space as %20)"
    if "#" in rest:
        return None, _AMBIGUOUS
    if _BAD_PERCENT.search(rest):
        return None, "a % that does not start a %XX escape, or %00: write a % itself as %25"
    end = re.search(r"[@/]", rest)
    libpq_user = rest[:end.start()] if end is not None and end.group() == "@" else None
    before_query, _, query = rest.partition("?")
    netloc, slash, database = before_query.partition("/")
    path = slash + database
    python_user = netloc.rpartition("@")[0] if "@" in netloc else None
    if libpq_user != python_user or "@" in path:
        return None, _AMBIGUOUS
    parameters = tuple(query.split("&")) if query else ()
    if any(p.count("=") != 1 for p in parameters):
        return None, "its query is not key=value pairs joined by &: percent-encode an = or & in a value (%3D, %26)"
    hostport = netloc.rpartition("@")[2]
    try:
        for host in hostport.split(","):  # libpq's list of hosts, each [host][:port]
            urllib.parse.urlsplit(f"//{host}").port  # noqa: B018 (reading it is the check)
    except ValueError:
        return None, "its host or port cannot be read (a port is a number up to 65535, an IPv6 address is in [])"
    user, colon, _ = python_user.partition(":") if python_user is not None else (None, "", "")
    return _Server(scheme.lower(), user, bool(colon), hostport, path, parameters), ""


def _key(parameter: str) -> str:
    """A query parameter's name as libpq reads it (percent-decoded)."""
    return urllib.parse.unquote(parameter.partition("=")[0])


def _url(server: _Server, parameters: tuple[str, ...]) -> str:
    user = f"{server.user}@" if server.user else ""
    query = f"?{'&'.join(parameters)}" if parameters else ""
    return f"{server.scheme}://{user}{server.hostport}{server.path}{query}"


def shown(location: str) -> str:
    """A ledger location as messages print it. A file's path as it is; a server URL as
    ``postgresql://user@host:port/database``: its user, host, port and database only (the query's
    ``host``, ``port``, ``dbname`` and ``user`` too), never a password or any other parameter. A
    server URL that cannot be read safely (:func:`check_server_url` refuses it), another scheme's URL
    or a libpq keyword/value string shows nothing beyond its scheme: any part could be a password."""
    scheme = _SCHEME.match(location)
    if scheme is None:
        return "(a libpq keyword/value string)" if _KEYWORD_STRING.match(location) else location
    server, _ = _split(location) if is_server(location) else (None, "")
    if server is None:
        return f"{scheme.group(1).lower()}://..."
    return _url(server, tuple(p for p in server.parameters if _key(p) in _SHOWN_PARAMETERS))


def check_server_url(location: str, option: str = "--ledger") -> str:
    """A server ledger's URL as libpq should get it (without spaces around it, the scheme in lower
    case: libpq would read ``POSTGRESQL://`` as a keyword/value string and quote it whole in its
    error), or a one-line error naming ``option`` when it cannot be read safely (:func:`_split`)."""
    server, why = _split(location)
    if server is None:
        raise PcqrError(f"{option} {shown(location)}: not a valid postgresql:// URL: {why}")
    return f"{server.scheme}://{location.strip().partition('://')[2]}"


def checked_setting(value: str, origin: str) -> str:
    """A ledger setting read from ``origin`` (``--ledger``, ``PCQR_LEDGER``, a cluster.yaml's
    ``pcqr.ledger``): a server URL (:func:`check_server_url`) or a file's path as given. Refused in
    one line naming ``origin``, and never taken for a file name: an empty value, any other
    ``scheme://`` and a libpq keyword/value string."""
    if not value.strip():
        raise PcqrError(f"{origin} is empty: give the ledger file's path or a postgresql:// URL")
    if is_server(value):
        return check_server_url(value, origin)
    scheme = _SCHEME.match(value)
    if scheme is not None:
        raise PcqrError(f"{origin}: {scheme.group(1)}:// names no ledger: give a postgresql:// URL (or postgres://) "
                        "or a SQLite file's path")
    if _KEYWORD_STRING.match(value):
        raise PcqrError(f"{origin}: a libpq keyword/value string (host=... dbname=...) names no ledger: write it as "
                        "a URL, postgresql://USER@HOST:PORT/DATABASE, with the password in ~/.pgpass or PGPASSWORD")
    return value


DEFAULT_LEDGER = os.path.join("~", ".local", "share", "pcqr", "ledger.sqlite")


LEDGER_VARIABLE = "PCQR_LEDGER"


def ledger_setting(option: str | None) -> str:
    """The ledger as the user named it: ``--ledger PATH|URL``, else ``$PCQR_LEDGER``, else
    ~/.local/share/pcqr/ledger.sqlite (:func:`checked_setting`: a server URL normalised, a file's path
    as given). An empty ``--ledger`` or a ``PCQR_LEDGER`` that is set but empty is refused (it would
    otherwise fall back to the home folder's ledger, unnoticed), and so is a setting that names
    neither a file nor a server: every command that takes ``--ledger`` and every Python API entry
    point calls this first, before anything is read or charged."""
    if option is not None:
        return checked_setting(option, spelled("--ledger"))
    named = os.environ.get(LEDGER_VARIABLE)
    if named is None:
        return DEFAULT_LEDGER
    if not named.strip():
        raise PcqrError(f"{LEDGER_VARIABLE} is set but empty: set it to the ledger file's path or a postgresql:// "
                        f"URL, or unset it to use {DEFAULT_LEDGER}")
    return checked_setting(named, LEDGER_VARIABLE)


def ledger_location(option: str | None) -> str:
    """The ledger (:func:`ledger_setting`): a server URL as libpq should get it, a file's path made
    absolute (its parent directories are created)."""
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


def pasteable(location: str) -> str:
    """A ledger location as a hint writes it, to be pasted back: a file's path or a server URL
    without a password as given; a URL with one, the same URL without it (it still works when the
    password is in ~/.pgpass or PGPASSWORD, where it belongs). Never ``***``, which pasted back would
    be taken for the password."""
    server = _split(location)[0] if is_server(location) else None
    if server is None:
        return shown(location)
    kept = tuple(p for p in server.parameters if _key(p).lower() not in _SECRET_PARAMETERS)
    return _url(server, kept) if server.password or kept != server.parameters else location


def budget_command(verb: str, dataset: str, ledger: str | None, *options: str) -> str:
    """A ``pcqr budget`` command line for the user to paste: every word shell-quoted (a path with a
    space or a quote pastes back as one word), with ``--ledger`` (:func:`pasteable`) unless
    ``ledger`` is the one the command finds by itself ($PCQR_LEDGER, else the default)."""
    words = ["pcqr", "budget", verb, dataset, *options]
    if ledger is not None and not _found_by_itself(ledger):
        words += ["--ledger", pasteable(ledger)]
    return shlex.join(words)


def _found_by_itself(location: str) -> bool:
    """Whether ``location`` is the ledger a command given no ``--ledger`` would use (the same file,
    or the same server, user and database); False when the environment's setting would be refused."""
    try:
        own = ledger_setting(None)
    except PcqrError:
        return False
    return _same_place(own) == _same_place(location)


def _same_place(location: str) -> str:
    return shown(location) if is_server(location) else os.path.abspath(os.path.expanduser(location))
