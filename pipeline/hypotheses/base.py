"""The interface every hypothesis class implements: Shard, Hypothesis, Enumeration, HypothesisClass.

A :class:`HypothesisClass` enumerates its *dichotomies* on a sample: one
representative hypothesis per distinct labelling the class induces on the
sample's distinct points. The result is an :class:`Enumeration`, a compact,
picklable description (sorted distinct values, offsets) -- not the list of
candidates -- whose global indices ``0 .. size() - 1`` are deterministic, so
Dask tasks can score index ranges (:class:`Shard`) independently and a later
task can rebuild ``hypothesis(index)`` for the chosen index.

Conventions (helpers in :mod:`pipeline.hypotheses.common`): every one-feature
cut sits between two consecutive distinct sample values ``v[c-1] < v[c]`` at
their midpoint (nudged down to ``v[c-1]`` if rounding would reach ``v[c]``),
so ``v[c-1] <= t < v[c]``; the outer cuts are ``-inf`` and ``+inf``. "x is
above cut t" means ``x > t``, so a cut never splits tied values. Scoring maps
NaN to ``-inf`` (below every cut), exactly what ``predict``'s comparisons do
with NaN.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np


@dataclass(frozen=True)
class Shard:
    """A chunk descriptor: the candidates ``[start, stop)`` of an :class:`Enumeration`."""

    start: int
    stop: int


@runtime_checkable
class Hypothesis(Protocol):
    """A fitted predictor: small, picklable, rebuilt from ``to_dict`` by ``hypothesis_from_dict``."""

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Labels (int8, 0/1) of the rows of ``X`` (rows, all features)."""
        ...

    def to_dict(self) -> dict[str, Any]:
        """JSON-able parameters: ``{"class": name, ...}``."""
        ...


class Enumeration(ABC):
    """The dichotomies of one hypothesis class on one sample, indexed ``0 .. size() - 1``."""

    @abstractmethod
    def size(self) -> int:
        """Number of representatives (= number of distinct labellings of the sample)."""

    @abstractmethod
    def mistakes(self, shard: Shard, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Mistakes of each candidate of ``shard`` on labelled rows ``(X, y)``.

        Parameters
        ----------
        shard : Shard
            The candidates ``[shard.start, shard.stop)``.
        X : np.ndarray
            Rows to score on, shape (n, all features); any data, not only the sample.
        y : np.ndarray
            Their 0/1 labels, shape (n,).

        Returns
        -------
        np.ndarray
            int64 array of length ``shard.stop - shard.start``.
        """

    @abstractmethod
    def hypothesis(self, index: int) -> Hypothesis:
        """The representative with global index ``index``."""

    def shards(self, shard_size: int) -> list[Shard]:
        """Consecutive shards of at most ``shard_size`` candidates partitioning ``[0, size())``.

        Parameters
        ----------
        shard_size : int
            Candidates per shard, at least 1.

        Returns
        -------
        list[Shard]
            In index order; deterministic for a given enumeration.
        """
        if int(shard_size) < 1:
            raise ValueError(f"shard_size must be at least 1, got {shard_size}")
        size, step = self.size(), int(shard_size)
        return [Shard(start, min(start + step, size)) for start in range(0, size, step)]

    def _indices(self, shard: Shard) -> np.ndarray:
        """Global indices of a shard, checked against ``size()``."""
        start, stop = int(shard.start), int(shard.stop)
        if not 0 <= start <= stop <= self.size():
            raise IndexError(f"shard [{start}, {stop}) is outside [0, {self.size()})")
        return np.arange(start, stop, dtype=np.int64)

    def _index(self, index: int) -> int:
        """A global index, checked against ``size()``."""
        i = int(index)
        if not 0 <= i < self.size():
            raise IndexError(f"hypothesis index {i} is outside [0, {self.size()})")
        return i


class HypothesisClass(ABC):
    """A hypothesis class H over chosen feature columns."""

    name: ClassVar[str]

    @abstractmethod
    def vc_dimension(self) -> int:
        """VC dimension of H (an upper bound where stated)."""

    @abstractmethod
    def enumerate(self, X_sample: np.ndarray) -> Enumeration:
        """One representative per dichotomy of H on the distinct points of ``X_sample``.

        Parameters
        ----------
        X_sample : np.ndarray
            Sample rows, shape (n, all features); the chosen columns must be finite.

        Returns
        -------
        Enumeration
            Compact and picklable; its indices are deterministic in the sample.
        """
