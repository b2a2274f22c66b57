"""Re-running ``pcqr answer`` (issue 26, item 5): an input answered in full is not asked again, however
it is copied or re-encoded; a changed or new input continues the session; an interrupted one resumes.
Nothing of it spends budget or changes an answer (pipeline/session/inputs.py)."""
from __future__ import annotations

import json
import os
import shlex
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import pcqr.pipeline.session.query_release as query_release
from pcqr.jobs.cli import main
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.session.inputs import KEPT, begin_input
from pcqr.pipeline.session.state import load_session
from tests.conftest import MECHANICS_PRIVACY, threshold_data, write_parquet

QUERIES = 600


@pytest.fixture
def session(tmp_path, thread_cluster_yaml):
    """A trained session (no answer yet) and its queries, 600 rows with ids in row groups of 300."""
    write_parquet(str(tmp_path / "private/p.parquet"), threshold_data(20_000, seed=1))
    q = threshold_data(QUERIES, seed=2)
    write_parquet(str(tmp_path / "queries/q.parquet"),
                  {"query_id": np.arange(QUERIES), **{k: v for k, v in q.items() if k != "label"}}, row_group_size=300)
    assert main(["train", "--private", str(tmp_path / "private"), "--state", str(tmp_path / "state"),
                 "--cluster", thread_cluster_yaml, *MECHANICS_PRIVACY, "--queries-max", "100000"]) == 0
    return tmp_path, thread_cluster_yaml


def answer(capsys, root, cluster: str, queries: str, *extra: str) -> tuple[dict, str]:
    code = main(["answer", "--state", str(root / "state"), "--queries", str(root / queries), "--log",
                 str(root / "log"), "--batch-size", "100", "--cluster", cluster, "--json", *extra])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out.strip().splitlines()[-1]), err


def log_batches(root) -> int:
    return len([n for n in os.listdir(root / "log") if n.startswith("batch-")])  # not the claim, _session.json


def test_a_finished_input_is_not_asked_again_in_any_copy(session, capsys) -> None:
    root, cluster = session
    first, _ = answer(capsys, root, cluster, "queries")
    assert first["batches"] == 6 and "already_answered" not in first
    answers = pq.read_table(root / "log").column("answer").to_pylist()
    # the same file, a copy elsewhere, the same rows re-encoded in other row groups, another batch size
    shutil.copytree(root / "queries", root / "it's a copy")  # printed shell-quoted: pasted back, one word
    table = pq.read_table(root / "queries")
    os.makedirs(root / "recoded")
    pq.write_table(table, root / "recoded/other-name.parquet", row_group_size=77, compression="zstd")
    for queries, extra in (("queries", ()), ("it's a copy", ()), ("recoded", ()), ("queries", ("--batch-size", "7"))):
        again, err = answer(capsys, root, cluster, queries, *extra)
        assert (again["already_answered"], again["already_answered_batches"], again["batches"]) == (QUERIES, [0, 5], 0)
        assert again["session_totals"] == first["session_totals"] and again["budget_used"] == first["budget_used"]
        assert f"all 600 queries of {shlex.quote(str(root / queries))} were already answered in {root / 'log'} " \
            "(batches 0-5); nothing asked" in err
        assert "dashboard" not in err  # none was asked for
    assert log_batches(root) == 6 and pq.read_table(root / "log").column("answer").to_pylist() == answers


@pytest.mark.parametrize("change", ["value", "row", "order", "ids"])
def test_a_changed_input_continues_the_session(session, capsys, change) -> None:
    root, cluster = session
    first, _ = answer(capsys, root, cluster, "queries")
    table = pq.read_table(root / "queries")
    if change == "value":  # one feature value of one row
        x1 = table.column("x1").to_numpy().copy()
        x1[123] += 1e-9
        table = table.set_column(table.schema.get_field_index("x1"), "x1", pa.array(x1))
    elif change == "row":  # one row added (a copy of the first, with its own id: ids are unique)
        extra = table.slice(0, 1).set_column(0, "query_id", pa.array([QUERIES], type=table.schema.field(0).type))
        table = pa.concat_tables([table, extra])
    elif change == "order":  # two rows swapped
        order = np.arange(QUERIES)
        order[[10, 20]] = order[[20, 10]]
        table = table.take(order)
    else:  # other query ids
        table = table.set_column(0, "query_id", pa.array(np.arange(QUERIES) + 1000))
    write_parquet(str(root / "changed/q.parquet"), {c: table.column(c) for c in table.column_names})
    second, _ = answer(capsys, root, cluster, "changed")
    assert "already_answered" not in second and second["resumed_after"] == 0
    processed = second["answered"] + second["abstained"] + second["refused"]
    assert processed == table.num_rows and second["duplicates"] >= first["answered"] - 2  # repeats: logged answers
    assert log_batches(root) == 6 + second["batches"]


def test_every_kept_input_is_recognised(session, capsys) -> None:
    root, cluster = session
    other = threshold_data(300, seed=3)
    write_parquet(str(root / "other/q.parquet"), {k: v for k, v in other.items() if k != "label"})
    answer(capsys, root, cluster, "queries")
    answer(capsys, root, cluster, "other")  # a new input: the first one joins the kept ones
    again, _ = answer(capsys, root, cluster, "queries")
    assert (again["already_answered"], again["already_answered_batches"]) == (QUERIES, [0, 5])
    again, _ = answer(capsys, root, cluster, "other")
    assert (again["already_answered"], again["already_answered_batches"]) == (300, [6, 8])
    assert log_batches(root) == 9


def test_an_interrupted_input_resumes_then_is_answered(session, capsys, monkeypatch) -> None:
    root, cluster = session
    advance, calls = query_release._advance, []

    def crash_at_the_third_batch(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:  # before the third batch's commit: batches 0 and 1 are committed
            raise PcqrError("simulated crash")
        return advance(*args, **kwargs)

    monkeypatch.setattr(query_release, "_advance", crash_at_the_third_batch)
    assert main(["answer", "--state", str(root / "state"), "--queries", str(root / "queries"), "--log",
                 str(root / "log"), "--batch-size", "100", "--cluster", cluster]) == 2
    assert log_batches(root) == 2
    monkeypatch.setattr(query_release, "_advance", advance)
    capsys.readouterr()
    resumed, err = answer(capsys, root, cluster, "queries")
    assert resumed["resumed_after"] == 200 and resumed["batches"] == 4 and "already_answered" not in resumed
    assert f"resuming {root / 'queries'}: 200 of 600 queries were committed by an earlier run" in err
    again, _ = answer(capsys, root, cluster, "queries")
    assert (again["already_answered"], again["already_answered_batches"], again["batches"]) == (QUERIES, [0, 5], 0)
    log = pq.read_table(root / "log")
    assert log.num_rows == QUERIES and log.column("query_id").to_pylist() == list(range(QUERIES))


def test_the_kept_inputs_are_bounded(session) -> None:
    root, _ = session
    state = load_session(str(root / "state"))
    from pcqr.pipeline.data.datasets import open_dataset

    queries = open_dataset(str(root / "queries"), "queries")
    for i in range(KEPT + 5):
        begin_input(state, queries, f"queries-v1:600:{i:016x}")
        state.input["done"] = QUERIES  # answered in full
        state.next_batch += 1
    begin_input(state, queries, "queries-v1:600:new")
    assert len(state.answered_inputs) == KEPT
    assert state.answered_inputs[-1]["identity"] == f"queries-v1:600:{KEPT + 4:016x}"
    assert state.answered_inputs[-1]["first_batch"] == state.answered_inputs[-1]["last_batch"] == KEPT + 4
