"""A session whose released answers are all one label says so, and what to try (issue 29, item 1):
``pcqr answer`` (stderr and ``one_label_warning`` in --json) and ``pcqr status``, from public facts
only (the released labels, n and k; never the votes). ``--learner auto`` is the tree the rule picks."""
from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from pcqr.jobs.cli import main
from pcqr.pipeline.session.planning import ONE_LABEL_ANSWERS, ONE_LABEL_SHARE, one_label_warning
from tests.conftest import write_parquet


def _session(answered: int, ones: int | None, k: int = 100, rows: int = 10_000) -> SimpleNamespace:
    return SimpleNamespace(totals={"answered": answered}, released_ones=ones, private_rows=rows,
                           params=SimpleNamespace(subsamples=k, classes=2), learner={"name": "stump"})


@pytest.mark.parametrize(("answered", "ones", "warned"), [
    (1000, 0, True), (1000, 1000, True), (1000, 5, True), (1000, 6, False), (1000, 500, False),
    (ONE_LABEL_ANSWERS - 1, 0, False), (ONE_LABEL_ANSWERS, 0, True), (5000, None, False),
])
def test_the_rule_reads_the_released_labels_only(answered: int, ones: int | None, warned: bool) -> None:
    """Warned when at least ONE_LABEL_ANSWERS answers hold at most ONE_LABEL_SHARE of the other label;
    never for a state from before the count (None)."""
    line = one_label_warning(_session(answered, ones))  # type: ignore[arg-type]
    assert (line is not None) == warned
    if line is not None:
        label = 1 if ones and ones > answered / 2 else 0
        assert f"are label {label}" in line and "100 private rows each" in line and "--learner auto" in line
    assert ONE_LABEL_SHARE == 0.005


def test_a_tree_session_is_not_told_to_try_trees() -> None:
    session = _session(1000, 0)
    session.learner = {"name": "sklearn.tree.DecisionTreeClassifier"}
    line = one_label_warning(session)  # type: ignore[arg-type]
    assert line is not None and "--learner auto (decision trees" not in line and "--subsamples" in line


@pytest.mark.parametrize(("learner", "told"), [
    ({"name": "stump"}, True),
    ({"name": "sklearn.tree.DecisionTreeClassifier", "params": {"max_depth": 3}}, True),
    ({"name": "sklearn.tree.DecisionTreeClassifier", "params": {"max_depth": 3, "class_weight": "balanced"}}, False),
])
def test_a_rare_label_is_told_to_try_class_weighted_trees_unless_it_has(learner: dict, told: bool) -> None:
    """Issue 29, item 4 (benchmarks/imbalance.py): trees that weigh their own subsample's labels lift the
    positives' recall where each model sees a few; a session that already weighs them is not told again."""
    from pcqr.pipeline.session.planning import CLASS_WEIGHTED

    session = _session(1000, 0)
    session.learner = learner
    line = one_label_warning(session)  # type: ignore[arg-type]
    assert line is not None and (CLASS_WEIGHTED in line) == told
    assert CLASS_WEIGHTED == "--learner auto --learner-param class_weight=balanced"


def test_answer_and_status_say_so_on_a_rare_label(tmp_path, capsys, thread_cluster_yaml) -> None:
    """3% positives in a disc, stumps on 40 rows each: every model answers 0, and the user is told; --learner auto
    trains the rule's tree (depth round(log2(n / k)) - 3) and the count of ones is the log's."""
    import pyarrow.parquet as pq

    rng = np.random.default_rng(2911)
    X = rng.standard_normal((20_000, 3))
    label = (X[:, 0] ** 2 + X[:, 1] ** 2 < 0.06).astype(np.int64)  # about 3%: a disc, which no stump isolates
    write_parquet(str(tmp_path / "private" / "p.parquet"), {"x0": X[:, 0], "x1": X[:, 1], "x2": X[:, 2],
                                                           "label": label})
    Q = rng.standard_normal((1000, 3))
    write_parquet(str(tmp_path / "queries" / "p.parquet"),
                  {"query_id": np.arange(1000), "x0": Q[:, 0], "x1": Q[:, 1], "x2": Q[:, 2]})
    common = ["--private", str(tmp_path / "private"), "--seed", "4", "--insecure-seed", "--cluster", thread_cluster_yaml,
              "--ledger", str(tmp_path / "ledger.sqlite"),  # its own: its rows are no other test's private data
              "--epsilon", "4", "--gate", "gnmax", "--queries-max", "1000", "--subsamples", "500"]
    assert main(["answer", "--state", str(tmp_path / "st"), "--queries", str(tmp_path / "queries"), "--log",
                 str(tmp_path / "log"), "--json", "--learner", "stump", *common]) == 0
    out, err = capsys.readouterr()
    summary = json.loads(out)
    answers = pq.read_table(tmp_path / "log").column("answer").to_numpy()
    assert summary["answered"] == 1000 and int(np.sum(answers == 1)) <= 5
    assert "are label 0" in summary["one_label_warning"] and "warning: " in err and "--learner auto" in err
    assert main(["status", "--state", str(tmp_path / "st")]) == 0
    assert "are label 0" in capsys.readouterr().err
    assert main(["status", "--state", str(tmp_path / "st"), "--json"]) == 0
    assert "are label 0" in json.loads(capsys.readouterr().out)["one_label_warning"]
    assert main(["train", "--state", str(tmp_path / "auto"), "--learner", "auto", "--json", *common]) == 0
    trained = json.loads(capsys.readouterr().out)
    assert trained["learner"] == "sklearn.tree.DecisionTreeClassifier"
    state = json.loads((tmp_path / "auto" / "session.json").read_text())
    assert state["learner"]["params"] == {"max_depth": 4} and state["released_ones"] == 0  # 40 rows: log2 = 5.3
    assert state["learner"]["student"] == {"name": "cross-validated", "params": {}}  # chosen from its answers
    assert main(["train", "--state", str(tmp_path / "weighted"), "--learner", "auto", "--learner-param",
                 "class_weight=balanced", *common]) == 0  # the user's parameter over the rule's depth
    capsys.readouterr()
    weighted = json.loads((tmp_path / "weighted" / "session.json").read_text())["learner"]["params"]
    assert weighted == {"max_depth": 4, "class_weight": "balanced"}


def test_an_auto_sessions_student_grows_with_the_answers_it_learns_from() -> None:
    """'auto' resolves at the rows of each fit: a teacher's n / k, a student's count of released
    answers (public), so the after-halt student of an auto session is a deeper tree than its teachers
    once it has the answers to support one; the user's parameters stay over the rule's."""
    from pcqr.pipeline.gates.public_guess import fit_student
    from pcqr.pipeline.models.learners import AUTO_MAX_DEPTH, resolve_auto
    from pcqr.pipeline.session.distillation import student_learner

    assert resolve_auto("auto", {}, 40) == ("sklearn.tree.DecisionTreeClassifier", {"max_depth": 4})
    assert resolve_auto("auto", {"max_depth": 3, "min_samples_leaf": 5}, 10_000)[1] == {"max_depth": 3, "min_samples_leaf": 5}
    assert resolve_auto("stump", {"a": 1}, 10_000) == ("stump", {"a": 1})
    rng = np.random.default_rng(7)
    for rows, depth in ((20, 3), (40, 4), (80, 5), (2000, AUTO_MAX_DEPTH)):
        X = rng.standard_normal((rows, 2))
        y = ((X[:, 0] > 0) ^ (X[:, 1] > 0)).astype(np.int8)
        assert fit_student({"name": "auto", "params": {}}, X, y).get_params()["max_depth"] == depth
    session = {"name": "sklearn.tree.DecisionTreeClassifier", "params": {"max_depth": 2},
               "student": {"name": "auto", "params": {}}}
    assert student_learner(session, None, None, {}) == {"name": "auto", "params": {}}
    assert student_learner({"name": "stump", "params": {}}, None, None, {}) == {"name": "stump", "params": {}}
    assert student_learner(session, None, "stump", {})["name"] == "stump"  # --student-learner wins


@pytest.mark.parametrize("edited", ["12", -1, 2**70, 1.5, True])
def test_an_edited_count_of_ones_is_refused_in_one_line(tmp_path, capsys, edited) -> None:
    """released_ones is read back from session.json: anything but a count of the session's answers is
    refused in one line (exit 2), never a traceback; the state is left as it was."""
    from pcqr.pipeline.session.state import SESSION_FILE

    from tests.conftest import write_session_data

    write_session_data(tmp_path, rows=4000, queries=10)
    assert main(["train", "--private", str(tmp_path / "private"), "--state", str(tmp_path / "st"), "--seed", "1",
                 "--insecure-seed", "--subsamples", "20", "--learner", "stump", "--ledger", str(tmp_path / "ledger.sqlite")]) == 0
    capsys.readouterr()
    path = tmp_path / "st" / SESSION_FILE
    state = json.loads(path.read_text())
    state["released_ones"] = edited
    path.write_text(json.dumps(state))
    before = path.read_bytes()
    assert main(["status", "--state", str(tmp_path / "st")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "released_ones" in err[0] and path.read_bytes() == before
