"""The ledger as the jobs use it, and repeated queries answered from the log.

* every job that reads private data (train, answer with --private, learn, release) charges the
  ledger before reading a row; once the budget is spent the next job is refused with one line,
  having read no private row (the functions that read private parts are replaced by ones that
  fail loudly) and recorded nothing;
* a job that fails on invalid private values has its charge refunded;
* a repeated query gets its logged answer, source "duplicate", at no budget, even after the
  session has halted.
"""
from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

import pcqr.pipeline.models.subsample
from pcqr.jobs.cli import main
from pcqr.pipeline.public_log.answered import AnsweredIndex, row_keys
from pcqr.pipeline.budget.fingerprint import dataset_identity
from pcqr.pipeline.budget.ledger import Ledger
from pcqr.pipeline.data.datasets import open_dataset
from tests.conftest import MECHANICS_PRIVACY, threshold_data, write_parquet, write_session_data

PARAMS = MECHANICS_PRIVACY  # (100, 1e-3) asked; w the smallest certifiable
# A session that halts within a few dozen queries and answers some first: eps 4, delta 1e-6, T 3
# (lambda 9.3, w 271.5); k = 700 > 2w, so a unanimous query abstains with probability 0.010 and
# answers none of the first 4 instances with probability about 1e-8.
HALTING = ["--epsilon", "4", "--delta", "1e-6", "--cutoff", "3", "--subsamples", "700", "--gate", "stability",
           "--learner", "stump"]  # the ledger in the jobs is the test, not the learner: the fastest one


@pytest.fixture
def data(tmp_path):
    write_session_data(tmp_path)
    public = threshold_data(300, seed=3)
    write_parquet(str(tmp_path / "public" / "p.parquet"), {k: v for k, v in public.items() if k != "label"})
    return tmp_path


def _run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _charges(ledger: str, private) -> list[dict]:
    files = open_dataset(str(private), "private").files
    with Ledger(ledger) as book:
        return book.store.charges(dataset_identity(files, None, book))


def _no_private_reads(monkeypatch) -> None:
    def read(*args, **kwargs):
        raise AssertionError("a private row was read")

    monkeypatch.setattr(pcqr.pipeline.models.subsample, "load_part", read)  # training, relabelling, A_SSPP (learn, answer)
    from pcqr.pipeline.mechanisms import with_public_data

    monkeypatch.setattr(with_public_data, "load_features", read)  # A_PAP (release)


def test_jobs_charge_and_are_refused_past_the_budget(data, capsys, thread_cluster_yaml, tmp_path, monkeypatch) -> None:
    ledger = str(tmp_path / "ledger.sqlite")
    common = ["--cluster", thread_cluster_yaml, "--ledger", ledger, "--json"]
    code, _, err = _run(capsys, "budget", "set", str(data / "private"), "--epsilon", "101.5", "--delta", "1e-2",
                        "--ledger", ledger)
    assert code == 0, err
    code, out, err = _run(capsys, "train", "--private", str(data / "private"), "--state", str(tmp_path / "s1"),
                          *PARAMS, *common)
    assert code == 0, err
    assert "charged (100, 0.001)" in json.loads(out.strip().splitlines()[-1])["ledger"]
    code, _, err = _run(capsys, "learn", "--private", str(data / "private"), "--public", str(data / "public"),
                        "--hypothesis", "threshold", "--features", "x0", "--epsilon", "1",
                        "--out", str(tmp_path / "m.json"), *common)
    assert code == 0, err
    train, learn = _charges(ledger, data / "private")
    assert (train["job"], train["epsilon"], train["delta"]) == ("train", 100.0, 1e-3)
    # A_SSPP is (1, d)-DP with d the exponential mechanism's dropped-levels term (below 2^-140)
    assert (learn["job"], learn["epsilon"]) == ("learn", 1.0) and 0 <= learn["delta"] < 2.0**-140
    # (101, 1e-3) spent of (101.5, 1e-2): every further job asking eps >= 1 is refused before reading a row
    _no_private_reads(monkeypatch)
    attempts = [
        ("train", "--private", str(data / "private"), "--state", str(tmp_path / "s2"), *PARAMS),
        ("answer", "--private", str(data / "private"), "--state", str(tmp_path / "s3"), "--queries",
         str(data / "queries"), "--log", str(tmp_path / "log3"), *PARAMS),
        ("learn", "--private", str(data / "private"), "--public", str(data / "public"), "--hypothesis", "threshold",
         "--features", "x0", "--epsilon", "1", "--out", str(tmp_path / "m2.json")),
        ("release", "--private", str(data / "private"), "--public", str(data / "public"), "--hypothesis",
         "threshold", "--features", "x0", "--epsilon", "1", "--out", str(tmp_path / "t.parquet")),
    ]
    for args in attempts:
        code, out, err = _run(capsys, *args, *common)
        lines = err.strip().splitlines()
        assert code != 0 and len(lines) == 1 and "privacy budget of" in lines[0] and "exceeded" in lines[0], err
    assert len(_charges(ledger, data / "private")) == 2  # nothing recorded for the refused jobs
    assert not (tmp_path / "s2").exists() and not (tmp_path / "s3" / "session.json").exists()
    assert not (tmp_path / "m2.json").exists() and not (tmp_path / "t.parquet").exists()
    code, out, _ = _run(capsys, "budget", "show", str(data / "private"), "--ledger", ledger, "--json")
    shown = json.loads(out.strip().splitlines()[-1])
    assert code == 0 and len(shown["charges"]) == 2


def test_invalid_private_values_refund_the_charge(data, capsys, thread_cluster_yaml, tmp_path) -> None:
    ledger = str(tmp_path / "ledger.sqlite")
    bad = threshold_data(20_000, seed=1)
    bad["label"][123] = 3
    write_parquet(str(tmp_path / "bad" / "p.parquet"), bad)
    code, _, err = _run(capsys, "train", "--private", str(tmp_path / "bad"), "--state", str(tmp_path / "s"),
                        *PARAMS, "--cluster", thread_cluster_yaml, "--ledger", ledger)
    assert code != 0 and "outside {0, 1}" in err
    (charge,) = _charges(ledger, tmp_path / "bad")
    assert charge["refunded"] and "invalid input" in charge["refunded"]
    with Ledger(ledger) as book:
        files = open_dataset(str(tmp_path / "bad"), "private").files
        assert book.store.spent(dataset_identity(files, None, book)) == (0.0, 0.0)


def test_row_keys_and_index() -> None:
    X = np.array([[1.0, 2.0], [1.0, 2.0], [-0.0, 5.0], [0.0, 5.0], [2.0, 1.0]])
    keys = row_keys(X, seed=7)
    assert keys[0] == keys[1] and keys[2] == keys[3] and keys[0] != keys[4] and keys[0] != keys[2]
    assert (row_keys(X, seed=8) != keys).all()  # keyed: another session's seed gives other keys
    index = AnsweredIndex()
    rng = np.random.default_rng(0)
    all_keys = rng.integers(0, 2**63, size=5000).astype(np.uint64)
    labels = rng.integers(0, 2, size=5000).astype(np.int8)
    for lo in range(0, 5000, 137):  # many small runs, merged as they come
        index.add(all_keys[lo : lo + 137], labels[lo : lo + 137])
    found, got = index.lookup(np.concatenate([all_keys, np.array([1, 2, 3], dtype=np.uint64)]))
    assert found[:5000].all() and not found[5000:].any() and (got[:5000] == labels).all()
    assert len(index) == 5000


def test_repeated_queries_get_the_logged_answer_for_free(data, capsys, thread_cluster_yaml, tmp_path) -> None:
    args = ["answer", "--private", str(data / "private"), "--state", str(tmp_path / "st"), "--queries",
            str(data / "queries"), "--log", str(tmp_path / "log"), *HALTING, "--cluster", thread_cluster_yaml,
            "--after-halt", "refuse", "--json"]
    code, out, err = _run(capsys, *args)
    assert code == 0, err
    first = json.loads(out.strip().splitlines()[-1])
    log = pq.read_table(tmp_path / "log")
    answered = log.filter(pq.ParquetDataset(tmp_path / "log").read().column("status").to_numpy(
        zero_copy_only=False) == "answered")
    assert answered.num_rows > 0
    # ask again: every answered query (new ids) plus fresh ones
    fresh = threshold_data(500, seed=9)
    repeat = {"query_id": np.arange(10_000, 10_000 + answered.num_rows),
              **{c: answered.column(c).to_numpy() for c in ("x0", "x1", "x2")}}
    more = {"query_id": np.arange(20_000, 20_500), **{c: fresh[c] for c in ("x0", "x1", "x2")}}
    write_parquet(str(tmp_path / "again" / "p.parquet"),
                  {k: np.concatenate([repeat[k], more[k]]) for k in repeat})
    code, out, err = _run(capsys, "answer", "--state", str(tmp_path / "st"), "--queries", str(tmp_path / "again"),
                          "--cluster", thread_cluster_yaml, "--after-halt", "refuse", "--json")
    assert code == 0, err
    second = json.loads(out.strip().splitlines()[-1])
    assert second["duplicates"] == answered.num_rows
    new = pq.read_table(tmp_path / "log").filter(pq.read_table(tmp_path / "log").column("query_id").to_numpy() >= 10_000)
    new = new.sort_by("query_id")
    dup = new.slice(0, answered.num_rows)
    assert set(dup.column("source").to_pylist()) == {"duplicate"}
    assert set(dup.column("status").to_pylist()) == {"answered"}
    assert dup.column("answer").to_pylist() == answered.column("answer").to_pylist()
    assert first["budget_spent"]  # cutoff 3: the session halted during the first call
    # a halted session still answers repeats (free) and refuses the rest
    assert set(new.slice(answered.num_rows).column("status").to_pylist()) == {"refused"}
    assert second["budget_used"] == first["budget_used"]
