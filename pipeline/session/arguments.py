"""The Python API's arguments, each checked by type and range before anything is read, written or charged.

As scikit-learn's ``_parameter_constraints``: one table, :data:`RULES`, says what each keyword of
``pcqr.Session.create``, ``Session.answer`` and ``pcqr.PrivateClassifier`` accepts, and
:func:`check_arguments` refuses any other value in one :class:`PcqrError` line in the keyword's own
name (``PrivateClassifier: queries_max=1.5: expected a whole number in [1, 2^53]``), never a
``TypeError`` from deep in a session after its charge. A bool is not a number; numbers are
``numbers.Real`` / ``numbers.Integral`` (NumPy scalars included); a choice is one of its listed
strings. The ranges are the command line's (pcqr.pipeline.privacy.limits); ``delta``'s, ``alpha``'s,
``beta``'s and ``threshold``'s are the privacy plan's, which checks them with the certificate (only
their type is checked here).
"""
from __future__ import annotations

import math
import numbers
import os
import reprlib
from dataclasses import dataclass
from typing import Any, Callable, Collection, Mapping

import numpy as np

from pcqr.pipeline.budget.bounds import text_problem
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.privacy.limits import (
    MAX_BATCH_SIZE, MAX_CLASSES, MAX_COUNT, MAX_CUTOFF, MAX_EPSILON, MAX_SUBSAMPLES,
)
from pcqr.pipeline.privacy.session_plan import MODES
from pcqr.pipeline.privacy.subsamp import GATES, PROFILES
from pcqr.pipeline.session.distillation import AFTER_HALT

#: The longest ``name`` a PrivateClassifier's charge is labelled with (the ledger takes labels up to
#: pcqr.pipeline.budget.bounds.TEXT_CHARS; a name is meant to be read in ``pcqr budget show``).
NAME_CHARS = 200


@dataclass(frozen=True)
class Rule:
    """What a keyword accepts: ``accepts(value)``, and ``expected``, the same in words; ``plain``
    turns an accepted value into the Python value the library takes (a NumPy integer into an int)."""

    expected: str
    accepts: Callable[[Any], bool]
    plain: Callable[[Any], Any] = lambda value: value


def _real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and not _numpy_bool(value)


def _integral(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _numpy_bool(value: Any) -> bool:
    return isinstance(value, np.bool_)


def _power(value: int) -> str:
    return f"2^{value.bit_length() - 1}" if value > 10**6 and value & (value - 1) == 0 else f"{value:,}"


def whole(lowest: int, highest: int) -> Rule:
    """An integer in [lowest, highest]."""
    return Rule(f"a whole number in [{lowest:,}, {_power(highest)}]",
                lambda v: _integral(v) and lowest <= v <= highest, int)


def positive(highest: float) -> Rule:
    """A finite number in (0, highest]."""
    return Rule(f"a number in (0, {highest:g}]", lambda v: _real(v) and math.isfinite(v) and 0 < v <= highest,
                float)


NUMBER = Rule("a number", _real, float)
FLAG = Rule("True or False", lambda v: isinstance(v, bool) or _numpy_bool(v), bool)
TEXT = Rule("a string", lambda v: isinstance(v, str) and v != "")
PATH = Rule("a path (str or os.PathLike)", lambda v: isinstance(v, (str, os.PathLike)) and os.fspath(v) != "",
            os.fspath)
#: A ledger setting: its value (empty, a URL's form) is judged by pcqr.pipeline.budget.location.ledger_setting.
LEDGER = Rule("a ledger file's path or a postgresql:// URL (str)", lambda v: isinstance(v, (str, os.PathLike)),
              os.fspath)
PARAMS = Rule("a dict of keyword arguments (str keys)",
              lambda v: isinstance(v, Mapping) and all(isinstance(k, str) for k in v))
COLUMNS = Rule("a list of column names (str)", lambda v: isinstance(v, str) or (
    isinstance(v, (list, tuple)) and all(isinstance(c, str) for c in v)))


def one_of(*allowed: Any) -> Rule:
    """One of the strings ``allowed``."""
    words = ", ".join(repr(a) for a in allowed)
    return Rule(f"one of {words}", lambda v: isinstance(v, str) and v in allowed)


#: Every keyword of the Python API that takes a value, and what it accepts.
RULES: dict[str, Rule] = {
    "epsilon": positive(MAX_EPSILON), "delta": NUMBER, "alpha": NUMBER, "beta": NUMBER, "threshold": NUMBER,
    "cutoff": whole(1, MAX_CUTOFF), "queries_max": whole(1, MAX_COUNT), "labels": whole(1, MAX_COUNT),
    "subsamples": whole(1, MAX_SUBSAMPLES), "batch_size": whole(1, MAX_BATCH_SIZE), "seed": whole(0, 2**64 - 1),
    "classes": whole(2, MAX_CLASSES),
    "profile": one_of(*PROFILES), "gate": one_of(*GATES), "mode": one_of(*MODES), "after_halt": one_of(*AFTER_HALT),
    "fallback_label": Rule(f"a class index: 0 or 1, or below the session's classes (at most {MAX_CLASSES})",
                           lambda v: _integral(v) and 0 <= v < MAX_CLASSES, int),
    "guess": TEXT, "learner": TEXT, "student_learner": TEXT, "hypothesis": TEXT, "label": TEXT, "id_column": TEXT,
    "learner_params": PARAMS, "student_learner_params": PARAMS, "features": COLUMNS,
    "state": PATH, "log": PATH, "private": PATH, "truth": PATH, "cluster": PATH, "ledger": LEDGER,
    "insecure_seed": FLAG, "allow_private_overlap": FLAG, "wait": FLAG, "local_threads": FLAG, "private_log": FLAG,
    "name": Rule(f"a string of 1 to {NAME_CHARS} characters, no control characters",
                 lambda v: isinstance(v, str) and len(v) <= NAME_CHARS and text_problem("name", v) is None),
}


def check_arguments(owner: str, arguments: Mapping[str, Any], optional: Collection[str] = ()) -> dict[str, Any]:
    """Refuse the first of ``arguments`` (keyword: value) that its rule does not accept, naming
    ``owner`` (``PrivateClassifier``, ``Session.create``), the keyword and what it expects. A keyword
    in ``optional`` may also be None. Returns the arguments as the library takes them (``Rule.plain``:
    ``numpy.int64(5)`` as 5, ``numpy.float32(2)`` as 2.0, a path as str)."""
    plain: dict[str, Any] = {}
    for name, value in arguments.items():
        rule = RULES[name]
        if value is None and name in optional:
            plain[name] = None
        elif rule.accepts(value):
            plain[name] = rule.plain(value)
        else:
            raise PcqrError(f"{owner}: {name}={reprlib.repr(value)}: expected {rule.expected}")
    return plain
