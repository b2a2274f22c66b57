"""The answer loop's reads (pcqr.pipeline.session.query_batches, datasets.read_chunks): chunks of
exactly --batch-size rows whatever the row groups, the driver's read checked against the validation
pass's, and a `pcqr answer` that imports no scikit-learn for array-counted models."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pcqr.pipeline.data.datasets import Part, open_dataset, read_chunks
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.models.votes import Ensemble, LinearVotes
from pcqr.pipeline.public_log.answered import row_keys
from pcqr.pipeline.session.query_batches import check_queries, count_votes, query_chunks, read_ahead

FEATURES = ["x0", "x1", "x2"]


def _queries(tmp_path: Path, rows: int, row_group: int) -> tuple[Path, np.ndarray]:
    X = np.random.default_rng(3).normal(size=(rows, len(FEATURES)))
    path = tmp_path / "queries.parquet"
    pq.write_table(pa.table({n: X[:, j] for j, n in enumerate(FEATURES)}), path, row_group_size=row_group)
    return path, X


@pytest.mark.parametrize(("rows", "row_group", "chunk", "skip"),
                         [(1000, 1000, 300, 0), (1000, 70, 300, 0), (1000, 70, 300, 455), (999, 500, 1000, 1),
                          (10, 3, 1, 4)])
def test_read_chunks_are_exact_slices(tmp_path: Path, rows: int, row_group: int, chunk: int, skip: int) -> None:
    path, X = _queries(tmp_path, rows, row_group)
    (part,) = open_dataset(str(path), "queries").parts(10**9)
    chunks = list(read_chunks(part, FEATURES, chunk, skip))
    assert [c.num_rows for c in chunks[:-1]] == [chunk] * (len(chunks) - 1) and 0 < chunks[-1].num_rows <= chunk
    got = np.vstack([np.column_stack([c.column(n).to_numpy() for n in FEATURES]) for c in chunks])
    np.testing.assert_array_equal(got, X[skip:])


def test_query_chunks_number_rows_from_the_part_start(tmp_path: Path) -> None:
    path, X = _queries(tmp_path, 500, 120)
    (part,) = open_dataset(str(path), "queries").parts(10**9)
    chunks = list(query_chunks(part, FEATURES, None, 100, 5, 37))
    np.testing.assert_array_equal(np.concatenate([t.column("query_id").to_numpy() for t, _ in chunks]),
                                  np.arange(37, 500))
    assert [t.num_rows for t, _ in chunks] == [63, 100, 100, 100, 100]  # the validation pass's chunks
    np.testing.assert_array_equal(
        np.vstack([np.column_stack([t.column(n) for n in FEATURES]) for t, _ in chunks]), X[37:])
    np.testing.assert_array_equal(np.concatenate([k for _, k in chunks]), row_keys(X[37:], 5))


def test_count_votes_is_the_ensembles_count_and_a_batch_gives_the_rows_asked(tmp_path: Path) -> None:
    path, X = _queries(tmp_path, 1000, 130)
    parts = open_dataset(str(path), "queries").parts(10**9)
    rng = np.random.default_rng(4)
    ensemble = Ensemble.of(LinearVotes(rng.normal(size=(9, 3)), rng.normal(size=9)))
    np.testing.assert_array_equal(count_votes(ensemble, X), ensemble.count_ones(X))
    batch = next(read_ahead(parts, FEATURES, None, 256, 0, seed=11))
    np.testing.assert_array_equal(batch.matrix(np.array([2, 5])), X[[2, 5]])
    np.testing.assert_array_equal(batch.matrix(slice(10, 20)), X[10:20])


def test_a_chunk_that_changed_after_the_validation_pass_is_refused(tmp_path: Path) -> None:
    """The driver's read of a batch must be the rows the validation pass checked, to the bit: a file
    changed between the two reads is refused at the first chunk that differs, before it is yielded."""
    path, X = _queries(tmp_path, 300, 300)
    (part,) = open_dataset(str(path), "queries").parts(10**9)
    shares = check_queries(part, FEATURES, None, 100, None, 5)[5]
    assert shares.shape == (3,)
    assert len(list(query_chunks(part, FEATURES, None, 100, 5, 0, shares))) == 3  # unchanged: every chunk
    changed = X.copy()
    changed[217, 1] = np.nextafter(changed[217, 1], np.inf)
    pq.write_table(pa.table({n: changed[:, j] for j, n in enumerate(FEATURES)}), path, row_group_size=300)
    got = []
    with pytest.raises(PcqrError, match="changed after its queries were checked"):
        for table, _ in query_chunks(part, FEATURES, None, 100, 5, 0, shares):
            got.append(table.num_rows)
    assert got == [100, 100]  # the chunks before the changed one
    with pytest.raises(PcqrError, match="changed after its queries were checked"):  # from a resume point too
        list(query_chunks(part, FEATURES, None, 100, 5, 250, shares))
    ids = pa.table({**{n: X[:, j] for j, n in enumerate(FEATURES)}, "qid": np.arange(300)})
    pq.write_table(ids, path)
    shares = check_queries(part, FEATURES, "qid", 100, None, 5)[5]
    pq.write_table(ids.set_column(3, "qid", pa.array(np.r_[np.arange(150), np.arange(151, 301)])), path)
    with pytest.raises(PcqrError, match="changed after its queries were checked"):  # an id changed, not a value
        list(query_chunks(part, FEATURES, "qid", 100, 5, 0, shares))
    pq.write_table(ids.set_column(0, FEATURES[0], pa.array(["a"] * 300)), path)
    with pytest.raises(PcqrError, match="changed after its queries were checked"):  # a column's type changed
        list(query_chunks(part, FEATURES, "qid", 100, 5, 0, shares))


def test_read_ahead_yields_every_batch_in_order_and_raises_at_the_bad_one(tmp_path: Path) -> None:
    path, X = _queries(tmp_path, 1000, 90)
    parts = open_dataset(str(path), "queries").parts(200)
    shares = {p.start: check_queries(p, FEATURES, None, 64, None, 3)[5] for p in parts}
    got = list(read_ahead(parts, FEATURES, None, 64, 130, seed=3, shares=shares))
    ids = np.concatenate([b.table.column("query_id").to_numpy() for b in got])
    np.testing.assert_array_equal(ids, np.arange(130, 1000))
    np.testing.assert_array_equal(np.concatenate([b.keys for b in got]), row_keys(X[130:], 3))
    np.testing.assert_array_equal(np.vstack([b.matrix() for b in got]), X[130:])
    assert [b.part for b in got] == sorted(b.part for b in got)
    gone = [parts[0], Part(str(tmp_path / "gone.parquet"), (0,), 10, parts[0].rows)]
    seen = []
    with pytest.raises(PcqrError, match="gone.parquet"):  # the thread's error, raised in the caller
        for batch in read_ahead(gone, FEATURES, None, 64, 0, seed=3):
            seen.append(batch.part)
    assert set(seen) == {0}  # every batch of the readable part came first


def test_answer_command_imports_no_scikit_learn() -> None:
    """`pcqr answer` on stump or linear models counts votes with arrays: neither the command line
    nor the answer loop's worker tasks import scikit-learn (about a second of every run)."""
    code = ("import sys, pcqr.jobs.cli, pcqr.jobs.answer, pcqr.pipeline.session.query_batches, "
            "pcqr.pipeline.models.store; print(sorted(m for m in ('sklearn', 'scipy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("learner", ["sklearn.linear_model.LogisticRegression", "auto"])
def test_an_answer_run_imports_no_scikit_learn(tmp_path: Path, thread_cluster_yaml: str, learner: str) -> None:
    """The whole run, not only the imports: a session of logistic models or of the default learner's
    decision trees (trained here), answered by `pcqr answer` in a fresh process with --after-halt
    refuse (the student, when a halted session needs one, does import it) and the workers as
    threads of that process, never imports scikit-learn (it cost about a second a run when the
    --after-halt check imported it unconditionally, and 1.3 s of the README's `pcqr answer` when
    loading trees imported it for the one-class model's class)."""
    from tests.conftest import MECHANICS_PRIVACY, write_session_data

    from pcqr.jobs.cli import main

    root = write_session_data(tmp_path, rows=5000, queries=500)
    assert main(["train", "--private", str(root / "private"), "--state", str(root / "state"), *MECHANICS_PRIVACY,
                 "--learner", learner, "--cluster", thread_cluster_yaml]) == 0
    assert json.loads((root / "state" / "session.json").read_text())["learner"]["name"].startswith("sklearn.")
    answer = ["answer", "--state", str(root / "state"), "--queries", str(root / "queries"), "--log", str(root / "log"),
              "--cluster", thread_cluster_yaml, "--after-halt", "refuse"]
    code = ("import sys; from pcqr.jobs.cli import main; rc = main(sys.argv[1:]); "
            "print(rc, sorted(m for m in ('sklearn', 'scipy') if m in sys.modules))")
    run = subprocess.run([sys.executable, "-c", code, *answer], capture_output=True, text=True, check=True)
    assert run.stdout.strip().splitlines()[-1] == "0 []", run.stderr[-2000:]


def test_only_parts_whose_id_ranges_overlap_are_compared() -> None:
    """The cross-part duplicate-id check fetches the ids of overlapping parts only (issue 27: the
    driver's memory does not grow with the queries when ids ascend through the files)."""
    from pcqr.pipeline.session.query_batches import overlapping_groups

    assert overlapping_groups([(0, 9), (10, 19), (20, 29)]) == []  # ascending ids: nothing to fetch
    assert overlapping_groups([(0, 9), (5, 14), (20, 29), (None, None)]) == [[0, 1]]
    assert overlapping_groups([(20, 29), (0, 30), (40, 41), (41, 50)]) == [[1, 0], [2, 3]]  # touching ends too
    assert overlapping_groups([(3, 3), (3, 3)]) == [[0, 1]]
