"""``--labels M`` (issue 29, item 3): the teacher answers the first M queries, the student the rest.

A session planned with ``--labels M`` is the session planned with ``--queries-max M`` (the same k,
noise, gate and certificate), it records M in session.json, the summary and the log's provenance,
and its log holds exactly M teacher answers followed by the student's. The refusals (with an
explicit --queries-max, with --after-halt refuse, in universal mode) are in tests/test_hostile.py.
"""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pyarrow.parquet as pq
import pytest

from pcqr.jobs.cli import main
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.options import TrainingOptions
from pcqr.pipeline.privacy.session_plan import plan_session
from pcqr.pipeline.public_log.batches import GATED_SOURCES
from pcqr.pipeline.public_log.replay import verify_log
from tests.conftest import write_session_data

TEACHER = set(GATED_SOURCES)


@pytest.mark.parametrize("extra", [{"gate": "gnmax"}, {"gate": "guess"}, {"gate": "stability"}, {},
                                   {"mode": "agnostic", "hypothesis": "threshold", "subsamples": 50, "epsilon": 10.0}],
                         ids=["gnmax", "guess", "stability", "chosen", "agnostic"])
def test_labels_plans_the_session_of_queries_max_m(extra) -> None:
    """Every parameter and the certificate of a --labels 500 plan are those of --queries-max 500,
    and both differ from the default m's (the comparison can fail); the plan records M."""
    base = TrainingOptions(state="unused", **extra)
    labelled = plan_session(replace(base, labels=500), 200_000, 1)
    bounded = plan_session(replace(base, queries_max=500), 200_000, 1)
    assert labelled.labels == 500 and bounded.labels is None
    assert labelled.params == bounded.params and labelled.params.queries_max == 500
    assert labelled.certificate() == bounded.certificate()
    assert labelled.agnostic == bounded.agnostic and labelled.gate_chosen == bounded.gate_chosen
    assert plan_session(replace(base, after_halt="refuse"), 200_000, 1).params != labelled.params


def test_labels_is_refused_beside_queries_max_and_in_universal_mode() -> None:
    with pytest.raises(PcqrError, match="--labels M replaces --queries-max: give one"):
        plan_session(TrainingOptions(state="unused", labels=500, queries_max=700), 200_000)
    with pytest.raises(PcqrError, match="--mode universal"):
        plan_session(TrainingOptions(state="unused", labels=500, mode="universal", hypothesis="threshold",
                                     profile=None), 200_000, 1)
    with pytest.raises(PcqrError, match=r"--labels \(M\)"):
        plan_session(TrainingOptions(state="unused", labels=0), 200_000)


@pytest.mark.parametrize("gate", ["gnmax", "guess"])
def test_the_teacher_answers_exactly_m_queries_and_the_student_the_rest(gate, tmp_path, capsys,
                                                                       thread_cluster_yaml) -> None:
    """One-shot ``pcqr answer --labels 300`` on 2,000 queries: the first 300 log rows are the
    teacher's (gnmax: each one spends an answer; guess: T is never reached on this easy task) and
    every later row the student's; M is in the summary, session.json and every batch's provenance;
    the summary's certificate is the one ``pcqr train --queries-max 300`` gets."""
    write_session_data(tmp_path, rows=20_000, queries=2000)
    common = ["--private", str(tmp_path / "private"), "--gate", gate, "--learner", "stump", "--seed", "5",
              "--insecure-seed", "--cluster", thread_cluster_yaml, "--json"]
    assert main(["answer", "--state", str(tmp_path / "st"), "--queries", str(tmp_path / "queries"),
                 "--log", str(tmp_path / "log"), "--labels", "300", "--batch-size", "700", *common]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert main(["train", "--state", str(tmp_path / "bounded"), "--queries-max", "300", *common]) == 0
    bounded = json.loads(capsys.readouterr().out)

    log = pq.read_table(tmp_path / "log").sort_by("query_id")
    source = np.asarray(log.column("source").to_pylist())
    assert set(source[:300]) <= TEACHER and set(source[300:]) == {"student"}
    assert set(log.column("status").to_pylist()) == {"answered"}
    assert summary["labels"] == 300 and summary["queries_max"] == 300 and summary["student_answers"] == 1700
    certificate = ("proven_epsilon", "proven_delta", "subsamples", "gate", "cutoff", "accountant",
                   "sigma" if gate == "gnmax" else "lambda")
    assert {key: summary[key] for key in certificate} == {key: bounded[key] for key in certificate}
    assert bounded["labels"] is None
    state = json.loads((tmp_path / "st" / "session.json").read_text())
    assert state["labels"] == 300 and state["params"]["queries_max"] == 300
    report = verify_log(str(tmp_path / "log"))
    assert report.ok and report.provenance["labels"] == 300
    from pcqr.pipeline.report.contents import certificate_of

    assert certificate_of(report.provenance)["labels"] == 300  # pcqr report's certificate table shows M
    assert main(["status", "--state", str(tmp_path / "st")]) == 0  # what the session does next, in words
    status = capsys.readouterr().out
    assert "(1,700 by the student)" in status and "labels: M = 300: the models answer the first 300" in status
    assert "forecast" not in status  # no rate of queries per instance: the student answers on at no cost
    truth = (log.column("x0").to_numpy() > 0.1).astype(int)
    assert (log.column("answer").to_numpy()[300:] == truth[300:]).mean() > 0.9


def test_a_labels_session_refuses_after_halt_refuse_later(tmp_path, capsys, thread_cluster_yaml) -> None:
    """``pcqr train --labels M``, then ``pcqr answer --after-halt refuse``: refused in one line
    before anything is answered (its later queries are the student's by the session's plan)."""
    write_session_data(tmp_path, rows=20_000, queries=50)
    assert main(["train", "--private", str(tmp_path / "private"), "--state", str(tmp_path / "st"), "--labels", "20",
                 "--gate", "gnmax", "--learner", "stump", "--cluster", thread_cluster_yaml]) == 0
    capsys.readouterr()
    assert main(["answer", "--state", str(tmp_path / "st"), "--queries", str(tmp_path / "queries"), "--log",
                 str(tmp_path / "log"), "--after-halt", "refuse", "--cluster", thread_cluster_yaml]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--labels 20" in err[0] and not (tmp_path / "log").exists()


@pytest.mark.parametrize("rows,m,expected", [(100_000, 2000, 200), (32_561, 2000, 200), (1_000_000, 2000, 2000),
                                              (140_000, 2000, 500),
                                              (100_000, 150, 150), (1_000_000, 100_000, 20_000)])
def test_plan_recommends_m_from_public_parameters(rows, m, expected, capsys) -> None:
    """``pcqr plan --private-rows N --queries-max m --json``: labels_recommended is the largest M of
    the ladder whose gnmax k leaves >= 250 rows a model (>= 200 up to M = 500; none: the floor of 200),
    never above m;
    labels_subsamples is gnmax's k at that M for n rows; the text output has the same line."""
    from pcqr.pipeline.privacy.gate_choice import LABEL_LADDER, LABELS_FLOOR, gate_parameters
    from pcqr.pipeline.privacy.gate_choice import LABELS_MIN_ROWS_PER_MODEL, LABELS_NEAR_FLOOR
    from pcqr.pipeline.privacy.subsamp import GNMAX_ROWS_PER_MODEL

    argv = ["plan", "--private-rows", str(rows), "--epsilon", "1", "--queries-max", str(m)]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["labels_recommended"] == expected and out["labels_gate"] == "gnmax"
    k = gate_parameters("gnmax", 1.0, 1e-6, 50, expected, 0.05, None).for_rows(rows).subsamples
    assert out["labels_subsamples"] == k and isinstance(out["labels_why"], str) and out["labels_why"]
    above = [c for c in LABEL_LADDER if expected < c < m]
    if above and expected >= LABELS_FLOOR:  # the next rung would leave too few rows a model
        bar = LABELS_MIN_ROWS_PER_MODEL if above[0] <= LABELS_NEAR_FLOOR else GNMAX_ROWS_PER_MODEL
        assert rows // gate_parameters("gnmax", 1.0, 1e-6, 50, above[0], 0.05, None).subsamples < bar
    default = out["defaults"]  # what pcqr train plans given neither --gate nor --labels (every row here: >= 10 a model)
    assert default["labels"] == (expected if expected < m else None) and default["why"]
    assert default["gate"] == "gnmax" or (default["labels"] is None and default["gate"] == out["recommended_gate"])
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert f"labels: --labels {expected:,} --gate gnmax (k = {k:,};" in text
    assert f"defaults (pcqr train without --gate or --labels): --gate {default['gate']}" in text


# --- the plan's own M (issue 29): a session given neither --gate nor --labels ------------------------

@pytest.mark.parametrize("rows,given,labels,gate", [
    (200_000, {}, 500, "gnmax"),  # the rule's M (its k leaves 250 rows a model) below m = 10,000
    (32_561, {"queries_max": 2000}, 200, "gnmax"),  # Adult's n: 82 rows a model at M = 200
    (200_000, {"after_halt": "refuse"}, None, "guess"),  # refusals after the halt: the old rule, all m
    (200_000, {"gate": "guess"}, None, "guess"),  # a gate given: the plan is the user's
    (200_000, {"threshold": 3.0}, None, "guess"),  # options choose_gate reserves to the guess gate
    (3_000, {"queries_max": 2000}, 100, "gnmax"),  # 7 rows a model at M = 200: small data, M = 100 (10 each)
    (1_500, {"queries_max": 2000}, None, "guess"),  # 3 rows at M = 200, 5 at 50: below LABELS_ROWS_PER_MODEL
    (1_000_000, {"queries_max": 2000}, None, "gnmax"),  # the rule's M is m: the teacher answers all
])
def test_the_plan_chooses_labels_when_a_student_answers_after_the_halt(rows, given, labels, gate) -> None:
    """``choose_labels``: with neither --gate nor --labels and the default --after-halt student, the
    plan is ``--labels M`` with M from recommend_labels (public n, eps, delta, m), the same plan as
    ``--labels M --gate gnmax``; not where the user chose the gate, asked for refusals, or gnmax's k
    would leave fewer than LABELS_ROWS_PER_MODEL rows a model."""
    from pcqr.pipeline.privacy.gate_choice import LABELS_ROWS_PER_MODEL, recommend_labels

    options = TrainingOptions(state="unused", **given)
    plan = plan_session(options, rows)
    assert plan.labels == labels and plan.params.gate == gate
    if labels is None:
        return
    assert labels == recommend_labels(rows, 1.0, 1e-6, 50, options.queries_max, 0.05)[0] < options.queries_max
    explicit = plan_session(replace(options, labels=labels, queries_max=TrainingOptions.queries_max, gate="gnmax"), rows)
    assert plan.params == explicit.params and plan.certificate() == explicit.certificate()
    assert rows // plan.params.subsamples >= LABELS_ROWS_PER_MODEL and f"--labels {labels:,}" in plan.gate_chosen


def test_a_default_session_spends_on_the_plans_labels_and_says_so(tmp_path, capsys, thread_cluster_yaml) -> None:
    """``pcqr train`` with neither --gate nor --labels on 20,000 rows and m = 2,000: the plan's M
    (200) is in the summary, session.json and the stderr note; a later ``--after-halt refuse`` is
    refused in one line; the one-shot ``pcqr answer --after-halt refuse`` plans the teacher for all m."""
    write_session_data(tmp_path, rows=20_000, queries=50)
    common = ["--private", str(tmp_path / "private"), "--queries-max", "2000", "--learner", "stump",
              "--cluster", thread_cluster_yaml]
    assert main(["train", "--state", str(tmp_path / "st"), "--json", *common]) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert summary["labels"] == 200 and summary["gate"] == "gnmax" and "--labels 200" in summary["gate_chosen"]
    assert "--labels 200" in captured.err
    assert json.loads((tmp_path / "st" / "session.json").read_text())["labels"] == 200
    assert main(["answer", "--state", str(tmp_path / "st"), "--queries", str(tmp_path / "queries"), "--log",
                 str(tmp_path / "log"), "--after-halt", "refuse", "--cluster", thread_cluster_yaml]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--labels 200" in err[0] and "--gate" in err[0] and not (tmp_path / "log").exists()
    assert main(["answer", "--state", str(tmp_path / "once"), "--queries", str(tmp_path / "queries"), "--log",
                 str(tmp_path / "once-log"), "--after-halt", "refuse", "--json", *common]) == 0
    once = json.loads(capsys.readouterr().out)
    assert once["labels"] is None and once["queries_max"] == 2000


@pytest.mark.parametrize("rows,depth,few", [(4_300, 3, True), (40_000, 6, False)])
def test_the_summary_says_which_tree_auto_chose_and_why(rows, depth, few, tmp_path, capsys, thread_cluster_yaml) -> None:
    """Small data (issue 48, item 2): a new session with ``--learner auto`` (the default) says in
    ``learner_chosen`` the tree the public rule gave its teachers and why, from n and k only; at few
    rows a model (4,300 rows, k = 393: 10 each) it says the trees are deeper than the rows seem to
    allow, and why; a learner the user names gets no such line."""
    write_session_data(tmp_path, rows=rows, queries=10)
    base = ["train", "--private", str(tmp_path / "private"), "--cluster", thread_cluster_yaml, "--json",
            "--epsilon", "1", "--queries-max", "2000", "--seed", "3", "--insecure-seed"]
    assert main([*base, "--state", str(tmp_path / "auto")]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    k = summary["subsamples"]
    assert summary["learner_chosen"].startswith(f"depth-{depth} trees: {rows // k:,} private rows a model (k = {k:,})")
    assert ("few rows a model" in summary["learner_chosen"]) is few
    state = json.loads((tmp_path / "auto" / "session.json").read_text())
    assert state["learner"]["params"] == {"max_depth": depth}
    assert main([*base, "--state", str(tmp_path / "named"), "--learner", "stump"]) == 0
    assert "learner_chosen" not in json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert main([*base, "--state", str(tmp_path / "given"), "--learner-param", "max_depth=2"]) == 0
    given = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["learner_chosen"]
    assert given.startswith("depth-2 trees as given (learner parameter max_depth)") and f"depth {depth} at" in given


@pytest.mark.parametrize("rows,epsilon,labels,gate", [
    (4_300, 0.5, 50, "gnmax"),  # k = 749 at M = 200 would leave 5 rows a model; M = 50: k = 377, 11 each
    (6_000, 0.5, 100, "gnmax"),  # 8 rows at M = 200; M = 100: k = 533, 11 each
    (3_000, 1.0, 100, "gnmax"),  # 7 rows at M = 200; M = 100: k = 277, 10 each
    (1_500, 0.5, None, "guess"),  # even M = 50 leaves fewer than 10 rows: the guess gate, as before
    (4_300, 1.0, 100, "gnmax"),  # 10 rows at M = 200, under 20; M = 100: k = 277, 15 each
    (8_000, 0.5, 100, "gnmax"),  # 10 rows at M = 200; M = 100: k = 533, 15 each
    (8_000, 1.0, 200, "gnmax"),  # 20 rows at M = 200: the floor stands
])
def test_small_data_plans_fewer_answers_and_fewer_models(rows, epsilon, labels, gate) -> None:
    """Small data (issue 48, item 2): where gnmax's k at the floor of 200 answers would leave fewer
    than SMALL_DATA_ROWS_PER_MODEL (20) rows a model, the plan asks for fewer answers (100, then 50):
    less noise, so fewer models, each fed at least LABELS_ROWS_PER_MODEL (10) rows; its why says so.
    Public n, eps, delta, m only."""
    from pcqr.pipeline.privacy.gate_choice import LABELS_ROWS_PER_MODEL, recommend_labels

    options = TrainingOptions(state="unused", epsilon=epsilon, queries_max=2000)
    plan = plan_session(options, rows)
    assert plan.labels == labels and plan.params.gate == gate
    if labels is None:
        return
    k = plan.params.subsamples
    assert rows // k >= LABELS_ROWS_PER_MODEL
    why = recommend_labels(rows, epsilon, 1e-6, 50, 2000, 0.05)[3]
    assert why.startswith("small data") == (labels < 200) and f"{rows // k:,} rows each" in why


def test_an_m_gnmax_cannot_certify_ends_the_ladder_instead_of_the_plan(capsys, monkeypatch) -> None:
    """An M whose gnmax calibration refuses ends the ladder at the M before it; the plan does not fail
    (at eps 700, n = 5,000 the calibration refused 1,000 answers until issue 49 made the PLD certify
    from the first eps its bound fits: the refusal is simulated here, on data whose rows would let the
    ladder climb past 500). The plan at eps 700 still recommends 500: 1,000 answers' k leaves too few
    rows a model."""
    from pcqr.pipeline.privacy import gate_choice

    real = gate_choice.gate_parameters

    def refusing(gate, epsilon, delta, cutoff, m, *rest):  # type: ignore[no-untyped-def]
        if m >= 1000:
            raise PcqrError(f"the PLD accountant cannot certify {m:,} answers at --epsilon {epsilon}")
        return real(gate, epsilon, delta, cutoff, m, *rest)

    monkeypatch.setattr(gate_choice, "gate_parameters", refusing)
    assert gate_choice.recommend_labels(10**6, 1.0, 1e-6, 50, 2000, 0.05)[0] == 500
    monkeypatch.setattr(gate_choice, "gate_parameters", real)
    labels, gate, k, _ = gate_choice.recommend_labels(5000, 700.0, 1e-6, 50, 2000, 0.05)
    assert (labels, gate) == (500, "gnmax") and 5000 // k >= 200
    assert main(["plan", "--private-rows", "5000", "--epsilon", "700", "--queries-max", "2000", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["labels_recommended"] == 500 and out["defaults"]["labels"] == 500
