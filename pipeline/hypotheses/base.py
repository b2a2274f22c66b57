"""The interface every hypothesis class implements: Shard, Hypothesis, Enumeration, HypothesisClass.

A :class:`HypothesisClass` enumerates its *dichotomies* on a sample: one
representative hypothesis per distinct labelling the class induces on the
sample's distinct points. The result is an :class:`Enumeration`, a compact,
picklable description (sorted distinct values, offsets) -- not the list of
candidates -- whose global indices ``0 .. size() - 1`` are deterministic, so
Dask tasks can score index ranges (:class:`Shard`) independently and a later
task can rebuild ``hypothesis(index)`` for the chosen index.

Conventions (helpers in :mod:`pcqr.pipeline.hypotheses.common`): every one-feature
cut sits between two consecutive distinct sample values ``v[c-1] < v[c]`` at
their midpoint (nudged down to ``v[c-1]`` if rounding would reach ``v[c]``),
so ``v[c-1] <= t < v[c]``; the outer cuts are ``-inf`` and ``+inf``. "x is
above cut t" means ``x > t``, so a cut never splits tied values. Scoring maps
NaN to ``-inf`` (below every cut), exactly what ``predict``'s comparisons do
with NaN.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple, Protocol, runtime_checkable

import numpy as np

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.privacy.limits import MAX_DICHOTOMIES, MAX_ENUMERATION_STEPS, MEMORY_BOUND, largest_fitting


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


class EnumerationCost(NamedTuple):
    """Upper bounds on enumerating a class's dichotomies on a sample of a given number of rows."""

    dichotomies: int  # candidates the exponential mechanism scores
    steps: int  # elementary steps of the enumeration
    memory: int  # bytes the enumeration holds


def log_factor(points: int) -> int:
    """log2 of a sort's size, at least 1 (the cost of sorting ``points`` values, per value)."""
    return max(1, int(points).bit_length())


class HypothesisClass(ABC):
    """A hypothesis class H over chosen feature columns."""

    name: ClassVar[str]

    @abstractmethod
    def vc_dimension(self) -> int:
        """VC dimension of H (an upper bound where stated)."""

    @abstractmethod
    def enumeration_cost(self, points: int) -> EnumerationCost:
        """Upper bounds on enumerating H's dichotomies on a sample of ``points`` rows, whatever their
        values (so a public function of the row count: it may be checked before any charge)."""

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


def enumeration_problem(cost: EnumerationCost) -> str | None:
    """Which bound of pcqr.pipeline.privacy.limits an enumeration of this cost exceeds (one clause), or None."""
    if cost.dichotomies > MAX_DICHOTOMIES:
        return (f"up to {cost.dichotomies:.3g} dichotomies, above the limit of 2^{int(math.log2(MAX_DICHOTOMIES))} "
                "the exponential mechanism scores (pcqr.pipeline.privacy.limits.MAX_DICHOTOMIES)")
    if cost.steps > MAX_ENUMERATION_STEPS:
        return (f"up to {cost.steps:.3g} steps to enumerate its dichotomies, above the limit of "
                f"2^{int(math.log2(MAX_ENUMERATION_STEPS))} (pcqr.pipeline.privacy.limits.MAX_ENUMERATION_STEPS)")
    if cost.memory > MEMORY_BOUND:
        return (f"up to {cost.memory / 2**30:.3g} GiB to hold its dichotomies, above the limit of 1 GiB "
                "(pcqr.pipeline.privacy.limits.MEMORY_BOUND)")
    return None


def check_enumerable(hypothesis_class: HypothesisClass, points: int, sample: str) -> None:
    """Refuse (one line, with the most rows that fit) a class whose dichotomies on a sample of
    ``points`` rows could not be enumerated and scored within pcqr.pipeline.privacy.limits. The costs are upper
    bounds from the row count alone (public), so this runs before any charge or read.

    Parameters
    ----------
    hypothesis_class : HypothesisClass
    points : int
        Rows of the sample the class will be enumerated on (its distinct points are at most these).
    sample : str
        What the sample is, for the message (e.g. "A_Relabel's sample S' of n' = eps n / 56 rows").
    """
    problem = enumeration_problem(hypothesis_class.enumeration_cost(points))
    if problem is None:
        return
    largest = largest_fitting(lambda p: enumeration_problem(hypothesis_class.enumeration_cost(p)) is None, 1, points)
    fits = f"at most {largest:,} rows fit" if largest is not None else "no sample fits"
    raise PcqrError(f"--hypothesis {hypothesis_class.name} on {sample} ({points:,} rows): {problem}; {fits}")
