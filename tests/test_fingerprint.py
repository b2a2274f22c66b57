"""Dataset identity of decoded rows, overlap sketches and the misuse guard (issue 11, items 5 and 6).

Statistical assertions use the sketches' stated error bounds (pipeline/budget/overlap.py) with the hash
treated as a random function; each fails by chance with probability at most P_FAIL = 1e-6."""
from __future__ import annotations

import json
import math
import os
import sqlite3

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pcqr.jobs.cli import main
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.budget.fingerprint import dataset_identity, feature_hashes, fingerprint_dataset, row_hashes
from pcqr.pipeline.budget.charging import charge_private_use
from pcqr.pipeline.budget.ledger import Ledger
from pcqr.pipeline.public_log.batches import PROVENANCE_KEY
from pcqr.pipeline.budget.overlap import legacy_identity
from pcqr.pipeline.budget.siphash import siphash128
from pcqr.pipeline.budget.sketch import OVERLAP_FRACTION, Sketch, containment
from tests.conftest import MECHANICS_PRIVACY, P_FAIL, threshold_data, write_parquet

ROWS = 6000


def table_of(rows: int = ROWS, seed: int = 1) -> pa.Table:
    return pa.table(threshold_data(rows, seed=seed))


def write(directory, table: pa.Table, pieces: int = 1, compression: str = "snappy", name: str = "part") -> str:
    os.makedirs(directory, exist_ok=True)
    bounds = np.linspace(0, table.num_rows, pieces + 1).astype(int)
    for i in range(pieces):
        pq.write_table(table.slice(bounds[i], bounds[i + 1] - bounds[i]), os.path.join(directory, f"{name}-{i}.parquet"),
                       compression=compression, row_group_size=1000)
    return str(directory)


def files_of(directory: str) -> list[str]:
    return sorted(os.path.join(directory, f) for f in os.listdir(directory))


def ledger_rows(path: str) -> tuple[list[tuple], list[tuple]]:
    """Every budget and charge (what a refused command must leave unchanged)."""
    if not os.path.exists(path):
        return [], []
    with sqlite3.connect(path) as db:
        return (db.execute("SELECT * FROM budgets ORDER BY identity").fetchall(),
                db.execute("SELECT * FROM charges ORDER BY id").fetchall())


# --- identity ----------------------------------------------------------------------------------

def test_identity_ignores_compression_order_splitting_and_names(tmp_path) -> None:
    table = table_of()
    identity = dataset_identity(files_of(write(tmp_path / "base", table)))
    shuffled = table.take(np.random.default_rng(3).permutation(table.num_rows))
    variants = {
        "zstd": write(tmp_path / "zstd", table, compression="zstd"),
        "none": write(tmp_path / "none", table, compression="none"),
        "shuffled": write(tmp_path / "shuffled", shuffled),
        "three files": write(tmp_path / "split", shuffled, pieces=3),
        "renamed": write(tmp_path / "renamed", table, pieces=3, name="other"),
    }
    pq.write_table(table, str(tmp_path / "dictionary.parquet"), use_dictionary=True, data_page_version="2.0")
    for kind, directory in variants.items():
        assert dataset_identity(files_of(directory)) == identity, kind
    assert dataset_identity([str(tmp_path / "dictionary.parquet")]) == identity


def test_identity_changes_with_one_value_one_row_or_a_duplicate(tmp_path) -> None:
    table = table_of(500)
    identity = dataset_identity([write_parquet(str(tmp_path / "a.parquet"), table.to_pydict())])
    label = table.column("label").to_numpy().copy()
    label[17] ^= 1
    changed = table.set_column(table.schema.get_field_index("label"), "label", pa.array(label))
    others = {"one label": changed, "one row less": table.slice(1), "a row twice": pa.concat_tables([table, table.slice(0, 1)])}
    for kind, other in others.items():
        path = str(tmp_path / f"{kind}.parquet")
        pq.write_table(other, path)
        assert dataset_identity([path]) != identity, kind


def test_canonical_values_widths_negative_zero_nan_nulls_and_strings() -> None:
    def same(a: dict, b: dict) -> bool:
        return all((x == y).all() for x, y in zip(row_hashes(pa.table(a)), row_hashes(pa.table(b))))

    assert same({"v": pa.array([1, -2], pa.int32())}, {"v": pa.array([1, -2], pa.int64())})
    assert same({"v": pa.array([1.5, 0.25], pa.float32())}, {"v": pa.array([1.5, 0.25], pa.float64())})
    assert same({"v": pa.array([-0.0, float("nan")])}, {"v": pa.array([0.0, -float("nan")])})
    assert same({"s": pa.array(["a", "b", "a"]).dictionary_encode()}, {"s": pa.array(["a", "b", "a"])})
    assert same({"a": [1], "b": [2.0]}, {"b": [2.0], "a": [1]})  # columns by name, not position
    assert not same({"v": pa.array([1], pa.int64())}, {"v": pa.array([1.0])})  # the type is part of a value
    assert not same({"v": pa.array([0], pa.int64())}, {"v": pa.array([None], pa.int64())})
    assert not same({"a": [1]}, {"b": [1]})
    assert not same({"s": ["ab", "c"]}, {"s": ["a", "bc"]})
    big = 2**63 + 5
    assert not same({"v": pa.array([big], pa.uint64())}, {"v": pa.array([big - 2**64], pa.int64())})
    # feature hashes see floats: an integer column equals a float column with the same values
    ints, floats = pa.table({"x": pa.array([3, 4], pa.int16())}), pa.table({"x": pa.array([3.0, 4.0])})
    assert (feature_hashes(ints, ["x"]) == feature_hashes(floats, ["x"])).all()


def test_siphash_matches_the_reference_vectors() -> None:
    """SipHash-2-4-128 of the messages 00 01 .. (i-1), key 00 .. 0f (veorq/SipHash vectors.h, i = 0, 8, 16)."""
    expected = {0: "a3817f04ba25a8e66df67214c7550293", 8: "3b62a9ba6258f5610f83e264f31497b4",
                16: "6ee2a4ca67b054bbfd3315bf85230577"}
    for length, tag in expected.items():
        words = np.frombuffer(bytes(range(length)), dtype="<u8").astype(np.uint64).reshape(-1, 1)
        h0, h1 = siphash128(np.tile(words, (1, 3)), bytes(range(16)))  # three copies of the message
        assert all(int(h0[i]).to_bytes(8, "little").hex() + int(h1[i]).to_bytes(8, "little").hex() == tag
                   for i in range(3))


def test_sketches_merge_exactly_and_the_workers_give_the_local_result(tmp_path, client) -> None:
    files = files_of(write(tmp_path / "p", table_of(), pieces=3))
    local = fingerprint_dataset(files, None, None, ["x0", "x1"])
    on_workers = fingerprint_dataset(files, client, None, ["x1", "x0"])
    assert on_workers.identity == local.identity and on_workers.rows == ROWS
    assert local.row_sketch is not None and on_workers.row_sketch is not None and local.feature_sketch is not None
    assert (local.row_sketch.values == on_workers.row_sketch.values).all()
    whole = Sketch.of(feature_hashes(table_of(), ["x0", "x1"]))
    assert (local.feature_sketch.values == whole.values).all() and (local.feature_sketch.counts == 1).all()
    repeated = Sketch.merge([Sketch.of(np.array([5, 1, 5], np.uint64)), Sketch.of(np.array([5, 9], np.uint64))], size=2)
    assert repeated.values.tolist() == [1, 5] and repeated.counts.tolist() == [1, 3] and repeated.full


# --- containment ---------------------------------------------------------------------------------

@pytest.mark.parametrize("shared, only_a, only_b", [(30_000, 30_000, 0), (20_000, 20_000, 20_000), (50_000, 0, 1)])
def test_containment_estimates_are_within_the_stated_error(shared, only_a, only_b) -> None:
    rng = np.random.default_rng(shared + only_a)
    pool = rng.integers(0, 2**64, shared + only_a + only_b, dtype=np.uint64)
    a, b = pool[: shared + only_a], np.concatenate([pool[:shared], pool[shared + only_a:]])
    estimate = containment(Sketch.of(a), Sketch.of(b))
    for value, truth, sampled in ((estimate.a_in_b, shared / len(a), estimate.sampled_a),
                                  (estimate.b_in_a, shared / len(b), estimate.sampled_b)):
        t = math.sqrt(math.log(2 / P_FAIL) / (2 * sampled))  # Hoeffding: 2 exp(-2 m t^2) = P_FAIL
        assert value is not None and abs(value - truth) <= t
    assert estimate.related == (max(shared / len(a), shared / len(b)) >= OVERLAP_FRACTION)
    unrelated = containment(Sketch.of(a), Sketch.of(rng.integers(0, 2**64, 40_000, dtype=np.uint64)))
    assert unrelated.a_in_b == 0.0 and unrelated.b_in_a == 0.0  # never sees overlap that is not there


# --- charges across re-writes and overlaps --------------------------------------------------------

def test_the_budget_holds_across_rewrites_and_overlapping_data(tmp_path, capsys) -> None:
    path = str(tmp_path / "ledger.sqlite")
    table = table_of()
    base = write(tmp_path / "base", table)
    assert main(["budget", "set", base, "--epsilon", "1", "--delta", "0", "--ledger", path]) == 0
    rewritten = write(tmp_path / "rewritten", table.take(np.arange(ROWS)[::-1]), pieces=3, compression="zstd")
    charge_private_use(files_of(rewritten), rewritten, "learn", 0.6, 0.0, {}, path)
    with pytest.raises(PcqrError, match=f"privacy budget of {base} exceeded: spent \\(0.6, 0\\)"):  # one identity
        charge_private_use(files_of(base), base, "learn", 0.6, 0.0, {}, path)
    appended = write(tmp_path / "appended", pa.concat_tables([table, table_of(50, seed=9)]))
    removed = write(tmp_path / "removed", table.slice(0, ROWS - 1))
    charged = charge_private_use(files_of(appended), appended, "learn", 0.3, 0.0, {}, path)
    assert charged["identity"] != dataset_identity(files_of(base)) and "also charged to" in charged["overlaps"]
    before = ledger_rows(path)
    with pytest.raises(PcqrError, match=f"privacy budget of {base} exceeded: spent \\(0.9, 0\\)"):
        charge_private_use(files_of(removed), removed, "learn", 0.2, 0.0, {}, path)
    assert ledger_rows(path) == before  # refused: nothing recorded, on either identity
    with Ledger(path) as ledger:
        assert ledger.store.spent(dataset_identity(files_of(base))) == pytest.approx((0.9, 0.0))
    capsys.readouterr()
    assert main(["budget", "show", appended, "--ledger", path, "--json"]) == 0
    (overlap,) = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["overlaps"]
    assert overlap["dataset"] == base and overlap["its_rows_in_this"] == 1.0  # all of base is in appended
    unrelated = write(tmp_path / "unrelated", table_of(seed=5))
    assert charge_private_use(files_of(unrelated), unrelated, "learn", 5.0, 0.0, {}, path)["overlaps"] is None


def test_a_budget_under_an_identity_of_earlier_versions_still_binds(tmp_path) -> None:
    path = str(tmp_path / "ledger.sqlite")
    base = write(tmp_path / "base", table_of(), pieces=2)
    with Ledger(path) as ledger:
        ledger.set_budget(legacy_identity(files_of(base)), base, 1.0, 0.0)
    charged = charge_private_use(files_of(base), base, "learn", 0.7, 0.0, {}, path)
    assert "earlier pcqr versions" in charged["overlaps"]
    with pytest.raises(PcqrError, match=f"privacy budget of {base} exceeded"):
        charge_private_use(files_of(base), base, "learn", 0.7, 0.0, {}, path)


# --- the misuse guard ------------------------------------------------------------------------------

@pytest.fixture
def session_data(tmp_path):
    """Private rows with a query_id column (so --truth can point at them), and unrelated queries."""
    private = threshold_data(4000, seed=1)
    write_parquet(str(tmp_path / "private/p.parquet"), {"query_id": np.arange(4000), **private})
    q = threshold_data(500, seed=2)
    write_parquet(str(tmp_path / "queries/q.parquet"), {"query_id": np.arange(500), **{k: q[k] for k in ("x0", "x1", "x2")}})
    write_parquet(str(tmp_path / "truth/t.parquet"), {"query_id": np.arange(500), "label": q["label"]})
    return tmp_path


def refused(code: int, err: str, *needles: str) -> None:
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("pcqr: error: "), err
    for needle in needles:
        assert needle in lines[0], lines[0]


def cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_public_or_queries_or_truth_holding_private_rows_are_refused(session_data, capsys, thread_cluster_yaml) -> None:
    d, ledger = session_data, str(session_data / "ledger.sqlite")
    common = ["--ledger", ledger, "--cluster", thread_cluster_yaml]
    private = str(d / "private")
    for command, extra in (("learn", ["--hypothesis", "threshold", "--out", str(d / "model.json")]),
                           ("release", ["--hypothesis", "threshold", "--out", str(d / "table.parquet")])):
        code, _, err = cli(capsys, command, "--private", private, "--public", private, "--features", "x0", *extra, *common)
        refused(code, err, "--public", f"private dataset {private}", "--allow-private-overlap")
    assert ledger_rows(ledger) == ([], []) and not (d / "model.json").exists() and not (d / "table.parquet").exists()
    session = ["--features", "x0,x1,x2", *MECHANICS_PRIVACY, "--queries-max", "10000", *common]
    one_shot = ["answer", "--private", private, "--state", str(d / "state"), "--log", str(d / "log"), *session]
    code, _, err = cli(capsys, *one_shot, "--queries", private)  # a new session on its own private rows
    refused(code, err, "--queries", private)
    assert ledger_rows(ledger) == ([], []) and not (d / "state" / "session.json").exists()
    assert not (d / "log").exists() or not os.listdir(d / "log")
    assert cli(capsys, "train", "--private", private, "--state", str(d / "state"), *session)[0] == 0
    before = ledger_rows(ledger)
    for option, value in (("--queries", private), ("--truth", private)):
        queries = [] if option == "--queries" else ["--queries", str(d / "queries")]
        code, _, err = cli(capsys, "answer", "--state", str(d / "state"), "--log", str(d / "log"), *queries,
                           option, value, *common)
        refused(code, err, option, f"private dataset {private}")
        assert ledger_rows(ledger) == before and (not (d / "log").exists() or not os.listdir(d / "log"))
    # unrelated queries and truth: answered
    code, out, err = cli(capsys, "answer", "--state", str(d / "state"), "--log", str(d / "log"), "--queries",
                         str(d / "queries"), "--truth", str(d / "truth"), "--json", *common)
    assert code == 0, err
    assert "allow_private_overlap" not in json.loads(out.strip().splitlines()[-1])


def test_answer_reads_its_queries_once_for_the_validation_and_the_guard(session_data, capsys, monkeypatch,
                                                                         thread_cluster_yaml) -> None:
    """pcqr answer's misuse guard finds private rows in --queries on the validation pass's own read (one
    read of the file, issue 32): with the guard's separate read disabled it still refuses them, and a
    file of unrelated queries is answered."""
    import pcqr.pipeline.budget.overlap as overlap

    d, ledger = session_data, str(session_data / "ledger.sqlite")
    common = ["--ledger", ledger, "--cluster", thread_cluster_yaml]
    private = str(d / "private")
    session = ["--features", "x0,x1,x2", *MECHANICS_PRIVACY, "--queries-max", "10000", *common]
    assert cli(capsys, "train", "--private", private, "--state", str(d / "state"), *session)[0] == 0

    def second_read(*args, **kwargs):
        raise AssertionError("the queries were read again for the guard")

    monkeypatch.setattr(overlap, "_in_range", second_read)
    answer = ["answer", "--state", str(d / "state"), "--log", str(d / "log"), *common]
    code, _, err = cli(capsys, *answer, "--queries", private)
    refused(code, err, "--queries", f"private dataset {private}")
    assert not (d / "log").exists() or not os.listdir(d / "log")
    code, out, err = cli(capsys, *answer, "--queries", str(d / "queries"), "--json")
    assert code == 0 and json.loads(out.strip().splitlines()[-1])["answered"] > 0, err


def test_replay_truth_and_predict_queries_holding_private_rows_are_refused(session_data, capsys,
                                                                           thread_cluster_yaml) -> None:
    """The misuse guard covers pcqr replay --truth and pcqr predict's QUERIES too (issue 27): a file of
    private rows is refused in one line, nothing written; --allow-private-overlap runs and warns."""
    d, ledger = session_data, str(session_data / "ledger.sqlite")
    common = ["--ledger", ledger, "--cluster", thread_cluster_yaml]
    private = str(d / "private")
    assert cli(capsys, "answer", "--private", private, "--state", str(d / "state"), "--log", str(d / "log"),
               "--queries", str(d / "queries"), "--features", "x0,x1,x2", *MECHANICS_PRIVACY, "--queries-max",
               "10000", *common)[0] == 0
    code, _, err = cli(capsys, "replay", str(d / "log"), "--truth", private, "--ledger", ledger)
    refused(code, err, "--truth", f"private dataset {private}", "--allow-private-overlap")
    truth = pq.read_table(d / "truth")  # a truth file with a column that is no feature (a note): still scored
    pq.write_table(truth.append_column("note", pa.array(["n"] * truth.num_rows)), d / "noted.parquet")
    for file in ("truth", "noted.parquet"):
        code, out, err = cli(capsys, "replay", str(d / "log"), "--truth", str(d / file), "--ledger", ledger, "--json")
        assert code == 0 and json.loads(out.strip().splitlines()[-1])["evaluated"] > 0, err
    code, _, err = cli(capsys, "learn", "--private", private, "--public", str(d / "queries"), "--features", "x0",
                       "--hypothesis", "threshold", "--out", str(d / "model.json"), *common)
    assert code == 0, err
    before = ledger_rows(ledger)
    code, _, err = cli(capsys, "predict", str(d / "model.json"), private, "--out", str(d / "predicted"), *common)
    refused(code, err, "QUERIES", f"private dataset {private}", "--allow-private-overlap")
    assert not (d / "predicted").exists() and ledger_rows(ledger) == before
    code, _, err = cli(capsys, "predict", str(d / "model.json"), private, "--out", str(d / "predicted"),
                       "--allow-private-overlap", *common)
    assert code == 0 and "warning: QUERIES" in err, err
    assert cli(capsys, "predict", str(d / "model.json"), str(d / "queries"), "--out", str(d / "ok"), *common)[0] == 0


def test_allow_private_overlap_runs_and_says_so(session_data, capsys, thread_cluster_yaml) -> None:
    d, ledger = session_data, str(session_data / "ledger.sqlite")
    private = str(d / "private")
    common = ["--ledger", ledger, "--cluster", thread_cluster_yaml, "--allow-private-overlap", "--json"]
    code, out, err = cli(capsys, "learn", "--private", private, "--public", private, "--features", "x0",
                         "--hypothesis", "threshold", "--out", str(d / "model.json"), *common)
    assert code == 0, err
    assert "warning: --public" in err and "allowed by --allow-private-overlap" in err
    assert json.loads((d / "model.json").read_text())["allow_private_overlap"] is True
    assert json.loads(out.strip().splitlines()[-1])["allow_private_overlap"] is True
    code, out, err = cli(capsys, "answer", "--private", private, "--queries", private, "--state", str(d / "state"),
                         "--log", str(d / "log"), "--features", "x0,x1,x2", *MECHANICS_PRIVACY, "--queries-max",
                         "10000", *common)
    assert code == 0, err
    provenance = json.loads(pq.read_schema(str(d / "log" / "batch-00000000.parquet")).metadata[PROVENANCE_KEY])
    assert provenance["allow_private_overlap"] is True
    with Ledger(ledger) as book:  # the learn and the session, each charged once
        assert len(book.store.charges(dataset_identity(files_of(private)))) == 2


def test_shared_common_values_are_not_private_rows(tmp_path, capsys, thread_cluster_yaml) -> None:
    """Discrete features: public rows equal to feature vectors that several private rows share are
    not refused (only once-occurring private vectors single a row out)."""
    rng = np.random.default_rng(4)
    b = rng.integers(0, 3, size=(3000, 2)).astype(float)
    write_parquet(str(tmp_path / "private/p.parquet"), {"b0": b[:, 0], "b1": b[:, 1], "label": (b[:, 0] > 0).astype(np.int8)})
    public = rng.integers(0, 3, size=(200, 2)).astype(float)
    write_parquet(str(tmp_path / "public/p.parquet"), {"b0": public[:, 0], "b1": public[:, 1]})
    code, _, err = cli(capsys, "learn", "--private", str(tmp_path / "private"), "--public", str(tmp_path / "public"),
                       "--hypothesis", "threshold", "--features", "b0", "--out", str(tmp_path / "m.json"),
                       "--ledger", str(tmp_path / "l.sqlite"), "--cluster", thread_cluster_yaml)
    assert code == 0, err
