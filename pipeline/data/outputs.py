"""One rule for every command's outputs (issue 47): checked before anything is read, charged or computed.

An output (a file, or a folder the command writes files into) that is, lies inside or holds one of the
same command's inputs (a dataset, log, model, table, state, the ledger or cluster file) or another of its
outputs is refused, ``--overwrite`` or not: writing it would destroy what the command reads, or mix what
it writes into what it reads. "Inside" is decided on absolute local paths twice, as given and with every
symlink resolved (``os.path.realpath``: an output that is a symlink to an input file, or reached through
a symlinked folder, counts), plus ``os.path.samefile`` for two existing files (a hard link); and on
``s3://`` URIs by bucket and key prefix. A local path and a URI never overlap.

An existing output file, or an output folder holding anything, is replaced only with ``--overwrite``
(``overwrite=True``); a command without that flag (``overwrite=None``) refuses it always. A session's
state and log (``appended``) are continued by the session itself, which is not replacing them.

Every refusal is one line naming both options and both paths.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from pcqr.pipeline.data import locations
from pcqr.pipeline.data.atomic import check_writable_directory, check_writable_file
from pcqr.pipeline.errors import PcqrError

Named = tuple[str, "str | None"]
"""An input: the option (or argument) that names it in messages, and its path or URI (None: not given)."""

NOTHING_DONE = "nothing was read or charged"


@dataclass(frozen=True)
class Output:
    """A location a command writes. ``folder``: files are written into it, and it exists when it holds
    any; ``appended``: a session's state or log, continued by the session (checked for overlaps only: the
    session's own rules say which may exist); ``may_hold_inputs``: a folder whose writer writes only files
    of its own names, so an input inside it is safe (a session's state: PrivateClassifier keeps its rows
    there while it trains)."""

    option: str
    path: str | None
    folder: bool = False
    appended: bool = False
    may_hold_inputs: bool = False


def check_outputs(outputs: Sequence[Output], inputs: Sequence[Named], overwrite: bool | None) -> None:
    """Refuse, before any work, outputs that overlap an input or each other, that cannot be written,
    or that exist without ``overwrite`` (True: ``--overwrite`` given; False: not given; None: the
    command has no such flag).

    Raises
    ------
    PcqrError
        One line naming the output's option and path (and the input's, for an overlap).
    """
    written = [out for out in outputs if out.path is not None]
    read = [(option, path) for option, path in inputs if path is not None]
    for i, out in enumerate(written):
        assert out.path is not None
        others = [(option, path, False) for option, path in read] + [(o.option, o.path, True) for o in written[:i]]
        for option, path, is_output in others:
            relation = overlap(out.path, str(path))
            if relation is not None and not (relation == "holds" and out.may_hold_inputs and not is_output):
                raise PcqrError(f"{out.option} {out.path}: {relation} {option} {path}; write it elsewhere "
                                f"({NOTHING_DONE})")
    for out in written:  # a session's state and log: its own checks (the lock, the log directory rule)
        assert out.path is not None
        if out.appended:
            continue
        (check_writable_directory if out.folder else check_writable_file)(out.path, out.option)
        if overwrite is not True and _exists(out.path, out.folder):
            raise PcqrError(_exists_line(out, overwrite is False))


def overlap(out: str, source: str) -> str | None:
    """How ``out`` meets ``source``: "is", "lies inside", "holds", or None (apart)."""
    if locations.is_uri(out) or locations.is_uri(source):
        return _key_overlap(out, source) if locations.is_uri(out) and locations.is_uri(source) else None
    for resolve in (os.path.abspath, os.path.realpath):
        relation = _path_overlap(resolve(out), resolve(source))
        if relation is not None:
            return relation
    try:
        return "is" if os.path.samefile(out, source) else None
    except OSError:  # one of them is not there yet
        return None


def _path_overlap(out: str, source: str) -> str | None:
    if out == source:
        return "is"
    common = os.path.commonpath([out, source])
    return "lies inside" if common == source else "holds" if common == out else None


def _key_overlap(out: str, source: str) -> str | None:
    """Two URIs: the same scheme and bucket, and one key a prefix (by ``/`` segments) of the other. A
    URI with credentials in it is never compared (nor printed): its writer or reader refuses it."""
    keys = []
    for uri in (out, source):
        scheme, _, rest = uri.partition("://")
        if "@" in rest.split("/", 1)[0]:
            return None
        keys.append((scheme.lower(), *(part for part in rest.split("/") if part)))
    mine, theirs = keys
    if mine == theirs:
        return "is"
    if mine[:len(theirs)] == theirs:
        return "lies inside"
    return "holds" if theirs[:len(mine)] == mine else None


def _exists(path: str, folder: bool) -> bool:
    if folder:
        return bool(locations.names_in(path))
    return locations.exists(path) if locations.is_uri(path) else os.path.lexists(path)


def _exists_line(out: Output, has_flag: bool) -> str:
    what = "is not empty" if out.folder else "exists"
    if has_flag:
        return f"{out.option} {out.path}: {what}; pass --overwrite to replace {'its files' if out.folder else 'it'}"
    return f"{out.option} {out.path}: {what}; give a new {'or empty folder' if out.folder else 'path'}"


def check_session_paths(state: str, log: str | None, *, private: str | None = None, queries: str | None = None,
                        truth: str | None = None, ledger: str | None = None, cluster: str | None = None) -> None:
    """A session's private state and public log (written and continued by the session) against each
    other and its inputs: the private dataset, the queries, the truth file, the ledger and cluster files
    (``pcqr train``, ``pcqr answer``, :class:`pcqr.Session`). Neither may be or lie inside an input, nor
    the log hold one; the state may hold one (it writes only its own files)."""
    check_outputs([Output("--state", state, folder=True, appended=True, may_hold_inputs=True),
                   Output("--log", log, folder=True, appended=True)],
                  [("--private", private), ("--queries", queries), ("--truth", truth), ("--ledger", ledger),
                   ("--cluster", cluster)], overwrite=None)


__all__ = ["NOTHING_DONE", "Named", "Output", "check_outputs", "check_session_paths", "overlap"]
