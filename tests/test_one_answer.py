"""One answer per distinct query, and no vote that cannot be used (issue 47).

A query whose features equal an earlier one's in the session's stream -- earlier in its own batch,
in an earlier batch, or in an earlier run -- gets that query's outcome (the answer, or the
abstention) with source ``duplicate`` and spends nothing, under every gate and after the halt (the
student's answers too). And the workers count the votes of the fresh queries the gate can still
test only: not of a repeat, a query past m, or one after the halt; a finished stream's re-run counts
none. Before issue 47, 100 copies of one boundary point under gnmax came back 48 x 1 and 52 x 0 and
spent 100 of m, and 20 copies under the stability gate spent all T = 20 and halted the session.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import pcqr.pipeline.session.vote_demand as vote_demand
from pcqr.jobs.cli import main
from pcqr.pipeline.public_log.replay import verify_log
from tests.conftest import MECHANICS_PRIVACY, threshold_data, write_parquet

BOUNDARY = (0.1, 0.0, 0.0)  # on the concept's boundary (x0 > 0.1): the k models split their votes

VOTED: list[int] = []  # rows whose votes the workers counted (module level: Dask sends _counted by reference)
_COUNT_VOTES = vote_demand.count_votes


def _counted(ensemble, X):
    VOTED.append(X.shape[0])
    return _COUNT_VOTES(ensemble, X)


@pytest.fixture(autouse=True)
def own_ledger(tmp_path, monkeypatch) -> None:
    """A ledger of this test's own: the suite's shared one knows other tests' private rows, which
    the misuse guard would find among these generated queries."""
    monkeypatch.setenv("PCQR_LEDGER", str(tmp_path / "ledger.sqlite"))


@pytest.fixture
def voted(monkeypatch) -> list[int]:
    VOTED.clear()
    monkeypatch.setattr(vote_demand, "count_votes", _counted)
    return VOTED


def _stream(path: Path, rows: np.ndarray, first_id: int = 0) -> str:
    write_parquet(str(path / "p.parquet"), {"query_id": np.arange(first_id, first_id + rows.shape[0]),
                                            **{f"x{j}": rows[:, j] for j in range(3)}})
    return str(path)


def _copies(count: int) -> np.ndarray:
    return np.tile(np.array(BOUNDARY), (count, 1))


def _distinct(count: int, seed: int) -> np.ndarray:
    data = threshold_data(count, seed=seed)
    return np.column_stack([data[f"x{j}"] for j in range(3)])


def _train(tmp_path: Path, cluster: str, *options: str, name: str = "state") -> str:
    private = tmp_path / "private"
    if not private.exists():
        write_parquet(str(private / "p.parquet"), threshold_data(4000, seed=1))
    state = str(tmp_path / name)
    assert main(["train", "--private", str(private), "--state", state, "--seed", "3", "--insecure-seed",
                 "--cluster", cluster, "--learner", "stump", *options]) == 0
    return state


def _answer(capsys, state: str, queries: str, log: Path, cluster: str, *options: str) -> dict:
    capsys.readouterr()
    assert main(["answer", "--state", state, "--queries", queries, "--log", str(log), "--cluster", cluster,
                 "--json", *options]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def _same_outcome(log, ids: np.ndarray) -> tuple[str, int | None]:
    """Every row of ``ids`` in the log has the first one's status and answer; that outcome."""
    rows = log.filter(np.isin(log.column("query_id").to_numpy(), ids))
    status, answer = rows.column("status").to_pylist(), rows.column("answer").to_pylist()
    assert len(set(status)) == 1 and len(set(answer)) == 1, (status, answer)
    return status[0], answer[0]


def test_gnmax_answers_a_hundred_copies_once_within_and_across_batches_and_runs(
        tmp_path, capsys, thread_cluster_yaml, voted) -> None:
    """100 copies of one boundary point among 50 other queries, in batches of 30: one noisy-majority
    answer for all 100 (the first; the rest duplicates), 51 of m spent, 51 queries voted on; the
    same point in a later run: a duplicate, nothing spent, nothing voted."""
    state = _train(tmp_path, thread_cluster_yaml, "--epsilon", "30", "--queries-max", "400", "--gate", "gnmax",
                   "--subsamples", "20")
    rows = np.vstack([_distinct(25, 5), _copies(100), _distinct(25, 6)])
    rows = rows[np.random.default_rng(0).permutation(rows.shape[0])]
    copies = np.flatnonzero((rows == np.array(BOUNDARY)).all(axis=1))
    first = _answer(capsys, state, _stream(tmp_path / "q1", rows), tmp_path / "log", thread_cluster_yaml,
                    "--batch-size", "30")
    log = pq.read_table(tmp_path / "log").sort_by("query_id")
    assert _same_outcome(log, copies)[0] == "answered"
    source = np.array(log.column("source").to_pylist())
    assert source[copies[0]] == "gnmax" and set(source[copies[1:]]) == {"duplicate"}
    assert first["duplicates"] == 99 and first["budget_used"] == 51 and sum(voted) == 51
    voted.clear()
    again = _answer(capsys, state, _stream(tmp_path / "q2", _copies(3), first_id=1000), tmp_path / "log",
                    thread_cluster_yaml)
    assert again["duplicates"] == 3 and again["budget_used"] == 51 and sum(voted) == 0
    whole = pq.read_table(tmp_path / "log").sort_by("query_id")
    assert whole.filter(np.asarray(whole.column("query_id").to_numpy() >= 1000)).column("answer").to_pylist() \
        == [log.column("answer")[int(copies[0])].as_py()] * 3
    assert verify_log(str(tmp_path / "log")).ok


def test_stability_copies_cannot_halt_a_session(tmp_path, capsys, thread_cluster_yaml, voted) -> None:
    """T = 20 and 20 copies of a boundary point (each tested alone would abstain and spend): one is
    tested, the other 19 get its outcome, an abstention repeated spends nothing, and the log (whose
    repeated abstentions are not instances) verifies, as does its report's count of instances."""
    state = _train(tmp_path, thread_cluster_yaml, *MECHANICS_PRIVACY)
    summary = _answer(capsys, state, _stream(tmp_path / "q", np.vstack([_copies(20), _distinct(30, 4)])),
                      tmp_path / "log", thread_cluster_yaml, "--batch-size", "8")
    log = pq.read_table(tmp_path / "log").sort_by("query_id")
    _same_outcome(log, np.arange(20))
    assert summary["budget_spent"] is False and summary["refused"] == 0 and summary["duplicates"] == 19
    assert log.column("source").to_pylist()[1:20] == ["duplicate"] * 19
    assert sum(voted) == 31  # the first copy and the 30 others
    report = verify_log(str(tmp_path / "log"))
    assert report.ok, report.problems
    status, source = (np.array(log.column(c).to_pylist()) for c in ("status", "source"))
    assert np.count_nonzero((status == "abstained") & (source != "duplicate")) == summary["budget_used"]


def test_an_abstention_is_repeated_for_a_copy_asked_in_a_later_run(tmp_path, capsys, thread_cluster_yaml) -> None:
    """An abstained query asked again in a later run is not tested again (it was: another instance
    spent each time): it gets the logged abstention, free."""
    state = _train(tmp_path, thread_cluster_yaml, *MECHANICS_PRIVACY)
    first = _answer(capsys, state, _stream(tmp_path / "q1", np.vstack([_copies(1), _distinct(40, 8)])),
                    tmp_path / "log", thread_cluster_yaml)
    log = pq.read_table(tmp_path / "log").sort_by("query_id")
    abstained = np.flatnonzero(np.array(log.column("status").to_pylist()) == "abstained")
    assert abstained.size, "the boundary point abstains under these settings (k = 50 splits)"
    rows = np.column_stack([log.column(f"x{j}").to_numpy() for j in range(3)])[abstained]
    again = _answer(capsys, state, _stream(tmp_path / "q2", rows, first_id=500), tmp_path / "log",
                    thread_cluster_yaml)
    assert again["abstained"] == abstained.size and again["duplicates"] == abstained.size
    assert again["budget_used"] == first["budget_used"]


def test_guess_gate_copies_share_one_answer(tmp_path, capsys, thread_cluster_yaml, voted) -> None:
    state = _train(tmp_path, thread_cluster_yaml, "--epsilon", "100", "--delta", "1e-3", "--cutoff", "20",
                   "--subsamples", "50", "--gate", "guess")
    rows = np.vstack([_distinct(20, 9), _copies(30)])
    summary = _answer(capsys, state, _stream(tmp_path / "q", rows), tmp_path / "log", thread_cluster_yaml,
                      "--batch-size", "16")
    log = pq.read_table(tmp_path / "log").sort_by("query_id")
    assert _same_outcome(log, np.arange(20, 50))[0] == "answered"
    assert log.column("source").to_pylist()[21:] == ["duplicate"] * 29
    assert summary["duplicates"] == 29 and sum(voted) == 21


def test_the_students_answer_is_repeated_for_copies_past_m(tmp_path, capsys, thread_cluster_yaml, voted) -> None:
    """--labels 10 under gnmax: the first 10 fresh queries are the teachers', the rest the student's;
    copies of a point past m: the first the student's, the rest duplicates; only 10 queries voted on
    however long the stream."""
    state = _train(tmp_path, thread_cluster_yaml, "--epsilon", "30", "--labels", "10", "--gate", "gnmax",
                   "--subsamples", "20")
    rows = np.vstack([_distinct(200, 10), _copies(40)])
    summary = _answer(capsys, state, _stream(tmp_path / "q", rows), tmp_path / "log", thread_cluster_yaml,
                      "--batch-size", "64")
    log = pq.read_table(tmp_path / "log").sort_by("query_id")
    source = log.column("source").to_pylist()
    assert source.count("gnmax") == 10 and source[200] == "student" and source[201:] == ["duplicate"] * 39
    assert _same_outcome(log, np.arange(200, 240))[0] == "answered"
    assert summary["budget_used"] == 10 and sum(voted) == 10


def test_a_finished_streams_rerun_and_a_halted_sessions_queries_vote_nothing(
        tmp_path, capsys, thread_cluster_yaml, voted) -> None:
    """A stream answered in full, run again: nothing voted (it was: every query of the first 2^21,
    on the validation pass's read). A halted session asked new queries: nothing voted."""
    state = _train(tmp_path, thread_cluster_yaml, "--epsilon", "30", "--queries-max", "50", "--gate", "gnmax",
                   "--subsamples", "20")
    queries = _stream(tmp_path / "q", _distinct(300, 11))
    summary = _answer(capsys, state, queries, tmp_path / "log", thread_cluster_yaml, "--batch-size", "40",
                      "--after-halt", "refuse")
    assert summary["answered"] == 50 and summary["refused"] == 250 and sum(voted) == 50
    voted.clear()
    import pcqr.pipeline.data.cluster as cluster
    import pcqr.pipeline.session.answering as answering

    def unwanted(*args, **kwargs):
        raise AssertionError("a finished input's re-run starts no cluster and loads no model")

    with pytest.MonkeyPatch.context() as patch:  # recognised in the driver (inputs.answered_before)
        patch.setattr(cluster, "open_client", unwanted)
        patch.setattr(answering, "load_models", unwanted)
        assert _answer(capsys, state, queries, tmp_path / "log", thread_cluster_yaml, "--batch-size", "40",
                       "--after-halt", "refuse")["already_answered"] == 300
    assert sum(voted) == 0
    more = _answer(capsys, state, _stream(tmp_path / "q2", _distinct(100, 12), first_id=1000), tmp_path / "log",
                   thread_cluster_yaml, "--after-halt", "refuse")
    assert more["refused"] == 100 and sum(voted) == 0


@pytest.mark.parametrize("seed", range(5))
def test_origins_name_each_rows_first_row_of_its_key(seed: int) -> None:
    """pcqr.pipeline.public_log.answered.origins against a dictionary of first rows (keys drawn from
    few values, so most rows are copies; and the two bits the index ignores varied)."""
    from pcqr.pipeline.public_log.answered import origins

    rng = np.random.default_rng(seed)
    base = rng.integers(0, 2**63, size=7, dtype=np.uint64) & ~np.uint64(3)
    keys = base[rng.integers(0, 7, size=500)] | rng.integers(0, 4, size=500).astype(np.uint64)
    first: dict[int, int] = {}
    expected = [first.setdefault(int(k) >> 2, i) for i, k in enumerate(keys)]
    np.testing.assert_array_equal(origins(keys), expected)
    unique = rng.permutation(np.arange(100, dtype=np.uint64) << np.uint64(2))
    np.testing.assert_array_equal(origins(unique), np.arange(100))
