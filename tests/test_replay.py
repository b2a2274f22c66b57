"""pcqr replay: a public log is verified (missing, altered and reordered batches are named by
number) and re-served exactly, without private data or budget; --truth scores it; --into
runs its queries through another session and compares."""
from __future__ import annotations

import json
import os
import shutil
import struct

import click
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pcqr.jobs.cli import main
from pcqr.jobs.replay import command
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.public_log.batches import PROVENANCE_KEY, batch_files, batch_path, sha256
from pcqr.pipeline.public_log.replay import ANSWER_COLUMNS, verify_log
from tests.conftest import MECHANICS, STABILITY, privacy_options

BATCHES, QUERIES = 6, 3000
SEEDED = ["--seed", "3", "--insecure-seed"]
# The logged session answers, abstains and halts within the 3000 queries: MECHANICS with k = 30,
# just above 2w = 23, so a unanimous query abstains with probability 0.040 and T = 20 is spent early.
PRIVACY = [*privacy_options({**MECHANICS, "subsamples": 30}), *STABILITY, *SEEDED]
# The other session: k = 50 and a --threshold above the smallest certifiable (11.5), which it accepts.
OTHER_THRESHOLD = 20
OTHER = [*privacy_options(MECHANICS), *STABILITY, "--threshold", str(OTHER_THRESHOLD), *SEEDED]


@pytest.fixture(scope="module")
def logged(tmp_path_factory) -> dict:
    """One session's log (6 batches of 500 queries), its last hash, and a second, trained session.
    The private dataset and the first session's state are deleted before any test replays."""
    root = tmp_path_factory.mktemp("replay")
    cluster = root / "cluster.yaml"  # as conftest's thread_cluster_yaml, for the whole module
    cluster.write_text("pcqr:\n  cluster:\n    backend: local\n    n-workers: 1\n"
                       "    threads-per-worker: 2\n    processes: false\n")
    data = root / "data"
    assert main(["generate", "--kind", "realizable", "--rows", "20000", "--features", "3", "--queries",
                 str(QUERIES), "--seed", "1", "--out", str(data), "--cluster", str(cluster)]) == 0
    code = main(["answer", "--private", str(data / "private"), "--queries", str(data / "queries"),
                 "--state", str(root / "state"), "--log", str(root / "log"),
                 *PRIVACY, "--batch-size", "500", "--after-halt", "refuse", "--cluster", str(cluster)])
    assert code == 0
    code = main(["train", "--private", str(data / "private"), "--state", str(root / "other"),
                 *OTHER, "--cluster", str(cluster)])
    assert code == 0
    with open(root / "state" / "session.json", encoding="utf-8") as handle:
        last_hash = json.load(handle)["last_hash"]
    shutil.rmtree(data / "private")  # replay must never need it
    shutil.rmtree(root / "state")
    return {"root": root, "log": str(root / "log"), "truth": str(data / "truth"), "cluster": str(cluster),
            "other": str(root / "other"), "last_hash": last_hash, "private": str(data / "private")}


def replay(capsys, *args: str) -> tuple[int, str, str]:
    """Run `pcqr replay` as jobs/cli.py's main would: a PcqrError is one line and an exit code."""
    try:
        command.main(list(args), prog_name="pcqr replay", standalone_mode=False)
        code = 0
    except PcqrError as exc:
        click.echo(f"pcqr: error: {exc}", err=True)
        code = exc.exit_code
    out, err = capsys.readouterr()
    return code, out, err


def last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def copy_log(logged: dict, tmp_path) -> str:
    log = str(tmp_path / "log")
    shutil.copytree(logged["log"], log)
    return log


def log_columns(log: str) -> pa.Table:
    """The log's answer columns read straight from its files, independently of pcqr.pipeline.public_log.replay."""
    return pa.concat_tables([pq.read_table(path, columns=list(ANSWER_COLUMNS)).replace_schema_metadata(None)
                             for _, path in batch_files(log)])


def flip(path: str, offset: int) -> None:
    with open(path, "rb") as handle:
        data = bytearray(handle.read())
    data[offset] ^= 0xFF
    with open(path, "wb") as handle:
        handle.write(bytes(data))


def assert_refused(code: int, err: str, log: str, out_file, *needles: str) -> None:
    assert code != 0
    lines = [line for line in err.strip().splitlines() if line.startswith("pcqr: error: ")]
    assert len(lines) == 1, err
    for needle in (log, *needles):
        assert needle in lines[0], lines[0]
    assert not os.path.exists(out_file)  # nothing written


def test_intact_log_verifies_and_replays_identical_answers(logged, tmp_path, capsys) -> None:
    log = logged["log"]
    report = verify_log(log)
    assert report.ok and report.first_bad is None and report.problem is None
    assert report.batches == BATCHES and report.queries == QUERIES
    assert report.provenance is not None and report.provenance["features"] == ["x0", "x1", "x2"]
    assert any("batch 5 (the last) is vouched for by no later batch" in n for n in report.notes)
    assert verify_log(log, expected_last_hash=logged["last_hash"]).last_vouched

    out = tmp_path / "answers.parquet"
    code, stdout, err = replay(capsys, log, "--out", str(out), "--json", "--last-hash", logged["last_hash"])
    assert code == 0, err
    summary = last_json(stdout)
    assert summary["verified"] is True and summary["last_batch_vouched"] is True
    assert summary["batches"] == BATCHES and summary["queries"] == QUERIES
    assert summary["answered"] + summary["abstained"] + summary["refused"] == QUERIES
    assert min(summary["answered"], summary["abstained"], summary["refused"]) > 0  # all three kinds replayed
    replayed, logged_table = pq.read_table(str(out)), log_columns(log)
    assert replayed.column_names == list(ANSWER_COLUMNS)
    for name in ANSWER_COLUMNS:
        assert replayed.schema.field(name).type == logged_table.schema.field(name).type
        assert replayed.column(name).combine_chunks().equals(logged_table.column(name).combine_chunks()), name
    provenance = json.loads(replayed.schema.metadata[PROVENANCE_KEY])
    assert provenance["session_id"] == report.provenance["session_id"]

    # without --out: CSV on stdout, the same values (an empty answer is null)
    code, stdout, err = replay(capsys, log)
    assert code == 0, err
    lines = stdout.strip().splitlines()
    assert lines[0] == "query_id,answer,status,source" and len(lines) == QUERIES + 1
    expected = [f"{q},{'' if a is None else a},{s},{src}" for q, a, s, src in zip(
        *(logged_table.column(c).to_pylist() for c in ("query_id", "answer", "status", "source")))]
    assert lines[1:] == expected
    assert "verified" in err  # the human summary goes to stderr, stdout stays pure CSV


def _footer_start(path: str) -> int:
    with open(path, "rb") as handle:
        data = handle.read()
    (length,) = struct.unpack("<i", data[-8:-4])
    return len(data) - 8 - length


@pytest.mark.parametrize("where", ["data", "footer"])
def test_a_flipped_byte_in_batch_2_is_reported_at_batch_2(logged, tmp_path, capsys, where) -> None:
    log = copy_log(logged, tmp_path)
    path = batch_path(log, 2)
    footer = _footer_start(path)
    size = os.path.getsize(path)
    flip(path, footer // 2 if where == "data" else (footer + size - 8) // 2)
    report = verify_log(log)
    assert not report.ok and report.first_bad == 2, report.problems
    assert report.problem is not None and report.problem.startswith("batch 2 is altered"), report.problem
    out = tmp_path / "answers.parquet"
    code, _, err = replay(capsys, log, "--out", str(out))
    assert_refused(code, err, log, out, "batch 2")


def test_every_single_byte_flip_of_a_middle_batch_is_named(logged, tmp_path) -> None:
    """A sample of offsets over the whole file: whether the flip breaks Parquet, the metadata or
    only changes values, the report names batch 2 (the chain of batch 3 vouches for it)."""
    log = copy_log(logged, tmp_path)
    path = batch_path(log, 2)
    with open(path, "rb") as handle:
        original = handle.read()
    wrong = []
    for offset in range(0, len(original), 97):
        flip(path, offset)
        report = verify_log(log)
        if report.first_bad != 2:
            wrong.append((offset, report.problem))
        with open(path, "wb") as handle:
            handle.write(original)
    assert wrong == []
    assert verify_log(log).ok


def test_the_last_batch_is_vouched_for_only_by_the_session_hash(logged, tmp_path) -> None:
    log = copy_log(logged, tmp_path)
    path = batch_path(log, BATCHES - 1)
    flip(path, _footer_start(path) // 2)
    report = verify_log(log, expected_last_hash=logged["last_hash"])
    assert report.first_bad == BATCHES - 1 and "altered" in (report.problem or "")
    os.remove(path)  # a truncated log: the chain alone cannot see it
    assert verify_log(log).ok
    report = verify_log(log, expected_last_hash=logged["last_hash"])
    assert report.first_bad == BATCHES - 2 and "batches after it are missing" in (report.problem or "")


def test_a_deleted_batch_is_reported_missing(logged, tmp_path, capsys) -> None:
    log = copy_log(logged, tmp_path)
    os.remove(batch_path(log, 3))
    report = verify_log(log)
    assert report.first_bad == 3 and report.problem == "batch 3 is missing"
    out = tmp_path / "answers.parquet"
    code, stdout, err = replay(capsys, log, "--out", str(out), "--json")
    assert_refused(code, err, log, out, "batch 3 is missing")
    assert stdout == ""


def test_swapped_batches_are_reported_out_of_order(logged, tmp_path, capsys) -> None:
    log = copy_log(logged, tmp_path)
    one, two, spare = batch_path(log, 1), batch_path(log, 2), os.path.join(log, "spare")
    os.rename(one, spare)
    os.rename(two, one)
    os.rename(spare, two)
    report = verify_log(log)
    assert report.first_bad in (1, 2), report.problems
    assert "out of order" in (report.problem or "")
    assert {n for n, _ in report.problems} == {1, 2}  # nothing else is blamed
    out = tmp_path / "answers.parquet"
    code, _, err = replay(capsys, log, "--out", str(out))
    assert_refused(code, err, log, out, "out of order")
    assert "batch 1" in err or "batch 2" in err


def test_truth_accuracy_matches_a_manual_computation(logged, tmp_path, capsys) -> None:
    truth = pq.read_table(logged["truth"])
    ids, labels = truth.column("query_id").to_numpy(), truth.column("label").to_numpy().copy()
    labels[ids % 5 == 0] ^= 1  # a truth that disagrees with some answers: accuracy well below 1
    pq.write_table(pa.table({"query_id": ids, "label": labels}), str(tmp_path / "truth.parquet"))
    code, stdout, err = replay(capsys, logged["log"], "--truth", str(tmp_path / "truth.parquet"), "--json")
    assert code == 0, err
    summary = last_json(stdout)
    table = log_columns(logged["log"])
    answered = np.asarray(table.column("status").to_pylist()) == "answered"
    qid = table.column("query_id").to_numpy()[answered]
    given = np.asarray(table.column("answer").to_pylist(), dtype=object)[answered].astype(np.int64)
    label_of = dict(zip(ids.tolist(), labels.tolist()))
    manual = np.mean([label_of[q] == a for q, a in zip(qid.tolist(), given.tolist())])
    assert 0.5 < manual < 0.95
    assert summary["accuracy"] == pytest.approx(manual, abs=1e-12)
    assert summary["evaluated"] == int(answered.sum())


def test_into_another_session_reports_agreement_and_grows_its_log(logged, tmp_path, capsys) -> None:
    state, other_log = str(tmp_path / "other"), str(tmp_path / "other-log")
    shutil.copytree(logged["other"], state)  # a fresh copy: this test spends its budget
    before = {path: sha256(open(path, "rb").read()) for _, path in batch_files(logged["log"])}
    code, stdout, err = replay(capsys, logged["log"], "--into", state, "--log", other_log,
                               "--cluster", logged["cluster"], "--json")
    assert code == 0, err
    summary = last_json(stdout)
    assert summary["verified"] is True and summary["into_log_verified"] is True
    files = batch_files(other_log)
    assert len(files) == summary["into_batches"] > 0  # the other session's log grew from nothing
    assert summary["into_summary"]["threshold"] == OTHER_THRESHOLD and summary["into_summary"]["budget_used"] > 0
    mine, theirs = log_columns(logged["log"]), log_columns(other_log)
    assert theirs.column("query_id").equals(mine.column("query_id"))  # the same queries, in order
    assert summary["statuses"]["into"] == {s: theirs.column("status").to_pylist().count(s)
                                           for s in ("answered", "abstained", "refused")}
    a_status, b_status = (np.asarray(t.column("status").to_pylist()) for t in (mine, theirs))
    both = (a_status == "answered") & (b_status == "answered")
    a_answer, b_answer = (np.asarray(t.column("answer").to_pylist(), dtype=object) for t in (mine, theirs))
    assert summary["both_answered"] == int(both.sum()) > 0
    assert summary["agreement"] == pytest.approx(float(np.mean(a_answer[both] == b_answer[both])))
    # the replayed log is untouched
    assert {path: sha256(open(path, "rb").read()) for _, path in batch_files(logged["log"])} == before


def test_replay_needs_no_private_data(logged, capsys) -> None:
    """The fixture deleted the private dataset and the session's private state: replay still works."""
    assert not os.path.exists(logged["private"])
    assert not os.path.exists(os.path.join(logged["root"], "state"))
    code, stdout, err = replay(capsys, logged["log"], "--json")
    assert code == 0, err
    assert last_json(stdout)["queries"] == QUERIES


def test_bad_options_are_one_line_errors(logged, tmp_path, capsys) -> None:
    code, _, err = replay(capsys, logged["log"], "--log", str(tmp_path / "x"))
    assert code == 2 and "--log" in err and "--into" in err
    code, _, err = replay(capsys, logged["log"], "--out", os.path.join(logged["log"], "x.parquet"))
    assert code == 2 and "inside the log" in err
    code, _, err = replay(capsys, str(tmp_path / "nowhere"))
    assert code == 2 and "no such log directory" in err


def test_universal_log_checks_its_released_model(tmp_path, capsys, thread_cluster_yaml) -> None:
    """Universal mode: the batches answered by h_priv name _released-model.json by its SHA-256."""
    data = tmp_path / "data"
    assert main(["generate", "--kind", "agnostic", "--noise", "0.05", "--rows", "200000", "--features", "1",
                 "--queries", "3000", "--seed", "5", "--out", str(data), "--cluster", thread_cluster_yaml]) == 0
    log = str(tmp_path / "log")
    assert main(["answer", "--mode", "universal", "--hypothesis", "threshold", "--private", str(data / "private"),
                 "--queries", str(data / "queries"), "--state", str(tmp_path / "state"), "--log", log,
                 "--epsilon", "1", "--alpha", "0.5", "--subsamples", "50",
                 "--batch-size", "500", "--seed", "3", "--insecure-seed", "--cluster", thread_cluster_yaml]) == 0
    capsys.readouterr()
    report = verify_log(log)
    assert report.ok and report.other_files == ["_released-model.json"], report.problems
    code, stdout, err = replay(capsys, log, "--json")
    assert code == 0, err
    assert last_json(stdout)["sources"].get("released_model", 0) > 0
    with open(os.path.join(log, "_released-model.json"), "a", encoding="utf-8") as handle:
        handle.write(" ")
    report = verify_log(log)
    assert not report.ok and (report.problem or "").startswith("_released-model.json is altered")


def test_truth_joins_by_id_only_where_an_id_names_one_query(tmp_path) -> None:
    """A query asked again (same id, same features) is scored by its id; an id naming two different
    queries (two runs numbered alike) makes --truth refuse the log instead of scoring one query's
    answer against the other's label."""
    from pcqr.pipeline.report.evaluation import check_one_query_per_id

    provenance = {"features": ["x0", "x1"]}
    first = {"query_id": np.arange(4), "x0": np.arange(4.0), "x1": np.zeros(4)}
    for name, second in (("again", dict(first)), ("other", {**first, "x1": np.ones(4)})):
        log = tmp_path / name
        log.mkdir()
        for batch, columns in enumerate((first, second)):
            pq.write_table(pa.table(columns), batch_path(str(log), batch))
        if name == "again":
            check_one_query_per_id(str(log), provenance)
        else:
            with pytest.raises(PcqrError, match="query id 0 names two different queries"):
                check_one_query_per_id(str(log), provenance)
