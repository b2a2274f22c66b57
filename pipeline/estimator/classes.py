"""The public class list of ``PrivateClassifier(classes=[...])`` (issue 49, item 1, two classes).

pcqr's sessions answer class indices 0 and 1; a user's labels may be any two values (``'<=50K'`` and
``'>50K'``, 1 and 2). The list is public and given, never read from the private rows (reading it
from ``y`` would release which labels occur), so:

* ``fit`` maps each private label to its index in the **sorted** list, refusing one outside it in one
  line before anything is written or charged. Sorted, not as given: ``classes=['b', 'a']`` and
  ``['a', 'b']`` write the same rows, so :func:`pcqr.set_budget` and every ``fit`` of the same data
  see the same rows and charge the same budget whatever order a caller wrote (the ledger compares
  rows whole, the label included: an inverted mapping would look like other data).
* ``predict`` maps each released index back to the label: post-processing of the released answer.
* ``classes_`` is the sorted list, scikit-learn's convention.

Multi-class sessions (c > 2) are not built (docs/privacy.md, "Design: the gates for c > 2 classes"):
a list of more than two labels is refused in one line.
"""
from __future__ import annotations

import numbers
import reprlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from pcqr.pipeline.errors import PcqrError

#: The labels a session answers today (the default list: the sessions' own indices).
BINARY = (0, 1)


def _plain(label: Any) -> int | str:
    """A label as a plain Python value -- an integer (not a bool) or a non-empty string -- else ValueError."""
    if isinstance(label, numbers.Integral) and not isinstance(label, (bool, np.bool_)):
        return int(label)
    if isinstance(label, (str, np.str_)) and str(label) != "":
        return str(label)
    raise ValueError(label)


@dataclass(frozen=True)
class ClassList:
    """Two public labels, sorted: label ``labels[i]`` is the session's class index i."""

    labels: tuple[int | str, ...] = BINARY

    @property
    def named(self) -> bool:
        """Whether the labels are the user's own (anything but the default 0 and 1)."""
        return self.labels != BINARY

    def indices(self, y: np.ndarray) -> np.ndarray:
        """Each label of ``y`` as its class index (int8); ValueError, not naming it, for a label outside the list."""
        values = np.asarray(y)
        one = _equal(values, self.labels[1])
        inside = one | _equal(values, self.labels[0])
        if not inside.all():  # the label itself is private: not echoed
            raise ValueError(f"y: holds labels outside classes={list(self.labels)!r} (the public class list is "
                             "given, never read from the private labels)")
        return one.astype(np.int8)

    def index(self, label: Any, name: str) -> int:
        """One label (``fallback_label``) as its index; PcqrError naming ``name`` if it is not in the list."""
        try:
            plain = _plain(label)
        except ValueError:
            plain = None
        for i, known in enumerate(self.labels):
            if type(known) is type(plain) and known == plain:
                return i
        raise PcqrError(f"PrivateClassifier: {name}={reprlib.repr(label)}: expected one of classes_ "
                        f"{list(self.labels)!r}")

    def answers(self, released: np.ndarray) -> np.ndarray:
        """The released indices (float: 0.0, 1.0, NaN where nothing was released) as labels: for the
        default list the float array itself; for numbers, floats with NaN; for strings, the strings
        (an object array with None where nothing was released)."""
        if not self.named:
            return released
        answered = ~np.isnan(released)
        if all(isinstance(label, int) for label in self.labels):
            out = np.full(released.shape, np.nan)
            out[answered] = np.asarray(self.labels, dtype=np.float64)[released[answered].astype(np.int64)]
            return out
        if answered.all():
            return np.asarray(self.labels)[released.astype(np.int64)]
        out = np.full(released.shape, None, dtype=object)
        out[answered] = np.asarray(self.labels, dtype=object)[released[answered].astype(np.int64)]
        return out


def _equal(values: np.ndarray, label: int | str) -> np.ndarray:
    """Elementwise values == label, False where the types cannot be equal (a string and a number)."""
    if isinstance(label, str):
        return values == label if values.dtype.kind in "UO" else np.zeros(values.shape, dtype=bool)
    if values.dtype.kind in "biuf":
        return values == label
    return np.array([isinstance(v, numbers.Number) and not isinstance(v, str) and v == label for v in values.ravel()],
                    dtype=bool).reshape(values.shape)


def class_list(classes: Any) -> ClassList:
    """``classes`` (None: 0 and 1) as a checked, sorted ClassList; PcqrError in one line otherwise."""
    if classes is None:
        return ClassList()
    expected = "expected a list of two distinct labels, all integers or all non-empty strings"
    if isinstance(classes, (str, bytes)) or not isinstance(classes, (list, tuple, np.ndarray)):
        raise PcqrError(f"PrivateClassifier: classes={reprlib.repr(classes)}: {expected}")
    try:
        labels = [_plain(label) for label in np.asarray(classes, dtype=object).ravel()]
    except ValueError:
        raise PcqrError(f"PrivateClassifier: classes={reprlib.repr(classes)}: {expected}") from None
    if len(labels) > 2 and len(set(labels)) == len(labels):
        raise PcqrError(f"PrivateClassifier: classes={reprlib.repr(classes)}: {len(labels)} classes, but pcqr's "
                        "sessions answer two; multi-class queries are not built yet")
    if len(labels) != 2 or labels[0] == labels[1] or type(labels[0]) is not type(labels[1]):
        raise PcqrError(f"PrivateClassifier: classes={reprlib.repr(classes)}: {expected}")
    return ClassList(tuple(sorted(labels)))  # type: ignore[type-var]  # both int or both str
