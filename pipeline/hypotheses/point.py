"""Point functions on one feature: ``1 iff x == p``.

Dichotomies on u distinct sample values: each value alone, plus the all-zero
labelling (a point off the sample): u + 1 labellings.

Index order: 0 is the all-zero representative (``value=None``: a point
function at a point no data reaches, predicting 0 everywhere); index k >= 1
is the point ``v[k-1]``. Equality is exact float equality (-0.0 == 0.0).

Scoring a shard of s candidates on n rows: sort the rows once per label and
count equal values by two binary searches, O((n + s) log n).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from pcqr.pipeline.hypotheses.base import Enumeration, EnumerationCost, HypothesisClass, Shard, log_factor
from pcqr.pipeline.hypotheses.common import (
    SortedLabels,
    check_labelled,
    sample_columns,
)
from pcqr.pipeline.hypotheses.fields import index, optional_number


@dataclass(frozen=True)
class PointHypothesis:
    """``1 iff X[:, feature] == value``; ``value=None`` is the all-zero function."""

    feature: int
    value: float | None

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Labels (int8) of the rows of ``X`` (rows, all features)."""
        x = np.asarray(X, dtype=np.float64)[:, self.feature]
        if self.value is None:
            return np.zeros(x.shape[0], dtype=np.int8)
        return (x == self.value).astype(np.int8)

    def to_dict(self) -> dict[str, Any]:
        """``{"class": "point", "feature", "value"}`` (value null for all-zero)."""
        value = None if self.value is None else float(self.value)
        return {"class": "point", "feature": int(self.feature), "value": value}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PointHypothesis:
        """Inverse of :meth:`to_dict`."""
        return cls(index(d, "feature"), optional_number(d, "value", False))


class PointEnumeration(Enumeration):
    """Point dichotomies on one feature: its sorted distinct sample values."""

    def __init__(self, feature: int, values: np.ndarray) -> None:
        self.feature = int(feature)
        self.values = np.asarray(values, dtype=np.float64)

    def size(self) -> int:
        return self.values.shape[0] + 1

    def mistakes(self, shard: Shard, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        X, y = check_labelled(X, y)
        idx = self._indices(shard)
        rows = SortedLabels.of(X, y, self.feature)
        points = self.values[np.maximum(idx - 1, 0)] if self.values.size else np.zeros(idx.shape)
        ones_eq, zeros_eq = rows.equal(points)
        return np.where(idx == 0, rows.n1, rows.n1 - ones_eq + zeros_eq).astype(np.int64)

    def hypothesis(self, index: int) -> PointHypothesis:
        i = self._index(index)
        return PointHypothesis(self.feature, None if i == 0 else float(self.values[i - 1]))


@dataclass(frozen=True)
class PointClass(HypothesisClass):
    """Point functions on column ``feature``."""

    feature: int
    name: ClassVar[str] = "point"

    def vc_dimension(self) -> int:
        """1."""
        return 1

    def enumeration_cost(self, points: int) -> EnumerationCost:
        """u + 1 point functions on u <= points distinct values; a sort; the u values."""
        return EnumerationCost(points + 1, points * log_factor(points), 8 * points)

    def enumerate(self, X_sample: np.ndarray) -> PointEnumeration:
        """The distinct values: O(n log n), stores the u values."""
        values = np.unique(sample_columns(X_sample, [self.feature])[:, 0])
        return PointEnumeration(self.feature, values)
