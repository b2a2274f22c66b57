"""Thresholds on one feature: ``1 iff x > t`` (up) and ``1 iff x <= t`` (down).

Dichotomies on u distinct sample values ``v[0] < ... < v[u-1]``: cut c
(0 <= c <= u) has the c smallest values below it, at ``t_c`` (``-inf``,
midpoints, ``+inf``; see :mod:`pcqr.pipeline.hypotheses.base`).

* one direction: u + 1 labellings (cuts 0..u);
* both directions: 2u labellings for u >= 1 (the all-0 and all-1 labellings
  are shared by the two directions), 1 for an empty sample.

Index order (both directions): up cuts 0..u, then down cuts 1..u-1.
Tie convention: up predicts 1 iff ``x > t``; down is its exact complement,
``not x > t`` (so NaN gets 1, as in :mod:`pcqr.pipeline.models.learners`).

Scoring a shard of s candidates on n rows: sort the rows once per label and
count rows not above each cut by binary search, O(n log n + s log n); no
candidate-by-candidate loop.
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
)
from pcqr.pipeline.hypotheses.fields import direction, index, number

DIRECTIONS = ("both", "up", "down")


@dataclass(frozen=True)
class ThresholdHypothesis:
    """``1 iff X[:, feature] > threshold`` if ``up``, else its complement."""

    feature: int
    threshold: float
    up: bool = True

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Labels (int8) of the rows of ``X`` (rows, all features)."""
        above = np.asarray(X, dtype=np.float64)[:, self.feature] > self.threshold
        return (above == self.up).astype(np.int8)

    def to_dict(self) -> dict[str, Any]:
        """``{"class": "threshold", "feature", "threshold", "direction": "up" | "down"}``."""
        return {
            "class": "threshold",
            "feature": int(self.feature),
            "threshold": json_float(self.threshold),
            "direction": "up" if self.up else "down",
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ThresholdHypothesis:
        """Inverse of :meth:`to_dict`."""
        return cls(index(d, "feature"), number(d, "threshold", False), direction(d))


class ThresholdEnumeration(Enumeration):
    """Threshold dichotomies on one feature: its sorted distinct sample values and the directions."""

    def __init__(self, feature: int, values: np.ndarray, directions: str = "both") -> None:
        self.feature = int(feature)
        self.values = np.asarray(values, dtype=np.float64)
        self.directions = directions

    def size(self) -> int:
        u = self.values.shape[0]
        return u + 1 + (max(u - 1, 0) if self.directions == "both" else 0)

    def _decode(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Cut points and directions (True = up) of global indices."""
        u = self.values.shape[0]
        if self.directions == "up":
            up, cut = np.ones(idx.shape, dtype=bool), idx
        elif self.directions == "down":
            up, cut = np.zeros(idx.shape, dtype=bool), idx
        else:
            up = idx <= u
            cut = np.where(up, idx, idx - u)
        return cut_at(self.values, cut), up

    def mistakes(self, shard: Shard, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        X, y = check_labelled(X, y)
        t, up = self._decode(self._indices(shard))
        rows = SortedLabels.of(X, y, self.feature)
        ones_below, zeros_below = rows.not_above(t)
        up_mistakes = ones_below + (rows.n0 - zeros_below)
        return np.where(up, up_mistakes, y.shape[0] - up_mistakes).astype(np.int64)

    def hypothesis(self, index: int) -> ThresholdHypothesis:
        t, up = self._decode(np.array([self._index(index)]))
        return ThresholdHypothesis(self.feature, float(t[0]), bool(up[0]))


@dataclass(frozen=True)
class ThresholdClass(HypothesisClass):
    """Thresholds on column ``feature``; ``directions`` is "both" (default), "up" or "down"."""

    feature: int
    directions: str = "both"
    name: ClassVar[str] = "threshold"

    def __post_init__(self) -> None:
        if self.directions not in DIRECTIONS:
            raise ValueError(f"directions must be one of {DIRECTIONS}, got {self.directions!r}")

    def vc_dimension(self) -> int:
        """2 for both directions, 1 for one."""
        return 2 if self.directions == "both" else 1

    def enumeration_cost(self, points: int) -> EnumerationCost:
        """2u (both directions) or u + 1 cuts on u <= points distinct values; a sort; the u values."""
        return EnumerationCost(2 * points + 1, points * log_factor(points), 8 * points)

    def enumerate(self, X_sample: np.ndarray) -> ThresholdEnumeration:
        """Cuts between the distinct values of the feature: O(n log n), stores the u values."""
        values = np.unique(sample_columns(X_sample, [self.feature])[:, 0])
        return ThresholdEnumeration(self.feature, values, self.directions)
