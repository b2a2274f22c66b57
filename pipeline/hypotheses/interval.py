"""Intervals on one feature: ``1 iff low < x <= high``.

Dichotomies on u distinct sample values: every non-empty run of consecutive
values ``v[i] .. v[j-1]`` (0 <= i < j <= u), cut at ``t_i`` and ``t_j``
(midpoints, ``-inf`` / ``+inf`` at the ends; see :mod:`pcqr.pipeline.hypotheses.base`),
plus the empty interval once: u(u+1)/2 + 1 labellings.

Index order: 0 is the empty interval (``low = high = 0``); then the runs by
i, then j. Tie convention: half-open ``(low, high]``, matching "above cut t iff
``x > t``"; with midpoint cuts it labels the sample exactly as the closed
interval ``[v[i], v[j-1]]`` would.

Scoring a shard of s candidates on n rows: sort the rows once per label, count
rows at or below both cuts by binary search and subtract, O((n + s) log n).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from pcqr.pipeline.hypotheses.base import Enumeration, EnumerationCost, HypothesisClass, Shard, log_factor
from pcqr.pipeline.hypotheses.common import (
    SortedLabels,
    check_labelled,
    cut_at,
    json_float,
    sample_columns,
    triangle_pairs,
)
from pcqr.pipeline.hypotheses.fields import index, number


@dataclass(frozen=True)
class IntervalHypothesis:
    """``1 iff low < X[:, feature] <= high`` (empty when ``low >= high``)."""

    feature: int
    low: float
    high: float

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Labels (int8) of the rows of ``X`` (rows, all features)."""
        x = np.asarray(X, dtype=np.float64)[:, self.feature]
        return ((x > self.low) & (x <= self.high)).astype(np.int8)

    def to_dict(self) -> dict[str, Any]:
        """``{"class": "interval", "feature", "low", "high"}``."""
        return {
            "class": "interval",
            "feature": int(self.feature),
            "low": json_float(self.low),
            "high": json_float(self.high),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> IntervalHypothesis:
        """Inverse of :meth:`to_dict`."""
        return cls(index(d, "feature"), number(d, "low", False), number(d, "high", False))


class IntervalEnumeration(Enumeration):
    """Interval dichotomies on one feature: its sorted distinct sample values."""

    def __init__(self, feature: int, values: np.ndarray) -> None:
        self.feature = int(feature)
        self.values = np.asarray(values, dtype=np.float64)

    def size(self) -> int:
        u = self.values.shape[0]
        return u * (u + 1) // 2 + 1

    def _decode(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(empty?, low cut, high cut) of global indices."""
        empty = idx == 0
        i, j = triangle_pairs(self.values.shape[0], np.where(empty, 0, idx - 1))
        return empty, cut_at(self.values, i), cut_at(self.values, j)

    def mistakes(self, shard: Shard, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        X, y = check_labelled(X, y)
        idx = self._indices(shard)
        rows = SortedLabels.of(X, y, self.feature)
        if self.values.shape[0] == 0:
            return np.full(idx.shape, rows.n1, dtype=np.int64)
        empty, low, high = self._decode(idx)
        ones_low, zeros_low = rows.not_above(low)
        ones_high, zeros_high = rows.not_above(high)
        inside = rows.n1 - (ones_high - ones_low) + (zeros_high - zeros_low)
        return np.where(empty, rows.n1, inside).astype(np.int64)

    def hypothesis(self, index: int) -> IntervalHypothesis:
        i = self._index(index)
        if i == 0:
            return IntervalHypothesis(self.feature, 0.0, 0.0)
        _, low, high = self._decode(np.array([i]))
        return IntervalHypothesis(self.feature, float(low[0]), float(high[0]))


@dataclass(frozen=True)
class IntervalClass(HypothesisClass):
    """Intervals on column ``feature``."""

    feature: int
    name: ClassVar[str] = "interval"

    def vc_dimension(self) -> int:
        """2."""
        return 2

    def enumeration_cost(self, points: int) -> EnumerationCost:
        """u(u+1)/2 + 1 intervals on u <= points distinct values; a sort; the u values."""
        return EnumerationCost(points * (points + 1) // 2 + 1, points * log_factor(points), 8 * points)

    def enumerate(self, X_sample: np.ndarray) -> IntervalEnumeration:
        """Runs of consecutive distinct values: O(n log n), stores the u values."""
        values = np.unique(sample_columns(X_sample, [self.feature])[:, 0])
        return IntervalEnumeration(self.feature, values)
