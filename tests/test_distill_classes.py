"""The released student of a session over c > 2 classes (issue 49): each plain public form predicts
exactly the fitted model's class on fresh rows, whichever of the classes the student saw, and an
edited c-class model file is refused in one line naming the file. (``pcqr distill`` and ``pcqr
predict`` of a c-class log end to end: tests/test_multiclass.py.)"""
from __future__ import annotations

import copy
import json
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from sklearn.ensemble import (
    ExtraTreesClassifier, GradientBoostingClassifier, HistGradientBoostingClassifier, RandomForestClassifier,
)
from sklearn.linear_model import LogisticRegression, RidgeClassifier, SGDClassifier
from sklearn.neighbors import KNeighborsClassifier
from sklearn.svm import LinearSVC
from sklearn.tree import DecisionTreeClassifier

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.models.learners import ConstantModel
from pcqr.pipeline.models.portable import portable
from pcqr.pipeline.models.released import load_model, model_record, write_model

CLASSES = 5
FEATURES = ["a", "b", "c", "d"]
LEARNERS = [
    LogisticRegression(max_iter=500), LinearSVC(), RidgeClassifier(), SGDClassifier(random_state=0),
    DecisionTreeClassifier(max_depth=5, random_state=0), DecisionTreeClassifier(random_state=0),
    RandomForestClassifier(n_estimators=10, random_state=0), ExtraTreesClassifier(n_estimators=6, random_state=0),
    GradientBoostingClassifier(n_estimators=15, random_state=0), HistGradientBoostingClassifier(max_iter=15, random_state=0),
]
#: The classes a student saw: all five, three of them (its classes_ skip indices), two of them.
SEEN = ((0, 1, 2, 3, 4), (0, 2, 4), (1, 3))


def _task(rows: int, seed: int, seen: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The argmax of noisy linear scores of four features (one rounded: ties at the split points),
    labelled with the ``seen`` class indices."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(rows, 4))
    X[:, 2] = np.round(X[:, 2], 1)
    scores = X @ np.random.default_rng(0).normal(size=(4, len(seen))) + 0.5 * rng.normal(size=(rows, len(seen)))
    return X, np.asarray(seen)[np.argmax(scores, axis=1)]


def _fit(estimator: Any, seen: tuple[int, ...]) -> Any:
    X, y = _task(1500, 1, seen)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return estimator.fit(X, y)


def _written(hypothesis: Any, path: Path, **record: Any) -> Path:
    write_model(str(path), model_record(hypothesis, FEATURES, True, classes=CLASSES, **record))
    return path


@pytest.mark.parametrize("seen", SEEN, ids=lambda s: "seen" + "".join(map(str, s)))
@pytest.mark.parametrize("estimator", LEARNERS, ids=lambda e: type(e).__name__)
def test_each_form_predicts_exactly_the_fitted_models_class(estimator, seen, tmp_path) -> None:
    """Fitted on 1,500 rows of the classes ``seen``, written and read back: the class the estimator's
    own predict gives on each of 10,000 fresh rows (a difference is a bug, not noise)."""
    fitted = _fit(estimator, seen)
    hypothesis, _, record = load_model(str(_written(portable(fitted, "learner", CLASSES), tmp_path / "m.json")))
    assert record["classes"] == CLASSES and record["hypothesis"]["labels"] == list(seen)
    Q, _ = _task(10_000, 2, seen)
    expected = np.asarray(fitted.predict(Q))
    assert set(np.unique(expected)) == set(seen)  # every seen class predicted: the comparison can fail
    np.testing.assert_array_equal(hypothesis.predict(Q), expected)


@pytest.mark.parametrize("label", [0, 3, 4])
def test_a_one_class_student_is_its_class(label: int, tmp_path) -> None:
    hypothesis, _, _ = load_model(str(_written(portable(ConstantModel(label), "auto", CLASSES), tmp_path / "m.json")))
    assert hypothesis.predict(np.zeros((4, 4))).tolist() == [label] * 4


def test_a_student_of_a_class_beyond_the_sessions_is_refused() -> None:
    fitted = _fit(LogisticRegression(max_iter=500), (0, 2, 4))
    with pytest.raises(PcqrError, match=r"classes are \[0, 2, 4\], expected class indices 0 .. 2") as info:
        portable(fitted, "sklearn.linear_model.LogisticRegression", 3)
    assert "\n" not in str(info.value)
    with pytest.raises(PcqrError, match="KNeighborsClassifier has no plain public form"):
        portable(_fit(KNeighborsClassifier(), (0, 1, 2)), "sklearn.neighbors.KNeighborsClassifier", CLASSES)


Edit = Callable[[dict], None]


def _edits() -> list[tuple[str, str, Edit]]:
    """(the form edited, what is edited, the edit) of a valid record over five classes."""
    def label_beyond(r: dict) -> None:  # a class the session does not have
        r["hypothesis"]["labels"][-1] = CLASSES
    def labels_unsorted(r: dict) -> None:
        r["hypothesis"]["labels"][:2] = r["hypothesis"]["labels"][1::-1]
    def labels_repeated(r: dict) -> None:
        r["hypothesis"]["labels"][1] = r["hypothesis"]["labels"][0]
    def labels_dropped(r: dict) -> None:  # a vote over more values than labels
        r["hypothesis"]["labels"].pop()
    def labels_text(r: dict) -> None:
        r["hypothesis"]["labels"][0] = "zero"
    def classes_removed(r: dict) -> None:  # a two-class record whose hypothesis lists labels
        del r["classes"]
    def classes_text(r: dict) -> None:
        r["classes"] = "5"
    def names_short(r: dict) -> None:
        r["class_names"] = ["a", "b"]
    def names_repeated(r: dict) -> None:
        r["class_names"] = ["a"] * CLASSES
    def base_short(r: dict) -> None:
        r["hypothesis"]["base"].pop()
    def base_number(r: dict) -> None:
        r["hypothesis"]["base"] = 0.0
    def stage_cut(r: dict) -> None:  # a stage missing one label's tree
        r["hypothesis"]["trees"].pop()
    def one_label_sum(r: dict) -> None:
        r["hypothesis"]["labels"] = [0]
        r["hypothesis"]["base"] = 0.0
    def vote_width(r: dict) -> None:
        r["hypothesis"]["trees"][0]["value"][0].append(0.5)
    def weights_row_missing(r: dict) -> None:
        r["hypothesis"]["weights"].pop()
    def weight_missing(r: dict) -> None:
        r["hypothesis"]["weights"][1].pop()
    def bias_text(r: dict) -> None:
        r["hypothesis"]["bias"][0] = "big"
    def bias_infinite(r: dict) -> None:
        r["hypothesis"]["bias"][0] = "inf"
    shared = [("label_beyond", label_beyond), ("labels_unsorted", labels_unsorted),
              ("labels_repeated", labels_repeated), ("labels_dropped", labels_dropped), ("labels_text", labels_text),
              ("classes_removed", classes_removed), ("classes_text", classes_text), ("names_short", names_short),
              ("names_repeated", names_repeated)]
    return ([("boosting", name, edit) for name, edit in
             [*shared, ("base_short", base_short), ("base_number", base_number), ("stage_cut", stage_cut),
              ("one_label_sum", one_label_sum)]]
            + [("forest", name, edit) for name, edit in [*shared, ("vote_width", vote_width)]]
            + [("linear", name, edit) for name, edit in
               [*shared, ("weights_row_missing", weights_row_missing), ("weight_missing", weight_missing),
                ("bias_text", bias_text), ("bias_infinite", bias_infinite)]])


@pytest.fixture(scope="module")
def records() -> dict[str, dict]:
    """A valid five-class model record of each form (names given, so that their edits are seen)."""
    fitted = {"boosting": GradientBoostingClassifier(n_estimators=3, random_state=0),
              "forest": RandomForestClassifier(n_estimators=3, max_depth=3, random_state=0),
              "linear": LogisticRegression(max_iter=500)}
    return {form: model_record(portable(_fit(estimator, SEEN[0]), form, CLASSES), FEATURES, True, classes=CLASSES,
                               class_names=["low", "mid", "high", "top", "max"])
            for form, estimator in fitted.items()}


@pytest.mark.parametrize("form,name,edit", _edits(), ids=[f"{f}-{n}" for f, n, _ in _edits()])
def test_edited_class_records_are_refused_in_one_line(records, form, name, edit, tmp_path) -> None:
    """Whoever edits a c-class model file gains nothing: labels outside the classes, out of order or
    not matching the trees' values, a base or a stage of the wrong size, a class count or names that
    disagree with the labels -- each a one-line error naming the file, never a crash or a wrong class."""
    record = copy.deepcopy(records[form])
    path = tmp_path / "m.json"
    path.write_text(json.dumps(record))
    load_model(str(path))  # the unedited record is read: the edit is what is refused
    edit(record)
    path.write_text(json.dumps(record))
    with pytest.raises(PcqrError, match=str(path)) as info:
        load_model(str(path))
    assert "\n" not in str(info.value)
