"""A learner outside scikit-learn and pcqr, for the allow-list tests: usable only when an operator's
cluster.yaml lists ``tests.allowed_learner`` under ``pcqr: learners: allow:``.

It is neither a stump nor linear, so its models are stored with skops, as any other allowed type's.
"""
from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin


class NearestMeanClassifier(ClassifierMixin, BaseEstimator):
    """Predicts the label whose training mean is nearest (Euclidean), ties to 0."""

    def __init__(self, shrink: float = 0.0) -> None:
        self.shrink = shrink

    def fit(self, X: np.ndarray, y: np.ndarray) -> NearestMeanClassifier:
        X, y = np.asarray(X, dtype=np.float64), np.asarray(y)
        self.means_ = np.stack([X[y == c].mean(axis=0) * (1 - self.shrink) for c in (0, 1)])
        self.classes_ = np.array([0, 1])
        self.n_features_in_ = X.shape[1]
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        d = ((np.asarray(X, dtype=np.float64)[:, None, :] - self.means_[None]) ** 2).sum(axis=2)
        return (d[:, 1] < d[:, 0]).astype(np.int8)
