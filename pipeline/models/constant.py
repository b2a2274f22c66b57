"""The model of a one-class subsample, in a module of its own: loading a session's models
(:mod:`pcqr.pipeline.models.store`) needs it without importing scikit-learn, which
:mod:`pcqr.pipeline.models.learners` does (about a second a ``pcqr answer``)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ConstantModel:
    """The model of a subsample whose labels are all ``label`` (or that is empty)."""

    label: int

    def predict(self, X: np.ndarray) -> np.ndarray:
        return np.full(np.asarray(X).shape[0], self.label, dtype=np.int8)
