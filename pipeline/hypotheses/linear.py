"""Linear classifiers over any number of features: ``1 iff w . x + b > 0``, and over c > 2 classes.

The public form of a fitted linear student (logistic regression, a linear SVM, SGD; and a
constant: no features, ``b`` = +1 or -1) in a released model file (pcqr.pipeline.models.portable).
scikit-learn's linear classifiers predict ``classes_[1]`` exactly where their decision function
``X @ coef_.T + intercept_`` is positive; :meth:`LinearHypothesis.predict` computes the same sum.

A student of a session over c > 2 classes (:class:`MulticlassLinearHypothesis`) keeps scikit-learn's
whole rule: the decision function ``X @ coef_.T + intercept_`` has one column when the student saw
two of the classes (``labels[1]`` where it is positive, else ``labels[0]``) and one per label when it
saw more (``labels`` at the first largest); ``labels`` are the class indices it saw (its
``classes_``). A constant is one label, no features, one zero score.
Only hypotheses (fitted predictors), not classes pcqr enumerates.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from pcqr.pipeline.hypotheses.fields import index, labels, number

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


@dataclass(frozen=True)
class MulticlassLinearHypothesis:
    """``labels[argmax_j (X[:, features] @ weights[j] + bias[j])]``, or with one row of weights
    ``labels[1]`` where that score is positive, else ``labels[0]`` (see the module docstring)."""

    features: tuple[int, ...]
    weights: tuple[tuple[float, ...], ...]  # one row per score
    bias: tuple[float, ...]
    labels: tuple[int, ...]

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Class indices (int8) of the rows of ``X`` (rows, all features)."""
        X = np.asarray(X, dtype=np.float64)
        W = np.asarray(self.weights, dtype=np.float64).reshape(len(self.weights), len(self.features))
        scores = X[:, list(self.features)] @ W.T + np.asarray(self.bias, dtype=np.float64)
        at = (scores[:, 0] > 0).astype(np.int64) if len(self.labels) == 2 else np.argmax(scores, axis=1)
        return np.asarray(self.labels, dtype=np.int8)[at]

    def to_dict(self) -> dict[str, Any]:
        """``{"class": "linear", "labels", "features", "weights": [[...] per score], "bias": [...]}``."""
        return {"class": "linear", "labels": [int(c) for c in self.labels], "features": [int(f) for f in self.features],
                "weights": [[float(w) for w in row] for row in self.weights], "bias": [float(b) for b in self.bias]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MulticlassLinearHypothesis:
        """Inverse of :meth:`to_dict`; every field checked: one score (row of weights and a bias) for
        one or two labels, one per label for more, one finite weight per feature in each row."""
        found = labels(d)
        features, weights, bias = d.get("features"), d.get("weights"), d.get("bias")
        if not isinstance(features, list) or not isinstance(weights, list) or not isinstance(bias, list):
            raise ValueError("features, weights and bias must be lists")
        scores = 1 if len(found) <= 2 else len(found)
        if len(weights) != scores or len(bias) != scores:
            raise ValueError(f"{len(found)} labels need {scores} rows of weights and {scores} biases, got "
                             f"{len(weights)} and {len(bias)}")
        if any(not isinstance(row, list) or len(row) != len(features) for row in weights) \
                or scores * len(features) > MAX_WEIGHTS:
            raise ValueError(f"expected one weight per feature in each row (at most {MAX_WEIGHTS:,} in all)")
        return cls(tuple(index({"feature": f}, "feature") for f in features),
                   tuple(tuple(number({"weight": w}, "weight") for w in row) for row in weights),
                   tuple(number({"bias": b}, "bias") for b in bias), found)


def linear_from_dict(d: dict[str, Any]) -> LinearHypothesis | MulticlassLinearHypothesis:
    """A ``linear`` record: over c > 2 classes (it lists ``labels``) or two."""
    return MulticlassLinearHypothesis.from_dict(d) if "labels" in d else LinearHypothesis.from_dict(d)
