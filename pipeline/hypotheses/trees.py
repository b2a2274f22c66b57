"""Decision trees and tree ensembles as plain arrays: the public form of a tree student.

A fitted scikit-learn tree, forest or gradient-boosted ensemble becomes, in a released model file,
its nodes' arrays (pcqr.pipeline.models.portable): for each tree ``feature``, ``threshold``,
``left``, ``right`` (children; -1 at a leaf), ``missing_left`` (where a NaN goes) and ``value``
(per node, one number or two). A row goes left where ``x[feature] <= threshold``. The ensemble's
label is

* ``combine = "vote"`` (trees, forests): the class whose summed leaf values ``[v0, v1]`` is larger
  (ties: 0, as scikit-learn's argmax);
* ``combine = "sum"`` (gradient boosting): 1 iff ``base + sum_t scale * v_t > 0`` (the raw score's
  sign, which is where the predicted probability exceeds 1/2).

A student of a session over c > 2 classes also lists ``labels``, the class indices it saw (its
``classes_``), and predicts ``labels[i]`` for the position i the rule gives, as scikit-learn does:

* ``vote``: each node's value holds one number per label; i is the first largest sum;
* ``sum``: with two labels, one tree per stage and one ``base`` as above (i = 1 iff the raw score is
  positive); with L > 2 labels, L trees per stage in label order (tree t adds to label t mod L),
  ``base`` a list of L numbers, and i the first largest raw score.

``precision = "float32"``: the features are rounded to float32 before the comparisons, as
scikit-learn's tree code does (its thresholds are float64 midpoints of float32 values).

Reading a file checks every field: children lie after their parent and inside the tree (so every
walk ends at a leaf), feature indices are integers, thresholds are numbers, values finite, and at
most MAX_NODES nodes in all. Only a hypothesis (a fitted predictor), not a class pcqr enumerates.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from pcqr.pipeline.hypotheses.fields import labels as read_labels, number

#: Most nodes a model file may hold, over all its trees.
MAX_NODES = 5_000_000
COMBINES = ("vote", "sum")
PRECISIONS = ("float32", "float64")


@dataclass(frozen=True)
class Tree:
    """One tree's node arrays (node 0 is the root)."""

    feature: np.ndarray  # int64
    threshold: np.ndarray  # float64
    left: np.ndarray  # int64, -1 at leaves
    right: np.ndarray
    missing_left: np.ndarray  # bool
    value: np.ndarray  # float64, (nodes, width)

    def leaves(self, X: np.ndarray) -> np.ndarray:
        """The leaf each row of X reaches."""
        node = np.zeros(X.shape[0], dtype=np.int64)
        rows = np.flatnonzero(self.left[node] >= 0)
        while rows.size:
            at = node[rows]
            x = X[rows, self.feature[at]]
            go_left = np.where(np.isnan(x), self.missing_left[at], x <= self.threshold[at])
            node[rows] = np.where(go_left, self.left[at], self.right[at])
            rows = rows[self.left[node[rows]] >= 0]
        return node

    def to_dict(self) -> dict[str, Any]:
        return {"feature": self.feature.tolist(), "threshold": [_json(t) for t in self.threshold.tolist()],
                "left": self.left.tolist(), "right": self.right.tolist(),
                "missing_left": self.missing_left.tolist(), "value": self.value.tolist()}

    @classmethod
    def from_dict(cls, d: Any, width: int) -> Tree:
        """One tree's record, checked (see the module docstring)."""
        if not isinstance(d, dict):
            raise ValueError("a tree must be a mapping of node arrays")
        arrays = {key: d.get(key) for key in ("feature", "threshold", "left", "right", "missing_left", "value")}
        for key, values in arrays.items():
            if not isinstance(values, list):
                raise ValueError(f"a tree's {key} must be a list")
        nodes = len(arrays["left"])  # type: ignore[arg-type]
        if nodes == 0 or any(len(v) != nodes for v in arrays.values()):  # type: ignore[arg-type]
            raise ValueError("a tree's node arrays must be non-empty and of one length")
        feature = _integers(arrays["feature"], "feature")
        left, right = _integers(arrays["left"], "left"), _integers(arrays["right"], "right")
        threshold = np.array([number({"threshold": t}, "threshold", False) for t in arrays["threshold"]])  # type: ignore[union-attr]
        missing = arrays["missing_left"]
        if not all(isinstance(m, bool) for m in missing):  # type: ignore[union-attr]
            raise ValueError("a tree's missing_left must hold true/false")
        value = np.array([[number({"value": v}, "value") for v in _row(row, width)] for row in arrays["value"]],  # type: ignore[union-attr]
                         dtype=np.float64).reshape(nodes, width)
        check_structure(feature, left, right, np.arange(nodes), np.full(nodes, nodes))
        return cls(feature, threshold, left, right, np.array(missing, dtype=bool), value)


def check_structure(feature: np.ndarray, left: np.ndarray, right: np.ndarray, ids: np.ndarray,
                    end: np.ndarray) -> None:
    """ValueError unless every node has two children or none (-1, -1), every child comes after its
    parent and before ``end`` (its tree's node count; ``ids`` are the nodes' indices in their tree),
    so every walk ends at a leaf, and split features are non-negative. Arrays of one or many trees."""
    leaf = left < 0
    if np.any(leaf != (right < 0)) or np.any(leaf & ((left != -1) | (right != -1))):
        raise ValueError("a tree node must have two children or none (-1, -1)")
    inner = ~leaf
    if np.any(inner & ((left <= ids) | (right <= ids) | (left >= end) | (right >= end))):
        raise ValueError("a tree's children must come after their parent and inside the tree")
    if np.any(inner & (feature < 0)):
        raise ValueError("a tree's feature indices must be non-negative")


def _integers(values: Any, key: str) -> np.ndarray:
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise ValueError(f"a tree's {key} must hold integers")
    return np.array(values, dtype=np.int64)


def _row(row: Any, width: int) -> list[Any]:
    if not isinstance(row, list) or len(row) != width:
        raise ValueError(f"each node's value must be a list of {width} numbers")
    return row


def _json(value: float) -> float | str:
    return value if np.isfinite(value) else ("inf" if value > 0 else "-inf")


def score_count(combine: str, labels: tuple[int, ...]) -> int:
    """The raw scores an ensemble of ``labels`` (() for two: 0 and 1) adds up: one per label in a vote;
    in a sum one for two labels (its sign) and one per label beyond (one tree per label a stage)."""
    count = len(labels) or 2
    return count if combine == "vote" or count > 2 else 1


@dataclass(frozen=True)
class TreesHypothesis:
    """An ensemble of :class:`Tree` with the combination rule of the module docstring."""

    trees: tuple[Tree, ...]
    combine: str = "vote"
    base: float | tuple[float, ...] = 0.0  # a tuple: one per label (combine "sum", more than two labels)
    scale: float = 1.0
    precision: str = "float64"
    labels: tuple[int, ...] = ()  # () for a two-class session's student: labels 0 and 1

    @property
    def features(self) -> list[int]:
        """The feature indices the trees split on (sorted)."""
        used: set[int] = set()
        for tree in self.trees:
            used.update(tree.feature[tree.left >= 0].tolist())
        return sorted(used)

    @property
    def scores(self) -> int:
        """The raw scores the trees add up (:func:`score_count`)."""
        return score_count(self.combine, self.labels)

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Labels (int8) of the rows of ``X`` (rows, all features)."""
        X = np.asarray(X, dtype=np.float64)
        if self.precision == "float32":
            X = X.astype(np.float32).astype(np.float64)
        total = np.zeros((X.shape[0], self.scores))
        if self.combine == "sum" and self.scores > 1:
            total += np.asarray(self.base, dtype=np.float64)  # added first, as scikit-learn's raw scores
        for t, tree in enumerate(self.trees):
            if self.combine == "vote":
                total += tree.value[tree.leaves(X)]
            else:
                total[:, t % self.scores] += self.scale * tree.value[tree.leaves(X)][:, 0]
        if self.combine == "vote":
            at = np.argmax(total, axis=1)  # the first largest: scikit-learn's tie rule
        elif self.scores == 1:
            at = (self.base + total[:, 0] > 0).astype(np.int64)
        else:
            at = np.argmax(total, axis=1)
        return (np.asarray(self.labels, dtype=np.int8)[at] if self.labels else at.astype(np.int8))

    def to_dict(self) -> dict[str, Any]:
        """``{"class": "trees", "combine", "base", "scale", "precision", "features", "trees": [...]}``
        (and ``labels`` over c > 2 classes)."""
        base = [float(b) for b in self.base] if isinstance(self.base, tuple) else float(self.base)
        return {"class": "trees", **({"labels": list(self.labels)} if self.labels else {}), "combine": self.combine,
                "base": base, "scale": float(self.scale), "precision": self.precision, "features": self.features,
                "trees": [t.to_dict() for t in self.trees]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TreesHypothesis:
        """Inverse of :meth:`to_dict`; every field checked."""
        combine, precision, trees = d.get("combine"), d.get("precision"), d.get("trees")
        if combine not in COMBINES:
            raise ValueError(f"combine must be one of {COMBINES}, got {combine!r}")
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
        if not isinstance(trees, list) or not trees:
            raise ValueError("trees must be a non-empty list")
        nodes = sum(len(t.get("left") or []) if isinstance(t, dict) else 0 for t in trees)
        if nodes > MAX_NODES:
            raise ValueError(f"the trees hold {nodes:,} nodes, more than {MAX_NODES:,}")
        found = read_labels(d) if "labels" in d else ()
        if combine == "sum" and len(found) == 1:
            raise ValueError("a sum of trees needs at least two labels")
        scores = score_count(combine, found)
        if scores > 1 and combine == "sum":
            raw = d.get("base")
            if not isinstance(raw, list) or len(raw) != scores:
                raise ValueError(f"base must be a list of {scores} numbers, one per label")
            if len(trees) % scores:
                raise ValueError(f"a sum over {scores} labels needs {scores} trees a stage")
            base: float | tuple[float, ...] = tuple(number({"base": b}, "base") for b in raw)
        else:
            base = number(d, "base")
        width = scores if combine == "vote" else 1
        built = cls(tuple(Tree.from_dict(t, width) for t in trees), combine, base, number(d, "scale"), precision,
                    found)
        declared = d.get("features")
        if declared != built.features:  # the list load_model checks against the model's feature names
            raise ValueError(f"features must list the feature indices the trees split on, {built.features}")
        return built
