"""Helpers the hypothesis classes share: sample columns, cut points, sorted scoring data.

Cut points sit at the midpoint of consecutive distinct sample values
(``v[c-1] <= t < v[c]``), ``-inf`` / ``+inf`` outside; "above t" means ``x > t``.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from pcqr.pipeline.errors import PcqrError

#: Largest number of booleans a batched (rows x candidates) evaluation allocates.
BATCH_CELLS = 1 << 22


def sample_columns(X_sample: np.ndarray, features: Sequence[int]) -> np.ndarray:
    """The chosen columns of a sample as float64 (n, k), -0.0 folded into 0.0; finite or PcqrError."""
    X = np.asarray(X_sample, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"the sample must be a 2-D array (rows, features), got shape {X.shape}")
    cols = list(features)
    if cols and max(cols) >= X.shape[1]:
        raise ValueError(f"feature {max(cols)} is out of range for a sample with {X.shape[1]} features")
    Z = X[:, cols] + 0.0
    bad = ~np.isfinite(Z).all(axis=0)
    if bad.any():
        raise PcqrError(
            f"hypothesis enumeration needs finite features: column {cols[int(np.argmax(bad))]} "
            "of the sample has NaN or infinite values"
        )
    return Z


def distinct_rows(Z: np.ndarray) -> np.ndarray:
    """Distinct rows of a finite matrix, in lexicographic order."""
    if Z.shape[0] == 0:
        return Z.reshape(0, Z.shape[1])
    return np.unique(Z, axis=0)


def midpoint(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Cut points between ``lo < hi`` (elementwise): the midpoint, kept in ``[lo, hi)``."""
    lo, hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        t = lo / 2 + hi / 2
    return np.where((t >= hi) | (t < lo) | np.isnan(t), lo, t)


def cut_at(values: np.ndarray, cuts: np.ndarray) -> np.ndarray:
    """Cut points with ``cuts[k]`` sorted distinct ``values`` below them (0 -> -inf, u -> +inf)."""
    cuts = np.asarray(cuts, dtype=np.int64)
    u = values.shape[0]
    if u == 0:
        return np.full(cuts.shape, -np.inf)
    lo = values[np.clip(cuts - 1, 0, u - 1)]
    hi = values[np.clip(cuts, 0, u - 1)]
    return np.where(cuts <= 0, -np.inf, np.where(cuts >= u, np.inf, midpoint(lo, hi)))


def check_labelled(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Scoring data as (float64 2-D X, bool y); ValueError on shape or non-0/1 labels."""
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y).reshape(-1)
    if X.ndim != 2 or X.shape[0] != y.shape[0]:
        raise ValueError(f"X must be (rows, features) with one label per row; got {X.shape} and {y.shape}")
    if y.size and not np.isin(y, (0, 1)).all():
        raise ValueError("labels must be 0 or 1")
    return X, y.astype(bool)


def scoring_column(X: np.ndarray, feature: int) -> np.ndarray:
    """One feature of scoring data with NaN mapped to -inf (below every cut, like ``predict``)."""
    x = X[:, feature]
    return np.where(np.isnan(x), -np.inf, x)


# id(X) -> (weak reference to X, {feature: (labels, sorted scoring data)}); entries die with X
_SORTED: dict[int, tuple[weakref.ref[np.ndarray], dict[int, tuple[np.ndarray, SortedLabels]]]] = {}


@dataclass(frozen=True, eq=False)
class SortedLabels:
    """One feature of labelled scoring data, split by label and sorted: counts by searchsorted."""

    ones: np.ndarray
    zeros: np.ndarray

    @classmethod
    def of(cls, X: np.ndarray, y: np.ndarray, feature: int) -> SortedLabels:
        """Sort the feature's values of rows labelled 1 and 0 (``y`` boolean).

        Cached per scoring matrix (weakly: the cache dies with X) and feature, so
        the many shards a worker scores against the same data sort it once. The
        labels are compared on every hit; X itself must not be modified in place
        (pcqr's pipeline never does).
        """
        entry = _SORTED.get(id(X))
        per_matrix = entry[1] if entry is not None and entry[0]() is X else None
        cached = per_matrix.get(feature) if per_matrix is not None else None
        if cached is not None and np.array_equal(cached[0], y):
            return cached[1]
        x = scoring_column(X, feature)
        result = cls(np.sort(x[y]), np.sort(x[~y]))
        if isinstance(X, np.ndarray):
            if per_matrix is None:
                per_matrix = {}
                _SORTED[id(X)] = (weakref.ref(X), per_matrix)
                weakref.finalize(X, _SORTED.pop, id(X), None)
            per_matrix[feature] = (np.array(y, copy=True), result)
        return result

    @property
    def n1(self) -> int:
        return int(self.ones.shape[0])

    @property
    def n0(self) -> int:
        return int(self.zeros.shape[0])

    def not_above(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows labelled 1 and 0 with value ``<= t`` (not above the cut), for each ``t``."""
        return (
            np.searchsorted(self.ones, t, side="right").astype(np.int64),
            np.searchsorted(self.zeros, t, side="right").astype(np.int64),
        )

    def equal(self, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows labelled 1 and 0 with value ``== v``, for each ``v``."""
        return (
            (np.searchsorted(self.ones, v, side="right") - np.searchsorted(self.ones, v, side="left")).astype(np.int64),
            (np.searchsorted(self.zeros, v, side="right") - np.searchsorted(self.zeros, v, side="left")).astype(np.int64),
        )


def first_distinct(packed: np.ndarray) -> np.ndarray:
    """Sorted indices of the first of each distinct row of a (k, bytes) packed-labelling matrix."""
    if packed.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    if packed.shape[1] == 0:  # no sample points: every labelling is the empty one
        return np.zeros(1, dtype=np.int64)
    _, first = np.unique(packed, axis=0, return_index=True)
    return np.sort(first).astype(np.int64)


def groups(keys: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """``(key, positions)`` for each distinct key of an int array, in O(s log s) (not O(s * keys))."""
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1]))) if keys.size else np.zeros(0, int)
    return [(int(ordered[a]), part) for a, part in zip(starts, np.split(order, starts[1:]))]


def json_float(x: float) -> float | str:
    """A float for JSON: infinities as the strings "inf" / "-inf" (``float()`` reads them back)."""
    x = float(x)
    return x if np.isfinite(x) else ("inf" if x > 0 else "-inf")


def triangle_pairs(u: int, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The q-th pair ``0 <= i < j <= u`` in order (i, then j): there are u(u+1)/2 of them."""
    i_all = np.arange(u + 1, dtype=np.int64)
    row_start = i_all * u - i_all * (i_all - 1) // 2  # pairs before row i
    i = np.searchsorted(row_start, q, side="right") - 1
    return i, i + 1 + (q - row_start[i])
