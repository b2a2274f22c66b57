"""pcqr report: the figures' data equal the log's, each figure is readable (labelled axes, more than
one point, legends off the data, integer ticks for counts) under each gate, the page is
self-contained and lists what it read, the private state is read only when --state is given, and
bad input writes nothing."""
from __future__ import annotations

import json
import os
import re

import numpy as np
import pyarrow.parquet as pq
import pytest

from pcqr.jobs.cli import main
from pcqr.pipeline.public_log.replay import read_answers
from pcqr.pipeline.report.contents import VOTE_MARGINS_NOTE, session_report, stream_edges
from tests.conftest import DENSE_BOTTOMS_PRIVACY, threshold_data, write_parquet, write_session_data

pytest.importorskip("matplotlib")
import matplotlib.pyplot as plt  # noqa: E402

from pcqr.pipeline.report.axes import DATA  # noqa: E402
from pcqr.pipeline.report.render import draw  # noqa: E402


CLUSTER = "pcqr:\n  cluster:\n    backend: local\n    n-workers: 1\n    threads-per-worker: 2\n    processes: false\n"
FIGURES = ["budget", "outcomes", "gate", "accuracy", "sources", "labels"]


def _session(root, train: list[str], answer: list[str]):
    """ROOT/log: a seeded session answering write_session_data's 2,000 queries in batches of 250;
    ROOT/truth: their true labels."""
    write_session_data(root)
    (root / "cluster.yaml").write_text(CLUSTER)
    assert main(["answer", "--private", str(root / "private"), "--state", str(root / "state"), "--queries",
                 str(root / "queries"), "--log", str(root / "log"), "--batch-size", "250", *train, *answer,
                 "--seed", "5", "--insecure-seed", "--cluster", str(root / "cluster.yaml"), "--json"]) == 0
    write_parquet(str(root / "truth" / "t.parquet"), {"query_id": np.arange(2000),
                                                      "label": threshold_data(2000, seed=2)["label"]})
    return root


@pytest.fixture(scope="module")
def answered(tmp_path_factory):
    """A stability-gate session that abstains often (DENSE_BOTTOMS)."""
    return _session(tmp_path_factory.mktemp("report"), [*DENSE_BOTTOMS_PRIVACY, "--queries-max", "100000",
                                                        "--subsamples", "660"], [])


@pytest.fixture(scope="module")
def guessed(tmp_path_factory):
    """A guess-gate session with T = 5 whose student answers the rest of the stream after the halt."""
    return _session(tmp_path_factory.mktemp("guess"), ["--epsilon", "1", "--cutoff", "5", "--gate", "guess"],
                    ["--after-halt", "student"])


@pytest.fixture(scope="module")
def noisy_argmax(tmp_path_factory):
    """A gnmax session answering m = 1,500 queries, then the student."""
    return _session(tmp_path_factory.mktemp("gnmax"), ["--epsilon", "30", "--queries-max", "1500", "--gate", "gnmax",
                                                       "--subsamples", "60"], ["--after-halt", "student"])


def _per_bin(values, edges) -> list[int]:
    return [int(np.sum(values[a:b])) for a, b in zip(edges[:-1], edges[1:])]


def test_the_figures_data_are_the_logs(answered) -> None:
    root = answered
    report = session_report(str(root / "log"), truth=str(root / "truth"))
    log = read_answers(str(root / "log"))
    status = np.asarray(log.column("status").to_pylist())
    assert report.batches == 8 and report.total_queries == 2000
    assert report.edges.tolist() == list(range(0, 2001, 20)) and report.bin_width == 20  # the stream, not the batches
    for name in ("answered", "abstained", "refused"):
        assert report.statuses[name].tolist() == _per_bin(status == name, report.edges)
    assert report.spent_at.tolist() == (np.flatnonzero(status == "abstained") + 1).tolist()
    state = json.loads((root / "state" / "session.json").read_text())
    assert report.budget_used == state["sparse_vector"]["bottoms"] > 0  # the odometer ends at the session's c
    assert report.certificate["cutoff"] == report.limit == 400 and report.certificate["proven_epsilon"] <= 25
    assert report.certificate["accountant"] == "optimal_composition"  # the tight profile's, as the summary says
    assert report.gate == "stability" and report.halt_at is None and report.forecast_more_queries() is not None
    labels = np.asarray([-1 if a is None else a for a in log.column("answer").to_pylist()])
    assert report.ones.tolist() == _per_bin((status == "answered") & (labels == 1), report.edges)
    assert list(report.sources) == ["sparse_vector"] and report.sources["sparse_vector"].sum() == np.sum(status == "answered")
    truth = threshold_data(2000, seed=2)["label"]
    ids = np.asarray(log.column("query_id").to_pylist())
    right = (status == "answered") & (labels == truth[ids])
    assert report.truth.correct.tolist() == _per_bin(right, report.edges)
    assert report.truth.evaluated.tolist() == _per_bin(status == "answered", report.edges)
    assert report.truth.by_source == {"sparse_vector": (int(np.sum(status == "answered")), int(right.sum()))}
    assert VOTE_MARGINS_NOTE in report.notes


def test_the_budget_is_what_each_gate_spends(guessed, noisy_argmax) -> None:
    """Under the guess gate an instance is a flipped answer, under gnmax every noisy-majority answer
    (T = m); the halt is where the student takes over, and the report says why it halted."""
    for root, spender, reason in ((guessed, "flipped", "T = 5 reached"), (noisy_argmax, "gnmax", "m = 1,500 reached")):
        report = session_report(str(root / "log"), truth=str(root / "truth"))
        source = np.asarray(read_answers(str(root / "log")).column("source").to_pylist())
        assert report.spent_at.tolist() == (np.flatnonzero(source == spender) + 1).tolist()
        assert report.budget_used == report.limit and report.halt_reason() == reason
        assert report.halt_at == int(np.flatnonzero(source == "student")[0]) + 1
        assert set(report.truth.by_source) == set(np.unique(source)) and "student" in report.sources


@pytest.mark.parametrize("queries,bins,width", [(1, 1, 1), (2, 2, 1), (100, 100, 1), (250, 50, 5),
                                                (10_000, 100, 100), (100_001, 51, 2000)])
def test_the_stream_is_cut_into_round_bins(queries, bins, width) -> None:
    edges = stream_edges(queries)
    assert edges[0] == 0 and edges[-1] == queries and edges.size == bins + 1
    assert set(np.diff(edges)[:-1].tolist()) <= {width} and 0 < edges[-1] - edges[-2] <= width


def _points(ax) -> int:
    """The data points an axes shows (artists marked as data; a NaN is no point)."""
    lines = sum(int(np.isfinite(np.asarray(line.get_ydata(), dtype=float)).sum()) for line in ax.lines
                if line.get_gid() == DATA)
    return lines + sum(1 for patch in ax.patches if patch.get_gid() == DATA)


def _integer_ticks(axis, limits) -> bool:
    low, high = sorted(limits)
    ticks = [t for t in axis.get_majorticklocs() if low <= t <= high]
    return len(ticks) >= 2 and all(float(t).is_integer() for t in ticks)


@pytest.mark.parametrize("session", ["answered", "guessed", "noisy_argmax"])
def test_every_figure_is_readable(session, request) -> None:
    """Each figure is drawn, every axes labelled, with more than one data point; the legends sit
    outside every axes and inside the figure; the stream's positions and the counts have integer ticks."""
    root = request.getfixturevalue(session)
    report = session_report(str(root / "log"), truth=str(root / "truth"))
    drawn = draw(report)
    try:
        assert list(drawn) == FIGURES
        for name, fig in drawn.items():
            fig.canvas.draw()
            renderer = fig.canvas.get_renderer()
            assert fig.axes[0].get_title(), name
            for ax in fig.axes:
                assert ax.get_xlabel() and ax.get_ylabel(), name
                assert _points(ax) > 1, name
                legend = ax.get_legend()
                if legend is not None:
                    box = legend.get_window_extent(renderer)
                    assert not any(box.overlaps(other.get_window_extent(renderer)) for other in fig.axes), name
                    assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1 and fig.bbox.y0 <= box.y0, name
                if name != "sources":  # the stream's positions
                    assert ax.get_xlabel().startswith("position in the query stream"), name
                    assert _integer_ticks(ax.xaxis, ax.get_xlim()), name
            counts = ["budget", "outcomes", *(["gate"] if report.gate != "gnmax" else [])]
            if name in counts:
                assert _integer_ticks(fig.axes[0].yaxis, fig.axes[0].get_ylim()), name
    finally:
        for fig in drawn.values():
            plt.close(fig)
    without_truth = draw(session_report(str(root / "log")))
    for fig in without_truth.values():
        plt.close(fig)
    assert list(without_truth) == [name for name in FIGURES if name != "sources"]  # by source needs the truth


def test_a_one_query_session_draws_every_figure(answered, tmp_path) -> None:
    first = pq.read_table(answered / "log" / "batch-00000000.parquet")
    (tmp_path / "log").mkdir()
    pq.write_table(first.slice(0, 1), tmp_path / "log" / "batch-00000000.parquet")
    report = session_report(str(tmp_path / "log"), truth=str(answered / "truth"))
    assert report.total_queries == 1 and report.edges.tolist() == [0, 1]
    drawn = draw(report)
    try:
        assert list(drawn) == FIGURES
        assert all(ax.get_xlabel() and ax.get_ylabel() for fig in drawn.values() for ax in fig.axes)
    finally:
        for fig in drawn.values():
            plt.close(fig)


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
    assert page.count("data:image/png;base64,") == len(FIGURES)
    assert not re.search(r"(src|href)=\"(?!data:)", page) and "http" not in page.replace("http-equiv", "")
    for name in FIGURES:
        assert (root / "out" / f"report-{name}.png").read_bytes().startswith(b"\x89PNG")
    assert str(root / "log") in page and "batch-00000000.parquet" in page  # the files it read
    assert main(["report", "--log", str(root / "log"), "--state", str(state), "--out", str(out), "--overwrite",
                 "--json"]) == 0
    with_state = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert with_state["read_state"] is True and str(state / "session.json") in with_state["files_read"]
    assert "State summary" in out.read_text()
    # without --truth the accuracy-by-source figure is not drawn: the earlier report's is removed, not
    # left beside the new page (issue 47: it showed the earlier report's data)
    assert "sources" in FIGURES and not (root / "out" / "report-sources.png").exists()
    assert sorted(p.name for p in (root / "out").iterdir()) == sorted(
        ["report.html", *(os.path.basename(f) for f in with_state["figures"])])


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
