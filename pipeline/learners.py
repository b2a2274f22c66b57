"""Non-private learners B for A_SubSamp: built-in exact ERM learners and any scikit-learn classifier.

The built-in learners are scikit-learn estimators (``fit`` returns self,
learned state ends in ``_``) so they compose with the rest of the ecosystem:

* :class:`ThresholdLearner` -- thresholds on one feature, both directions;
* :class:`StumpLearner` -- decision stumps: the best threshold over all features.

Both are exact empirical-risk minimisers computed by sorting plus prefix sums
(O(n log n) per feature). A subsample whose labels are all one class gets a
:class:`ConstantModel` from :func:`fit_subsample`, whatever the learner.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, clone

from pipeline.errors import PcqrError

BUILTIN_LEARNERS = ("threshold", "stump")


def best_threshold(x: np.ndarray, y: np.ndarray) -> tuple[float, int, int]:
    """Exact ERM over thresholds on one feature, both directions.

    Returns ``(threshold, polarity, mistakes)``: polarity 1 predicts 1 where
    ``x > threshold``, polarity 0 predicts 1 where ``x <= threshold``.
    Candidates cut between consecutive distinct values (midpoints), plus -inf.
    """
    order = np.argsort(x, kind="stable")
    xs, ys = x[order], y[order].astype(np.int64)
    n, ones_total = xs.shape[0], int(ys.sum())
    ones_le = np.concatenate(([0], np.cumsum(ys)))  # ones among the first i rows
    cut = np.concatenate(([0], np.flatnonzero(xs[1:] != xs[:-1]) + 1, [n]))  # rows below each cut
    zeros_above = (n - cut) - (ones_total - ones_le[cut])
    up = ones_le[cut] + zeros_above  # mistakes of "1 iff x > t"
    down = n - up  # mistakes of "1 iff x <= t"
    i_up, i_down = int(np.argmin(up)), int(np.argmin(down))
    best, polarity = (i_up, 1) if up[i_up] <= down[i_down] else (i_down, 0)
    mistakes = int(up[best] if polarity == 1 else down[best])
    c = int(cut[best])
    if c == 0:
        threshold = -np.inf
    elif c == n:
        threshold = np.inf
    else:
        threshold = float((xs[c - 1] + xs[c]) / 2)
    return threshold, polarity, mistakes


class _StumpModel(ClassifierMixin, BaseEstimator):
    """Shared predict for models of the form ``polarity XOR (x[feature] <= threshold)``."""

    feature_: int
    threshold_: float
    polarity_: int

    def predict(self, X: np.ndarray) -> np.ndarray:
        above = np.asarray(X)[:, self.feature_] > self.threshold_
        return (above == bool(self.polarity_)).astype(np.int8)


class ThresholdLearner(_StumpModel):
    """Exact ERM over thresholds on one feature (column index ``feature``), both directions."""

    def __init__(self, feature: int = 0) -> None:
        self.feature = feature

    def fit(self, X: np.ndarray, y: np.ndarray) -> ThresholdLearner:
        X = np.asarray(X)
        self.feature_ = int(self.feature)
        self.threshold_, self.polarity_, _ = best_threshold(X[:, self.feature_], np.asarray(y))
        self.classes_ = np.array([0, 1])
        return self


class StumpLearner(_StumpModel):
    """Exact ERM over decision stumps: the best one-feature threshold over all features."""

    def fit(self, X: np.ndarray, y: np.ndarray) -> StumpLearner:
        X, y = np.asarray(X), np.asarray(y)
        fits = [best_threshold(X[:, j], y) for j in range(X.shape[1])]
        self.feature_ = int(np.argmin([f[2] for f in fits]))
        self.threshold_, self.polarity_, _ = fits[self.feature_]
        self.classes_ = np.array([0, 1])
        return self


@dataclass(frozen=True)
class ConstantModel:
    """The model of a subsample whose labels are all ``label`` (or that is empty)."""

    label: int

    def predict(self, X: np.ndarray) -> np.ndarray:
        return np.full(np.asarray(X).shape[0], self.label, dtype=np.int8)


@dataclass(frozen=True)
class LearnerSpec:
    """A learner by name: ``threshold``, ``stump``, or a scikit-learn classifier's import path."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)

    def build(self) -> Any:
        if self.name == "threshold":
            return ThresholdLearner(**self.params)
        if self.name == "stump":
            return StumpLearner(**self.params)
        module_name, _, attr = self.name.rpartition(".")
        if not module_name:
            raise PcqrError(
                f"--learner {self.name!r}: use 'threshold', 'stump' or an import path "
                "such as sklearn.linear_model.LogisticRegression"
            )
        try:
            cls = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise PcqrError(f"--learner {self.name!r} cannot be imported: {exc}") from None
        try:
            return clone(cls(**self.params))
        except (TypeError, ValueError) as exc:
            raise PcqrError(f"--learner-param for {self.name}: {exc}") from None

    @property
    def min_rows(self) -> int:
        """Rows a subsample needs so the learner sees at least one example."""
        return 1


def parse_learner_params(items: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """``key=value`` strings to a dict; values parsed as YAML scalars (1, 0.5, true, none)."""
    import yaml

    params: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise PcqrError(f"--learner-param {item!r}: expected key=value")
        params[key.strip()] = yaml.safe_load(value)
    return params


def fit_subsample(spec: LearnerSpec, X: np.ndarray, y: np.ndarray) -> Any:
    """Train B on one subsample; one class (or no rows) gives a constant model, not a crash."""
    labels = np.unique(y)
    if labels.size <= 1:
        return ConstantModel(int(labels[0]) if labels.size else 0)
    return spec.build().fit(X, y)
