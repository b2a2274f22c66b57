"""PrivateClassifier the way a data scientist uses it (issue 26): scikit-learn's cross-validation and
grid search give real numbers, their cost is known before they run and capped by the ledger, and no
private row is left behind in $TMPDIR -- after a fit, a predict, a score, a cross-validation, a
search, a fit that fails, a pickled copy."""
from __future__ import annotations

import gc
import os
import pickle
import stat
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, KFold, cross_val_score

import pcqr
from pcqr.pipeline.budget.ledger import Ledger
from pcqr.pipeline.estimator.classifier import PRIVATE_FILE
from tests.conftest import MECHANICS

SEED = {"seed": 3, "insecure_seed": True}  # tests only: reproducible, marked NOT private
BUDGET = {"epsilon": 8.0, "delta": 1e-6, "cutoff": 10, "subsamples": 50}
#: The tests of mechanics (the ledger, the temporary folder, refusals) train stumps: what they test does
#: not depend on the learner, and the default learner's cross-validated student costs a second a fit.
#: Cross-validation at the default learner is test_cross_validation_scores_are_real_numbers_near_the_non_private_ones.
SMALL = {**BUDGET, "learner": "stump"}


def _data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    return X, (X[:, 0] > 0.1).astype(int)


@pytest.fixture
def empty_tmpdir(tmp_path, monkeypatch) -> Path:
    """$TMPDIR (and Python's cached tempfile.tempdir) pointed at an empty folder."""
    folder = tmp_path / "tmpdir"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


@pytest.fixture(autouse=True)
def own_ledger(tmp_path, monkeypatch) -> None:
    """A ledger per test: these fits register their rows, which other tests' generated queries share."""
    monkeypatch.setenv("PCQR_LEDGER", str(tmp_path / "own-ledger.sqlite"))
    warnings.simplefilter("ignore", pcqr.PrivacyCostWarning)


def test_no_private_row_is_left_in_tmpdir(empty_tmpdir, thread_cluster_yaml) -> None:
    X, y = _data(3000, 1)
    clf = pcqr.PrivateClassifier(**SMALL, cluster=thread_cluster_yaml, **SEED).fit(X, y)
    made = list(empty_tmpdir.iterdir())  # while fitted: one private folder, 0700, no copy of the rows
    assert len(made) == 1 and made[0].name.startswith("pcqr-private-")
    assert stat.S_IMODE(made[0].stat().st_mode) == 0o700
    assert not any(p.name == PRIVATE_FILE for p in made[0].rglob("*"))  # the rows' copy went with training
    Q, truth = _data(500, 2)
    assert 0.9 < clf.score(Q, truth) <= 1.0
    copy = pickle.loads(pickle.dumps(clf))  # a copy shares the session while the original lives
    assert np.array_equal(np.isnan(copy.predict(Q[:10])), np.zeros(10, dtype=bool))
    clf.close()
    assert list(empty_tmpdir.iterdir()) == []
    with pytest.raises(pcqr.PcqrError, match="its session was removed"):
        copy.predict(Q[:10])

    with pcqr.PrivateClassifier(**SMALL, cluster=thread_cluster_yaml, **SEED) as scoped:
        scoped.fit(X, y).predict(Q)
    assert list(empty_tmpdir.iterdir()) == []

    collected = pcqr.PrivateClassifier(**SMALL, cluster=thread_cluster_yaml, **SEED).fit(X, y)
    del collected
    gc.collect()
    assert list(empty_tmpdir.iterdir()) == []

    with pytest.raises(pcqr.PcqrError):  # refused after the rows were written: nothing stays
        pcqr.PrivateClassifier(**{**SMALL, "subsamples": 5000}, cluster=thread_cluster_yaml, **SEED).fit(X, y)
    assert list(empty_tmpdir.iterdir()) == []

    scores = cross_val_score(pcqr.PrivateClassifier(**SMALL, cluster=thread_cluster_yaml, **SEED), X, y, cv=3)
    search = GridSearchCV(pcqr.PrivateClassifier(**SMALL, cluster=thread_cluster_yaml, **SEED),
                          {"cutoff": [5, 10]}, cv=2).fit(X, y)
    assert np.isfinite(scores).all() and np.isfinite(search.cv_results_["mean_test_score"]).all()
    del search
    gc.collect()
    assert list(empty_tmpdir.iterdir()) == []


def test_cross_validation_scores_are_real_numbers_near_the_non_private_ones(thread_cluster_yaml) -> None:
    """Each fold's test rows are other folds' training rows, which the ledger has registered as
    private: without a log of the caller's nothing is published, so they are answered."""
    X, y = _data(6000, 3)
    clf = pcqr.PrivateClassifier(**BUDGET, cluster=thread_cluster_yaml, **SEED)
    with warnings.catch_warnings():
        warnings.simplefilter("error", pcqr.UnansweredWarning)  # every query answered (the guess gate, the student)
        scores = cross_val_score(clf, X, y, cv=KFold(3, shuffle=True, random_state=0))
    baseline = cross_val_score(LogisticRegression(), X, y, cv=KFold(3, shuffle=True, random_state=0))
    assert np.isfinite(scores).all() and scores.min() > 0.95 and baseline.min() > 0.99


def test_a_search_costs_what_privacy_cost_said_and_the_budget_caps_it(tmp_path, thread_cluster_yaml) -> None:
    ledger = str(tmp_path / "ledger.sqlite")
    X, y = _data(4000, 4)
    clf = pcqr.PrivateClassifier(**SMALL, ledger=ledger, cluster=thread_cluster_yaml, **SEED)
    search = GridSearchCV(clf, {"cutoff": [5, 10]}, cv=3)
    cost = pcqr.privacy_cost(search)
    assert (cost.fits, cost.epsilon, cost.delta) == (7, 56.0, pytest.approx(7e-6))
    assert pcqr.privacy_cost(clf, cv=4).fits == 4 and pcqr.privacy_cost(clf).epsilon == 40.0  # cv=5 by default
    budget = pcqr.set_budget(X, y, epsilon=cost.epsilon + 8, delta=1e-4, name="rows", ledger=ledger)
    assert budget["spent_epsilon"] == 0
    with pytest.warns(pcqr.PrivacyCostWarning, match=r"charged \(epsilon=8, delta=1e-06\) to the ledger; "
                                                     r"so far, rows: spent \(8, 1e-06\) of \(64, 0.0001\)"):
        clone(clf).fit(X[:3000], y[:3000])  # rows of X: charged to its budget too, and the warning says so
    search.fit(X, y)
    assert np.isfinite(search.cv_results_["mean_test_score"]).all()
    with Ledger(ledger) as book:
        identity = book.store.find_name("rows")
        assert book.store.spent(identity)[0] == pytest.approx(cost.epsilon + 8)  # every fit charged to the rows
    with pytest.raises(pcqr.PcqrError, match="privacy budget of rows exceeded"):  # the budget is spent
        cross_val_score(clf, X, y, cv=3, error_score="raise")
    with Ledger(ledger) as book:
        assert book.store.spent(book.store.find_name("rows"))[0] == pytest.approx(cost.epsilon + 8)  # and never exceeded


def test_predict_refuses_up_front_what_the_session_cannot_answer(tmp_path, thread_cluster_yaml) -> None:
    X, y = _data(3000, 5)
    Q, _ = _data(300, 6)
    clf = pcqr.PrivateClassifier(**SMALL, queries_max=200, after_halt="refuse", cluster=thread_cluster_yaml,
                                 **SEED).fit(X, y)
    with pytest.raises(pcqr.PcqrError, match=r"300 queries, but the session answers at most 200 more"):
        clf.predict(Q)
    with pcqr.Session.open(clf.state_, cluster=thread_cluster_yaml) as session:
        assert session.status().answered == 0  # nothing was asked
    assert not np.isnan(clf.predict(Q[:200])).any()
    student = pcqr.PrivateClassifier(**SMALL, queries_max=200, cluster=thread_cluster_yaml, **SEED).fit(X, y)
    assert not np.isnan(student.predict(Q)).any()  # after_halt='student' (the default): beyond m, the student


def test_score_says_how_many_queries_got_no_answer(thread_cluster_yaml) -> None:
    """The stability gate abstains near the boundary: score counts those as wrong, and says so."""
    X, y = _data(6000, 7)
    Q, truth = _data(400, 8)
    clf = pcqr.PrivateClassifier(**MECHANICS, gate="stability", cluster=thread_cluster_yaml, **SEED).fit(X, y)
    with pytest.warns(pcqr.UnansweredWarning, match=r"of 400 queries got no answer \(abstained or refused\) and count as wrong"):
        score = clf.score(Q, truth)
    assert 0.5 < score < 1.0


def test_a_public_log_never_gets_private_rows(tmp_path, thread_cluster_yaml) -> None:
    """With log= (public), predicting the training rows is refused by the misuse guard; without, it is
    answered into the private folder's log."""
    X, y = _data(3000, 9)
    public = pcqr.PrivateClassifier(**SMALL, log=str(tmp_path / "log"), cluster=thread_cluster_yaml, **SEED).fit(X, y)
    with pytest.raises(pcqr.PcqrError, match="holds private rows"):
        public.predict(X[:100])
    assert not (tmp_path / "log").exists() or not any((tmp_path / "log").glob("*.parquet"))
    private = pcqr.PrivateClassifier(**SMALL, cluster=thread_cluster_yaml, **SEED).fit(X, y)
    assert not np.isnan(private.predict(X[:100])).any()
    assert os.path.dirname(private.log_) == os.path.dirname(private.state_)  # in the private folder


def test_too_few_rows_for_the_default_k_train_one_row_a_model_and_say_so(thread_cluster_yaml) -> None:
    X, y = _data(60, 10)
    with pytest.warns(pcqr.SmallDataWarning, match="60 private rows are too few"):
        clf = pcqr.PrivateClassifier(cluster=thread_cluster_yaml).fit(X, y)
    with pcqr.Session.open(clf.state_, cluster=thread_cluster_yaml) as session:
        assert session.summary()["subsamples"] == 60
    assert not np.isnan(clf.predict(X)).any()


def test_learner_auto_is_a_tree_as_deep_as_the_rows_a_model_get(thread_cluster_yaml) -> None:
    from pcqr.pipeline.models.learners import auto_learner

    assert [auto_learner(r)[1]["max_depth"] for r in (1, 22, 23, 45, 46, 90, 91, 10**6)] == [3, 3, 4, 4, 5, 5, 6, 6]
    X, y = _data(4000, 11)
    clf = pcqr.PrivateClassifier(**BUDGET, learner="auto", cluster=thread_cluster_yaml, **SEED).fit(X, y)
    with pcqr.Session.open(clf.state_, cluster=thread_cluster_yaml) as session:
        summary = session.summary()
    assert summary["learner"] == "sklearn.tree.DecisionTreeClassifier" and summary["subsamples"] == 50
    Q, truth = _data(300, 12)
    assert clf.score(Q, truth) > 0.95


def test_the_commands_leave_nothing_in_tmpdir(empty_tmpdir, tmp_path, thread_cluster_yaml, capsys) -> None:
    """train, answer (a local cluster: its scratch is a private folder of its own), report, replay."""
    from pcqr.jobs.cli import main
    from tests.conftest import MECHANICS_PRIVACY, write_session_data

    root = write_session_data(tmp_path / "work", rows=5000, queries=300)
    cluster = ["--cluster", thread_cluster_yaml]
    assert main(["train", "--private", str(root / "private"), "--state", str(root / "st"), *MECHANICS_PRIVACY,
                 *cluster]) == 0
    assert main(["answer", "--state", str(root / "st"), "--queries", str(root / "queries"), "--log",
                 str(root / "log"), *cluster]) == 0
    assert main(["report", "--log", str(root / "log"), "--out", str(root / "report.html")]) == 0
    assert main(["replay", str(root / "log"), "--out", str(root / "replayed.parquet")]) == 0
    capsys.readouterr()
    assert list(empty_tmpdir.iterdir()) == []


def test_bad_input_to_the_model_selection_helpers_is_one_line_and_charges_nothing(tmp_path) -> None:
    from sklearn.ensemble import BaggingClassifier
    from sklearn.experimental import enable_halving_search_cv  # noqa: F401
    from sklearn.model_selection import HalvingGridSearchCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    clf = pcqr.PrivateClassifier(epsilon=2.0)
    assert pcqr.privacy_cost(make_pipeline(StandardScaler(), clf), cv=3).epsilon == 6.0
    for unknown in (HalvingGridSearchCV(clf, {"cutoff": [5, 10]}), BaggingClassifier(clf, n_estimators=4)):
        with pytest.raises(pcqr.PcqrError, match="cannot count how often"):  # never undercounted
            pcqr.privacy_cost(unknown, cv=3)
    with pytest.raises(pcqr.PcqrError, match="holds no pcqr.PrivateClassifier"):
        pcqr.privacy_cost(LogisticRegression(), cv=3)
    ledger = str(tmp_path / "ledger.sqlite")
    X, y = _data(100, 13)
    for kwargs, error, needle in [({"epsilon": -1.0, "delta": 1e-4}, pcqr.PcqrError, "epsilon"),
                                  ({"epsilon": 1.0, "delta": 1.5}, pcqr.PcqrError, "--delta must be in"),
                                  ({"epsilon": 1.0, "delta": 1e-4, "name": " "}, pcqr.PcqrError, "--name"),
                                  ({"epsilon": 1.0, "delta": 1e-4, "y": y + 1}, ValueError, "labels must be 0 or 1")]:
        with pytest.raises(error, match=needle):
            pcqr.set_budget(X, kwargs.pop("y", y), **kwargs, ledger=ledger)
    assert not os.path.exists(ledger)  # refused before the ledger is opened


def test_the_share_of_one_class_models_that_the_few_rows_warning_states_is_a_lower_bound() -> None:
    """A subsample of r rows holds one class only with probability p^r + (1 - p)^r, least at p = 1/2:
    2^(1 - r). The warning states that bound averaged over the subsamples' sizes, rounded down, from
    ONE_CLASS_SHARE up: every model at 1 row, 2 rows (398 rows, k = 199), a mix, 3 rows; not at 4."""
    from pcqr.pipeline.session.planning import ONE_CLASS_SHARE, few_rows_warning

    shares = np.linspace(0.0, 1.0, 1001)
    for rows_a_model in range(1, 6):
        one_class = shares ** rows_a_model + (1 - shares) ** rows_a_model
        assert one_class.min() == pytest.approx(2.0 ** (1 - rows_a_model))
    assert ONE_CLASS_SHARE == 0.25
    assert "k = 60 models 1 row to learn from: on average at least 100% of the models" in few_rows_warning(60, 60)
    assert "each of the k = 199 models 2 rows to learn from: on average at least 50% of" in few_rows_warning(398, 199)
    # 379 rows, k = 199: 19 models of 1 row, 180 of 2: (19 + 180 / 2) / 199 = 54.8%
    assert "models 1-2 rows to learn from: on average at least 54% of" in few_rows_warning(379, 199)
    assert "3 rows to learn from: on average at least 25% of" in few_rows_warning(300, 100)
    assert few_rows_warning(301, 100) is None and few_rows_warning(400, 100) is None  # below a quarter
    assert few_rows_warning(3_000_000, 2500) is None  # the README's session: 1,200 rows a model


def test_the_default_on_a_small_real_dataset_says_its_models_get_too_few_rows(thread_cluster_yaml) -> None:
    """scikit-learn's breast-cancer data, its first 300 rows: a 3-fold cross-validation trains on 200
    rows, and the defaults at epsilon 8 give each of their k models 1 row (even 50 gnmax answers would
    leave fewer than 10 rows a model: the guess gate). Each fit says so in plain words (a
    pcqr.OneClassWarning, as ``pcqr train`` says it on stderr), and still scores a real number. (All
    569 rows, 379-380 a fold, now plan 50 gnmax answers of 11 rows a model: issue 48's small data.)"""
    from sklearn.datasets import load_breast_cancer

    X, y = load_breast_cancer(return_X_y=True)
    X, y = X[:300], y[:300]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scores = cross_val_score(pcqr.PrivateClassifier(epsilon=8, cluster=thread_cluster_yaml, **SEED), X, y, cv=3)
    said = [str(w.message) for w in caught if issubclass(w.category, pcqr.OneClassWarning)]
    assert len(said) == 3 and all("may be little better than answering the majority class" in s for s in said), said
    assert np.isfinite(scores).all()


def test_pcqr_train_says_its_models_get_too_few_rows_on_stderr(tmp_path, thread_cluster_yaml, capsys) -> None:
    from pcqr.jobs.cli import main

    data, cluster = str(tmp_path / "data"), ["--cluster", thread_cluster_yaml]
    assert main(["generate", "--kind", "realizable", "--rows", "200", "--features", "3", "--queries", "10",
                 "--seed", "1", "--out", data, *cluster]) == 0
    capsys.readouterr()
    assert main(["train", "--private", f"{data}/private", "--state", str(tmp_path / "st"), "--epsilon", "8",
                 "--seed", "1", "--insecure-seed", *cluster]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "rows to learn from" in line]
    assert len(lines) == 1 and lines[0].startswith("warning: 200 private rows give each of the k = ") and \
        "at least" in lines[0], lines
