"""The answered-query log: atomic batch files, hash chain, provenance."""
from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pcqr.pipeline.data import atomic
from pcqr.pipeline.public_log.batches import (
    PREV_HASH_KEY,
    PROVENANCE_KEY,
    append_batch,
    batch_files,
    batch_table,
    encode_batch,
    sha256,
)
from pcqr.pipeline.gates.sparse_vector import ABSTAINED, ANSWERED, REFUSED


def _batch(batch: int, fallback: int | None = None) -> pa.Table:
    queries = pa.table({"query_id": [10, 11, 12], "x0": [0.1, 0.2, 0.3]})
    status = np.array([ANSWERED, ABSTAINED, REFUSED], dtype=np.int8)
    return batch_table(queries, "query_id", ["x0"], status, np.array([1, 0, 0], np.int8), batch, fallback)


def test_batch_table_columns() -> None:
    table = _batch(4)
    assert table.column_names == ["query_id", "x0", "answer", "status", "source", "batch"]
    assert table.column("source").to_pylist() == ["sparse_vector"] * 3
    assert table.column("answer").to_pylist() == [1, None, None]
    assert table.column("answer").type == pa.int8()
    assert table.column("status").to_pylist() == ["answered", "abstained", "refused"]
    assert table.column("batch").to_pylist() == [4, 4, 4]
    filled = _batch(4, fallback=1)
    assert filled.column("answer").to_pylist() == [1, 1, 1]
    assert filled.column("status").to_pylist() == ["answered", "abstained", "refused"]


def test_hash_chain_and_provenance(tmp_path) -> None:
    prev = ""
    for b in range(3):
        data = encode_batch(_batch(b), {"epsilon": 1.0, "seeded": False}, prev)
        append_batch(str(tmp_path), b, data)
        prev = sha256(data)
    files = batch_files(str(tmp_path))
    assert [b for b, _ in files] == [0, 1, 2]
    chain = ""
    for _, path in files:
        meta = pq.read_schema(path).metadata
        assert meta[PREV_HASH_KEY].decode() == chain
        assert json.loads(meta[PROVENANCE_KEY])["epsilon"] == 1.0
        with open(path, "rb") as handle:
            chain = sha256(handle.read())


def test_a_failed_write_leaves_no_file(tmp_path, monkeypatch) -> None:
    """A crash before the rename: neither a half-written batch nor a temp file is visible."""
    data = encode_batch(_batch(0), {}, "")

    def crash(src: str, dst: str) -> None:
        assert os.path.getsize(src) == len(data)  # the temp file was complete before the rename
        raise OSError("simulated crash")

    monkeypatch.setattr(atomic.os, "replace", crash)
    with pytest.raises(OSError):
        append_batch(str(tmp_path), 0, data)
    assert os.listdir(tmp_path) == []


def test_rewrite_is_all_or_nothing(tmp_path) -> None:
    path = str(tmp_path / "f.bin")
    atomic.write_atomic(path, b"old")
    atomic.write_atomic(path, b"new contents")
    assert open(path, "rb").read() == b"new contents"
    assert os.listdir(tmp_path) == ["f.bin"]
