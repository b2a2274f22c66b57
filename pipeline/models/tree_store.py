"""The k models of a session as node arrays when they are scikit-learn decision trees (``learner="auto"``
and ``--learner sklearn.tree.DecisionTreeClassifier``): ``models.npz`` kind ``trees``.

skops writes a tree as a JSON tree of its attributes: 1,000 depth-4 trees took 5.6 s to write and
5.5 s to read back (a 30,000-row PrivateClassifier fit spent most of its time there). Their node
arrays hold everything a prediction reads, so pcqr keeps those instead, all trees concatenated:

* ``tree_nodes`` (int64, one per fitted tree): how many of the nodes below are that tree's;
* ``feature`` (int64), ``threshold`` (float64), ``left``, ``right`` (int64, a tree's own node
  indices; -1 at a leaf): scikit-learn's ``tree_`` arrays;
* ``value`` (float64, nodes x c): the leaf's class weights as scikit-learn keeps them. Over c > 2
  classes a tree fitted on a subsample that lacks some classes has fewer columns (its ``classes_``);
  they are stored at their classes' places, zeros at the others'.

On load each tree is a :class:`pcqr.pipeline.hypotheses.trees.TreesHypothesis` of one tree with
``precision="float32"`` (scikit-learn compares float32 features with its thresholds) and the vote
rule of ``predict`` (the largest weight; a tie is the smaller class, as its argmax): the same labels
as the fitted tree (tests/test_model_store.py compares them; over c classes, a leaf's largest weight
is positive, so a class the tree never saw, at zero, is never its vote). Every array is checked first: shapes and
dtypes, finite values, children inside their tree and after their parent (so every walk ends at a
leaf), feature indices below the session's.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from pcqr.pipeline.hypotheses.trees import MAX_NODES, Tree, TreesHypothesis, check_structure

_FIELDS = {"feature": np.int64, "threshold": np.float64, "left": np.int64, "right": np.int64}


def plain_trees(models: Sequence[Any], classes: int = 2) -> bool:
    """Whether every model is a fitted scikit-learn DecisionTreeClassifier of labels 0 and 1 (over
    ``classes`` c > 2: of two or more of the labels 0 .. c - 1)."""
    return bool(models) and all(
        type(m).__module__.startswith("sklearn.tree") and type(m).__name__ == "DecisionTreeClassifier"
        and getattr(m, "n_outputs_", None) == 1 and _labels_fit(getattr(m, "classes_", None), classes)
        for m in models)


def _labels_fit(labels: Any, classes: int) -> bool:
    if labels is None:
        return False
    labels = np.asarray(labels)
    if classes == 2:
        return bool(np.array_equal(labels, [0, 1]))
    return (labels.ndim == 1 and labels.size >= 2 and labels.dtype.kind in "iu" and bool(np.all(np.diff(labels) > 0))
            and int(labels[0]) >= 0 and int(labels[-1]) < classes)


def dump_trees(models: Sequence[Any], classes: int = 2) -> dict[str, np.ndarray]:
    """The node arrays of ``models`` (see :func:`plain_trees`), concatenated; each tree's class weights
    at its classes' columns of ``classes``."""
    trees = [m.tree_ for m in models]
    arrays = {name: np.concatenate([np.asarray(getattr(t, attr), dtype=kind) for t in trees])
              for name, attr, kind in (("feature", "feature", np.int64), ("threshold", "threshold", np.float64),
                                       ("left", "children_left", np.int64), ("right", "children_right", np.int64))}
    values = []
    for model in models:
        own = np.asarray(model.tree_.value, dtype=np.float64)[:, 0, :]
        if classes == 2:
            values.append(own)
        else:
            placed = np.zeros((own.shape[0], classes))
            placed[:, np.asarray(model.classes_, dtype=np.int64)] = own
            values.append(placed)
    arrays["value"] = np.concatenate(values)
    arrays["tree_nodes"] = np.array([t.node_count for t in trees], dtype=np.int64)
    return arrays


def load_trees(arrays: dict[str, np.ndarray], count: int, n_features: int,
               refuse: Callable[[str], Exception], classes: int = 2) -> list[TreesHypothesis]:
    """The ``count`` trees of ``arrays`` voting over ``classes`` labels, every field checked
    (``refuse(message)`` is raised on the first fault)."""
    sizes = _checked(arrays, "tree_nodes", np.int64, refuse)
    if sizes.shape != (count,) or (sizes < 1).any():
        raise refuse(f"'tree_nodes' must hold {count} positive node counts")
    total = int(sizes.sum())
    if total > MAX_NODES:
        raise refuse(f"the trees hold {total:,} nodes, more than {MAX_NODES:,}")
    fields = {name: _checked(arrays, name, kind, refuse) for name, kind in _FIELDS.items()}
    value = _checked(arrays, "value", np.float64, refuse)
    if any(a.shape != (total,) for a in fields.values()) or value.shape != (total, classes):
        raise refuse(f"the node arrays must hold the {total:,} nodes 'tree_nodes' counts")
    start = np.repeat(np.cumsum(sizes) - sizes, sizes)
    ids, end = np.arange(total) - start, np.repeat(sizes, sizes)
    left, right, feature, threshold = fields["left"], fields["right"], fields["feature"], fields["threshold"]
    try:
        check_structure(feature, left, right, ids, end)
    except ValueError as exc:
        raise refuse(str(exc)) from None
    inner = left >= 0
    outside = inner & (feature >= n_features)
    if outside.any():
        raise refuse(f"a tree splits on feature index {int(feature[outside][0])}: the session has {n_features} features")
    if np.any(inner & np.isnan(threshold)):
        raise refuse("a tree splits at a NaN threshold")
    if not np.isfinite(value).all() or (classes > 2 and (value < 0).any()):
        raise refuse("a tree's leaf weights are not finite" if classes == 2 else
                     "a tree's leaf weights are not finite and non-negative")
    edges = np.cumsum(sizes)[:-1]
    parts = zip(*(np.split(a, edges) for a in (feature, threshold, left, right, value)))
    labels = () if classes == 2 else tuple(range(classes))
    return [TreesHypothesis((Tree(f, t, lo, hi, np.zeros(f.size, dtype=bool), v),), "vote", precision="float32",
                            labels=labels) for f, t, lo, hi, v in parts]


def _checked(arrays: dict[str, np.ndarray], name: str, kind: type, refuse: Callable[[str], Exception]) -> np.ndarray:
    if name not in arrays:
        raise refuse(f"no {name!r} array")
    if arrays[name].dtype != kind:
        raise refuse(f"{name!r} holds {arrays[name].dtype} values, expected {np.dtype(kind)}")
    return arrays[name]
