"""The table of Arrow types (pipeline/data/arrow_types.py): every type it accepts as a feature is
read as the float64 it says, in train and answer alike; every type it refuses is refused by name;
docs/api.md prints the table."""
from __future__ import annotations

import decimal
import json
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pcqr.jobs.cli import main
from pcqr.pipeline.data.arrow_types import TYPES, as_float64, feature_refusal, id_refusal, label_refusal
from pcqr.pipeline.data.datasets import feature_matrix, open_dataset, read_part
from pcqr.pipeline.errors import PcqrError
from tests.conftest import MECHANICS_PRIVACY, write_parquet, write_thread_cluster
from tests.hostile_arrow import REFUSED_TYPES

ROOT = Path(__file__).resolve().parent.parent
EIGHTHS = np.array([-3.5, -0.125, 0.0, 0.25, 1.0, 2.875, 7.0])  # exact in every float width and decimal(10, 3)
WHOLE = np.array([0, 1, 2, 3, 5, 8, 13])


def _decimal(values: np.ndarray, kind: pa.DataType) -> pa.Array:
    return pa.array([decimal.Decimal(str(v)) for v in values], kind)


#: Each accepted type: (values it holds, the array).
ACCEPTED: dict[str, tuple[np.ndarray, Callable[[np.ndarray], pa.Array]]] = {
    "int8": (WHOLE, lambda v: pa.array(v, pa.int8())),
    "int16": (WHOLE, lambda v: pa.array(v, pa.int16())),
    "int32": (WHOLE, lambda v: pa.array(v, pa.int32())),
    "int64": (WHOLE, lambda v: pa.array(v, pa.int64())),
    "uint8": (WHOLE, lambda v: pa.array(v, pa.uint8())),
    "uint16": (WHOLE, lambda v: pa.array(v, pa.uint16())),
    "uint32": (WHOLE, lambda v: pa.array(v, pa.uint32())),
    "uint64": (WHOLE, lambda v: pa.array(v, pa.uint64())),
    "float16": (EIGHTHS, lambda v: pa.array(v.astype(np.float16))),
    "float32": (EIGHTHS, lambda v: pa.array(v.astype(np.float32))),
    "float64": (EIGHTHS, lambda v: pa.array(v)),
    "decimal128": (EIGHTHS, lambda v: _decimal(v, pa.decimal128(10, 3))),
    "decimal256": (EIGHTHS, lambda v: _decimal(v, pa.decimal256(50, 3))),
    "bool": (WHOLE % 2, lambda v: pa.array(v.astype(bool))),
    "dictionary-int": (WHOLE, lambda v: pa.array(v).dictionary_encode()),
    "dictionary-float": (EIGHTHS, lambda v: pa.array(v).dictionary_encode()),
}


@pytest.mark.parametrize("name", ACCEPTED)
def test_each_accepted_type_is_a_default_feature_read_as_its_float64(name: str, tmp_path: Path) -> None:
    values, make = ACCEPTED[name]
    path = write_parquet(str(tmp_path / "d.parquet"), {"z": make(values), "label": np.arange(len(values)) % 2})
    dataset = open_dataset(path, "private", label="label")
    assert dataset.features == ("z",)
    (part,) = dataset.parts(100)
    assert np.array_equal(feature_matrix(read_part(part, ["z"]), ["z"], path)[:, 0], values.astype(np.float64))


def test_precision_is_lost_where_the_table_says() -> None:
    assert as_float64(pa.array([2**53 + 1], pa.int64()))[0] == 2.0**53  # rounded beyond 2^53
    assert as_float64(pa.array([2**64 - 1], pa.uint64()))[0] == 2.0**64  # a feature, rounded
    digits = decimal.Decimal("0.12345678901234567890123")
    assert as_float64(pa.array([digits], pa.decimal128(38, 23)))[0] == pytest.approx(float(digits), rel=1e-15)
    assert np.isnan(as_float64(pa.array([1, None], pa.int32()))[1])  # a null becomes NaN, refused by the caller
    # Parquet gives numeric dictionaries back decoded; a table built in memory (the Python API) may hold one
    assert as_float64(pa.chunked_array([pa.array([1.5, 2.5, 1.5]).dictionary_encode()])).tolist() == [1.5, 2.5, 1.5]
    assert as_float64(pa.array([1, 0, 1], pa.int8()).dictionary_encode()).tolist() == [1.0, 0.0, 1.0]


@pytest.mark.parametrize("name", REFUSED_TYPES)
def test_each_refused_type_is_refused_in_every_role(name: str) -> None:
    kind = REFUSED_TYPES[name](3).type
    assert feature_refusal(kind) and label_refusal(kind) and id_refusal(kind)
    assert str(kind) in feature_refusal(kind)  # the one line says what the column is


def test_labels_and_ids_accept_what_the_table_says() -> None:
    for kind in (pa.bool_(), pa.int8(), pa.uint64(), pa.float32(), pa.dictionary(pa.int32(), pa.int8())):
        assert label_refusal(kind) is None, kind
    for kind in (pa.decimal128(5, 0), pa.string()):
        assert label_refusal(kind), kind
    for kind in (pa.int8(), pa.int64(), pa.uint64()):
        assert id_refusal(kind) is None, kind
    for kind in (pa.bool_(), pa.float64(), pa.decimal128(5, 0), pa.dictionary(pa.int32(), pa.int64())):
        assert id_refusal(kind), kind


def test_a_decimal_beyond_float64_is_refused() -> None:
    assert "float64" in (feature_refusal(pa.decimal256(76, -240)) or "")


def test_a_default_column_of_a_refused_type_is_named_not_dropped(tmp_path: Path) -> None:
    path = write_parquet(str(tmp_path / "d.parquet"), {"x": np.zeros(3), "when": np.arange(3).astype("datetime64[s]"),
                                                       "label": np.zeros(3, np.int8)})
    with pytest.raises(PcqrError, match="column 'when' is timestamp.* pass --features"):
        open_dataset(path, "private", label="label")
    assert open_dataset(path, "private", label="label", features=["x"]).features == ("x",)


def test_the_docs_print_the_table() -> None:
    api = (ROOT / "docs" / "api.md").read_text()
    for row in TYPES:
        assert row.name in api, row.name


def _typed(columns: dict[str, np.ndarray], label: np.ndarray | None) -> dict[str, Any]:
    """The same values in other Arrow types: x0 float16, x1 decimal128, x2 a dictionary of float32;
    the label bool."""
    typed: dict[str, Any] = {"x0": pa.array(columns["x0"].astype(np.float16)),
                             "x1": _decimal(columns["x1"], pa.decimal128(12, 3)),
                             "x2": pa.array(columns["x2"].astype(np.float32)).dictionary_encode()}
    if label is not None:
        typed["label"] = pa.array(label.astype(bool))
    return typed


def test_a_session_trains_and_answers_alike_on_every_accepted_type(tmp_path: Path) -> None:
    """Two seeded sessions, one on float64 data and queries, one on the same values stored as float16,
    decimal128, a dictionary and bool: the same features, the same answers."""
    rng = np.random.default_rng(7)
    X = np.round(rng.normal(size=(20_000, 3)) * 8) / 8  # eighths: exact in each type
    y = (X[:, 0] > 0.1).astype(np.int8)
    Q = np.round(rng.normal(size=(500, 3)) * 8) / 8
    Q[:, 2] += 64  # no query is a private row (the misuse guard would refuse them)
    plain = {f"x{j}": X[:, j] for j in range(3)}
    queries = {f"x{j}": Q[:, j] for j in range(3)}
    write_parquet(str(tmp_path / "plain/p.parquet"), {**plain, "label": y})
    write_parquet(str(tmp_path / "typed/p.parquet"), _typed(plain, y))
    write_parquet(str(tmp_path / "qplain/p.parquet"), {"query_id": np.arange(500), **queries})
    write_parquet(str(tmp_path / "qtyped/p.parquet"), {"query_id": np.arange(500, dtype=np.uint16),
                                                       **_typed(queries, None)})
    cluster = write_thread_cluster(tmp_path)
    for name in ("plain", "typed"):
        assert main(["train", "--private", str(tmp_path / name), "--state", str(tmp_path / f"s-{name}"), "--seed", "5",
                     "--insecure-seed", "--cluster", cluster, *MECHANICS_PRIVACY]) == 0
        assert main(["answer", "--state", str(tmp_path / f"s-{name}"), "--queries", str(tmp_path / f"q{name}"),
                     "--log", str(tmp_path / f"log-{name}"), "--cluster", cluster, "--json"]) == 0
    features = [json.loads((tmp_path / f"s-{name}" / "session.json").read_text())["features"] for name in ("plain", "typed")]
    assert features[0] == features[1] == ["x0", "x1", "x2"]
    logs = [pq.read_table(tmp_path / f"log-{name}").sort_by("query_id") for name in ("plain", "typed")]
    for column in ("query_id", "answer", "status", "source"):
        assert logs[0].column(column).to_pylist() == logs[1].column(column).to_pylist(), column
    assert logs[1].schema.field("x1").type == pa.decimal128(12, 3)  # the log keeps the queries' own types
