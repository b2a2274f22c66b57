"""Linear classifiers over any number of features: ``1 iff w . x + b > 0``.

The public form of a fitted linear student (logistic regression, a linear SVM, SGD; and a
constant: no features, ``b`` = +1 or -1) in a released model file (pcqr.pipeline.models.portable).
scikit-learn's linear classifiers predict ``classes_[1]`` exactly where their decision function
``X @ coef_.T + intercept_`` is positive; :meth:`LinearHypothesis.predict` computes the same sum.
Only a hypothesis (a fitted predictor), not a class pcqr enumerates.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from pcqr.pipeline.hypotheses.fields import index, number

#: Most weights a model file may hold (a bound on what an edited file can make a reader allocate).
MAX_WEIGHTS = 1_000_000


@dataclass(frozen=True)
class LinearHypothesis:
    """``1 iff sum_i weights[i] X[:, features[i]] + bias > 0``."""

    features: tuple[int, ...]
    weights: tuple[float, ...]
    bias: float

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Labels (int8) of the rows of ``X`` (rows, all features)."""
        X = np.asarray(X, dtype=np.float64)
        score = X[:, list(self.features)] @ np.asarray(self.weights, dtype=np.float64) + self.bias
        return (score > 0).astype(np.int8)

    def to_dict(self) -> dict[str, Any]:
        """``{"class": "linear", "features", "weights", "bias"}`` (finite numbers)."""
        return {"class": "linear", "features": [int(f) for f in self.features],
                "weights": [float(w) for w in self.weights], "bias": float(self.bias)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LinearHypothesis:
        """Inverse of :meth:`to_dict`; every field checked (finite weights, one per feature index)."""
        features, weights = d.get("features"), d.get("weights")
        if not isinstance(features, list) or not isinstance(weights, list):
            raise ValueError("features and weights must be lists")
        if len(features) != len(weights) or len(weights) > MAX_WEIGHTS:
            raise ValueError(f"expected one weight per feature (at most {MAX_WEIGHTS:,}), got "
                             f"{len(weights)} weights for {len(features)} features")
        return cls(tuple(index({"feature": f}, "feature") for f in features),
                   tuple(number({"weight": w}, "weight") for w in weights), number(d, "bias"))
