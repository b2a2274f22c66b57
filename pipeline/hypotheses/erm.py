"""Exact (non-private) empirical risk minimisation over a hypothesis class, by enumeration.

:class:`ERMClassifier` enumerates the class's dichotomies on the training rows,
scores every shard on those rows and keeps the first representative with the
fewest mistakes. Exact for every class (the representatives cover every
labelling of the training points), and a reference for the private learners.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin

from pcqr.pipeline.hypotheses.base import Hypothesis, HypothesisClass
from pcqr.pipeline.hypotheses.registry import make_class


class ERMClassifier(ClassifierMixin, BaseEstimator):
    """Empirical risk minimiser over ``--hypothesis`` on ``--features``, scikit-learn style.

    Parameters
    ----------
    hypothesis : str
        A name from :data:`pcqr.pipeline.hypotheses.CLASSES`.
    features : sequence of int, optional
        Column indices (see :func:`pcqr.pipeline.hypotheses.make_class`).
    models : sequence, optional
        Fitted models for ``hypothesis="finite"``.
    shard_size : int
        Candidates scored at a time.

    Attributes
    ----------
    hypothesis_ : Hypothesis
        The chosen representative (the lowest index among the minimisers).
    mistakes_ : int
        Its mistakes on the training rows.
    hypothesis_class_ : HypothesisClass
    n_candidates_ : int
        Number of dichotomies on the training rows.
    """

    def __init__(
        self,
        hypothesis: str = "stump",
        features: Sequence[int] | None = None,
        models: Sequence[Any] | None = None,
        shard_size: int = 1 << 16,
    ) -> None:
        self.hypothesis = hypothesis
        self.features = features
        self.models = models
        self.shard_size = shard_size

    def fit(self, X: np.ndarray, y: np.ndarray) -> ERMClassifier:
        """Enumerate on ``X``, score every shard on ``(X, y)``, keep the argmin.

        Parameters
        ----------
        X : np.ndarray
            Training rows (n, features), finite.
        y : np.ndarray
            0/1 labels (n,).

        Returns
        -------
        ERMClassifier
            self.
        """
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y)
        self.hypothesis_class_: HypothesisClass = make_class(self.hypothesis, X.shape[1], self.features, self.models)
        enumeration = self.hypothesis_class_.enumerate(X)
        best_index, best = 0, None
        for shard in enumeration.shards(self.shard_size):
            scores = enumeration.mistakes(shard, X, y)
            k = int(np.argmin(scores))
            if best is None or scores[k] < best:
                best_index, best = shard.start + k, int(scores[k])
        self.hypothesis_: Hypothesis = enumeration.hypothesis(best_index)
        self.mistakes_ = int(best) if best is not None else 0
        self.n_candidates_ = enumeration.size()
        self.classes_ = np.array([0, 1])
        self.n_features_in_ = X.shape[1]
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Labels (int8) of the chosen hypothesis."""
        return self.hypothesis_.predict(np.asarray(X, dtype=np.float64))
