"""The k subsample models as one ensemble that counts votes: ct(1) for each query.

Vote counts are private (they are computed from the private models). They are
computed on the workers and travel only to the driver's coordinator; they are
never logged or written to disk.

Counting is vectorised where the models allow it:

* stumps and thresholds (and constant models): three parameter arrays, one
  comparison per (query, model);
* linear classifiers (anything with ``coef_`` of one row and ``intercept_``,
  e.g. LogisticRegression, LinearSVC): one matrix product;
* anything else: each model's ``predict`` in turn.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from pipeline.learners import ConstantModel, _StumpModel


@dataclass
class Ensemble:
    """k trained models, with the fastest vote counter their types allow."""

    models: list[Any]

    def __post_init__(self) -> None:
        self._counter = _choose_counter(self.models)

    def __getstate__(self) -> dict[str, Any]:
        return {"models": self.models}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.models = state["models"]
        self._counter = _choose_counter(self.models)

    @property
    def size(self) -> int:
        return len(self.models)

    def count_ones(self, X: np.ndarray) -> np.ndarray:
        """ct(1) per row of X: how many models predict label 1 (int32)."""
        return self._counter(np.asarray(X, dtype=np.float64))


def _choose_counter(models: Sequence[Any]) -> Any:
    if all(isinstance(m, (_StumpModel, ConstantModel)) for m in models):
        return _StumpCounter(models)
    if all(_is_linear(m) or isinstance(m, ConstantModel) for m in models):
        return _LinearCounter(models)
    return _GenericCounter(models)


def _is_linear(model: Any) -> bool:
    coef = getattr(model, "coef_", None)
    classes = getattr(model, "classes_", None)
    return (
        coef is not None
        and np.ndim(coef) == 2
        and np.shape(coef)[0] == 1
        and hasattr(model, "intercept_")
        and classes is not None
        and list(classes) == [0, 1]
    )


class _StumpCounter:
    """Models of the form: predict 1 iff (x[f] > t) == polarity. A constant c is f=0, t=-inf."""

    def __init__(self, models: Sequence[Any]) -> None:
        features, thresholds, polarities = [], [], []
        for m in models:
            if isinstance(m, ConstantModel):
                features.append(0)
                thresholds.append(-np.inf)  # x > -inf always: predict `polarity`
                polarities.append(m.label)
            else:
                features.append(m.feature_)
                thresholds.append(m.threshold_)
                polarities.append(m.polarity_)
        features_a = np.array(features, dtype=np.int64)
        thresholds_a = np.array(thresholds, dtype=np.float64)
        polarities_a = np.array(polarities, dtype=bool)
        # Per feature, sorted thresholds turn k comparisons into two binary searches:
        # #{t < x} models vote 1 among polarity 1, #{t >= x} among polarity 0.
        self.per_feature = [
            (
                int(f),
                np.sort(thresholds_a[(features_a == f) & polarities_a]),
                np.sort(thresholds_a[(features_a == f) & ~polarities_a]),
            )
            for f in np.unique(features_a)
        ]

    def __call__(self, X: np.ndarray) -> np.ndarray:
        ones = np.zeros(X.shape[0], dtype=np.int64)
        for f, up, down in self.per_feature:
            x = X[:, f]
            ones += np.searchsorted(up, x, side="left")
            ones += down.size - np.searchsorted(down, x, side="left")
        return ones.astype(np.int32)


class _LinearCounter:
    """Linear models: predict 1 iff x . coef + intercept > 0. A constant c is coef 0, +-1 intercept."""

    def __init__(self, models: Sequence[Any]) -> None:
        width = next((np.shape(m.coef_)[1] for m in models if not isinstance(m, ConstantModel)), 0)
        coefs = np.zeros((len(models), width))
        intercepts = np.zeros(len(models))
        for j, m in enumerate(models):
            if isinstance(m, ConstantModel):
                intercepts[j] = 1.0 if m.label == 1 else -1.0
            else:
                coefs[j] = np.asarray(m.coef_)[0]
                intercepts[j] = float(np.ravel(m.intercept_)[0])
        self.coefs, self.intercepts = coefs, intercepts

    def __call__(self, X: np.ndarray) -> np.ndarray:
        scores = X @ self.coefs.T + self.intercepts
        return (scores > 0).sum(axis=1, dtype=np.int32)


class _GenericCounter:
    def __init__(self, models: Sequence[Any]) -> None:
        self.models = list(models)

    def __call__(self, X: np.ndarray) -> np.ndarray:
        ones = np.zeros(X.shape[0], dtype=np.int32)
        for m in self.models:
            ones += np.asarray(m.predict(X)).astype(np.int32) == 1
        return ones
