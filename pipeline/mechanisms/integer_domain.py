"""The public integer domain X = [lo, hi] of Beimel-Nissim-Stemmer's point and threshold mechanisms
(``--domain lo:hi``, given by the user, never read from the rows), and the exact per-value counts
the workers compute on it.

The counts are the only thing read from private rows: each worker counts its parts' values that are
integers of X (a value outside X, or not an integer, counts for no point), the driver sums them per
value. The mechanisms then see only {value: count}; unseen values of X count 0, so a 2^64-sized
domain costs nothing.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pcqr.pipeline.data.datasets import Part, load_features
from pcqr.pipeline.errors import PcqrError

#: A domain's ends lie within +-this: float64 (the feature columns pcqr reads) holds every integer up
#: to 2^53, and the counting code clips values to [lo - 1, hi + 1], which must stay exact too.
MAX_EXACT_INTEGER = 2**53 - 1


@dataclass(frozen=True)
class Domain:
    """The public integer domain [lo, hi] of a learner's or a sanitizer's feature."""

    lo: int
    hi: int

    @classmethod
    def parse(cls, text: str, option: str = "--domain") -> Domain:
        """``lo:hi``, integers, lo < hi, both within +-(2^53 - 1) (lo - 1 and hi + 1 exact as float64);
        one line otherwise."""
        lo_text, sep, hi_text = str(text).partition(":")
        try:
            lo, hi = int(lo_text), int(hi_text)
        except ValueError:
            lo = hi = 0
            sep = ""
        if not sep:
            raise PcqrError(f"{option} must be LO:HI with integers LO < HI (e.g. 0:4294967295), got {text!r}")
        if not (-MAX_EXACT_INTEGER <= lo < hi <= MAX_EXACT_INTEGER):
            raise PcqrError(f"{option} {text}: need LO < HI, both within +-(2^53 - 1) (exact as float64 features)")
        return cls(lo, hi)

    @property
    def size(self) -> int:
        return self.hi - self.lo + 1

    def describe(self) -> str:
        return f"{self.lo}:{self.hi}"


def value_counts(X: np.ndarray, domain: Domain) -> tuple[np.ndarray, np.ndarray]:
    """Worker task: (values, counts) of the rows of ``X`` (one feature column) whose value is an
    integer of ``domain``, values sorted."""
    x = np.asarray(X, dtype=np.float64)[:, 0]
    return _distinct(x[(x == np.floor(x)) & (x >= domain.lo) & (x <= domain.hi)])


def ceiling_counts(X: np.ndarray, domain: Domain) -> tuple[np.ndarray, np.ndarray]:
    """Worker task for threshold queries: (values, counts) of every row of ``X`` (one feature column)
    at ceil(x) clipped to [lo, hi], values sorted. For an integer theta, x <= theta iff ceil(x) <=
    theta (pcqr's threshold hypotheses 'x <= theta' / 'x > theta'), and a row below (above) the
    domain is below (above) every theta in [lo, hi - 1]: every such query counts the same rows on
    the clipped values as on the real ones. Replace-one neighbours stay replace-one neighbours (a
    per-row map)."""
    x = np.asarray(X, dtype=np.float64)[:, 0]
    return _distinct(np.clip(np.ceil(x), domain.lo, domain.hi))


def _distinct(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct values as int64, their counts) of integer-valued floats."""
    values, counts = np.unique(x.astype(np.int64), return_counts=True)
    return values, counts.astype(np.int64)


def check_integer_values(part: Part, feature: str) -> None:
    """Worker task, before the charge of a mechanism that counts integer points (:func:`value_counts`)
    on a feature whose type may hold other values (floats, decimals): refuse a column holding a
    value that is not an integer, which would count for no point (a silent all-zero answer)."""
    x = load_features(part, [feature])[:, 0]
    if not np.array_equal(x, np.floor(x)):
        raise PcqrError(f"{part.file}: feature column {feature!r} holds values that are not integers; the point "
                        "mechanisms count the integer points of --domain only, so such rows would count for none "
                        "(round the column, or use learn-thresholds / san-thresholds, which take ceil(x))")


def merge_counts(*pieces: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The parts' counts summed per value (sorted values, of the pieces' dtype; exact: integer sums).
    One stable sort and a segmented sum (``np.add.at`` was most of a 10^8-row merge)."""
    if not pieces:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    values = np.concatenate([p[0] for p in pieces])
    counts = np.concatenate([np.asarray(p[1], dtype=np.int64) for p in pieces])
    if not values.size:
        return values, counts
    order = np.argsort(values, kind="stable")
    values, counts = values[order], counts[order]
    starts = np.flatnonzero(np.concatenate([[True], values[1:] != values[:-1]]))
    return values[starts], np.add.reduceat(counts, starts)
