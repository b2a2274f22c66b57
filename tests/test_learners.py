"""Built-in ERM learners against brute force; vote counting against each model's predict."""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.tree import DecisionTreeClassifier

from pipeline.errors import PcqrError
from pipeline.learners import (
    ConstantModel,
    LearnerSpec,
    StumpLearner,
    ThresholdLearner,
    best_threshold,
    fit_subsample,
    parse_learner_params,
)
from pipeline.votes import Ensemble


def _brute_force_mistakes(x: np.ndarray, y: np.ndarray) -> int:
    cuts = np.concatenate(([-np.inf], np.unique(x)))
    best = len(y)
    for t in cuts:
        up = int(np.sum((x > t).astype(int) != y))
        best = min(best, up, len(y) - up)
    return best


@pytest.mark.parametrize("seed", range(20))
def test_best_threshold_is_exact_erm(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    x = rng.integers(0, 8, size=n).astype(float)  # many ties
    y = rng.integers(0, 2, size=n)
    threshold, polarity, mistakes = best_threshold(x, y)
    assert mistakes == _brute_force_mistakes(x, y)
    predicted = (x > threshold) == bool(polarity)
    assert int(np.sum(predicted.astype(int) != y)) == mistakes


def test_threshold_learner_finds_both_directions() -> None:
    x = np.linspace(-1, 1, 101)[:, None]
    up = ThresholdLearner().fit(x, (x[:, 0] > 0.2).astype(int))
    down = ThresholdLearner().fit(x, (x[:, 0] <= -0.3).astype(int))
    assert up.polarity_ == 1 and 0.18 < up.threshold_ < 0.22
    assert down.polarity_ == 0 and -0.32 < down.threshold_ < -0.28
    assert (up.predict(x) == (x[:, 0] > 0.2)).all()


def test_stump_learner_picks_the_informative_feature() -> None:
    rng = np.random.default_rng(3)
    X = rng.normal(size=(500, 6))
    y = (X[:, 4] > -0.5).astype(int)
    stump = StumpLearner().fit(X, y)
    assert stump.feature_ == 4 and (stump.predict(X) == y).all()


def test_one_class_subsample_gives_a_constant_model() -> None:
    X = np.ones((5, 2))
    assert fit_subsample(LearnerSpec("sklearn.linear_model.LogisticRegression"), X, np.ones(5)) == ConstantModel(1)
    assert fit_subsample(LearnerSpec("stump"), X[:0], np.ones(0)) == ConstantModel(0)


def test_learner_spec_errors_are_one_line() -> None:
    with pytest.raises(PcqrError, match="--learner"):
        LearnerSpec("nonsense").build()
    with pytest.raises(PcqrError, match="cannot be imported"):
        LearnerSpec("sklearn.nothing.Here").build()
    with pytest.raises(PcqrError, match="--learner-param"):
        LearnerSpec("sklearn.linear_model.LogisticRegression", {"no_such": 1}).build()
    assert parse_learner_params(["C=0.5", "fit_intercept=false"]) == {"C": 0.5, "fit_intercept": False}
    with pytest.raises(PcqrError, match="key=value"):
        parse_learner_params(["C"])


@pytest.mark.parametrize(
    "spec",
    [LearnerSpec("stump"), LearnerSpec("threshold", {"feature": 1}),
     LearnerSpec("sklearn.linear_model.LogisticRegression"),
     LearnerSpec("sklearn.tree.DecisionTreeClassifier", {"max_depth": 2})],
    ids=["stump", "threshold", "logistic", "tree"],
)
def test_ensemble_counts_equal_each_models_predict(spec: LearnerSpec) -> None:
    rng = np.random.default_rng(5)
    X = rng.normal(size=(2000, 4))
    y = ((X[:, 1] + 0.3 * X[:, 2]) > 0).astype(int)
    models = [fit_subsample(spec, X[j::40], y[j::40]) for j in range(40)]
    models += [ConstantModel(0), ConstantModel(1), ConstantModel(1)]
    queries = rng.normal(size=(500, 4))
    naive = sum(np.asarray(m.predict(queries)).astype(int) for m in models)
    counts = Ensemble(models).count_ones(queries)
    assert counts.dtype == np.int32 and (counts == naive).all()
    assert isinstance(models[0], (StumpLearner, ThresholdLearner, DecisionTreeClassifier)) or hasattr(models[0], "coef_")
