"""``PrivateClassifier(classes=[...])`` (issue 49, item 1, two classes): a public class list, given,
never read from the private labels; named labels through fit, predict, score and scikit-learn's
cross-validation and search; a label outside the list, a bad list or a mismatched fallback refused
in one line before anything is charged; the same rows (and so the same budget) whatever the order."""
from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
from sklearn.model_selection import GridSearchCV, cross_val_score

import pcqr
from pcqr.pipeline.budget.ledger import Ledger
from pcqr.pipeline.estimator.classes import ClassList, class_list

SEED = {"seed": 3, "insecure_seed": True}  # tests only: reproducible, marked NOT private
SMALL = {"epsilon": 8.0, "delta": 1e-6, "cutoff": 10, "subsamples": 50, "learner": "stump"}
NAMES = ["<=50K", ">50K"]


def _data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    return X, np.where(X[:, 0] > 0.1, ">50K", "<=50K")


@pytest.fixture(autouse=True)
def own_ledger(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PCQR_LEDGER", str(tmp_path / "own-ledger.sqlite"))
    warnings.simplefilter("ignore", pcqr.PrivacyCostWarning)


def test_string_labels_fit_predict_score_and_cross_validate(thread_cluster_yaml) -> None:
    X, y = _data(3000, 1)
    Q, truth = _data(400, 2)
    clf = pcqr.PrivateClassifier(**SMALL, classes=[">50K", "<=50K"], cluster=thread_cluster_yaml, **SEED).fit(X, y)
    assert clf.classes_.tolist() == NAMES  # sorted, scikit-learn's convention
    predicted = clf.predict(Q)
    assert set(predicted.tolist()) <= set(NAMES) and np.mean(predicted == truth) > 0.9
    assert clf.score(Q, truth) == pytest.approx(np.mean(predicted == truth))
    scores = cross_val_score(pcqr.PrivateClassifier(**SMALL, classes=NAMES, cluster=thread_cluster_yaml, **SEED),
                             X, y, cv=2)
    assert np.isfinite(scores).all() and scores.min() > 0.9
    search = GridSearchCV(pcqr.PrivateClassifier(**SMALL, classes=NAMES, cluster=thread_cluster_yaml, **SEED),
                          {"cutoff": [5, 10]}, cv=2, scoring="accuracy").fit(X, y)
    assert np.isfinite(search.cv_results_["mean_test_score"]).all()


def test_integer_labels_come_back_as_numbers(thread_cluster_yaml) -> None:
    X, y = _data(3000, 3)
    labels = np.where(y == ">50K", 7, -2)
    clf = pcqr.PrivateClassifier(**SMALL, classes=[7, -2], cluster=thread_cluster_yaml, **SEED).fit(X, labels)
    assert clf.classes_.tolist() == [-2, 7]
    assert set(clf.predict(X[:300]).tolist()) <= {-2.0, 7.0}


def test_the_order_of_the_list_changes_no_row_and_no_budget(tmp_path, thread_cluster_yaml) -> None:
    """The attack of a careless order: a budget set on the rows with one order, a fit with the other.
    The rows hashed are the same (each label's index in the sorted list), so the fit is charged to
    that budget and refused once it is spent, as a fit with the same order is."""
    X, y = _data(3000, 4)
    forward = pcqr.PrivateClassifier(classes=NAMES).rows_table(X, y)
    backward = pcqr.PrivateClassifier(classes=NAMES[::-1]).rows_table(X, y)
    assert forward.equals(backward) and forward.column("label").to_pylist() == (y == ">50K").astype(int).tolist()
    ledger = str(tmp_path / "ledger.sqlite")
    pcqr.set_budget(X, y, epsilon=10.0, delta=1e-4, name="rows", ledger=ledger, classes=NAMES[::-1])
    clf = pcqr.PrivateClassifier(**SMALL, classes=NAMES, ledger=ledger, cluster=thread_cluster_yaml, **SEED)
    clf.fit(X, y)  # 8 of 10
    with pytest.raises(pcqr.PcqrError, match=r"privacy budget of .* exceeded: spent \(8, 1e-06\) \+ this job"):
        clf.fit(X, y)
    with Ledger(ledger) as book:
        assert book.store.spent(book.store.find_name("rows"))[0] == pytest.approx(8.0)


@pytest.mark.parametrize("classes,message", [
    (["a"], "expected a list of 2 to 100 distinct labels"),
    (["a", "a"], "expected a list of 2 to 100 distinct labels"),
    (["a", 1], "expected a list of 2 to 100 distinct labels"),
    ([True, False], "expected a list of 2 to 100 distinct labels"),
    ("ab", "expected a list of 2 to 100 distinct labels"),
    (["", "b"], "expected a list of 2 to 100 distinct labels"),
    ([1.5, 2.5], "expected a list of 2 to 100 distinct labels"),
    ([f"c{i}" for i in range(101)], "expected a list of 2 to 100 distinct labels"),
])
def test_a_bad_class_list_is_refused_before_anything_is_charged(classes, message, tmp_path,
                                                                thread_cluster_yaml) -> None:
    X, y = _data(500, 5)
    ledger = tmp_path / "ledger.sqlite"
    with pytest.raises(pcqr.PcqrError, match=message) as refused:
        pcqr.PrivateClassifier(**SMALL, classes=classes, ledger=str(ledger), cluster=thread_cluster_yaml).fit(X, y)
    assert "\n" not in str(refused.value) and str(refused.value).startswith("PrivateClassifier: classes=")
    assert not ledger.exists()


def test_a_label_outside_the_list_is_refused_without_echoing_it(tmp_path, thread_cluster_yaml) -> None:
    X, y = _data(500, 6)
    y[17] = "secret-label"
    ledger = tmp_path / "ledger.sqlite"
    with pytest.raises(ValueError, match=r"y: holds labels outside classes=\['<=50K', '>50K'\]") as refused:
        pcqr.PrivateClassifier(**SMALL, classes=NAMES, ledger=str(ledger), cluster=thread_cluster_yaml).fit(X, y)
    assert "secret" not in str(refused.value) and "\n" not in str(refused.value)
    assert not ledger.exists()
    with pytest.raises(ValueError, match=r"give your two labels as classes=\[a, b\]"):  # no list: the hint
        pcqr.PrivateClassifier(**SMALL, ledger=str(ledger), cluster=thread_cluster_yaml).fit(*_data(500, 6))
    assert not ledger.exists()


def test_fallback_label_is_one_of_the_classes(tmp_path, thread_cluster_yaml) -> None:
    X, y = _data(500, 7)
    ledger = tmp_path / "ledger.sqlite"
    for fallback in (0, "other", True):
        with pytest.raises(pcqr.PcqrError, match=r"fallback_label=.*: expected one of classes_ \['<=50K', '>50K'\]"):
            pcqr.PrivateClassifier(**SMALL, classes=NAMES, fallback_label=fallback, ledger=str(ledger),
                                   cluster=thread_cluster_yaml).fit(X, y)
    assert not ledger.exists()
    assert class_list(NAMES).index(">50K", "fallback_label") == 1
    assert class_list([2, 1]).index(np.int64(2), "fallback_label") == 1


def test_released_indices_become_the_users_labels() -> None:
    released = np.array([0.0, 1.0, np.nan, 1.0])
    named = ClassList(("a", "b")).answers(released)
    assert named.dtype == object and named.tolist() == ["a", "b", None, "b"]
    assert ClassList(("a", "b")).answers(np.array([1.0, 0.0])).tolist() == ["b", "a"]
    numbers = ClassList((-2, 7)).answers(released)
    assert numbers[:2].tolist() == [-2.0, 7.0] and np.isnan(numbers[2])
    assert ClassList().answers(released) is released  # the default: today's floats, unchanged


def test_predict_refuses_a_class_list_changed_after_fit(thread_cluster_yaml) -> None:
    X, y = _data(3000, 8)
    clf = pcqr.PrivateClassifier(**SMALL, classes=NAMES, cluster=thread_cluster_yaml, **SEED).fit(X, y)
    clf.set_params(classes=["no", "yes"])
    with pytest.raises(pcqr.PcqrError, match="differs from the fitted classes_"):
        clf.predict(X[:10])
    assert os.path.isdir(clf.state_)
