"""The public class list of ``PrivateClassifier(classes=[...])`` (issue 49, item 1).

pcqr's sessions answer class indices 0 .. c - 1 (0 and 1 by default); a user's labels may be any c
distinct values of one type (``'<=50K'`` and ``'>50K'``, 1 and 2, ``['low', 'mid', 'high']``). The list is public and given, never read from the private rows (reading it
from ``y`` would release which labels occur), so:

* ``fit`` maps each private label to its index in the **sorted** list, refusing one outside it in one
  line before anything is written or charged. Sorted, not as given: ``classes=['b', 'a']`` and
  ``['a', 'b']`` write the same rows, so :func:`pcqr.set_budget` and every ``fit`` of the same data
  see the same rows and charge the same budget whatever order a caller wrote (the ledger compares
  rows whole, the label included: an inverted mapping would look like other data).
* ``predict`` maps each released index back to the label: post-processing of the released answer.
* ``classes_`` is the sorted list, scikit-learn's convention.

More than two classes are answered by the gnmax gate only (docs/privacy.md, "the gates for c > 2
classes"); at most pcqr.pipeline.privacy.limits.MAX_CLASSES.
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
    """The public labels, sorted: label ``labels[i]`` is the session's class index i."""

    labels: tuple[int | str, ...] = BINARY

    @property
    def named(self) -> bool:
        """Whether the labels are the user's own (anything but the default 0 and 1)."""
        return self.labels != BINARY

    def indices(self, y: np.ndarray) -> np.ndarray:
        """Each label of ``y`` as its class index (int8); ValueError, not naming it, for a label outside the list."""
        values = np.asarray(y)
        index = np.full(values.shape, -1, dtype=np.int8)
        for i, label in enumerate(self.labels):
            index[_equal(values, label)] = i
        if np.any(index < 0):  # the label itself is private: not echoed
            raise ValueError(f"y: holds labels outside classes={list(self.labels)!r} (the public class list is "
                             "given, never read from the private labels)")
        return index

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
    from pcqr.pipeline.privacy.limits import MAX_CLASSES

    expected = (f"expected a list of 2 to {MAX_CLASSES} distinct labels, all integers or all non-empty strings")
    if isinstance(classes, (str, bytes)) or not isinstance(classes, (list, tuple, np.ndarray)):
        raise PcqrError(f"PrivateClassifier: classes={reprlib.repr(classes)}: {expected}")
    try:
        labels = [_plain(label) for label in np.asarray(classes, dtype=object).ravel()]
    except ValueError:
        raise PcqrError(f"PrivateClassifier: classes={reprlib.repr(classes)}: {expected}") from None
    kinds = {type(label) for label in labels}
    if not 2 <= len(labels) <= MAX_CLASSES or len(set(labels)) != len(labels) or len(kinds) != 1:
        raise PcqrError(f"PrivateClassifier: classes={reprlib.repr(classes)}: {expected}")
    return ClassList(tuple(sorted(labels)))  # type: ignore[type-var]  # all int or all str
