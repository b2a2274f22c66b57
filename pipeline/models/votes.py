"""The k subsample models as one ensemble that counts votes: ct(1) for each query (over c > 2 classes,
ct(j) for each query and class j: :meth:`Ensemble.count_classes`).

Vote counts are private (they are computed from the private models). They are
computed on the workers and travel only to the driver's coordinator; they are
never logged or written to disk.

Counting is vectorised where the models allow it, and the vectorised counters
hold only arrays (what :mod:`pcqr.pipeline.models.store` writes, and what Dask ships):

* stumps and thresholds (and constant models): :class:`StumpVotes`, three
  parameter arrays, two binary searches per (query, feature);
* linear classifiers (scikit-learn's ``LinearClassifierMixin`` with one row of
  ``coef_``, e.g. LogisticRegression, LinearSVC): :class:`LinearVotes`, one matrix product;
* anything else, and every ensemble over c > 2 classes: :class:`ModelVotes`, each model's ``predict``
  in turn.
"""
from __future__ import annotations

from typing import Any, Protocol, Sequence

import numpy as np

from pcqr.pipeline.models.constant import ConstantModel

# scikit-learn and pcqr's learners are imported inside the functions that build a counter from
# fitted models: a worker that only counts votes with arrays (StumpVotes, LinearVotes) then
# starts without importing scikit-learn (about a second per fresh worker process).


class VoteCounter(Protocol):
    size: int

    def __call__(self, X: np.ndarray) -> np.ndarray: ...


class Ensemble:
    """k trained models, with the fastest vote counter their types allow."""

    def __init__(self, models: Sequence[Any], classes: int = 2) -> None:
        self.counter: VoteCounter = _choose_counter(models) if classes == 2 else ModelVotes(models, classes)

    @classmethod
    def of(cls, counter: VoteCounter) -> Ensemble:
        """An ensemble around a counter built directly (from a model file's arrays)."""
        ensemble = cls.__new__(cls)
        ensemble.counter = counter
        return ensemble

    @property
    def size(self) -> int:
        return self.counter.size

    @property
    def array_counted(self) -> bool:
        """Votes are counted by array operations only (NumPy releases the GIL while they run), not
        by each model's ``predict`` in Python: worker threads then count as fast as processes."""
        return isinstance(self.counter, (StumpVotes, LinearVotes))

    @property
    def classes(self) -> int:
        """c: the labels the models vote among (2 unless built for more)."""
        return getattr(self.counter, "classes", 2)

    def count_ones(self, X: np.ndarray) -> np.ndarray:
        """ct(1) per row of X: how many models predict label 1 (int32)."""
        if self.classes != 2:
            raise ValueError(f"count_ones: the ensemble votes among {self.classes} classes (count_classes)")
        return self.counter(np.asarray(X, dtype=np.float64))

    def count_votes(self, X: np.ndarray) -> np.ndarray:
        """What a gate reads: ct(1) per row (int32, (n,)) over two classes, else :meth:`count_classes`."""
        X = np.asarray(X, dtype=np.float64)
        return self.counter(X) if self.classes == 2 else self.count_classes(X)

    def count_classes(self, X: np.ndarray) -> np.ndarray:
        """ct(j) per row of X and class j (int32, (n, c)): how many models predict class j."""
        X = np.asarray(X, dtype=np.float64)
        if self.classes == 2:
            ones = self.counter(X)
            return np.column_stack([self.size - ones, ones]).astype(np.int32)
        assert isinstance(self.counter, ModelVotes)
        return self.counter.class_counts(X)


def _choose_counter(models: Sequence[Any]) -> VoteCounter:
    from pcqr.pipeline.models.learners import _StumpModel

    if all(isinstance(m, (_StumpModel, ConstantModel)) for m in models):
        return StumpVotes.from_models(models)
    if all(is_linear(m) or isinstance(m, ConstantModel) for m in models):
        return LinearVotes.from_models(models)
    return ModelVotes(models)


def is_linear(model: Any) -> bool:
    """A fitted binary linear classifier: predicts 1 iff x . coef_ + intercept_ > 0."""
    from sklearn.linear_model._base import LinearClassifierMixin

    coef = getattr(model, "coef_", None)
    classes = getattr(model, "classes_", None)
    return (
        isinstance(model, LinearClassifierMixin)
        and coef is not None
        and np.ndim(coef) == 2
        and np.shape(coef)[0] == 1
        and hasattr(model, "intercept_")
        and classes is not None
        and list(classes) == [0, 1]
    )


class StumpVotes:
    """Models of the form: predict 1 iff (x[f] > t) == polarity. A constant c is f=0, t=-inf, polarity c."""

    def __init__(self, features: np.ndarray, thresholds: np.ndarray, polarities: np.ndarray) -> None:
        self.features = np.asarray(features, dtype=np.int64)
        self.thresholds = np.asarray(thresholds, dtype=np.float64)
        self.polarities = np.asarray(polarities, dtype=np.int8)
        self.size = int(self.features.shape[0])
        up = self.polarities == 1
        # Per feature, sorted thresholds turn k comparisons into two binary searches:
        # #{t < x} models vote 1 among polarity 1, #{t >= x} among polarity 0.
        self.per_feature = [
            (
                int(f),
                np.sort(self.thresholds[(self.features == f) & up]),
                np.sort(self.thresholds[(self.features == f) & ~up]),
            )
            for f in np.unique(self.features)
        ]

    @classmethod
    def from_models(cls, models: Sequence[Any]) -> StumpVotes:
        constant = [isinstance(m, ConstantModel) for m in models]
        return cls(
            np.array([0 if c else m.feature_ for m, c in zip(models, constant)], dtype=np.int64),
            np.array([-np.inf if c else m.threshold_ for m, c in zip(models, constant)], dtype=np.float64),
            np.array([m.label if c else m.polarity_ for m, c in zip(models, constant)], dtype=np.int8),
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return StumpVotes, (self.features, self.thresholds, self.polarities)

    def __call__(self, X: np.ndarray) -> np.ndarray:
        ones = np.zeros(X.shape[0], dtype=np.int64)
        for f, up, down in self.per_feature:
            x = X[:, f]
            ones += np.searchsorted(up, x, side="left")
            ones += down.size - np.searchsorted(down, x, side="left")
        return ones.astype(np.int32)


BLOCK_ROWS = 8192


class LinearVotes:
    """Linear models: predict 1 iff x . coef + intercept > 0. A constant c is coef 0, +-1 intercept."""

    def __init__(self, coefs: np.ndarray, intercepts: np.ndarray) -> None:
        self.coefs = np.asarray(coefs, dtype=np.float64)
        self.intercepts = np.asarray(intercepts, dtype=np.float64)
        self.size = int(self.intercepts.shape[0])

    @classmethod
    def from_models(cls, models: Sequence[Any]) -> LinearVotes:
        width = next((np.shape(m.coef_)[1] for m in models if not isinstance(m, ConstantModel)), 0)
        coefs = np.zeros((len(models), width))
        intercepts = np.zeros(len(models))
        for j, m in enumerate(models):
            if isinstance(m, ConstantModel):
                intercepts[j] = 1.0 if m.label == 1 else -1.0
            else:
                coefs[j] = np.asarray(m.coef_)[0]
                intercepts[j] = float(np.ravel(m.intercept_)[0])
        return cls(coefs, intercepts)

    def __call__(self, X: np.ndarray) -> np.ndarray:
        """Rows in blocks of ``BLOCK_ROWS``: the scores of one block (BLOCK_ROWS x k floats) stay in
        cache instead of a rows x k array (800 MB for 10^6 rows and k = 100). ``s > -b`` is
        ``s + b > 0`` exactly (the sign of a rounded sum of two floats is the sign of the sum)."""
        ones = np.empty(X.shape[0], dtype=np.int32)
        weights, bar = np.ascontiguousarray(self.coefs.T), -self.intercepts
        scores = np.empty((min(BLOCK_ROWS, X.shape[0]), self.size))
        for start in range(0, X.shape[0], BLOCK_ROWS):
            block = X[start:start + BLOCK_ROWS]
            held = scores[:block.shape[0]]
            np.matmul(block, weights, out=held)
            ones[start:start + block.shape[0]] = np.count_nonzero(held > bar, axis=1)
        return ones


class ModelVotes:
    """Any models: each one's ``predict`` in turn (labels 0 .. classes - 1)."""

    def __init__(self, models: Sequence[Any], classes: int = 2) -> None:
        self.models = list(models)
        self.size = len(self.models)
        self.classes = classes

    def __call__(self, X: np.ndarray) -> np.ndarray:
        if self.classes != 2:
            return self.class_counts(X)
        ones = np.zeros(X.shape[0], dtype=np.int32)
        for m in self.models:
            ones += np.asarray(m.predict(X)).astype(np.int32) == 1
        return ones

    def class_counts(self, X: np.ndarray) -> np.ndarray:
        """ct(j) per row and class j (int32, (n, c)); ValueError if a model predicts outside 0 .. c - 1."""
        counts = np.zeros((X.shape[0], self.classes), dtype=np.int32)
        rows = np.arange(X.shape[0])
        for m in self.models:
            predicted = np.asarray(m.predict(X)).astype(np.int64)
            if predicted.size and (predicted.min() < 0 or predicted.max() >= self.classes):
                raise ValueError(f"a model predicts a class outside 0 .. {self.classes - 1}")
            np.add.at(counts, (rows, predicted), 1)
        return counts
