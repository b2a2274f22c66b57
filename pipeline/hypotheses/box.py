"""Axis-aligned boxes in d dimensions: ``1 iff low_i < X[:, f_i] <= high_i`` for every i.

The class Beimel-Nissim-Stemmer's rectangle learner releases (pcqr learn --algorithm rectangle;
papers/002 Theorem 3.22). Not enumerable (no dichotomy enumeration: the learner never needs one);
:class:`BoxHypothesis` is a released model's hypothesis, rebuilt from its JSON record with every
field checked. (The 2-feature ``rectangle`` class, with its enumeration for A_SSPP and A_PAP, is
:mod:`pcqr.pipeline.hypotheses.rectangle`; its 'x_low < x <= x_high' edges are the same convention.)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from pcqr.pipeline.hypotheses.common import json_float
from pcqr.pipeline.hypotheses.fields import index, number


@dataclass(frozen=True)
class BoxHypothesis:
    """``1 iff lows[i] < X[:, features[i]] <= highs[i]`` for every i (d >= 1 features)."""

    features: tuple[int, ...]
    lows: tuple[float, ...]
    highs: tuple[float, ...]

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Labels (int8) of the rows of ``X`` (rows, all features)."""
        X = np.asarray(X, dtype=np.float64)
        inside = np.ones(X.shape[0], dtype=bool)
        for f, low, high in zip(self.features, self.lows, self.highs):
            inside &= (X[:, f] > low) & (X[:, f] <= high)
        return inside.astype(np.int8)

    def to_dict(self) -> dict[str, Any]:
        """``{"class": "box", "features": [...], "lows": [...], "highs": [...]}``."""
        return {"class": "box", "features": [int(f) for f in self.features],
                "lows": [json_float(v) for v in self.lows], "highs": [json_float(v) for v in self.highs]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BoxHypothesis:
        """Inverse of :meth:`to_dict`: three lists of one length >= 1, feature indices and numbers
        (+-inf allowed, never NaN); anything else is a ValueError naming the field."""
        lists: dict[str, list[Any]] = {}
        for key in ("features", "lows", "highs"):
            value = d.get(key) if isinstance(d, dict) else None
            if not isinstance(value, list) or not value:
                raise ValueError(f"{key} must be a non-empty list, got {value!r}")
            lists[key] = value
        if not len(lists["features"]) == len(lists["lows"]) == len(lists["highs"]):
            raise ValueError("features, lows and highs must have one entry per dimension")
        features = tuple(index({"features": v}, "features") for v in lists["features"])
        lows = tuple(number({"lows": v}, "lows", False) for v in lists["lows"])
        highs = tuple(number({"highs": v}, "highs", False) for v in lists["highs"])
        return cls(features, lows, highs)
