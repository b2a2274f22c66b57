"""What the ledger accepts, in one place: the client's policy (:mod:`pcqr.pipeline.budget.ledger`) and
the server's functions (:mod:`pcqr.pipeline.budget.postgres_schema`, which embeds these values in
its SQL) check the same ranges, so a value the client would refuse is refused on the server too,
whoever sends it (issue 46: a hostile analyst calls the server's functions directly).

Why these ranges:

* epsilon at most :data:`MAX_EPSILON` (700, the CLI's own bound: e^eps stays a finite float) and
  delta in [0, 1): one charge cannot overflow the sums the ledger keeps (1e308 twice did), and no
  command asks for more;
* texts a user sees (a dataset's label, a state path, a budget's name) are at most
  :data:`TEXT_CHARS` characters with no control character, so a line printed to another analyst
  stays one line saying what it says;
* JSON (a charge's parameters, a session's position) is an object of at most :data:`JSON_BYTES`;
* a sketch is what :meth:`pcqr.pipeline.budget.sketch.Sketch.to_bytes` writes: at most
  :data:`SKETCH_PAIRS` pairs of little-endian uint64 (value, count), values strictly increasing,
  counts at least 1.
"""
from __future__ import annotations

import json
import math
import re
from typing import Any

import numpy as np

from pcqr.pipeline.budget.sketch import SKETCH_SIZE
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.privacy.limits import MAX_CUTOFF, MAX_EPSILON  # noqa: F401 (MAX_CUTOFF: for the server's SQL)

#: Charges are compared with a budget within this relative tolerance (three charges of 1e-6 fit a
#: budget of 3e-6 despite rounding; pcqr.pipeline.budget.ledger).
RELATIVE_TOLERANCE = 1e-9


def exceeds(spent: tuple[float, float], bound: tuple[float, float]) -> bool:
    """Whether (eps, delta) ``spent`` passes ``bound`` in either, beyond :data:`RELATIVE_TOLERANCE`."""
    return any(s > b * (1.0 + RELATIVE_TOLERANCE) for s, b in zip(spent, bound))

#: Longest label, state path or budget name (characters).
TEXT_CHARS = 4096
#: Largest JSON text of a charge's parameters or a session's position (bytes).
JSON_BYTES = 1 << 20
#: Pairs (value, count) of a stored sketch, at most.
SKETCH_PAIRS = SKETCH_SIZE
#: A dataset identity (pcqr.pipeline.budget.fingerprint; ``sha256:`` for ledgers of earlier versions).
IDENTITY = r"^(rows|sha256):[0-9a-f]{64}$"
#: A job's name as charges record it (train, answer, learn, release, sanitize, ...; never ``refund``,
#: which the chain's refund entries carry).
JOB = r"^(?!refund$)[a-z][a-z0-9-]{0,31}$"
#: A session's id (a uuid4's hex; tests use short names).
SESSION_ID = r"^[A-Za-z0-9_.-]{1,128}$"
#: A SHA-256 in hex (a session's fixed digest, a batch's hash).
SHA256 = r"^[0-9a-f]{64}$"
#: Jobs whose charge pays for a session (pcqr.pipeline.session.book).
SESSION_JOBS = ("train", "answer")

#: Characters no text a user sees may hold: C0 and C1 controls, line and paragraph separators and
#: the bidirectional overrides and isolates (each could make one printed line read as another).
CONTROL_CLASS = "[\\x01-\\x1f\\x7f-\\x9f\\u2028\\u2029\\u202a-\\u202e\\u2066-\\u2069]"
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def charge_problem(epsilon: float, delta: float) -> str | None:
    """Why (epsilon, delta) cannot be charged, or None."""
    if not (math.isfinite(epsilon) and 0 <= epsilon <= MAX_EPSILON):
        return f"epsilon must be in [0, {MAX_EPSILON:g}], got {epsilon}"
    if not (math.isfinite(delta) and 0 <= delta < 1):
        return f"delta must be in [0, 1), got {delta}"
    return None


def text_problem(what: str, value: str) -> str | None:
    """Why ``value`` (a label, path or name) cannot be stored, or None."""
    if not 1 <= len(value) <= TEXT_CHARS:
        return f"{what} must have 1 to {TEXT_CHARS} characters, got {len(value)}"
    if _CONTROL.search(value):
        return f"{what} must not hold a control character (a newline, a tab, ...)"
    return None


def json_problem(what: str, value: dict[str, Any]) -> str | None:
    """Why the JSON of ``value`` (a charge's parameters) is too large to store, or None."""
    size = len(json.dumps(value, sort_keys=True, default=str).encode())
    return f"{what} take {size} bytes of JSON, more than {JSON_BYTES}" if size > JSON_BYTES else None


def sketch_problem(data: bytes) -> str | None:
    """Why ``data`` is not a stored sketch's bytes (see the module docstring), or None."""
    if len(data) % 16 or len(data) > 16 * SKETCH_PAIRS:
        return f"a sketch is a multiple of 16 bytes, at most {16 * SKETCH_PAIRS}; got {len(data)}"
    pairs = np.frombuffer(data, dtype="<u8").reshape(-1, 2)
    if np.any(pairs[:, 1] == 0):
        return "a sketch's counts must be at least 1"
    if np.any(pairs[1:, 0] <= pairs[:-1, 0]):
        return "a sketch's values must be strictly increasing"
    return None


def refuse(problem: str | None, where: str) -> None:
    """Raise a one-line PcqrError saying ``where``: ``problem``, if there is one."""
    if problem is not None:
        raise PcqrError(f"{where}: {problem}")
