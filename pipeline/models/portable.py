"""A fitted student as a public model file: its parameters as plain numbers, never pickled code.

``pcqr distill`` fits a learner on the answers of a public log and writes the result as a
``pcqr.released-classifier/1`` file (pcqr.pipeline.models.released) that ``pcqr predict`` serves
and anyone can read. A file must not run code when loaded (whoever edits it gains nothing), so a
student is written in one of a few plain forms whose predictions equal the fitted model's
(tests/test_distill.py checks each against scikit-learn's own predict):

=================================================  ==========================================
fitted model                                       form
=================================================  ==========================================
a one-class student (ConstantModel)                ``linear`` with no weights, bias +-1
``stump``, ``threshold`` (pcqr's built-ins)         ``threshold``
scikit-learn linear classifiers (``coef_``)         ``linear``: 1 iff w . x + b > 0
DecisionTree, RandomForest, ExtraTrees              ``trees``, combine ``vote``
GradientBoosting, HistGradientBoosting (binary)     ``trees``, combine ``sum`` (raw score > 0)
=================================================  ==========================================

A student of a session over c > 2 classes is written in the same forms with its ``labels``, the class
indices it saw (its ``classes_``; pcqr.pipeline.hypotheses.linear and .trees): a linear classifier
keeps scikit-learn's one score per label (one score for two labels), a forest its per-label leaf
fractions, gradient boosting one tree per label a stage, and a one-class student is a linear form
with no features and one label.

Any other learner can still answer after the halt (``pcqr answer --after-halt student`` keeps the
fitted student in memory); :func:`portable` refuses it in one line naming the forms above.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.hypotheses.base import Hypothesis
from pcqr.pipeline.hypotheses.linear import LinearHypothesis, MulticlassLinearHypothesis
from pcqr.pipeline.hypotheses.threshold import ThresholdHypothesis
from pcqr.pipeline.hypotheses.trees import Tree, TreesHypothesis, score_count
from pcqr.pipeline.models.learners import ConstantModel, _StumpModel

PORTABLE = ("linear classifiers (coef_)", "DecisionTreeClassifier", "RandomForestClassifier", "ExtraTreesClassifier",
            "GradientBoostingClassifier", "HistGradientBoostingClassifier", "stump", "threshold")


def portable(model: Any, learner: str, classes: int = 2) -> Hypothesis:
    """The plain public form of a fitted student of a session over ``classes`` classes (``learner``:
    its name, for the error)."""
    if isinstance(model, ConstantModel):
        if classes == 2:
            return LinearHypothesis((), (), 1.0 if model.label == 1 else -1.0)
        return MulticlassLinearHypothesis((), ((),), (0.0,), (int(model.label),))
    if isinstance(model, _StumpModel):  # two labels (a c-class session refuses one-feature learners)
        return ThresholdHypothesis(int(model.feature_), float(model.threshold_), bool(model.polarity_))
    labels = _labels(model, learner, classes)
    name = type(model).__name__
    if name == "HistGradientBoostingClassifier":
        return _hist_boosting(model, learner, labels)
    if name == "GradientBoostingClassifier":
        return _boosting(model, learner, labels)
    if hasattr(model, "tree_") or name in ("RandomForestClassifier", "ExtraTreesClassifier"):
        return _forest(model, labels)
    coef, intercept = _linear(model)
    if coef is not None and coef.shape[0] == score_count("sum", labels):  # decision columns, as a boosted sum's
        if not labels:
            return LinearHypothesis(tuple(range(coef.shape[1])), tuple(coef[0].tolist()), float(intercept[0]))
        return MulticlassLinearHypothesis(tuple(range(coef.shape[1])), tuple(tuple(row.tolist()) for row in coef),
                                          tuple(intercept.tolist()), labels)
    raise PcqrError(f"--learner {learner}: a fitted {name} has no plain public form for a model file (pcqr writes "
                    f"{', '.join(PORTABLE)}); `pcqr answer --after-halt student` can still use it")


def _labels(model: Any, learner: str, classes: int) -> tuple[int, ...]:
    """The class indices a fitted student saw, as its form lists them: () for a two-class session's
    (which must have seen both), else its ``classes_``, each below ``classes``."""
    found = getattr(model, "classes_", None)
    seen = [int(c) for c in np.asarray(found).tolist()] if found is not None else []
    if classes == 2:
        if seen != [0, 1]:
            raise PcqrError(f"--learner {learner}: the fitted student's classes are {found!r}, expected [0, 1]")
        return ()
    if not seen or seen != sorted(set(seen)) or seen[0] < 0 or seen[-1] >= classes:
        raise PcqrError(f"--learner {learner}: the fitted student's classes are {seen}, expected class "
                        f"indices 0 .. {classes - 1}")
    return tuple(seen)


def _linear(model: Any) -> tuple[np.ndarray | None, np.ndarray]:
    """A linear classifier's finite ``coef_`` (scores, features) and ``intercept_``, or (None, ...)."""
    coef, intercept = getattr(model, "coef_", None), getattr(model, "intercept_", None)
    if coef is None or intercept is None:
        return None, np.zeros(0)
    w, b = np.atleast_2d(np.asarray(coef, dtype=np.float64)), np.ravel(np.asarray(intercept, dtype=np.float64))
    if w.ndim != 2 or b.size != w.shape[0] or not (np.all(np.isfinite(w)) and np.all(np.isfinite(b))):
        return None, b
    return w, b


def _forest(model: Any, labels: tuple[int, ...]) -> TreesHypothesis:
    """A tree, or a forest's trees, voting with their leaves' class fractions."""
    width = len(labels) or 2
    estimators = [model] if hasattr(model, "tree_") else list(model.estimators_)
    return TreesHypothesis(tuple(_sklearn_tree(e.tree_, width) for e in estimators), "vote", precision="float32",
                           labels=labels)


def _sklearn_tree(tree: Any, vote: int | None) -> Tree:
    """A scikit-learn ``tree_`` as node arrays: the fractions of its ``vote`` classes, or (None) the
    regression value."""
    value = np.asarray(tree.value, dtype=np.float64)[:, 0, :]
    if vote is not None:
        if value.shape[1] != vote:
            raise PcqrError(f"a tree of the student has {value.shape[1]} classes, expected {vote}")
        total = value.sum(axis=1, keepdims=True)
        value = np.divide(value, total, out=np.zeros_like(value), where=total > 0)
    missing = getattr(tree, "missing_go_to_left", None)
    nodes = tree.node_count
    return Tree(np.asarray(tree.feature, dtype=np.int64), np.asarray(tree.threshold, dtype=np.float64),
                np.asarray(tree.children_left, dtype=np.int64), np.asarray(tree.children_right, dtype=np.int64),
                np.zeros(nodes, dtype=bool) if missing is None else np.asarray(missing, dtype=bool),
                value if vote is not None else value[:, :1])


def _base(raw: np.ndarray, labels: tuple[int, ...]) -> float | tuple[float, ...]:
    values = np.ravel(raw).astype(np.float64)
    return float(values[0]) if score_count("sum", labels) == 1 else tuple(values.tolist())


def _boosting(model: Any, learner: str, labels: tuple[int, ...]) -> TreesHypothesis:
    """Gradient boosting: raw = init + learning_rate * sum of the stages' tree values (one tree a
    stage for two labels, one per label beyond)."""
    stages = np.asarray(model.estimators_)
    per_stage = score_count("sum", labels)
    if stages.ndim != 2 or stages.shape[1] != per_stage:
        raise PcqrError(f"--learner {learner}: expected {per_stage} trees per boosting stage")
    init = getattr(model, "init_", None)
    if not (init == "zero" or type(init).__name__ == "DummyClassifier"):
        raise PcqrError(f"--learner {learner}: a custom init estimator has no plain public form")
    n_features = int(model.n_features_in_)
    base = _base(model._raw_predict_init(np.zeros((1, n_features))), labels)
    trees = tuple(_sklearn_tree(tree.tree_, None) for stage in stages for tree in stage)
    return TreesHypothesis(trees, "sum", base=base, scale=float(model.learning_rate), precision="float32",
                           labels=labels)


def _hist_boosting(model: Any, learner: str, labels: tuple[int, ...]) -> TreesHypothesis:
    """Histogram gradient boosting: raw = baseline + sum of the iterations' leaf values (numeric
    splits; one tree an iteration for two labels, one per label beyond)."""
    per_iteration = score_count("sum", labels)
    if int(model.n_trees_per_iteration_) != per_iteration:
        raise PcqrError(f"--learner {learner}: expected {per_iteration} trees per iteration")
    trees = []
    for iteration in model._predictors:
        for predictor in iteration:
            nodes = predictor.nodes
            if np.any(nodes["is_categorical"]):
                raise PcqrError(f"--learner {learner}: categorical splits have no plain public form")
            leaf = nodes["is_leaf"].astype(bool)
            left = np.where(leaf, -1, nodes["left"].astype(np.int64))
            right = np.where(leaf, -1, nodes["right"].astype(np.int64))
            trees.append(Tree(nodes["feature_idx"].astype(np.int64), nodes["num_threshold"].astype(np.float64), left,
                              right, nodes["missing_go_to_left"].astype(bool),
                              nodes["value"].astype(np.float64).reshape(-1, 1)))
    return TreesHypothesis(tuple(trees), "sum", base=_base(model._baseline_prediction, labels), scale=1.0,
                           precision="float64", labels=labels)
