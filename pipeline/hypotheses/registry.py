"""Hypothesis classes by name (``--hypothesis``, ``--features``) and hypotheses from their dicts."""
from __future__ import annotations

import operator
from typing import Any, Callable, Sequence

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.hypotheses.base import Hypothesis, HypothesisClass
from pcqr.pipeline.hypotheses.box import BoxHypothesis
from pcqr.pipeline.hypotheses.finite import FiniteClass, FiniteHypothesis
from pcqr.pipeline.hypotheses.halfspace import HalfspaceClass, HalfspaceHypothesis
from pcqr.pipeline.hypotheses.interval import IntervalClass, IntervalHypothesis
from pcqr.pipeline.hypotheses.linear import linear_from_dict
from pcqr.pipeline.hypotheses.point import PointClass, PointHypothesis
from pcqr.pipeline.hypotheses.rectangle import RectangleClass, RectangleHypothesis
from pcqr.pipeline.hypotheses.stump import StumpClass
from pcqr.pipeline.hypotheses.threshold import ThresholdClass, ThresholdHypothesis
from pcqr.pipeline.hypotheses.trees import TreesHypothesis

#: Names accepted by ``--hypothesis``.
CLASSES: tuple[str, ...] = ("threshold", "interval", "point", "stump", "rectangle", "halfspace", "finite")

#: Classes over a fixed number of features, and how to build them from the chosen columns.
_FIXED: dict[str, tuple[int, Callable[[tuple[int, ...]], HypothesisClass]]] = {
    "threshold": (1, lambda f: ThresholdClass(f[0])),
    "interval": (1, lambda f: IntervalClass(f[0])),
    "point": (1, lambda f: PointClass(f[0])),
    "rectangle": (2, lambda f: RectangleClass((f[0], f[1]))),
    "halfspace": (2, lambda f: HalfspaceClass((f[0], f[1]))),
}

_FROM_DICT: dict[str, Callable[[dict[str, Any]], Hypothesis]] = {
    "threshold": ThresholdHypothesis.from_dict,
    "interval": IntervalHypothesis.from_dict,
    "point": PointHypothesis.from_dict,
    "rectangle": RectangleHypothesis.from_dict,
    "halfspace": HalfspaceHypothesis.from_dict,
    "linear": linear_from_dict,  # distilled students (pcqr.pipeline.models.portable)
    "trees": TreesHypothesis.from_dict,
    "box": BoxHypothesis.from_dict,  # the rectangle learner's d-dimensional box (pcqr learn --algorithm rectangle)
}


def _chosen(name: str, n_features: int, feature_indices: Sequence[int] | None) -> tuple[int, ...] | None:
    """The ``--features`` column indices, checked against the data's width."""
    if feature_indices is None:
        return None
    try:
        chosen = tuple(operator.index(i) for i in feature_indices)
    except TypeError:
        raise PcqrError(f"--features {list(feature_indices)!r}: give column indices (integers)") from None
    for i in chosen:
        if not 0 <= i < n_features:
            raise PcqrError(
                f"--features {i} is out of range: the data has {n_features} features "
                f"(indices 0 to {n_features - 1})"
            )
    if len(set(chosen)) != len(chosen):
        raise PcqrError(f"--features {list(chosen)} names a feature twice")
    if not chosen:
        raise PcqrError(f"--features chose no features; --hypothesis {name} needs at least one")
    return chosen


def make_class(
    name: str, n_features: int, feature_indices: Sequence[int] | None = None, models: Sequence[Any] | None = None
) -> HypothesisClass:
    """The hypothesis class ``name`` over the chosen feature columns.

    Parameters
    ----------
    name : str
        One of :data:`CLASSES` (``--hypothesis``).
    n_features : int
        Number of feature columns of the data.
    feature_indices : sequence of int, optional
        Column indices (``--features``). One-feature classes (threshold,
        interval, point) and two-feature classes (rectangle, halfspace) need
        exactly that many, and may omit them only when the data has exactly
        that many columns; stumps default to all columns; a finite class
        passes the chosen columns (all if omitted) to its models.
    models : sequence, optional
        Fitted models (with ``predict``) of the ``finite`` class; no other class takes any.

    Returns
    -------
    HypothesisClass

    Raises
    ------
    PcqrError
        One line naming ``--hypothesis`` or ``--features``.
    """
    if name not in CLASSES:
        raise PcqrError(f"--hypothesis {name!r} is unknown; choose one of {', '.join(CLASSES)}")
    if n_features < 1:
        raise PcqrError(f"--hypothesis {name} needs at least one feature; the data has none")
    if models is not None and name != "finite":
        raise PcqrError(f"--hypothesis {name} takes no models (only --hypothesis finite does)")
    chosen = _chosen(name, n_features, feature_indices)
    if name == "stump":
        return StumpClass(chosen if chosen is not None else tuple(range(n_features)))
    if name == "finite":
        if not models:
            raise PcqrError("--hypothesis finite needs a non-empty list of fitted models to choose from")
        return FiniteClass(tuple(models), chosen)
    k, build = _FIXED[name]
    noun = "feature" if k == 1 else "features"
    if chosen is None:
        if n_features != k:
            pronoun = "it" if k == 1 else "them"
            raise PcqrError(
                f"--hypothesis {name} needs exactly {k} {noun} (choose {pronoun} with --features); "
                f"the data has {n_features}"
            )
        chosen = tuple(range(k))
    if len(chosen) != k:
        raise PcqrError(f"--hypothesis {name} needs exactly {k} {noun}; --features chose {len(chosen)}")
    return build(chosen)


def hypothesis_from_dict(d: dict[str, Any], models: Sequence[Any] | None = None) -> Hypothesis:
    """Rebuild a hypothesis from its ``to_dict()``.

    Parameters
    ----------
    d : dict
        ``{"class": name, ...params}`` as written by a hypothesis's ``to_dict``.
    models : sequence, optional
        The model list of the finite class (needed only for ``"class": "finite"``).

    Returns
    -------
    Hypothesis
    """
    if not isinstance(d, dict):
        raise ValueError(f"a hypothesis is a mapping of fields, got {type(d).__name__}")
    kind = d.get("class")
    if kind == "finite":
        if models is None:
            raise ValueError("a finite-class hypothesis needs its class's model list to be rebuilt")
        return FiniteHypothesis.from_dict(d, models)
    if kind not in _FROM_DICT:
        raise ValueError(f"unknown hypothesis class {kind!r} in {d!r}")
    return _FROM_DICT[kind](d)
