"""pcqr report: the figures' data equal the log's, the page is self-contained and lists what it read,
the private state is read only when --state is given, and bad input writes nothing."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

from pcqr.jobs.cli import main
from pcqr.pipeline.session.replay import read_answers
from pcqr.pipeline.session.report import VOTE_MARGINS_NOTE, session_report
from tests.conftest import DENSE_BOTTOMS_PRIVACY, threshold_data, write_parquet, write_session_data

pytest.importorskip("matplotlib")


@pytest.fixture(scope="module")
def answered(tmp_path_factory):
    """A session that abstains often (DENSE_BOTTOMS) answering 2,000 queries in batches of 250,
    and a truth file for them."""
    root = write_session_data(tmp_path_factory.mktemp("report"))
    cluster = root / "cluster.yaml"
    cluster.write_text("pcqr:\n  cluster:\n    backend: local\n    n-workers: 1\n"
                       "    threads-per-worker: 2\n    processes: false\n")
    assert main(["answer", "--private", str(root / "private"), "--state", str(root / "state"), "--queries",
                 str(root / "queries"), "--log", str(root / "log"), "--batch-size", "250", *DENSE_BOTTOMS_PRIVACY,
                 "--queries-max", "100000", "--subsamples", "660", "--seed", "5", "--insecure-seed",
                 "--cluster", str(cluster), "--json"]) == 0
    truth = threshold_data(2000, seed=2)
    write_parquet(str(root / "truth" / "t.parquet"), {"query_id": np.arange(2000), "label": truth["label"]})
    return root


def test_the_figures_data_are_the_logs(answered) -> None:
    root = answered
    report = session_report(str(root / "log"), truth=str(root / "truth"))
    log = read_answers(str(root / "log"))
    status = np.asarray(log.column("status").to_pylist())
    batch = np.asarray(log.column("batch").to_pylist())
    assert list(report.batches) == list(range(8)) and report.total_queries == 2000
    for name in ("answered", "abstained", "refused"):
        assert list(getattr(report, name)) == [int(np.sum((batch == b) & (status == name))) for b in range(8)]
    assert report.budget_used == int(np.sum(status == "abstained")) > 0
    state = json.loads((root / "state" / "session.json").read_text())
    assert report.budget_used == state["sparse_vector"]["bottoms"]  # the curve ends at the session's c
    assert report.certificate["cutoff"] == 400 and report.certificate["proven_epsilon"] <= 25
    labels = np.asarray([-1 if a is None else a for a in log.column("answer").to_pylist()])
    assert int(report.ones.sum()) == int(np.sum((status == "answered") & (labels == 1)))
    truth = threshold_data(2000, seed=2)["label"]
    ids = np.asarray(log.column("query_id").to_pylist())
    right = (status == "answered") & (labels == truth[ids])
    assert int(report.correct.sum()) == int(right.sum()) and int(report.evaluated.sum()) == int(np.sum(status == "answered"))
    assert VOTE_MARGINS_NOTE in report.notes


def test_the_command_writes_a_self_contained_page_and_reads_no_state_unless_asked(answered, capsys) -> None:
    root = answered
    state = root / "state"
    state.rename(root / "hidden")  # a report without --state must not need the private state
    try:
        out = root / "out" / "report.html"
        assert main(["report", "--log", str(root / "log"), "--truth", str(root / "truth"), "--out", str(out),
                     "--json"]) == 0
    finally:
        (root / "hidden").rename(state)
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["read_state"] is False and not any("state" in f for f in summary["files_read"])
    page = out.read_text()
    assert page.count("data:image/png;base64,") == 4
    assert not re.search(r"(src|href)=\"(?!data:)", page) and "http" not in page.replace("http-equiv", "")
    for name in ("budget", "statuses", "answers", "accuracy"):
        assert (root / "out" / f"report-{name}.png").read_bytes().startswith(b"\x89PNG")
    assert str(root / "log") in page and "batch-00000000.parquet" in page  # the files it read
    assert main(["report", "--log", str(root / "log"), "--state", str(state), "--out", str(out), "--json"]) == 0
    with_state = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert with_state["read_state"] is True and str(state / "session.json") in with_state["files_read"]
    assert "State summary" in out.read_text()


@pytest.mark.parametrize("case,needle", [
    ("missing", "no batch files|not a directory|does not exist|no such"),
    ("not-a-log", "no batch files"),
    ("bad-out", "--out"),
])
def test_bad_input_is_one_line_and_writes_nothing(answered, tmp_path, capsys, case, needle) -> None:
    log = {"missing": tmp_path / "nope", "not-a-log": tmp_path / "empty"}.get(case, answered / "log")
    (tmp_path / "empty").mkdir()
    out = tmp_path / ("report.txt" if case == "bad-out" else "report.html")
    assert main(["report", "--log", str(log), "--out", str(out)]) != 0
    err = capsys.readouterr().err.strip()
    assert re.search(needle, err, re.I) and len(err.splitlines()) == 1, err
    assert not out.exists() and not list(tmp_path.glob("report-*.png"))
