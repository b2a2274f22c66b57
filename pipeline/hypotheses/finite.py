"""A finite class given explicitly: a list of fitted models (anything with ``predict``).

The candidates are the models, in the order given. By default the enumeration
keeps only the first model of each distinct labelling of the sample's distinct
points (so, like every class here, no two representatives label the sample
alike): at most min(k, 2^m) labellings for k models and m distinct points.
With ``dedupe=False`` every model is a candidate (index = model position),
which is still a valid input for the exponential mechanism, just with repeated
labellings. Each model sees ``X[:, features]`` (all columns if ``features`` is
None) and must predict 0/1.

Enumeration: k predictions on the m distinct points. Scoring: one ``predict``
per candidate on the n rows, O(s * cost of predict). ``to_dict`` records the
model's position only (models are not JSON); ``hypothesis_from_dict`` needs
the same model list to rebuild it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

import numpy as np

from pcqr.pipeline.hypotheses.base import Enumeration, EnumerationCost, HypothesisClass, Shard
from pcqr.pipeline.hypotheses.common import (
    check_labelled,
    distinct_rows,
    first_distinct,
    sample_columns,
)


def _model_input(X: np.ndarray, features: tuple[int, ...] | None) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    return X if features is None else X[:, list(features)]


def _labels(model: Any, Z: np.ndarray) -> np.ndarray:
    """A model's 0/1 predictions on model input ``Z`` as int8; ValueError if not 0/1."""
    if Z.shape[0] == 0:
        return np.zeros(0, dtype=np.int8)
    out = np.asarray(model.predict(Z)).reshape(-1)
    if out.shape[0] != Z.shape[0] or not np.isin(out, (0, 1)).all():
        raise ValueError(f"model {model!r} must predict one 0/1 label per row")
    return out.astype(np.int8)


@dataclass(frozen=True, eq=False)
class FiniteHypothesis:
    """Model ``index`` of a finite class, applied to ``X[:, features]`` (all columns if None)."""

    index: int
    model: Any
    features: tuple[int, ...] | None = None

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Labels (int8) of the rows of ``X`` (rows, all features)."""
        return _labels(self.model, _model_input(X, self.features))

    def to_dict(self) -> dict[str, Any]:
        """``{"class": "finite", "index", "features"}``: the model's position, not the model."""
        features = None if self.features is None else [int(f) for f in self.features]
        return {"class": "finite", "index": int(self.index), "features": features}

    @classmethod
    def from_dict(cls, d: dict[str, Any], models: Sequence[Any]) -> FiniteHypothesis:
        """Inverse of :meth:`to_dict`, given the class's model list."""
        index = int(d["index"])
        features = d.get("features")
        return cls(index, models[index], None if features is None else tuple(int(f) for f in features))


class FiniteEnumeration(Enumeration):
    """The models and the positions of the kept ones."""

    def __init__(self, models: tuple[Any, ...], features: tuple[int, ...] | None, kept: np.ndarray) -> None:
        self.models = models
        self.features = features
        self.kept = np.asarray(kept, dtype=np.int64)

    def size(self) -> int:
        return int(self.kept.shape[0])

    def mistakes(self, shard: Shard, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        X, y = check_labelled(X, y)
        Z = _model_input(X, self.features)
        positions = self.kept[self._indices(shard)]
        return np.array([int(np.sum(_labels(self.models[k], Z) != y)) for k in positions], dtype=np.int64)

    def hypothesis(self, index: int) -> FiniteHypothesis:
        k = int(self.kept[self._index(index)])
        return FiniteHypothesis(k, self.models[k], self.features)


@dataclass(frozen=True, eq=False)
class FiniteClass(HypothesisClass):
    """The fitted ``models`` (non-empty), each seeing columns ``features`` (all if None)."""

    models: tuple[Any, ...]
    features: tuple[int, ...] | None = None
    dedupe: bool = True
    name: ClassVar[str] = "finite"

    def __post_init__(self) -> None:
        if not self.models:
            raise ValueError("a finite class needs at least one model")

    def vc_dimension(self) -> int:
        """floor(log2 k) for k models (an upper bound)."""
        return int(len(self.models)).bit_length() - 1

    def enumeration_cost(self, points: int) -> EnumerationCost:
        """At most k labellings for k models; every model predicts every point (packed bits kept)."""
        k = len(self.models)
        return EnumerationCost(k, k * points + 1, k * (points // 8 + 1))

    def enumerate(self, X_sample: np.ndarray) -> FiniteEnumeration:
        """Predict every model on the distinct points; keep the first of each labelling."""
        models = tuple(self.models)
        if not self.dedupe:
            return FiniteEnumeration(models, self.features, np.arange(len(models)))
        X = np.asarray(X_sample, dtype=np.float64)
        columns = range(X.shape[1]) if self.features is None else self.features
        Z = distinct_rows(sample_columns(X, list(columns)))
        packed = np.stack([np.packbits(_labels(m, Z).astype(bool)) for m in models])
        return FiniteEnumeration(models, self.features, first_distinct(packed))
