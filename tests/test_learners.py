"""Built-in ERM learners against brute force; vote counting against each model's predict;
``--learner`` runs no code by name and its parameters are checked before any charge (issue 11)."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from sklearn.tree import DecisionTreeClassifier

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.models.learners import (
    LEARNER_MODULES,
    ConstantModel,
    LearnerSpec,
    StumpLearner,
    ThresholdLearner,
    best_threshold,
    fit_subsample,
    module_allowed,
    parse_learner_params,
)
from pcqr.pipeline.models.votes import Ensemble


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


REFUSED_NAMES = {
    "os.system": "module os is not allowed",
    "builtins.eval": "module builtins is not allowed",
    "subprocess.Popen": "module subprocess is not allowed",
    "json.JSONDecoder": "module json is not allowed",
    "sklearn.preprocessing.StandardScaler": "not a scikit-learn estimator with fit and predict",
    "sklearn.linear_model.LinearRegression": "not a classifier",
    "pcqr.pipeline.models.learners.importlib": "not a class defined in the allowed modules",
    "pcqr.pipeline.models.learners._StumpModel": "not a public class",
    "sklearn..tree": "not a dotted class path",
    "nonsense": "not a dotted class path",
    "tests.allowed_learner.NearestMeanClassifier": "module tests.allowed_learner is not allowed",
}


@pytest.mark.parametrize("name", list(REFUSED_NAMES))
def test_a_learner_name_outside_the_allowed_classifiers_is_refused(name: str) -> None:
    sys.modules.pop("tests.allowed_learner", None)
    with pytest.raises(PcqrError) as refused:
        LearnerSpec(name, {"command": "true"}).build()
    message = str(refused.value)
    assert message.startswith(f"--learner {name!r}: {REFUSED_NAMES[name]};") and "\n" not in message
    assert "sklearn., pcqr.pipeline." in message and "pcqr: learners: allow:" in message
    assert "tests.allowed_learner" not in sys.modules  # checked before anything is imported


def test_the_operator_extends_the_allowed_modules() -> None:
    spec = LearnerSpec("tests.allowed_learner.NearestMeanClassifier", {"shrink": 0.1}, ("tests.allowed_learner",))
    assert spec.allowed == (*LEARNER_MODULES, "tests.allowed_learner")
    assert type(spec.build()).__name__ == "NearestMeanClassifier" and spec.build().shrink == 0.1
    assert module_allowed("xgboost.sklearn", ("xgboost.",)) and module_allowed("xgboost", ("xgboost",))
    assert not module_allowed("xgboostx", ("xgboost.",)) and not module_allowed("sklearnx.y", LEARNER_MODULES)


@pytest.mark.parametrize(
    "name,params,needle",
    [
        ("sklearn.linear_model.LogisticRegression", {"C": -1}, "The 'C' parameter of LogisticRegression must be"),
        ("sklearn.tree.DecisionTreeClassifier", {"max_depth": "foo"}, "'max_depth' parameter"),
        ("sklearn.linear_model.LogisticRegression", {"no_such": 1}, "unexpected keyword argument 'no_such'"),
        ("sklearn.linear_model.LogisticRegression", {"penalty": "l1"}, "fails on a small public sample"),
        ("threshold", {"feature": 3}, "feature 3 is out of range: the data has 3 features"),
        ("threshold", {"feature": "x"}, "'feature' parameter of ThresholdLearner must be an int"),
        ("stump", {"depth": 2}, "StumpLearner() takes no arguments"),
        ("pcqr.pipeline.hypotheses.ERMClassifier", {"hypothesis": "zzz"}, "--hypothesis 'zzz' is unknown"),
    ],
)
def test_bad_learner_params_are_refused_by_the_estimator(name: str, params: dict, needle: str) -> None:
    with pytest.raises(PcqrError) as refused:
        LearnerSpec(name, params).check(3, 400)
    message = str(refused.value)
    assert message.startswith("--learner") and needle in message and "\n" not in message, message


def test_a_valid_learner_is_tried_on_a_public_sample() -> None:
    trial = LearnerSpec("sklearn.linear_model.LogisticRegression", {"C": 0.5}).check(3, 400)
    assert trial.coef_.shape == (1, 3) and trial.C == 0.5
    assert LearnerSpec("threshold", {"feature": 2}).check(3, 1).feature_ == 2  # a one-row subsample still checks


@pytest.mark.parametrize(
    "item,needle",
    [("C=[1, 2]", "got a list"), ("C={a: 1}", "got a dict"), ("C=.nan", "got a non-finite number"),
     ("C=.inf", "got a non-finite number"), ("day=2020-01-01", "got a date"), ("C=[", "not a YAML scalar"),
     ("=1", "expected key=value"), ("a b=1", "expected key=value")],
)
def test_learner_param_values_are_plain_scalars(item: str, needle: str) -> None:
    with pytest.raises(PcqrError, match=f"^--learner-param .*{needle}"):
        parse_learner_params([item])
    with pytest.raises(PcqrError, match="--learner-param C: given twice"):
        parse_learner_params(["C=1", "C=2"])
    assert parse_learner_params(["kernel=rbf", "max_depth=none", "tol=1e-3", "class_weight=null"]) == {
        "kernel": "rbf", "max_depth": None, "tol": 1e-3, "class_weight": None}


# --- the same refusals through the command line and a `pcqr run` spec: exit 2, one line, nothing
# written, the ledger untouched; an operator's cluster.yaml extends the list --------------------

def _cli(capsys, *args: str) -> tuple[int, str]:
    from pcqr.jobs.cli import main

    code = main(list(args))
    return code, capsys.readouterr().err


def _ledger_bytes(path: str) -> bytes | None:
    return open(path, "rb").read() if os.path.exists(path) else None


def _refused(code: int, err: str, tmp_path, ledger_before: bytes | None, ledger: str, *needles: str) -> None:
    lines = [line for line in err.strip().splitlines() if not line.startswith("dashboard:")]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("pcqr: error: "), err
    assert all(needle in lines[0] for needle in needles), lines[0]
    assert not (tmp_path / "state").exists() and not (tmp_path / "log").exists()
    assert not (tmp_path / "touched").exists()
    assert _ledger_bytes(ledger) == ledger_before


@pytest.fixture
def private_data(tmp_path):
    from tests.conftest import threshold_data, write_parquet

    write_parquet(str(tmp_path / "private/part-0.parquet"), threshold_data(5000, seed=1))
    q = threshold_data(300, seed=2)
    q.pop("label")
    write_parquet(str(tmp_path / "queries/part-0.parquet"), {"query_id": np.arange(300), **q})
    return tmp_path


def _train_args(tmp_path, cluster: str, *extra: str) -> list[str]:
    from tests.conftest import MECHANICS_PRIVACY

    return ["train", "--private", str(tmp_path / "private"), "--state", str(tmp_path / "state"),
            "--cluster", cluster, "--queries-max", "100000", *MECHANICS_PRIVACY, *extra]


CLI_REFUSALS = [
    (["--learner", "os.system", "--learner-param", "command=touch {touched}"], ["--learner 'os.system'"]),
    (["--learner", "builtins.eval", "--learner-param", "source=open('{touched}', 'w')"], ["--learner 'builtins.eval'"]),
    (["--learner", "subprocess.Popen", "--learner-param", "args=touch {touched}"], ["--learner 'subprocess.Popen'"]),
    (["--learner", "sklearn.preprocessing.StandardScaler"], ["not a scikit-learn estimator with fit and predict"]),
    (["--learner", "json.JSONDecoder"], ["module json is not allowed", "sklearn., pcqr.pipeline."]),
    (["--learner", "tests.allowed_learner.NearestMeanClassifier"], ["module tests.allowed_learner is not allowed"]),
    (["--learner", "sklearn.linear_model.LogisticRegression", "--learner-param", "C=-1"], ["--learner-param", "'C'"]),
    (["--learner", "sklearn.tree.DecisionTreeClassifier", "--learner-param", "max_depth=foo"], ["'max_depth'"]),
    (["--learner", "sklearn.linear_model.LogisticRegression", "--learner-param", "penalty=l1"],
     ["fails on a small public sample", "penalty"]),
    (["--learner", "sklearn.linear_model.LogisticRegression", "--learner-param", "C=[1, 2]"], ["--learner-param", "list"]),
    (["--learner", "threshold", "--learner-param", "feature=9"], ["feature 9 is out of range"]),
]


@pytest.mark.parametrize("options,needles", CLI_REFUSALS, ids=[" ".join(o[1:2] + o[3:4]) for o, _ in CLI_REFUSALS])
def test_the_command_line_refuses_before_any_charge(options, needles, private_data, capsys, thread_cluster_yaml,
                                                    test_ledger) -> None:
    before = _ledger_bytes(test_ledger)
    options = [o.format(touched=private_data / "touched") for o in options]
    code, err = _cli(capsys, *_train_args(private_data, thread_cluster_yaml, *options))
    _refused(code, err, private_data, before, test_ledger, *needles)


@pytest.mark.parametrize("learner,params,needle", [
    ("os.system", "[command=touch {touched}]", "--learner 'os.system'"),
    ("sklearn.linear_model.LogisticRegression", "[C=-1]", "'C' parameter"),
])
def test_a_job_spec_refuses_the_same(learner, params, needle, private_data, capsys, thread_cluster_yaml,
                                     test_ledger) -> None:
    from tests.conftest import MECHANICS

    spec = private_data / "job.yaml"
    spec.write_text(
        f"job: answer\nprivate: {private_data / 'private'}\nqueries: {private_data / 'queries'}\n"
        f"state: {private_data / 'state'}\nlog: {private_data / 'log'}\n"
        + "".join(f"{k}: {v}\n" for k, v in MECHANICS.items())
        + f"learner: {learner}\nlearner-param: {params.format(touched=private_data / 'touched')}\n"
    )
    before = _ledger_bytes(test_ledger)
    code, err = _cli(capsys, "run", str(spec), "--cluster", thread_cluster_yaml)
    _refused(code, err, private_data, before, test_ledger, needle)


def test_an_operator_allows_a_learner_module_in_cluster_yaml(private_data, capsys, thread_cluster_yaml) -> None:
    allowing = private_data / "allowing.yaml"
    allowing.write_text(open(thread_cluster_yaml).read() + "  learners:\n    allow: [tests.allowed_learner]\n")
    learner = ["--learner", "tests.allowed_learner.NearestMeanClassifier", "--learner-param", "shrink=0.1"]
    code, err = _cli(capsys, *_train_args(private_data, str(allowing), *learner))
    assert code == 0, err
    state = private_data / "state"
    assert sorted(f for f in os.listdir(state) if f.startswith("models")) == ["models.npz"]
    answer = ["answer", "--state", str(state), "--queries", str(private_data / "queries"),
              "--log", str(private_data / "log"), "--after-halt", "refuse"]  # the student's learner is checked first
    code, err = _cli(capsys, *answer, "--cluster", str(thread_cluster_yaml))  # the list no longer has it
    lines = [line for line in err.strip().splitlines() if not line.startswith("dashboard:")]
    assert code == 2 and len(lines) == 1, err
    assert "models.npz: holds type tests.allowed_learner.NearestMeanClassifier" in lines[0]
    assert not (private_data / "log").exists() or not os.listdir(private_data / "log")
    code, err = _cli(capsys, *answer, "--cluster", str(allowing))
    assert code == 0, err
    allowing.write_text(open(thread_cluster_yaml).read() + "  learners:\n    allow: tests.allowed_learner\n")
    code, err = _cli(capsys, *answer, "--cluster", str(allowing))
    assert code == 2 and "pcqr.learners.allow: expected a list of module names" in err, err


@pytest.mark.parametrize("changed", [0, 777, 1999])
def test_class_weighted_teachers_still_move_one_vote(changed: int) -> None:
    """Issue 29, item 4: with ``class_weight='balanced'`` each teacher weighs its labels by ITS OWN
    subsample's counts (scikit-learn computes them inside ``fit``), so changing one private row changes
    one teacher only: on the same split (pcqr's own split_rows and train_block), every other teacher's
    tree is identical to the weight of each node, and no query's ct(1) moves by more than 1. A weight
    computed from the whole dataset's counts would change every teacher's node weights."""
    from pcqr.pipeline.models.subsample import split_rows, train_block

    rng = np.random.default_rng(29)
    X = rng.standard_normal((2000, 3))
    y = ((X[:, 0] > 0.9) & (X[:, 1] > 0.4)).astype(np.int8)  # about 6% positives: 4-8 a teacher
    neighbour = y.copy()
    neighbour[changed] ^= 1
    k, spec = 20, LearnerSpec("sklearn.tree.DecisionTreeClassifier",
                              {"max_depth": 3, "class_weight": "balanced", "random_state": 0})
    counts, edges = np.full(k, 2000 // k), np.array([0, k])
    models, others = (train_block(0, k, spec, *split_rows((X, labels), counts, edges, seed=5))
                      for labels in (y, neighbour))
    differ = [j for j, (a, b) in enumerate(zip(models, others))
              if not (isinstance(a, ConstantModel) and a == b) and not (
                  hasattr(a, "tree_") and hasattr(b, "tree_") and np.array_equal(a.tree_.value, b.tree_.value)
                  and np.array_equal(a.tree_.threshold, b.tree_.threshold))]
    assert len(differ) == 1  # the changed row's teacher (its weights and labels changed), no other
    Q = rng.standard_normal((5000, 3))
    assert np.max(np.abs(Ensemble(models).count_ones(Q) - Ensemble(others).count_ones(Q))) <= 1
