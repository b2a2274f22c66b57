"""Tests of ``pcqr generate`` (jobs/generate.py over pipeline/data/synthetic.py).

Most tests run the command through CliRunner on one shared in-process Dask
cluster (``open_client`` patched to yield it); one runs the real
``open_client`` with a ``--cluster`` file.
"""
from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner, Result
from distributed import Client, LocalCluster

import pcqr.jobs.generate as generate
from pcqr.pipeline.data import synthetic
from pcqr.pipeline.errors import PcqrError

DELTA = 1e-6  # allowed false-failure probability of the statistical test
SMALL = {"kind": "realizable", "rows": 1000, "features": 3, "queries": 250, "seed": 11}


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                      dashboard_address=":0") as cluster, Client(cluster) as c:
        yield c


@pytest.fixture
def run(client: Client, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[..., Result]:
    """``run(out, **options)``: invoke the command on the shared cluster."""
    @contextlib.contextmanager
    def shared(cluster_path: str | None, echo: Any = None, array_work: bool = False) -> Iterator[Client]:
        yield client

    monkeypatch.setattr(generate, "open_client", shared)
    monkeypatch.chdir(tmp_path)

    def invoke(out: Path, *flags: str, **options: Any) -> Result:
        args = [f"--{k.replace('_', '-')}={v}" for k, v in options.items()]
        return CliRunner().invoke(generate.command, [*args, f"--out={out}", *flags, "--json"])
    return invoke


def ok(result: Result) -> dict[str, Any]:
    assert result.exit_code == 0, (result.output, result.exception)
    return json.loads(result.stdout.strip().splitlines()[-1])


def parts(out: Path, dataset: str) -> list[Path]:
    return sorted((out / dataset).glob("part-*.parquet"))


def read(out: Path, dataset: str) -> pa.Table:
    """The dataset's files concatenated in name order (schema metadata dropped)."""
    tables = [pq.read_table(p) for p in parts(out, dataset)]
    return pa.concat_tables(tables).replace_schema_metadata(None).combine_chunks()


def features(table: pa.Table) -> np.ndarray:
    names = sorted((n for n in table.column_names if n.startswith("x")), key=lambda n: int(n[1:]))
    return np.column_stack([table[n].to_numpy() for n in names])


def flip_bound(n: int, gamma: float, delta: float = DELTA) -> float:
    """eps with P(|flips/n - gamma| >= eps) <= delta for flips ~ Binomial(n, gamma).

    Bernstein: P(|mean - gamma| >= eps) <= 2 exp(-n eps^2 / (2 s2 + 2 eps / 3)), s2 =
    gamma (1 - gamma); setting the right side to delta and solving the quadratic
    with L = ln(2 / delta) gives eps = (L / 3 + sqrt(L^2 / 9 + 2 n s2 L)) / n.
    """
    log_term = math.log(2 / delta)
    variance = gamma * (1 - gamma)
    return (log_term / 3 + math.sqrt(log_term ** 2 / 9 + 2 * n * variance * log_term)) / n


def test_layout_columns_dtypes_counts_and_order(run: Callable[..., Result], tmp_path: Path) -> None:
    out = tmp_path / "data"
    summary = ok(run(out, **{**SMALL, "queries": 700}, rows_per_file=300))
    assert {k: summary[k] for k in ("rows", "queries", "features", "kind", "noise", "concept")} == \
        {"rows": 1000, "queries": 700, "features": 3, "kind": "realizable", "noise": 0.0,
         "concept": "threshold"}
    assert summary["out"] == str(out.resolve()) and summary["files"] == 4 + 3 + 3
    assert [p.name for p in parts(out, "private")] == [f"part-{i:05d}.parquet" for i in range(4)]
    schemas = {d: pq.read_schema(parts(out, d)[0]) for d in synthetic.DATASETS}
    assert [(f.name, f.type) for f in schemas["private"]] == \
        [("x0", pa.float64()), ("x1", pa.float64()), ("x2", pa.float64()), ("label", pa.int8())]
    assert [(f.name, f.type) for f in schemas["queries"]] == [("query_id", pa.int64())] + \
        [(f"x{j}", pa.float64()) for j in range(3)]
    assert [(f.name, f.type) for f in schemas["truth"]] == \
        [("query_id", pa.int64()), ("label", pa.int8())]
    assert read(out, "private").num_rows == 1000
    assert [pq.read_metadata(p).num_rows for p in parts(out, "private")] == [300, 300, 300, 100]
    assert not [n for d in synthetic.DATASETS for n in os.listdir(out / d) if n.startswith(".")]
    for dataset in ("queries", "truth"):  # query order = file-name order
        assert read(out, dataset)["query_id"].to_pylist() == list(range(700))


def test_row_groups_are_small(run: Callable[..., Result], tmp_path: Path) -> None:
    out = tmp_path / "data"
    ok(run(out, kind="agnostic", rows=300_000, features=1, queries=1))
    meta = pq.read_metadata(parts(out, "private")[0])
    sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    assert sum(sizes) == 300_000 and max(sizes) <= 128 * 1024 and len(sizes) == 3


@pytest.mark.parametrize("concept", synthetic.CONCEPTS)
def test_realizable_labels_follow_the_hidden_concept(run: Callable[..., Result], tmp_path: Path,
                                                     concept: str) -> None:
    out = tmp_path / "data"
    ok(run(out, **SMALL, concept=concept, rows_per_file=400))
    hidden = synthetic.read_concept(str(parts(out, "private")[0]))
    assert hidden == synthetic.concept_from_seed(concept, 3, SMALL["seed"])
    private, queries, truth = (read(out, d) for d in synthetic.DATASETS)
    x, labels = features(private), private["label"].to_numpy()
    np.testing.assert_array_equal(labels, hidden.labels(x))
    np.testing.assert_array_equal(truth["label"].to_numpy(), hidden.labels(features(queries)))
    assert 0 < labels.sum() < len(labels)  # both classes occur
    if concept == "threshold":
        metadata = pq.read_schema(parts(out, "private")[0]).metadata
        t = json.loads(metadata[b"pcqr.concept"])["threshold"]
        np.testing.assert_array_equal(labels, (x[:, 0] > t).astype(np.int8))
    if concept == "point":  # x0 integer, label 1 iff x0 is the seeded point
        j = json.loads(pq.read_schema(parts(out, "private")[0]).metadata[b"pcqr.concept"])["value"]
        assert np.all(x[:, 0] == np.floor(x[:, 0])) and -50 <= j <= 50 and j == int(j)
        np.testing.assert_array_equal(labels, (x[:, 0] == j).astype(np.int8))


@pytest.mark.parametrize("concept", synthetic.CONCEPTS)
def test_agnostic_flip_rate_within_binomial_bound(run: Callable[..., Result], tmp_path: Path,
                                                  concept: str) -> None:
    gamma, n = 0.2, 20_000
    out = tmp_path / "data"
    ok(run(out, kind="agnostic", noise=gamma, concept=concept, rows=n, features=4, queries=n))
    hidden = synthetic.read_concept(str(parts(out, "private")[0]))
    private, queries, truth = (read(out, d) for d in synthetic.DATASETS)
    for x, labels in ((features(private), private["label"]), (features(queries), truth["label"])):
        rate = float(np.mean(labels.to_numpy() != hidden.labels(x)))
        assert abs(rate - gamma) <= flip_bound(n, gamma), (rate, flip_bound(n, gamma))


@pytest.mark.parametrize("rate, seed", [(None, 0), (None, 7), (0.03, 1)])
def test_corner_positive_rate_on_1e5_rows_within_binomial_bound(run: Callable[..., Result], tmp_path: Path,
                                                                rate: float | None, seed: int) -> None:
    """Issue 29's imbalanced task: for any seed, a row is positive with probability r exactly (the cuts
    are normal quantiles), so the positives of 10^5 rows are Binomial(10^5, r): within flip_bound
    with probability >= 1 - 1e-6. With --noise q the labels' rate is r (1 - q) + (1 - r) q."""
    n, r = 100_000, rate or synthetic.DEFAULT_POSITIVE_RATE
    options = {} if rate is None else {"positive_rate": rate}
    out = tmp_path / "data"
    summary = ok(run(out, concept="corner", rows=n, features=3, queries=0, seed=seed, **options))
    assert summary["positive_rate"] == r
    hidden = synthetic.read_concept(str(parts(out, "private")[0]))
    assert hidden == synthetic.concept_from_seed("corner", 3, seed, r) and len(hidden.cuts) == 2
    metadata = json.loads(pq.read_schema(parts(out, "private")[0]).metadata[b"pcqr.synthetic"])
    assert metadata["positive_rate"] == r and metadata["concept"] == "corner"
    labels = read(out, "private")["label"].to_numpy()
    assert abs(labels.mean() - r) <= flip_bound(n, r), (labels.mean(), flip_bound(n, r))
    noisy = tmp_path / "noisy"
    ok(run(noisy, kind="agnostic", noise=0.2, concept="corner", rows=n, features=3, queries=0, seed=seed, **options))
    expected = r * 0.8 + (1 - r) * 0.2
    assert abs(read(noisy, "private")["label"].to_numpy().mean() - expected) <= flip_bound(n, expected)


def test_same_seed_gives_identical_bytes(run: Callable[..., Result], tmp_path: Path) -> None:
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for out, seed in ((a, 5), (b, 5), (c, 6)):
        ok(run(out, **{**SMALL, "kind": "agnostic", "seed": seed}, rows_per_file=300))
    for dataset in synthetic.DATASETS:
        assert [p.read_bytes() for p in parts(a, dataset)] == \
            [p.read_bytes() for p in parts(b, dataset)]
    assert not read(a, "private").equals(read(c, "private"))


@pytest.mark.parametrize("rows_per_file", [7, 64, 333])
def test_chunking_does_not_change_the_data(run: Callable[..., Result], tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch,
                                           rows_per_file: int) -> None:
    monkeypatch.setattr(synthetic, "BLOCK_ROWS", 64)  # many random blocks in few rows
    options = {**SMALL, "kind": "agnostic", "concept": "halfspace"}
    ok(run(tmp_path / "one", **options, rows_per_file=1000))
    ok(run(tmp_path / "many", **options, rows_per_file=rows_per_file))
    for dataset in synthetic.DATASETS:
        assert read(tmp_path / "one", dataset).equals(read(tmp_path / "many", dataset))
    meta = pq.read_metadata(parts(tmp_path / "one", "private")[0])
    assert max(meta.row_group(i).num_rows for i in range(meta.num_row_groups)) <= 64


def test_fewer_rows_are_a_prefix(run: Callable[..., Result], tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(synthetic, "BLOCK_ROWS", 64)
    ok(run(tmp_path / "big", **{**SMALL, "kind": "agnostic"}))
    ok(run(tmp_path / "small", **{**SMALL, "kind": "agnostic", "rows": 300}))
    big, small = read(tmp_path / "big", "private"), read(tmp_path / "small", "private")
    assert big.slice(0, 300).equals(small)


def test_make_chunk_is_pure() -> None:
    concept = synthetic.concept_from_seed("halfspace", 2, 3)
    seed_seq = synthetic.block_seed(3, "private", 0)
    noisy = synthetic.make_chunk("agnostic", concept, 50, 2, 0.3, seed_seq)
    assert noisy.equals(synthetic.make_chunk("agnostic", concept, 50, 2, 0.3, seed_seq))
    clean = synthetic.make_chunk("realizable", concept, 50, 2, 0.0, seed_seq)  # same features
    assert noisy.drop_columns("label").equals(clean.drop_columns("label"))


def test_zero_queries_write_one_empty_file(run: Callable[..., Result], tmp_path: Path) -> None:
    out = tmp_path / "data"
    ok(run(out, **{**SMALL, "queries": 0}))
    for dataset in ("queries", "truth"):
        (only,) = parts(out, dataset)
        assert pq.read_table(only).num_rows == 0 and pq.read_schema(only).names[0] == "query_id"


@pytest.mark.parametrize("change, option", [
    ({"rows": 0}, "--rows"), ({"features": 0}, "--features"), ({"queries": -1}, "--queries"),
    ({"seed": -1}, "--seed"), ({"rows_per_file": 0}, "--rows-per-file"),
    ({"rows_per_file": 1, "rows": 200_000}, "--rows-per-file"),
    ({"kind": "agnostic", "noise": 0.5}, "--noise"),
    ({"kind": "agnostic", "noise": -0.1}, "--noise"),
    ({"noise": 0.1}, "--noise"), ({"kind": "noisy"}, "--kind"), ({"concept": "tree"}, "--concept"),
    ({"rows": "many"}, "--rows"), ({"concept": "xor", "features": 1}, "--features"),
    ({"concept": "corner", "features": 1}, "--features"), ({"concept": "corner", "positive_rate": 1.0}, "--positive-rate"),
    ({"concept": "corner", "positive_rate": 0}, "--positive-rate"), ({"positive_rate": 0.1}, "--positive-rate"),
])
def test_bad_options_fail_in_one_line_before_any_work(run: Callable[..., Result], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      change: dict[str, Any], option: str) -> None:
    monkeypatch.setattr(generate, "open_client", lambda *a, **k: pytest.fail("cluster opened"))
    out = tmp_path / "data"
    result = run(out, **{**SMALL, **change})
    assert result.exit_code != 0
    if isinstance(result.exception, PcqrError):
        assert "\n" not in str(result.exception) and str(result.exception).startswith(f"{option}:")
    else:  # click's own usage errors (exit 2) end in one "Error: ..." line naming the option
        assert result.exit_code == 2 and f"'{option}'" in result.output.strip().splitlines()[-1]
    assert not out.exists()


def test_refuses_non_empty_out_unless_overwrite(run: Callable[..., Result], tmp_path: Path) -> None:
    out = tmp_path / "data"
    ok(run(out, **SMALL, rows_per_file=100))
    before = {p: p.read_bytes() for p in parts(out, "private")}
    (out / "private" / "notes.txt").write_text("keep me")
    result = run(out, **{**SMALL, "seed": 12})
    assert isinstance(result.exception, PcqrError) and str(result.exception).startswith(f"--out {out / 'private'}: ")
    assert "--overwrite" in str(result.exception)
    assert {p: p.read_bytes() for p in parts(out, "private")} == before
    ok(run(out, "--overwrite", **{**SMALL, "seed": 12}))
    assert [p.name for p in parts(out, "private")] == ["part-00000.parquet"]  # stale parts removed
    assert (out / "private" / "notes.txt").read_text() == "keep me"
    assert synthetic.read_concept(str(parts(out, "private")[0])) == \
        synthetic.concept_from_seed("threshold", 3, 12)


def test_failed_write_leaves_no_partial_files(run: Callable[..., Result], tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    calls, make_chunk = itertools.count(), synthetic.make_chunk

    def failing(*args: Any) -> pa.Table:  # the third block fails, as a full disk would
        if next(calls) == 2:
            raise OSError(28, "No space left on device")
        return make_chunk(*args)
    monkeypatch.setattr(synthetic, "BLOCK_ROWS", 64)
    monkeypatch.setattr(synthetic, "make_chunk", failing)
    out = tmp_path / "data"
    result = run(out, **{**SMALL, "queries": 0}, rows_per_file=1000)
    assert isinstance(result.exception, PcqrError) and str(result.exception).startswith("--out:")
    assert not out.exists()  # the folders this run made are removed too (issue 27)


def test_real_open_client_with_cluster_file(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "cluster.yaml"
    # Worker processes: also checks that tasks pickle and pipeline imports on workers.
    config.write_text("pcqr: {cluster: {backend: local, n-workers: 2, threads-per-worker: 1, "
                      "processes: true}}\n")
    monkeypatch.setattr(generate, "progress_enabled", lambda: True)
    out = tmp_path / "data"
    args = ["--kind=agnostic", "--rows=500", "--features=2", "--queries=20", "--rows-per-file=100",
            f"--out={out}", f"--cluster={config}", "--json"]
    summary = ok(CliRunner().invoke(generate.command, args))
    assert summary["files"] == 5 + 1 + 1 and summary["noise"] == 0.1
    assert read(out, "private").num_rows == 500
