"""pcqr.Session: train, answer (pandas / pyarrow / numpy / Parquet in, the log's table out), status,
re-open, one process at a time, and bad input refused before any budget is spent."""
from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import pcqr
from pcqr.pipeline.public_log.batches import batch_files
from tests.conftest import MECHANICS, threshold_data, write_session_data

SEED = {"seed": 7, "insecure_seed": True}  # tests only: reproducible, marked NOT private


def _queries(n: int, seed: int) -> dict[str, np.ndarray]:
    return {k: v for k, v in threshold_data(n, seed=seed).items() if k != "label"}


def _charges(ledger: Path) -> int:
    if not ledger.exists():
        return 0
    with closing(sqlite3.connect(ledger)) as db:
        return db.execute("SELECT COUNT(*) FROM charges").fetchone()[0]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A session trained through the API (its lock released), its data, cluster file and ledger."""
    root = write_session_data(tmp_path_factory.mktemp("api"))
    cluster = root / "cluster.yaml"
    cluster.write_text("pcqr:\n  cluster:\n    backend: local\n    n-workers: 1\n"
                       "    threads-per-worker: 2\n    processes: false\n")
    ledger = root / "ledger.sqlite"
    with pcqr.Session.create(str(root / "state"), str(root / "private"), **MECHANICS, gate="stability",
                             queries_max=100_000, cluster=str(cluster), ledger=str(ledger), **SEED) as session:
        summary = session.last_summary
        assert session.features == ["x0", "x1", "x2"]
    return root, cluster, ledger, summary


def test_create_charges_once_and_reports_the_certificate(trained) -> None:
    root, _, ledger, summary = trained
    assert summary["models"] == MECHANICS["subsamples"] and summary["epsilon"] == MECHANICS["epsilon"]
    assert summary["proven_epsilon"] <= MECHANICS["epsilon"] and summary["proven_delta"] <= MECHANICS["delta"]
    assert summary["privacy"] == "NOT PRIVATE (seeded noise)"
    assert _charges(ledger) == 1


def test_answers_every_input_kind_and_returns_what_the_log_holds(trained) -> None:
    import pandas as pd

    root, cluster, ledger, _ = trained
    log = root / "log"
    q = _queries(300, seed=11)
    with pcqr.Session.open(str(root / "state"), cluster=str(cluster), ledger=str(ledger)) as session:
        first = session.answer(pd.DataFrame(q), log=str(log), batch_size=100)
        assert first.num_rows == 300 and len(batch_files(str(log))) == 3
        logged = pa.concat_tables([pq.read_table(p) for _, p in batch_files(str(log))])
        assert first.equals(logged)
        second = session.answer(pa.table(_queries(50, seed=12)))  # the session's own log from now on
        third = session.answer(np.column_stack([v for v in _queries(40, seed=13).values()]))
        assert (second.num_rows, third.num_rows) == (50, 40)
        assert len(batch_files(str(log))) == 5
        again = session.answer(pd.DataFrame(q))  # answered in full before: not asked again, its logged answers
        assert again.equals(first) and len(batch_files(str(log))) == 5
        assert session.last_summary["already_answered"] == 300 and session.last_summary["batches"] == 0
        assert session.answer(pa.table(_queries(50, seed=12))).equals(second)  # an earlier input, still kept
        assert len(batch_files(str(log))) == 5
        statuses = set(pa.concat_tables([first, second, third]).column("status").to_pylist())
        assert statuses <= {"answered", "abstained", "refused"} and "answered" in statuses
        answered = [a for a, s in zip(first.column("answer").to_pylist(), first.column("status").to_pylist())
                    if s == "answered"]
        truth = [int(x > 0.1) for x, s in zip(q["x0"], first.column("status").to_pylist()) if s == "answered"]
        assert np.mean(np.array(answered) == np.array(truth)) > 0.9  # k = 50 models of a threshold concept
        status = session.status()
        assert status.answered + status.abstained + status.refused == 390
        assert status.used == status.abstained and status.cutoff == MECHANICS["cutoff"]
        assert status.epsilon == MECHANICS["epsilon"] and not status.private and status.log == str(log.resolve())
    assert _charges(ledger) == 1  # answering spends nothing new on the ledger


def test_one_process_at_a_time(trained) -> None:
    root, cluster, ledger, _ = trained
    with pcqr.Session.open(str(root / "state"), cluster=str(cluster), ledger=str(ledger)):
        with pytest.raises(pcqr.PcqrError, match="lock|in use|holds"):
            pcqr.Session.open(str(root / "state"), cluster=str(cluster), ledger=str(ledger))
    pcqr.Session.open(str(root / "state"), cluster=str(cluster), ledger=str(ledger)).close()  # released


def test_a_closed_session_answers_nothing(trained) -> None:
    root, cluster, ledger, _ = trained
    session = pcqr.Session.open(str(root / "state"), cluster=str(cluster), ledger=str(ledger))
    session.close()
    with pytest.raises(pcqr.PcqrError, match="closed"):
        session.status()


@pytest.mark.parametrize("bad,needle", [
    (pa.table({"x0": [0.5], "x1": [0.1]}), "x2"),                      # a missing feature
    (pa.table({"x0": [np.nan], "x1": [0.1], "x2": [0.3]}), "NaN|finite"),  # NaN
    (np.zeros((3, 2)), "shape"),                                         # a numpy array of the wrong width
    ([[0.1, 0.2, 0.3]], "expected a pandas DataFrame"),                  # not a table
])
def test_bad_queries_are_refused_in_one_line_before_any_answer(trained, bad, needle) -> None:
    root, cluster, ledger, _ = trained
    with pcqr.Session.open(str(root / "state"), cluster=str(cluster), ledger=str(ledger)) as session:
        before = session.status()
        with pytest.raises(pcqr.PcqrError, match=needle) as refused:
            session.answer(bad, log=str(root / "log"))
        assert "\n" not in str(refused.value) and "pcqr-queries-" not in str(refused.value)
        assert session.status() == before
    assert _charges(ledger) == 1


def test_an_uncertifiable_parameter_is_refused_before_anything_is_charged(tmp_path) -> None:
    root = write_session_data(tmp_path, rows=2000, queries=10)
    ledger = tmp_path / "ledger.sqlite"
    with pytest.raises(pcqr.PcqrError, match="--threshold") as refused:
        pcqr.Session.create(str(tmp_path / "state"), str(root / "private"), **MECHANICS, threshold=1.0,
                            gate="stability", ledger=str(ledger), **SEED)
    assert "\n" not in str(refused.value) and _charges(ledger) == 0
    assert not (tmp_path / "state").exists()  # nothing left: not the folder, not its lock file


@pytest.mark.parametrize("refused", [{"delta": 0.5}, {"labels": 10, "queries_max": 5}, {"gate": "gnmax",
                                                                                       "threshold": 2.0}])
def test_a_refused_create_leaves_no_state_folder(refused, tmp_path) -> None:
    """A plan refused after the lock was taken (delta, labels with queries_max, an uncertifiable
    option) leaves nothing: the state folder the call made, with its lock file, goes with it (it
    stayed, holding only ``lock``, before); a folder that was there stays, empty."""
    root = write_session_data(tmp_path, rows=2000, queries=10)
    with pytest.raises(pcqr.PcqrError):
        pcqr.Session.create(str(tmp_path / "new" / "state"), str(root / "private"), **{**MECHANICS, **refused},
                            ledger=str(tmp_path / "ledger.sqlite"), **SEED)
    assert not (tmp_path / "new").exists()
    (tmp_path / "kept").mkdir()
    with pytest.raises(pcqr.PcqrError):
        pcqr.Session.create(str(tmp_path / "kept"), str(root / "private"), **{**MECHANICS, **refused},
                            ledger=str(tmp_path / "ledger.sqlite"), **SEED)
    assert (tmp_path / "kept").is_dir() and not list((tmp_path / "kept").iterdir())


def test_open_needs_a_session(tmp_path) -> None:
    with pytest.raises(pcqr.PcqrError, match="no session"):
        pcqr.Session.open(str(tmp_path / "nothing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(pcqr.PcqrError, match="no session here"):
        pcqr.Session.open(str(tmp_path / "empty"))
    assert not list((tmp_path / "empty").iterdir())  # no lock file left behind
