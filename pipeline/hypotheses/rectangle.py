"""Axis-aligned rectangles on two features: ``1 iff x_low < x <= x_high and y_low < y <= y_high``.

A set of sample points is cut out by some rectangle iff its bounding box
contains no other sample point, and then its *tight* box (the cuts just
outside its extreme values, at midpoints) is the unique box with each edge
touching a point of the set. So the dichotomies are: the empty set once, plus
one tight box per realisable non-empty set -- O(u^4) of them on u distinct
points (at most ux(ux+1)/2 * uy(uy+1)/2 boxes on ux, uy distinct coordinates).

Index order: 0 is the empty rectangle (all edges 0); then the x-ranges
``[i, j)`` of distinct x values in order (i, then j), and within one x-range
its tight y-ranges in order (lowest y, then highest). The enumeration stores
the points' coordinate ranks and the number of tight boxes per x-range
(O(ux^2) offsets); a shard recomputes the y-ranges of the x-ranges it touches.

Enumeration costs O(ux^2 * m^2) for m distinct points (u = 60: well under a
second). Scoring a shard of s boxes on n rows: the rows' cells by binary
search, a 2-D prefix sum of (zeros - ones) per cell, then O(1) per box:
O(n log u + ux uy + s + touched x-ranges * m^2).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from pcqr.pipeline.hypotheses.base import Enumeration, EnumerationCost, HypothesisClass, Shard
from pcqr.pipeline.hypotheses.common import (
    check_labelled,
    cut_at,
    distinct_rows,
    groups,
    json_float,
    sample_columns,
    scoring_column,
    triangle_pairs,
)
from pcqr.pipeline.hypotheses.fields import index_pair, number


@dataclass(frozen=True)
class RectangleHypothesis:
    """``1 iff x_low < X[:, fx] <= x_high and y_low < X[:, fy] <= y_high`` for ``features = (fx, fy)``."""

    features: tuple[int, int]
    x_low: float
    x_high: float
    y_low: float
    y_high: float

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Labels (int8) of the rows of ``X`` (rows, all features)."""
        X = np.asarray(X, dtype=np.float64)
        x, y = X[:, self.features[0]], X[:, self.features[1]]
        inside = (x > self.x_low) & (x <= self.x_high) & (y > self.y_low) & (y <= self.y_high)
        return inside.astype(np.int8)

    def to_dict(self) -> dict[str, Any]:
        """``{"class": "rectangle", "features", "x_low", "x_high", "y_low", "y_high"}``."""
        edges = {k: json_float(getattr(self, k)) for k in ("x_low", "x_high", "y_low", "y_high")}
        return {"class": "rectangle", "features": [int(f) for f in self.features], **edges}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RectangleHypothesis:
        """Inverse of :meth:`to_dict`."""
        return cls(index_pair(d, "features"), number(d, "x_low", False), number(d, "x_high", False), number(d, "y_low", False),
                   number(d, "y_high", False))


class RectangleEnumeration(Enumeration):
    """Rectangle dichotomies: distinct coordinates, the points' ranks, tight boxes per x-range."""

    def __init__(self, features: tuple[int, int], xs: np.ndarray, ys: np.ndarray, gx: np.ndarray, gy: np.ndarray) -> None:
        self.features = (int(features[0]), int(features[1]))
        self.xs, self.ys = xs, ys  # sorted distinct coordinates
        self.gx, self.gy = gx, gy  # each distinct point's rank in xs and ys
        ux = xs.shape[0]
        counts = [self._y_ranges(k)[0].shape[0] for k in range(ux * (ux + 1) // 2)]
        self.offsets = np.concatenate(([0], np.cumsum(counts, dtype=np.int64))).astype(np.int64)

    def size(self) -> int:
        return 1 + int(self.offsets[-1])

    def _x_range(self, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return triangle_pairs(self.xs.shape[0], k)

    def _y_ranges(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Tight y-ranges (lowest, highest y rank, inclusive) of x-range k, in index order."""
        i, j = (int(a[0]) for a in self._x_range(np.array([k])))
        at = (self.gx >= i) & (self.gx < j)
        gx, gy = self.gx[at], self.gy[at]
        present, row = np.unique(gy, return_inverse=True)
        ky = present.shape[0]
        low_x = np.full(ky, j, dtype=np.int64)
        high_x = np.full(ky, i - 1, dtype=np.int64)
        np.minimum.at(low_x, row, gx)
        np.maximum.at(high_x, row, gx)
        upper = np.triu(np.ones((ky, ky), dtype=bool))  # [a, b]: y ranks present[a] .. present[b]
        lowest = np.minimum.accumulate(np.where(upper, low_x[None, :], j), axis=1)
        highest = np.maximum.accumulate(np.where(upper, high_x[None, :], i - 1), axis=1)
        a, b = np.nonzero(upper & (lowest == i) & (highest == j - 1))
        return present[a], present[b]

    def _boxes(self, idx: np.ndarray) -> tuple[np.ndarray, ...]:
        """Rank bounds [i, j) x [ya, yb] of non-empty global indices (>= 1)."""
        q = idx - 1
        k = np.searchsorted(self.offsets, q, side="right") - 1
        i, j = self._x_range(k)
        ya, yb = np.empty_like(q), np.empty_like(q)
        for kk, at in groups(k):
            lows, highs = self._y_ranges(kk)
            ya[at], yb[at] = lows[q[at] - self.offsets[kk]], highs[q[at] - self.offsets[kk]]
        return i, j, ya, yb

    def mistakes(self, shard: Shard, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        X, y = check_labelled(X, y)
        idx = self._indices(shard)
        n1 = int(y.sum())
        out = np.full(idx.shape, n1, dtype=np.int64)
        box = idx > 0
        if not box.any():
            return out
        ux, uy = self.xs.shape[0], self.ys.shape[0]
        tx, ty = cut_at(self.xs, np.arange(ux + 1)), cut_at(self.ys, np.arange(uy + 1))
        cx = np.searchsorted(tx, scoring_column(X, self.features[0]), side="left") - 1
        cy = np.searchsorted(ty, scoring_column(X, self.features[1]), side="left") - 1
        ok = (cx >= 0) & (cy >= 0)  # rows below every cut are in no box
        weight = np.zeros((ux + 1, uy + 1), dtype=np.int64)  # padded: prefix[a, b] = cells < (a, b)
        np.add.at(weight, (cx[ok] + 1, cy[ok] + 1), np.where(y[ok], -1, 1))
        prefix = weight.cumsum(axis=0).cumsum(axis=1)
        i, j, ya, yb = self._boxes(idx[box])
        inside = prefix[j, yb + 1] - prefix[i, yb + 1] - prefix[j, ya] + prefix[i, ya]
        out[box] += inside
        return out

    def hypothesis(self, index: int) -> RectangleHypothesis:
        g = self._index(index)
        if g == 0:
            return RectangleHypothesis(self.features, 0.0, 0.0, 0.0, 0.0)
        i, j, ya, yb = self._boxes(np.array([g]))
        x_low, x_high = cut_at(self.xs, np.array([i[0], j[0]]))
        y_low, y_high = cut_at(self.ys, np.array([ya[0], yb[0] + 1]))
        return RectangleHypothesis(self.features, float(x_low), float(x_high), float(y_low), float(y_high))


@dataclass(frozen=True)
class RectangleClass(HypothesisClass):
    """Axis-aligned rectangles on the two columns ``features``."""

    features: tuple[int, int]
    name: ClassVar[str] = "rectangle"

    def vc_dimension(self) -> int:
        """4."""
        return 4

    def enumeration_cost(self, points: int) -> EnumerationCost:
        """At most ux(ux+1)/2 uy(uy+1)/2 + 1 boxes (ux, uy <= m <= points); O(ux^2 m^2) steps;
        O(ux^2) offsets."""
        ranges = points * (points + 1) // 2
        return EnumerationCost(ranges * ranges + 1, ranges * points * points + 1, 8 * ranges + 24 * points)

    def enumerate(self, X_sample: np.ndarray) -> RectangleEnumeration:
        """Tight boxes of the distinct points (see the module docstring): O(ux^2 m^2)."""
        points = distinct_rows(sample_columns(X_sample, self.features))
        xs, gx = np.unique(points[:, 0], return_inverse=True)
        ys, gy = np.unique(points[:, 1], return_inverse=True)
        return RectangleEnumeration(self.features, xs, ys, gx.reshape(-1).astype(np.int64), gy.reshape(-1).astype(np.int64))
