"""Strict readers for the fields of a hypothesis record (model files, ``--query``, release tables).

A record comes from a file or a command line anyone may have written: each field must have exactly
its type -- a finite number, a non-negative integer index, a known direction -- or the reader raises
ValueError naming the field (the callers turn it into a one-line PcqrError naming the file or option).
Nothing is coerced silently: ``"up "`` is not ``"up"``, ``true`` is not 1, ``NaN`` is not a threshold.
Hypotheses read their numbers with ``finite=False`` (+-inf are real hypotheses); queries typed by a
user must be finite.
"""
from __future__ import annotations

import math
from typing import Any

DIRECTIONS = ("up", "down")


def _field(d: Any, key: str) -> Any:
    if not isinstance(d, dict):
        raise ValueError(f"expected a mapping of fields, got {type(d).__name__}")
    if key not in d:
        raise ValueError(f"missing field {key}")
    return d[key]


def number(d: Any, key: str, finite: bool = True) -> float:
    """A number, never NaN; finite unless ``finite`` is False (a hypothesis's thresholds and bounds
    may be +-inf: "always 1" is the threshold -inf). A numeric string such as ``"0.3"`` from
    ``key=value`` text is accepted."""
    value = _field(d, key)
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise ValueError(f"{key} must be a number, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{key} must be a number, got {value!r}")
    if math.isnan(value) or (finite and math.isinf(value)):
        raise ValueError(f"{key} must be {'finite' if finite else 'a number, not NaN'}, got {value!r}")
    return float(value)


def optional_number(d: Any, key: str, finite: bool = True) -> float | None:
    """A number as :func:`number`, or None when the field is absent or null."""
    return None if _field_or_none(d, key) is None else number(d, key, finite)


def _field_or_none(d: Any, key: str) -> Any:
    return d.get(key) if isinstance(d, dict) else _field(d, key)


def index(d: Any, key: str) -> int:
    """A feature index: a non-negative integer (not a bool, not a float)."""
    value = _field(d, key)
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{key} must be a non-negative integer index, got {value!r}")
    return value


def labels(d: Any, key: str = "labels") -> tuple[int, ...]:
    """A model's class indices (scikit-learn's ``classes_`` of a student fitted over c > 2 classes):
    1 to MAX_CLASSES distinct non-negative integers in increasing order."""
    from pcqr.pipeline.options import MAX_CLASSES

    value = _field(d, key)
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_CLASSES:
        raise ValueError(f"{key} must be a list of 1 to {MAX_CLASSES} class indices, got {value!r}")
    found = tuple(index({key: v}, key) for v in value)
    if any(b <= a for a, b in zip(found, found[1:])):
        raise ValueError(f"{key} must be distinct class indices in increasing order, got {value!r}")
    return found


def index_pair(d: Any, key: str) -> tuple[int, int]:
    """Two distinct-or-equal feature indices, as a JSON list of two integers."""
    value = _field(d, key)
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ValueError(f"{key} must be a list of two feature indices, got {value!r}")
    first, second = (index({key: v}, key) for v in value)
    return first, second


def direction(d: Any, key: str = "direction") -> bool:
    """``"up"`` (True: predict 1 above the threshold) or ``"down"`` (False); nothing else."""
    value = _field(d, key)
    if value not in DIRECTIONS:
        raise ValueError(f"{key} must be 'up' or 'down', got {value!r}")
    return value == "up"
