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

Any other learner can still answer after the halt (``pcqr answer --after-halt student`` keeps the
fitted student in memory); :func:`portable` refuses it in one line naming the forms above.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.hypotheses.base import Hypothesis
from pcqr.pipeline.hypotheses.linear import LinearHypothesis
from pcqr.pipeline.hypotheses.threshold import ThresholdHypothesis
from pcqr.pipeline.hypotheses.trees import Tree, TreesHypothesis
from pcqr.pipeline.models.learners import ConstantModel, _StumpModel

PORTABLE = ("linear classifiers (coef_)", "DecisionTreeClassifier", "RandomForestClassifier", "ExtraTreesClassifier",
            "GradientBoostingClassifier", "HistGradientBoostingClassifier", "stump", "threshold")


def portable(model: Any, learner: str) -> Hypothesis:
    """The plain public form of a fitted binary classifier (``learner``: its name, for the error)."""
    if isinstance(model, ConstantModel):
        return LinearHypothesis((), (), 1.0 if model.label == 1 else -1.0)
    if isinstance(model, _StumpModel):
        return ThresholdHypothesis(int(model.feature_), float(model.threshold_), bool(model.polarity_))
    classes = getattr(model, "classes_", None)
    if classes is None or [int(c) for c in np.asarray(classes).tolist()] != [0, 1]:
        raise PcqrError(f"--learner {learner}: the fitted student's classes are {classes!r}, expected [0, 1]")
    name = type(model).__name__
    if name == "HistGradientBoostingClassifier":
        return _hist_boosting(model, learner)
    if name == "GradientBoostingClassifier":
        return _boosting(model, learner)
    if hasattr(model, "tree_"):
        return TreesHypothesis((_sklearn_tree(model.tree_, vote=True),), "vote", precision="float32")
    if name in ("RandomForestClassifier", "ExtraTreesClassifier"):
        return TreesHypothesis(tuple(_sklearn_tree(e.tree_, vote=True) for e in model.estimators_), "vote",
                               precision="float32")
    coef, intercept = getattr(model, "coef_", None), getattr(model, "intercept_", None)
    if coef is not None and intercept is not None:
        w, b = np.atleast_2d(np.asarray(coef, dtype=np.float64)), np.ravel(np.asarray(intercept, dtype=np.float64))
        if w.ndim == 2 and w.shape[0] == 1 and b.size == 1 and np.all(np.isfinite(w)) and np.isfinite(b[0]):
            return LinearHypothesis(tuple(range(w.shape[1])), tuple(w[0].tolist()), float(b[0]))
    raise PcqrError(f"--learner {learner}: a fitted {name} has no plain public form for a model file (pcqr writes "
                    f"{', '.join(PORTABLE)}); `pcqr answer --after-halt student` can still use it")


def _sklearn_tree(tree: Any, vote: bool) -> Tree:
    """A scikit-learn ``tree_`` as node arrays: class fractions (vote) or the regression value."""
    value = np.asarray(tree.value, dtype=np.float64)[:, 0, :]
    if vote:
        if value.shape[1] != 2:
            raise PcqrError(f"a tree of the student has {value.shape[1]} classes, expected 2")
        total = value.sum(axis=1, keepdims=True)
        value = np.divide(value, total, out=np.zeros_like(value), where=total > 0)
    missing = getattr(tree, "missing_go_to_left", None)
    nodes = tree.node_count
    return Tree(np.asarray(tree.feature, dtype=np.int64), np.asarray(tree.threshold, dtype=np.float64),
                np.asarray(tree.children_left, dtype=np.int64), np.asarray(tree.children_right, dtype=np.int64),
                np.zeros(nodes, dtype=bool) if missing is None else np.asarray(missing, dtype=bool),
                value[:, :2] if vote else value[:, :1])


def _boosting(model: Any, learner: str) -> TreesHypothesis:
    """Binary gradient boosting: raw = init + learning_rate * sum of the stages' tree values."""
    stages = np.asarray(model.estimators_)
    if stages.ndim != 2 or stages.shape[1] != 1:
        raise PcqrError(f"--learner {learner}: expected one tree per boosting stage (binary labels)")
    init = getattr(model, "init_", None)
    if not (init == "zero" or type(init).__name__ == "DummyClassifier"):
        raise PcqrError(f"--learner {learner}: a custom init estimator has no plain public form")
    n_features = int(model.n_features_in_)
    base = float(np.ravel(model._raw_predict_init(np.zeros((1, n_features))))[0])
    trees = tuple(_sklearn_tree(stage[0].tree_, vote=False) for stage in stages)
    return TreesHypothesis(trees, "sum", base=base, scale=float(model.learning_rate), precision="float32")


def _hist_boosting(model: Any, learner: str) -> TreesHypothesis:
    """Histogram gradient boosting: raw = baseline + sum of the iterations' leaf values (numeric splits)."""
    if int(model.n_trees_per_iteration_) != 1:
        raise PcqrError(f"--learner {learner}: expected one tree per iteration (binary labels)")
    trees = []
    for (predictor,) in model._predictors:
        nodes = predictor.nodes
        if np.any(nodes["is_categorical"]):
            raise PcqrError(f"--learner {learner}: categorical splits have no plain public form")
        leaf = nodes["is_leaf"].astype(bool)
        left = np.where(leaf, -1, nodes["left"].astype(np.int64))
        right = np.where(leaf, -1, nodes["right"].astype(np.int64))
        trees.append(Tree(nodes["feature_idx"].astype(np.int64), nodes["num_threshold"].astype(np.float64), left,
                          right, nodes["missing_go_to_left"].astype(bool),
                          nodes["value"].astype(np.float64).reshape(-1, 1)))
    base = float(np.ravel(model._baseline_prediction)[0])
    return TreesHypothesis(tuple(trees), "sum", base=base, scale=1.0, precision="float64")
