"""The cross-validated student (pcqr.pipeline.models.student_selection): the after-halt student of
an ``--learner auto`` session, chosen by k-fold cross-validation on the released answers.

It is post-processing of the public log, so what is tested is what makes it safe to use as one:
it reads only the answers it is given, its choice and its answers are a function of them (the same
answers give the same student), and it picks the learner the answers favour. Where it is used (a
session's log and ``pcqr distill``) its choice is recorded.
"""
from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from pcqr.jobs.cli import main
from pcqr.pipeline.gates.public_guess import fit_student
from pcqr.pipeline.models.student_selection import CANDIDATES, FOLDS, candidates, select_student
from pcqr.pipeline.options import AUTO, CROSS_VALIDATED
from pcqr.pipeline.public_log.batches import PROVENANCE_KEY, batch_files
from pcqr.pipeline.public_log.replay import verify_log
from tests.conftest import write_session_data

CV = {"name": CROSS_VALIDATED, "params": {}}


def _xor(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    X = np.random.default_rng(seed).random((rows, 2))
    return X, ((X[:, 0] > 0.5) ^ (X[:, 1] > 0.5)).astype(np.int8)


def _linear(rows: int, seed: int, features: int = 20) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(rows, features))
    return X, (X @ rng.normal(size=features) > 0).astype(np.int8)


def test_it_picks_what_the_answers_favour_and_the_same_answers_give_the_same_student() -> None:
    """On XOR (no linear cut) the choice is not the logistic regression; on a 20-feature linear
    concept, where a depth-limited tree or a small forest cannot follow the diagonal cut, it beats the
    rule's tree. Refitting on the same answers gives the same choice, scores and predictions."""
    X, y = _xor(300, 1)
    chosen, scores = select_student(CV, X, y)
    assert set(scores) == {c["name"] for c in CANDIDATES} and chosen["name"] != "sklearn.linear_model.LogisticRegression"
    assert scores[chosen["name"]] == max(scores.values()) > 0.9
    again, rescored = select_student(CV, X.copy(), y.copy())
    assert again == chosen and rescored == scores
    Q = np.random.default_rng(2).random((2000, 2))
    assert np.array_equal(fit_student(chosen, X, y).predict(Q), fit_student(again, X.copy(), y.copy()).predict(Q))
    X, y = _linear(300, 3)
    chosen, scores = select_student(CV, X, y)
    assert scores[chosen["name"]] > scores[AUTO]


def test_too_few_of_a_label_to_fold_leaves_the_rules_tree_and_one_label_a_constant() -> None:
    X, y = _xor(200, 4)
    y[:] = 0
    y[: FOLDS - 1] = 1
    assert select_student(CV, X, y) == ({"name": AUTO, "params": {}}, {})
    assert np.array_equal(fit_student(CV, X, np.zeros(200, dtype=np.int8)).predict(X), np.zeros(200))


def test_the_users_parameters_go_to_every_candidate_that_takes_them() -> None:
    """``--learner auto --learner-param max_depth=3``: the trees and boosting take it, the logistic
    regression does not and is left out; the rule's tree always stays."""
    names = [c["name"] for c in candidates({"max_depth": 3})]
    assert "sklearn.linear_model.LogisticRegression" not in names and names[0] == AUTO and len(names) == 3
    assert all(c["params"]["max_depth"] == 3 for c in candidates({"max_depth": 3}))
    assert len(candidates({"class_weight": "balanced"})) == len(CANDIDATES)


def test_other_students_are_not_chosen_for() -> None:
    named = {"name": "stump", "params": {}}
    assert select_student(named, *_xor(100, 5)) == (named, {})


def test_a_default_session_records_the_choice_and_distill_writes_it(tmp_path, capsys, thread_cluster_yaml) -> None:
    """A session at the default learner answers after the halt with the cross-validated student; the
    log's provenance names the learner it chose, and ``pcqr distill`` writes that learner's model."""
    write_session_data(tmp_path, rows=20_000, queries=600)
    assert main(["answer", "--private", str(tmp_path / "private"), "--state", str(tmp_path / "st"), "--queries",
                 str(tmp_path / "queries"), "--log", str(tmp_path / "log"), "--labels", "200", "--gate", "gnmax",
                 "--seed", "3", "--insecure-seed", "--cluster", thread_cluster_yaml, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["student_answers"] == 400 and summary["student_taught"] == 200
    report = verify_log(str(tmp_path / "log"))
    assert report.ok
    batches = [json.loads(pq.read_schema(path).metadata[PROVENANCE_KEY]) for _, path in batch_files(str(tmp_path / "log"))]
    students = [b["student"] for b in batches if "student" in b]
    assert students and all(s["learner"] == CV and s["chosen"]["name"] in {c["name"] for c in CANDIDATES}
                            for s in students)
    assert main(["distill", "--log", str(tmp_path / "log"), "--out", str(tmp_path / "student.json"), "--json"]) == 0
    distilled = json.loads(capsys.readouterr().out)
    assert distilled["learner"] == CROSS_VALIDATED and distilled["chosen"] == students[0]["chosen"]["name"]
    record = json.loads((tmp_path / "student.json").read_text())
    assert record["learner"] == students[0]["chosen"]


@pytest.mark.parametrize("bad", ["cross-validated"])
def test_cross_validated_is_a_student_not_a_teacher(bad, tmp_path, capsys) -> None:
    """``--learner cross-validated`` is refused in one line (it names a student: choosing the teachers'
    learner from private data would be a charged selection)."""
    write_session_data(tmp_path, rows=2000, queries=10)
    assert main(["train", "--private", str(tmp_path / "private"), "--state", str(tmp_path / "st"),
                 "--learner", bad]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and bad in err[0]
