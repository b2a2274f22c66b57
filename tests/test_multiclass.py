"""Sessions over c > 2 classes (issue 49), end to end as users run them: ``pcqr generate --classes``,
``train`` and ``answer --classes`` through gnmax, ``replay`` and ``report`` with a truth file, repeats
answered from the log, and ``PrivateClassifier`` with string labels under cross-validation; every
misuse refused in one line before anything is charged or written."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sklearn.model_selection import cross_val_score

import pcqr
from pcqr.jobs.cli import main
from tests.hostile_world import ledger_rows

CLASSES = 5


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _one_line(code: int, err: str, *needles: str) -> None:
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("pcqr: error: "), err
    for needle in needles:
        assert needle in lines[0], lines[0]


def _spent(ledger: Path) -> dict:
    """The ledger's charges not refunded and its sessions (what a refused command must leave empty)."""
    rows = ledger_rows(str(ledger))
    return {name: rows[name] for name in ("charges", "sessions") if rows.get(name)}


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    """A 5-class task: the argmax of 5 seeded linear scores of 6 features, 5% of labels moved."""
    root = tmp_path_factory.mktemp("multiclass")
    cluster = str(root / "cluster.yaml")
    Path(cluster).write_text("pcqr:\n  cluster:\n    backend: local\n    n-workers: 1\n"
                             "    threads-per-worker: 2\n    processes: false\n")
    assert main(["generate", "--kind", "agnostic", "--concept", "halfspace", "--classes", str(CLASSES),
                 "--noise", "0.05", "--rows", "40000", "--features", "6", "--queries", "1500", "--seed", "3",
                 "--out", str(root / "data"), "--cluster", cluster]) == 0
    return root


def test_generate_writes_c_classes_and_refuses_a_binary_concept(generated, capsys, tmp_path) -> None:
    labels = pq.read_table(generated / "data" / "private").column("label").to_numpy()
    counts = np.bincount(labels, minlength=CLASSES)
    assert counts.size == CLASSES and counts.min() > 0.05 * labels.size  # every class present
    meta = pq.read_schema(next((generated / "data" / "private").glob("*.parquet"))).metadata
    assert json.loads(meta[b"pcqr.concept"])["classes"] == CLASSES
    code, _, err = _cli(capsys, "generate", "--concept", "threshold", "--classes", "3", "--rows", "100",
                        "--out", str(tmp_path / "x"))
    _one_line(code, err, "--classes 3: the threshold concept has two labels")
    assert not (tmp_path / "x").exists()


def test_train_answer_replay_report_over_five_classes(generated, capsys, tmp_path) -> None:
    data, cluster = generated / "data", str(generated / "cluster.yaml")
    ledger, state, log = tmp_path / "ledger.sqlite", tmp_path / "state", tmp_path / "log"
    common = ["--ledger", str(ledger), "--cluster", cluster]
    code, out, err = _cli(capsys, "train", "--private", str(data / "private"), "--classes", str(CLASSES),
                          "--epsilon", "2", "--queries-max", "1500", "--state", str(state), "--json", *common)
    assert code == 0, err
    summary = json.loads(out)
    assert summary["classes"] == CLASSES and summary["gate"] == "gnmax"
    assert summary["proven_epsilon"] <= 2 and summary["proven_delta"] <= 1e-6
    params = json.loads((state / "session.json").read_text())["params"]
    assert params["classes"] == CLASSES
    code, out, err = _cli(capsys, "answer", "--state", str(state), "--queries", str(data / "queries"), "--log", str(log),
                          "--truth", str(data / "truth"), "--json", *common)
    assert code == 0, err
    answered = json.loads(out)
    answers = pq.read_table(log).column("answer").to_numpy()
    assert set(np.unique(answers)) == set(range(CLASSES))  # the log holds class indices, every one used
    assert answered["accuracy"] > 0.6  # chance is about 0.3 (the largest class's share)
    provenance = json.loads(pq.read_schema(next(log.glob("batch-*.parquet"))).metadata[b"pcqr.provenance"])
    assert provenance["parameters"]["classes"] == CLASSES
    code, out, err = _cli(capsys, "replay", str(log), "--truth", str(data / "truth"), "--json")
    assert code == 0, err
    assert json.loads(out.strip().splitlines()[-1])["accuracy"] == answered["accuracy"]  # after the answers' CSV
    code, out, err = _cli(capsys, "report", "--log", str(log), "--truth", str(data / "truth"),
                          "--out", str(tmp_path / "report.html"), "--json")
    assert code == 0, err
    assert str(tmp_path / "report-confusion.png") in json.loads(out)["figures"] and (tmp_path / "report-confusion.png").exists()
    from pcqr.pipeline.report.contents import session_report

    report = session_report(str(log), truth=str(data / "truth"))
    confusion = report.truth.confusion
    assert confusion.shape == (CLASSES, CLASSES) and confusion.sum() == 1500  # every answer, every truth
    assert np.trace(confusion) / confusion.sum() == pytest.approx(answered["accuracy"])
    page = (tmp_path / "report.html").read_text()
    for j in range(CLASSES):  # each true class's accuracy beside the figures
        assert f"accuracy on true class {j}" in page
    _distilled_student_answers_as_the_log(capsys, log, state, data / "queries", tmp_path, cluster)
    # repeats of logged queries get their logged classes, at no cost
    first = pq.read_table(log).sort_by("query_id").slice(0, 300)
    again = first.select(["query_id", *[f"x{j}" for j in range(6)]])
    again = again.set_column(0, "query_id", pa.array(np.arange(10**6, 10**6 + 300)))
    pq.write_table(again, tmp_path / "again.parquet")
    code, out, err = _cli(capsys, "answer", "--state", str(state), "--queries", str(tmp_path / "again.parquet"),
                          "--log", str(log), "--json", *common)
    assert code == 0, err
    batches = sorted(log.glob("batch-*.parquet"))
    repeated = pq.read_table(batches[-1]).sort_by("query_id")
    assert repeated.column("source").to_pylist() == ["duplicate"] * 300
    assert repeated.column("answer").to_pylist() == first.column("answer").to_pylist()


def _distilled_student_answers_as_the_log(capsys, log: Path, state: Path, queries: Path, tmp_path: Path,
                                          cluster: str, names: list[str] | None = None) -> None:
    """``pcqr distill`` of a c-class log writes a model file of c classes (and their names) whose
    ``pcqr predict`` gives every query the log's student answered the student's logged class."""
    model, predictions = tmp_path / "student.json", tmp_path / "predictions"
    code, out, err = _cli(capsys, "distill", "--log", str(log), "--state", str(state), "--out", str(model), "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["classes"] == CLASSES and summary.get("class_names") == (",".join(names) if names else None)
    record = json.loads(model.read_text())
    assert record["classes"] == CLASSES and record.get("class_names") == names and record["hypothesis"]["labels"]
    code, out, err = _cli(capsys, "predict", str(model), str(queries), "--out", str(predictions), "--json",
                          "--cluster", cluster)
    assert code == 0, err
    assert json.loads(out)["classes"] == CLASSES and json.loads(out).get("class_names") == (",".join(names) if names else None)
    logged = pq.read_table(log).to_pandas()
    predicted = pq.read_table(predictions).to_pandas().merge(logged, on="query_id")
    student = predicted[predicted["source"] == "student"]
    assert len(student) > 100 and student["answer"].nunique() > 2  # the comparison can fail
    assert (student["prediction"].astype(int) == student["answer"].astype(int)).all()


@pytest.mark.parametrize("args,needles", [
    (["--classes", "1"], ["--classes must be a whole number of classes in [2, 100], got 1"]),
    (["--classes", "101"], ["--classes must be a whole number of classes in [2, 100], got 101"]),
    (["--classes", "5", "--gate", "guess"], ["--gate guess: --classes 5 needs --gate gnmax or stability"]),
    (["--classes", "5", "--guess", "prior"], ["--guess prior: --classes 5 needs --gate gnmax or stability"]),
    (["--classes", "5", "--mode", "agnostic", "--hypothesis", "threshold"], ["--mode agnostic relabels"]),
    (["--classes", "5", "--learner", "stump"], ["--learner stump", "needs a multi-class learner"]),
    (["--classes", "3"], ["label column 'label' has values outside 0 .. 2 (--classes 3)"]),
    ([], ["label column 'label' has values outside {0, 1}"]),
])
def test_a_misused_class_count_is_one_line_and_spends_nothing(generated, capsys, tmp_path, args, needles) -> None:
    ledger, state = tmp_path / "ledger.sqlite", tmp_path / "state"
    code, _, err = _cli(capsys, "train", "--private", str(generated / "data" / "private"), "--epsilon", "2",
                        "--queries-max", "1000", "--state", str(state), "--ledger", str(ledger),
                        "--cluster", str(generated / "cluster.yaml"), *args)
    _one_line(code, err, *needles)
    assert not state.exists() and _spent(ledger) == {}  # a label found outside: the charge is refunded


def test_a_fallback_label_outside_the_classes_is_refused_before_anything(generated, capsys, tmp_path) -> None:
    ledger, state, log = tmp_path / "ledger.sqlite", tmp_path / "state", tmp_path / "log"
    common = ["--ledger", str(ledger), "--cluster", str(generated / "cluster.yaml")]
    assert main(["train", "--private", str(generated / "data" / "private"), "--classes", "5", "--epsilon", "2",
                 "--queries-max", "500", "--state", str(state), *common]) == 0
    capsys.readouterr()
    code, _, err = _cli(capsys, "answer", "--state", str(state), "--queries", str(generated / "data" / "queries"),
                        "--log", str(log), "--fallback-label", "5", *common)
    _one_line(code, err, "--fallback-label 5: the session answers the class indices 0 .. 4")
    assert not log.exists()


def test_private_classifier_with_three_named_classes_under_cross_validation(thread_cluster_yaml, tmp_path,
                                                                          monkeypatch) -> None:
    monkeypatch.setenv("PCQR_LEDGER", str(tmp_path / "ledger.sqlite"))
    warnings.simplefilter("ignore", pcqr.PrivacyCostWarning)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((6000, 3))
    y = np.where(X[:, 0] > 0.5, "high", np.where(X[:, 1] > 0, "mid", "low"))
    clf = pcqr.PrivateClassifier(epsilon=4.0, classes=["mid", "low", "high"], subsamples=100, labels=300,
                                 cluster=thread_cluster_yaml, seed=1, insecure_seed=True)
    scores = cross_val_score(clf, X, y, cv=2)
    assert scores.min() > 0.75  # chance: 0.4
    fitted = clf.fit(X[:3000], y[:3000])
    assert fitted.classes_.tolist() == ["high", "low", "mid"]
    predicted = fitted.predict(X[3000:3500])
    assert set(predicted.tolist()) == {"high", "low", "mid"}
    with pytest.raises(ValueError, match=r"y: holds labels outside classes=\['high', 'low', 'mid'\]") as refused:
        pcqr.PrivateClassifier(epsilon=4.0, classes=["mid", "low", "high"], cluster=thread_cluster_yaml).fit(
            X[:100], np.where(np.arange(100) == 7, "secret", y[:100]))
    assert "secret" not in str(refused.value)


def test_the_stability_gate_answers_five_classes(generated, capsys, tmp_path) -> None:
    """--gate stability over c classes: the plurality through the sparse vector on its gap; abstentions
    spend the T instances, then the student answers (every class index in the log)."""
    data = generated / "data"
    ledger, state, log = tmp_path / "ledger.sqlite", tmp_path / "state", tmp_path / "log"
    common = ["--ledger", str(ledger), "--cluster", str(generated / "cluster.yaml")]
    code, out, err = _cli(capsys, "train", "--private", str(data / "private"), "--classes", str(CLASSES), "--gate",
                          "stability", "--epsilon", "8", "--cutoff", "10", "--queries-max", "1500", "--subsamples",
                          "400", "--state", str(state), "--json", *common)
    assert code == 0, err
    assert json.loads(out)["gate"] == "stability" and json.loads(out)["classes"] == CLASSES
    code, out, err = _cli(capsys, "answer", "--state", str(state), "--queries", str(data / "queries"), "--log", str(log),
                          "--json", *common)
    assert code == 0, err
    table = pq.read_table(log)
    sources = table.column("source").to_pylist()
    assert "sparse_vector" in sources and table.column("status").to_pylist().count("abstained") == 10
    assert set(pc_unique(table.column("answer"))) <= set(range(CLASSES))


def pc_unique(column: pa.ChunkedArray) -> list[int]:
    return [v for v in column.unique().to_pylist() if v is not None]


def test_plan_gives_k_and_m_for_c_classes(capsys) -> None:
    """pcqr plan --private-rows N --classes c: the gates built for c classes (gnmax's noise on each count,
    larger than two classes' at the same eps), the guess gate refused, and the defaults train would use."""
    common = ["plan", "--private-rows", "100000", "--epsilon", "1", "--queries-max", "3000", "--json"]
    code, out, err = _cli(capsys, *common, "--classes", "5")
    assert code == 0, err
    five = json.loads(out)
    code, out, _ = _cli(capsys, *common)
    two = json.loads(out)
    gates = {g["gate"]: g for g in five["gates"]}
    assert "--gate guess answers two classes" in gates["guess"]["refused"]
    assert gates["gnmax"]["scale"] > {g["gate"]: g for g in two["gates"]}["gnmax"]["scale"]
    assert five["inputs"]["classes"] == 5 and "classes" not in two["inputs"]
    assert five["defaults"]["gate"] == "gnmax" and five["defaults"]["labels"] == five["labels_recommended"]
    code, _, err = _cli(capsys, "plan", "--alpha", "0.1", "--vc", "1", "--epsilon", "1", "--queries-max", "100",
                        "--classes", "3")
    _one_line(code, err, "--classes 3 applies to --private-rows only")


NAMES = ("low", "mid", "high", "top", "max")


@pytest.fixture(scope="module")
def named(generated) -> Path:
    """The generated task with its labels as names (class i is NAMES[i]), private rows and truth."""
    root = generated / "named"
    for part, folder in (("private", "private"), ("truth", "truth")):
        table = pq.read_table(generated / "data" / part)
        names = pa.array(np.asarray(NAMES, dtype=object)[table.column("label").to_numpy()].tolist())
        (root / folder).mkdir(parents=True, exist_ok=True)
        pq.write_table(table.set_column(table.column_names.index("label"), "label", names), root / folder / "p.parquet")
    return root


def test_named_classes_on_the_command_line(generated, named, capsys, tmp_path) -> None:
    """--classes low,mid,high,top,max: the label column holds the names (class i = the i-th name), the
    log's provenance lists them in order, --truth is read by name, the summary names them."""
    ledger, state, log = tmp_path / "ledger.sqlite", tmp_path / "state", tmp_path / "log"
    common = ["--ledger", str(ledger), "--cluster", str(generated / "cluster.yaml")]
    code, out, err = _cli(capsys, "train", "--private", str(named / "private"), "--classes", ",".join(NAMES),
                          "--epsilon", "2", "--queries-max", "1500", "--state", str(state), "--json", *common)
    assert code == 0, err
    assert json.loads(out)["classes"] == 5 and json.loads(out)["class_names"] == ",".join(NAMES)
    code, out, err = _cli(capsys, "answer", "--state", str(state), "--queries", str(generated / "data" / "queries"),
                          "--log", str(log), "--truth", str(named / "truth"), "--json", *common)
    assert code == 0, err
    accuracy = json.loads(out)["accuracy"]
    assert accuracy > 0.6
    provenance = json.loads(pq.read_schema(next(log.glob("batch-*.parquet"))).metadata[b"pcqr.provenance"])
    assert provenance["class_names"] == list(NAMES)
    code, out, err = _cli(capsys, "replay", str(log), "--truth", str(named / "truth"), "--json")
    assert code == 0, err
    assert json.loads(out.strip().splitlines()[-1])["accuracy"] == accuracy  # the truth read by name again
    _distilled_student_answers_as_the_log(capsys, log, state, generated / "data" / "queries", tmp_path,
                                          str(generated / "cluster.yaml"), list(NAMES))


@pytest.mark.parametrize("classes,needles", [
    ("low,low", ["a name is given twice"]),
    ("low", ["give at least two names"]),
    ("low,,high", ["is empty"]),
    (",".join(f"c{i}" for i in range(101)), ["--classes must be a whole number of classes in [2, 100], got 101"]),
    ("low,mid,high,top", ["label column 'label' has values outside --classes low,mid,high,top"]),
])
def test_bad_class_names_are_one_line_and_spend_nothing(generated, named, capsys, tmp_path, classes, needles) -> None:
    ledger, state = tmp_path / "ledger.sqlite", tmp_path / "state"
    code, _, err = _cli(capsys, "train", "--private", str(named / "private"), "--classes", classes, "--epsilon", "2",
                        "--queries-max", "1000", "--state", str(state), "--ledger", str(ledger),
                        "--cluster", str(generated / "cluster.yaml"))
    _one_line(code, err, *needles)
    assert not state.exists() and _spent(ledger) == {}


def test_names_need_a_text_or_whole_number_label_column(generated, capsys, tmp_path) -> None:
    """A float label column with --classes names is refused from its metadata, before the charge."""
    ledger, state = tmp_path / "ledger.sqlite", tmp_path / "state"
    table = pq.read_table(generated / "data" / "private").slice(0, 2000)
    table = table.set_column(table.column_names.index("label"), "label", table.column("label").cast(pa.float64()))
    pq.write_table(table, tmp_path / "floats.parquet")
    code, _, err = _cli(capsys, "train", "--private", str(tmp_path / "floats.parquet"), "--classes", "a,b,c,d,e",
                        "--epsilon", "2", "--state", str(state), "--ledger", str(ledger))
    _one_line(code, err, "label column 'label' is double; with --classes names it must hold text or whole numbers")
    assert not state.exists() and _spent(ledger) == {}


def test_session_create_takes_a_count_or_names(generated, named, tmp_path) -> None:
    """Session.create(classes=5) reads labels 0 .. 4, classes=[names] a column of names; status names them;
    anything else is one line naming classes= before anything is read or charged."""
    ledger = str(tmp_path / "ledger.sqlite")
    cluster = str(generated / "cluster.yaml")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pcqr.Session.create(str(tmp_path / "named-state"), str(named / "private"), classes=list(NAMES),
                                 epsilon=2.0, queries_max=300, ledger=ledger, cluster=cluster) as session:
            status = session.status()
            answers = session.answer(str(generated / "data" / "queries"), log=str(tmp_path / "log"))
    assert status.classes == 5 and status.class_names == list(NAMES)
    assert set(pc_unique(answers.column("answer"))) <= set(range(5))
    for bad, needle in ((3.0, "classes=3.0: expected a count"), (["low", "low"], "a name is given twice"),
                        (["a,b", "c"], "strings without commas"), (True, "classes=True")):
        with pytest.raises(pcqr.PcqrError, match=needle):
            pcqr.Session.create(str(tmp_path / "refused"), str(named / "private"), classes=bad, ledger=ledger)
    assert not (tmp_path / "refused").exists()


def test_grid_search_over_named_classes(thread_cluster_yaml, tmp_path, monkeypatch) -> None:
    """GridSearchCV picks among PrivateClassifier settings on three named classes (each fit charged)."""
    from sklearn.model_selection import GridSearchCV

    monkeypatch.setenv("PCQR_LEDGER", str(tmp_path / "ledger.sqlite"))
    warnings.simplefilter("ignore", pcqr.PrivacyCostWarning)
    rng = np.random.default_rng(1)
    X = rng.standard_normal((3000, 3))
    y = np.where(X[:, 0] > 0.5, "high", np.where(X[:, 1] > 0, "mid", "low"))
    search = GridSearchCV(pcqr.PrivateClassifier(classes=["low", "mid", "high"], subsamples=60, labels=200,
                                                 cluster=thread_cluster_yaml, seed=2, insecure_seed=True),
                          {"epsilon": [4.0, 8.0]}, cv=2).fit(X, y)
    assert search.best_params_["epsilon"] in (4.0, 8.0) and search.best_score_ > 0.7
    assert set(search.predict(X[:300]).tolist()) <= {"low", "mid", "high"}
