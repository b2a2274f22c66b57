"""Halfspaces (half-planes) on two features: ``1 iff w1 x + w2 y > b``.

Every non-trivial labelling of m distinct points by a half-plane is that of a
slight perturbation of a line through two sample points: translate a
separating line until it touches points of the positive side, then rotate it
counter-clockwise about one of them, p, until it meets other points. The
forward ray sweeps the positive (left) side and the backward ray the
negative one, so the positive points on the line are those from p onwards:
each labelling is ``left side + a suffix of the on-line points`` for one of
the line's two directions (the other direction is the complement: ``right
side + a prefix``). The enumeration walks every line through two or more
points once (by its two lowest-numbered points), realises those options with
explicit margins (translate by half the smallest off-line distance, or rotate
about the midpoint of two consecutive on-line points by a small enough
angle), with their complements, and keeps the first representative of each
labelling actually produced on the sample.
Plus all-0 (index 0) and all-1 (index 1). At most m^2 - m + 2 labellings,
exactly that in general position (Cover 1965).

No closed form indexes these, so the enumeration stores its representatives'
parameters: (size, 3) floats, O(m^2). Enumeration costs O(m^3) time and
O(m^2) memory (m = 60: well under a second). Scoring is per candidate,
vectorised over rows in batches: O(n s). Lines are found with a relative
tolerance of 1e-12; on nearly-degenerate samples a labelling realisable only
within that tolerance may be missed (every stored representative is still
exact: its labelling is what ``predict`` computes).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from pcqr.pipeline.hypotheses.base import Enumeration, EnumerationCost, HypothesisClass, Shard
from pcqr.pipeline.hypotheses.common import (
    BATCH_CELLS,
    check_labelled,
    distinct_rows,
    first_distinct,
    sample_columns,
)
from pcqr.pipeline.hypotheses.fields import index_pair, number

_TOLERANCE = 1e-12


def _side(x: np.ndarray, y: np.ndarray, w1: Any, w2: Any, b: Any) -> np.ndarray:
    """``x * w1 + y * w2 > b``: the one formula predict, scoring and deduplication all use."""
    return x * w1 + y * w2 > b


@dataclass(frozen=True)
class HalfspaceHypothesis:
    """``1 iff w1 X[:, f1] + w2 X[:, f2] > b`` for ``features = (f1, f2)``."""

    features: tuple[int, int]
    w1: float
    w2: float
    b: float

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Labels (int8) of the rows of ``X`` (rows, all features)."""
        X = np.asarray(X, dtype=np.float64)
        return _side(X[:, self.features[0]], X[:, self.features[1]], self.w1, self.w2, self.b).astype(np.int8)

    def to_dict(self) -> dict[str, Any]:
        """``{"class": "halfspace", "features", "w1", "w2", "b"}``."""
        return {
            "class": "halfspace",
            "features": [int(f) for f in self.features],
            "w1": float(self.w1),
            "w2": float(self.w2),
            "b": float(self.b),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HalfspaceHypothesis:
        """Inverse of :meth:`to_dict`."""
        return cls(index_pair(d, "features"), number(d, "w1", False), number(d, "w2", False), number(d, "b", False))


class HalfspaceEnumeration(Enumeration):
    """Half-plane dichotomies: the representatives' parameters ``(w1, w2, b)``, one row each."""

    def __init__(self, features: tuple[int, int], params: np.ndarray) -> None:
        self.features = (int(features[0]), int(features[1]))
        self.params = np.asarray(params, dtype=np.float64).reshape(-1, 3)

    def size(self) -> int:
        return int(self.params.shape[0])

    def mistakes(self, shard: Shard, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        X, y = check_labelled(X, y)
        idx = self._indices(shard)
        x1, x2 = X[:, self.features[0]], X[:, self.features[1]]
        out = np.empty(idx.shape, dtype=np.int64)
        step = max(1, BATCH_CELLS // max(X.shape[0], 1))
        for s in range(0, idx.shape[0], step):
            w = self.params[idx[s : s + step]]
            positive = _side(x1[:, None], x2[:, None], w[None, :, 0], w[None, :, 1], w[None, :, 2])
            out[s : s + step] = (positive != y[:, None]).sum(axis=0)
        return out

    def hypothesis(self, index: int) -> HalfspaceHypothesis:
        w1, w2, b = self.params[self._index(index)]
        return HalfspaceHypothesis(self.features, float(w1), float(w2), float(b))


def _line_options(points: np.ndarray, i: int, j: int) -> np.ndarray | None:
    """Parameters (k, 3) perturbing the line through points i < j; None unless i, j are its lowest."""
    p, d = points[i], points[j] - points[i]
    normal = np.array([-d[1], d[0]])
    rel = points - p
    s = rel[:, 0] * normal[0] + rel[:, 1] * normal[1]  # > 0: left of the directed line i -> j
    scale = float(np.abs(rel).max()) * float(np.abs(normal).max())
    on = np.abs(s) <= _TOLERANCE * scale
    on_idx = np.flatnonzero(on)
    if on_idx[0] != i or on_idx[1] != j:
        return None
    off = np.abs(s[~on])
    gap = float(off.min()) if off.size else float(np.abs(normal).max())
    offset = float(normal @ p)
    options = [[normal[0], normal[1], offset + gap / 2], [normal[0], normal[1], offset - gap / 2]]
    along = rel[on_idx] @ d
    line = points[on_idx[np.argsort(along, kind="stable")]]
    for k in range(1, line.shape[0]):
        c = (line[k - 1] + line[k]) / 2
        reach = float(np.abs((points - c) @ d).max())
        w = normal + (gap / (2 * reach)) * d  # rotated about c: the points after c join the left side
        options.append([w[0], w[1], float(w @ c)])
    half = np.asarray(options)
    return np.concatenate([half, -half])


@dataclass(frozen=True)
class HalfspaceClass(HypothesisClass):
    """Half-planes on the two columns ``features``."""

    features: tuple[int, int]
    name: ClassVar[str] = "halfspace"

    def vc_dimension(self) -> int:
        """3."""
        return 3

    def enumeration_cost(self, points: int) -> EnumerationCost:
        """At most m^2 - m + 2 labellings of m <= points distinct points; O(m^3) steps; their
        parameters, (size, 3) floats."""
        dichotomies = points * points - points + 2
        return EnumerationCost(dichotomies, points**3 + 1, 24 * dichotomies)

    def enumerate(self, X_sample: np.ndarray) -> HalfspaceEnumeration:
        """Perturbed lines through pairs of distinct points (see the module docstring): O(m^3)."""
        points = distinct_rows(sample_columns(X_sample, self.features))
        raw = [np.array([[0.0, 0.0, 1.0], [0.0, 0.0, -1.0]])]  # all-0, all-1
        m = points.shape[0]
        for i in range(m):
            for j in range(i + 1, m):
                opts = _line_options(points, i, j)
                if opts is not None:
                    raw.append(opts)
        params = np.concatenate(raw)
        step = max(1, BATCH_CELLS // max(m, 1))
        packed = [
            np.packbits(_side(points[:, 0:1], points[:, 1:2], w[None, :, 0], w[None, :, 1], w[None, :, 2]).T, axis=1)
            for w in (params[s : s + step] for s in range(0, params.shape[0], step))
        ]
        return HalfspaceEnumeration(self.features, params[first_distinct(np.concatenate(packed))])
