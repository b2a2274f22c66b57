"""The student distilled from a public log: its plain public forms (exactly the fitted model's
predictions), hostile model files, the teacher answers it learns from, ``pcqr answer --after-halt
student`` (deterministic across calls and batch sizes, no budget) and ``pcqr distill``."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from sklearn.ensemble import (
    ExtraTreesClassifier, GradientBoostingClassifier, HistGradientBoostingClassifier, RandomForestClassifier,
)
from sklearn.linear_model import LogisticRegression, RidgeClassifier, SGDClassifier
from sklearn.neighbors import KNeighborsClassifier
from sklearn.svm import LinearSVC
from sklearn.tree import DecisionTreeClassifier

from pcqr.jobs.cli import main
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.models.learners import ConstantModel, StumpLearner, ThresholdLearner
from pcqr.pipeline.models.portable import portable
from pcqr.pipeline.models.released import load_model, model_record, write_model
from pcqr.pipeline.session.distillation import teacher_answers
from pcqr.pipeline.public_log.batches import SOURCE_NAMES, append_batch, batch_table, encode_batch, sha256
from pcqr.pipeline.public_log.replay import verify_log
from pcqr.pipeline.gates.sparse_vector import ABSTAINED, ANSWERED, REFUSED
from tests.conftest import answer_two_ways, write_session_data

LEARNERS = [
    LogisticRegression(), LinearSVC(), RidgeClassifier(), SGDClassifier(random_state=0), StumpLearner(),
    ThresholdLearner(feature=1), DecisionTreeClassifier(max_depth=5, random_state=0),
    DecisionTreeClassifier(random_state=0), RandomForestClassifier(n_estimators=15, random_state=0),
    ExtraTreesClassifier(n_estimators=8, random_state=0), GradientBoostingClassifier(n_estimators=25, random_state=0),
    HistGradientBoostingClassifier(max_iter=25, random_state=0),
]


def _xor(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Four features, two of them rounded (ties at the split points), XOR labels with 10% noise."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(rows, 4))
    X[:, 2] = np.round(X[:, 2], 1)
    y = ((X[:, 0] * X[:, 1] > 0) ^ (rng.random(rows) < 0.1)).astype(np.int8)
    return X, y


@pytest.mark.parametrize("estimator", LEARNERS, ids=lambda e: type(e).__name__)
def test_portable_form_predicts_exactly_what_the_fitted_model_does(estimator, tmp_path) -> None:
    """Fitted on 2,000 rows, written to a model file and read back: the same label as the
    estimator's own predict on every one of 20,000 fresh rows (a difference is a bug, not noise)."""
    X, y = _xor(2000, 1)
    Q, _ = _xor(20_000, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fitted = estimator.fit(X, y)
    path = str(tmp_path / "m.json")
    write_model(path, model_record(portable(fitted, type(estimator).__name__), ["a", "b", "c", "d"], True))
    hypothesis, features, _ = load_model(path)
    assert features == ["a", "b", "c", "d"]
    expected = np.asarray(fitted.predict(Q))
    assert 0 < expected.mean() < 1  # both labels occur: the comparison can fail
    np.testing.assert_array_equal(hypothesis.predict(Q), expected)


@pytest.mark.parametrize("label", [0, 1])
def test_a_one_class_student_is_a_constant(label: int) -> None:
    hypothesis = portable(ConstantModel(label), "stump")
    assert hypothesis.predict(np.zeros((5, 3))).tolist() == [label] * 5


def test_a_learner_without_a_plain_form_is_refused_in_one_line() -> None:
    X, y = _xor(200, 3)
    with pytest.raises(PcqrError, match="KNeighborsClassifier has no plain public form") as info:
        portable(KNeighborsClassifier().fit(X, y), "sklearn.neighbors.KNeighborsClassifier")
    assert "\n" not in str(info.value)


def _tree_record() -> dict:
    X, y = _xor(500, 4)
    return portable(DecisionTreeClassifier(max_depth=3, random_state=0).fit(X, y), "tree").to_dict()


def _edits() -> list[tuple[str, object]]:
    """(what is edited, the edit) of a valid trees record."""
    def child_back(r):  # a loop: a child before its parent
        r["trees"][0]["left"][1] = 0
    def nan_threshold(r):
        r["trees"][0]["threshold"][0] = "nan"
    def float_feature(r):
        r["trees"][0]["feature"][0] = 0.5
    def one_child(r):
        leaf = r["trees"][0]["left"].index(-1)
        r["trees"][0]["right"][leaf] = leaf + 1
    def short_values(r):
        r["trees"][0]["value"][0] = [0.5]
    def bad_combine(r):
        r["combine"] = "max"
    def hidden_feature(r):  # the features list must name what the trees read
        r["features"] = []
    def out_of_tree(r):
        r["trees"][0]["right"][0] = 10**6
    return [("child_back", child_back), ("nan_threshold", nan_threshold), ("float_feature", float_feature),
            ("one_child", one_child), ("short_values", short_values), ("bad_combine", bad_combine),
            ("hidden_feature", hidden_feature), ("out_of_tree", out_of_tree)]


@pytest.mark.parametrize("name,edit", _edits(), ids=[n for n, _ in _edits()])
def test_edited_model_files_are_refused_in_one_line(name, edit, tmp_path) -> None:
    """Whoever edits a model file gains nothing: a malformed tree (a loop, a NaN, a child outside
    the tree...) is a one-line error naming the file, never a hang or a wrong answer."""
    record = model_record(_FakeHypothesis(_tree_record()), ["a", "b", "c", "d"], True)
    edit(record["hypothesis"])
    path = tmp_path / "m.json"
    path.write_text(json.dumps(record))
    with pytest.raises(PcqrError, match=str(path)) as info:
        load_model(str(path))
    assert "\n" not in str(info.value)


def test_linear_records_need_one_finite_weight_per_feature(tmp_path) -> None:
    for hypothesis in ({"class": "linear", "features": [0, 1], "weights": [1.0], "bias": 0.0},
                       {"class": "linear", "features": [0], "weights": ["inf"], "bias": 0.0},
                       {"class": "linear", "features": [7], "weights": [1.0], "bias": 0.0}):
        record = model_record(_FakeHypothesis(hypothesis), ["a", "b"], True)
        (tmp_path / "m.json").write_text(json.dumps(record))
        with pytest.raises(PcqrError, match="not a pcqr released model"):
            load_model(str(tmp_path / "m.json"))


class _FakeHypothesis:
    def __init__(self, record: dict) -> None:
        self.record = record

    def to_dict(self) -> dict:
        return self.record


def _write_log(log: Path, batches: list[tuple[list[str], list[int]]]) -> None:
    """A hash-chained log whose rows have the given sources and statuses (ANSWERED unless -1: abstained,
    -2: refused); x0 = the row number, answer = its parity."""
    prev, row = "", 0
    for number, (sources, statuses) in enumerate(batches):
        n = len(sources)
        table = __import__("pyarrow").table({"query_id": np.arange(row, row + n), "x0": np.arange(row, row + n) * 1.0})
        status = np.array([ANSWERED if s >= 0 else ABSTAINED if s == -1 else REFUSED for s in statuses], dtype=np.int8)
        source = np.array([SOURCE_NAMES.index(s) for s in sources], dtype=np.int8)
        label = (np.arange(row, row + n) % 2).astype(np.int8)
        data = encode_batch(batch_table(table, "query_id", ["x0"], status, label, number, None, source),
                            {"session_id": "s", "features": ["x0"]}, prev)
        append_batch(str(log), number, data)
        prev, row = sha256(data), row + n


def test_the_student_learns_only_what_the_teacher_released(tmp_path) -> None:
    """Answers from the k models through a gate (sparse_vector, guess, flipped) are the teacher's;
    repeats, h_priv's answers, the student's own, abstentions and refusals are not; log order is kept,
    and ``batches`` stops at a batch."""
    _write_log(tmp_path / "log", [
        (["sparse_vector", "duplicate", "guess", "sparse_vector"], [0, 0, 0, -1]),
        (["released_model", "flipped", "student", "sparse_vector"], [0, 0, 0, -2]),
    ])
    answers = teacher_answers(str(tmp_path / "log"), ["x0"])
    assert answers.X[:, 0].tolist() == [0.0, 2.0, 5.0] and answers.y.tolist() == [0, 0, 1] and answers.total == 3
    assert teacher_answers(str(tmp_path / "log"), ["x0"], batches=1).X[:, 0].tolist() == [0.0, 2.0]


def test_after_halt_student_answers_the_rest_deterministically_and_distills(tmp_path, capsys,
                                                                               thread_cluster_yaml) -> None:
    """A guess-gate session with T = 5 halts early in the stream; the student answers every later
    query (source student), spending nothing. One stream asked in two calls (batch sizes 500 and 300:
    the second refits the student from the log) gives the same log, row for row, as in one call
    (batch size 700). ``pcqr distill`` of the log with the same learner predicts exactly the
    student's answers; ``pcqr predict`` serves the file."""
    summaries, log = answer_two_ways(tmp_path, capsys, thread_cluster_yaml,
                                     ["--epsilon", "1", "--cutoff", "5", "--gate", "guess", "--learner", "stump"],
                                     ["--after-halt", "student"])
    source = log.column("source").to_numpy(zero_copy_only=False)
    student = source == "student"
    assert set(log.column("status").to_pylist()) == {"answered"}
    assert 1500 < student.sum() and set(source[~student]) <= {"guess", "flipped"}
    assert np.flatnonzero(~student).max() < np.flatnonzero(student).min()  # the student only after the halt
    last = summaries[-1]
    assert last["budget_used"] == 5 and last["budget_spent"] and last["student_answers"] == student.sum()
    assert last["student_taught"] == (~student).sum() and last["odometer"]["queries_tested"] == (~student).sum()
    assert summaries[1]["student_answers"] == 800 and summaries[1]["budget_used"] == 5
    truth = (log.column("x0").to_numpy() > 0.1).astype(int)
    assert (log.column("answer").to_numpy()[student] == truth[student]).mean() > 0.97
    assert verify_log(str(tmp_path / "log2")).ok

    assert main(["distill", "--log", str(tmp_path / "log2"), "--out", str(tmp_path / "s.json"), "--json"]) == 0
    distilled = json.loads(capsys.readouterr().out)
    assert distilled["learner"] == "stump" and distilled["teacher_answers"] == (~student).sum()
    assert distilled["privacy"].startswith("NOT PRIVATE")  # the session's noise was seeded
    hypothesis, features, record = load_model(str(tmp_path / "s.json"))
    X = np.column_stack([log.column(f).to_numpy() for f in features])
    np.testing.assert_array_equal(hypothesis.predict(X[student]), log.column("answer").to_numpy()[student])
    assert record["log_sha256"] == verify_log(str(tmp_path / "log2")).last_sha256
    assert main(["predict", str(tmp_path / "s.json"), str(tmp_path / "queries"), "--out", str(tmp_path / "pred"),
                 "--cluster", thread_cluster_yaml]) == 0
    assert pq.read_table(tmp_path / "pred").num_rows == 2000


def test_distill_refuses_before_writing(tmp_path, capsys) -> None:
    """A broken log, a learner with no plain form, a log the teacher never answered in, and
    --learner-param without --learner: one line each, no model file."""
    _write_log(tmp_path / "log", [(["sparse_vector", "guess"], [0, 0]), (["sparse_vector"], [0])])
    _write_log(tmp_path / "empty", [(["sparse_vector", "student"], [-1, 0])])
    altered = tmp_path / "altered"
    _write_log(altered, [(["sparse_vector", "guess"], [0, 0]), (["sparse_vector"], [0])])
    (altered / "batch-00000000.parquet").write_bytes((tmp_path / "empty" / "batch-00000000.parquet").read_bytes())
    out = tmp_path / "m.json"
    cases = [
        (["--log", str(altered)], "altered"),
        (["--log", str(tmp_path / "log"), "--learner", "sklearn.neighbors.KNeighborsClassifier"], "no plain public form"),
        (["--log", str(tmp_path / "log")], "names no learner"),
        (["--log", str(tmp_path / "empty"), "--learner", "stump"], "no answer released by the session's models"),
        (["--log", str(tmp_path / "log"), "--learner-param", "C=1"], "--learner-param needs --learner"),
    ]
    for extra, message in cases:
        assert main(["distill", "--out", str(out), *extra]) != 0
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1 and not out.exists(), (extra, err)


def test_after_halt_options_are_checked_before_anything_is_answered(tmp_path, capsys, thread_cluster_yaml) -> None:
    write_session_data(tmp_path, rows=4000, queries=20)
    assert main(["train", "--private", str(tmp_path / "private"), "--state", str(tmp_path / "st"), "--cutoff", "2",
                 "--gate", "guess", "--cluster", thread_cluster_yaml]) == 0
    capsys.readouterr()
    base = ["answer", "--state", str(tmp_path / "st"), "--queries", str(tmp_path / "queries"), "--log",
            str(tmp_path / "log"), "--cluster", thread_cluster_yaml]
    cases = [
        (["--after-halt", "refuse", "--student-learner", "stump"], "--student-learner applies only with --after-halt student"),
        (["--after-halt", "student", "--student-learner-param", "C=1"], "--student-learner-param needs --student-learner"),
        (["--after-halt", "student", "--student-learner", "os.system"], "--learner 'os.system'"),
        (["--after-halt", "student", "--student-learner", "sklearn.linear_model.LogisticRegression",
          "--student-learner-param", "C=-1"], "C"),
    ]
    for extra, message in cases:
        assert main([*base, *extra]) != 0
        err = capsys.readouterr().err
        assert message in err and not (tmp_path / "log").exists(), (extra, err)


def test_a_continuing_sessions_default_student_is_checked_at_its_first_fit(tmp_path, capsys, monkeypatch,
                                                                          thread_cluster_yaml) -> None:
    """A continuing session's default after-halt student (no --student-learner; the ledger vouches for the
    learner record it comes from) is not fitted on a trial sample before the run, which imports
    scikit-learn (about a second of every run): it is first fitted at the halt. A fit that fails there
    stops the run in one line, and the batch holding the halt is not committed; --after-halt refuse
    then answers it and the rest."""
    import pcqr.pipeline.models.learners as learners
    import pcqr.pipeline.session.distillation as distillation

    write_session_data(tmp_path, rows=4000, queries=600)
    state = tmp_path / "st"
    assert main(["train", "--private", str(tmp_path / "private"), "--state", str(state), "--cutoff", "5",
                 "--epsilon", "1", "--gate", "guess", "--learner", "stump", "--seed", "3", "--insecure-seed",
                 "--cluster", thread_cluster_yaml]) == 0
    capsys.readouterr()

    def no_trial(*args, **kwargs):
        raise AssertionError("checked before the run")

    def failing(*args, **kwargs):
        raise ValueError("cannot fit\nsecond line")

    monkeypatch.setattr(learners.LearnerSpec, "check", no_trial)
    monkeypatch.setattr(distillation, "fit_on_teacher", failing)
    base = ["answer", "--state", str(state), "--queries", str(tmp_path / "queries"), "--log", str(tmp_path / "log"),
            "--batch-size", "10", "--cluster", thread_cluster_yaml, "--json"]
    assert main(base) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("pcqr: error: the after-halt student stump failed to fit on the released answers (ValueError: "
                   "cannot fit); nothing of this batch was released: run again with --after-halt refuse, or name "
                   "another --student-learner"), err
    written = len(list((tmp_path / "log").glob("batch-*.parquet")))
    assert 0 < written < 60  # the batches before the halt's; not that one, nor any after
    assert main([*base, "--after-halt", "refuse"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["budget_spent"] and summary["refused"] > 0
    assert len(list((tmp_path / "log").glob("batch-*.parquet"))) == 60 and verify_log(str(tmp_path / "log")).ok


def test_python_api_answers_after_the_halt(thread_cluster_yaml, tmp_path) -> None:
    """PrivateClassifier(after_halt='student'): no NaN after T; Session.status() still shows the
    budget spent; pcqr.distill writes the student's file."""
    import pcqr
    from tests.conftest import threshold_data

    data = threshold_data(20_000, seed=11)
    X = np.column_stack([data[f"x{i}"] for i in range(3)])
    queries = threshold_data(1000, seed=12)
    Q = np.column_stack([queries[f"x{i}"] for i in range(3)])
    clf = pcqr.PrivateClassifier(epsilon=1, cutoff=2, gate="guess", after_halt="student", learner="stump",
                                 student_learner="sklearn.linear_model.LogisticRegression",
                                 state=str(tmp_path / "state"), log=str(tmp_path / "log"),
                                 cluster=thread_cluster_yaml, seed=3, insecure_seed=True)
    predicted = clf.fit(X, data["label"]).predict(Q)
    assert not np.isnan(predicted).any() and np.mean(predicted == queries["label"]) > 0.9
    with pcqr.Session.open(str(tmp_path / "state"), cluster=thread_cluster_yaml) as session:
        assert session.status().halted
    summary = pcqr.distill(str(tmp_path / "log"), str(tmp_path / "s.json"), "sklearn.linear_model.LogisticRegression")
    assert summary["form"] == "linear" and summary["teacher_answers"] > 0
