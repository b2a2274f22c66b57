"""Hypothesis classes whose dichotomies a cluster enumerates in shards (ALGORITHMS.md section 9).

For a class H and a sample, :meth:`HypothesisClass.enumerate` returns an
:class:`Enumeration`: one representative per distinct labelling H induces on
the sample's distinct points, indexed deterministically, described compactly
(sorted distinct values, offsets) so that Dask tasks score index ranges
(:class:`Shard`) on any labelled data without the driver materialising the
candidates. Dichotomy counts on u distinct values (m distinct points):

=============  =========================================  ============================
class          labellings                                 scoring a shard (s, n rows)
=============  =========================================  ============================
threshold      2u (both directions), u + 1 (one)          O((n + s) log n)
interval       u(u+1)/2 + 1                               O((n + s) log n)
point          u + 1                                      O((n + s) log n)
stump          <= 2 + sum_j 2(u_j - 1) <= 2p(u+1), exact  O(f n log n + s log n)
rectangle      O(u^4) (tight boxes + empty)               O(n log u + u^2 + s)
halfspace      <= m^2 - m + 2                             O(n s)
finite         <= number of models                        s predictions
=============  =========================================  ============================

Before any charge, :func:`check_enumerable` refuses a class whose dichotomies on a sample of a given
number of rows (an upper bound from the count alone: public) exceed pcqr.pipeline.privacy.limits
(:meth:`HypothesisClass.enumeration_cost`).

Cut points are midpoints between consecutive distinct sample values and
"above cut t" means ``x > t`` (see :mod:`pcqr.pipeline.hypotheses.base`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pcqr.pipeline.hypotheses.base import (
    Enumeration, EnumerationCost, Hypothesis, HypothesisClass, Shard, check_enumerable,
)
from pcqr.pipeline.hypotheses.finite import FiniteClass, FiniteHypothesis
from pcqr.pipeline.hypotheses.halfspace import HalfspaceClass, HalfspaceHypothesis
from pcqr.pipeline.hypotheses.interval import IntervalClass, IntervalHypothesis
from pcqr.pipeline.hypotheses.point import PointClass, PointHypothesis
from pcqr.pipeline.hypotheses.rectangle import RectangleClass, RectangleHypothesis
from pcqr.pipeline.hypotheses.registry import CLASSES, hypothesis_from_dict, make_class
from pcqr.pipeline.hypotheses.stump import StumpClass
from pcqr.pipeline.hypotheses.threshold import ThresholdClass, ThresholdHypothesis

__all__ = [
    "CLASSES",
    "ERMClassifier",
    "Enumeration",
    "EnumerationCost",
    "FiniteClass",
    "FiniteHypothesis",
    "HalfspaceClass",
    "HalfspaceHypothesis",
    "Hypothesis",
    "HypothesisClass",
    "IntervalClass",
    "IntervalHypothesis",
    "PointClass",
    "PointHypothesis",
    "RectangleClass",
    "RectangleHypothesis",
    "Shard",
    "StumpClass",
    "ThresholdClass",
    "ThresholdHypothesis",
    "check_enumerable",
    "hypothesis_from_dict",
    "make_class",
]


if TYPE_CHECKING:
    from pcqr.pipeline.hypotheses.erm import ERMClassifier


def __getattr__(name: str) -> Any:
    """``ERMClassifier`` on first use: it is a scikit-learn estimator, and importing scikit-learn
    costs about a second that commands which only read or apply a hypothesis need not pay."""
    if name == "ERMClassifier":
        from pcqr.pipeline.hypotheses.erm import ERMClassifier

        return ERMClassifier
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
