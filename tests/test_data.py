"""Dataset discovery from metadata, and value checks: each bad input is one line naming file and column."""
from __future__ import annotations

import numpy as np
import pytest

from pcqr.pipeline.data.datasets import feature_matrix, label_vector, open_dataset, read_part
from pcqr.pipeline.errors import PcqrError
from tests.conftest import threshold_data, write_parquet


def test_directory_of_files_with_row_groups(tmp_path) -> None:
    for i in range(3):
        write_parquet(str(tmp_path / f"d/part-{i}.parquet"), threshold_data(1000, seed=i), row_group_size=300)
    (tmp_path / "d/_SUCCESS").write_text("")
    ds = open_dataset(str(tmp_path / "d"), "private", label="label")
    assert ds.rows == 3000 and ds.features == ("x0", "x1", "x2") and len(ds.files) == 3
    parts = ds.parts(500)
    assert sum(p.rows for p in parts) == 3000
    assert [p.start for p in parts] == list(np.cumsum([0] + [p.rows for p in parts[:-1]]))
    assert all(p.rows <= 600 for p in parts)
    table = read_part(parts[1], ["x0", "label"])
    assert table.num_rows == parts[1].rows


def test_features_option_and_non_numeric_columns(tmp_path) -> None:
    cols = threshold_data(10)
    cols["name"] = np.array(["a"] * 10)
    path = write_parquet(str(tmp_path / "a.parquet"), cols)
    with pytest.raises(PcqrError, match="column 'name' is string, not a number .* pass --features"):
        open_dataset(path, "private", label="label")  # never dropped silently
    assert open_dataset(path, "private", label="label", features=["x0", "x1", "x2"]).features == ("x0", "x1", "x2")
    assert open_dataset(path, "private", label="label", features=["x2"]).features == ("x2",)
    with pytest.raises(PcqrError, match="'name' is string, not a number"):
        open_dataset(path, "private", label="label", features=["name"])
    with pytest.raises(PcqrError, match="no feature column 'x9'"):
        open_dataset(path, "private", label="label", features=["x9"])


@pytest.mark.parametrize(
    "mutate,pattern",
    [
        (lambda c: c.pop("label"), "no column 'label'"),
        (lambda c: c.update(label=np.array(["y"] * 10)), "label column 'label' is string"),
    ],
)
def test_schema_errors(tmp_path, mutate, pattern) -> None:
    cols = threshold_data(10)
    mutate(cols)
    path = write_parquet(str(tmp_path / "a.parquet"), cols)
    with pytest.raises(PcqrError, match=pattern) as err:
        open_dataset(path, "private", label="label")
    assert "a.parquet" in str(err.value) and "\n" not in str(err.value)


def test_empty_missing_mismatched_and_corrupt(tmp_path) -> None:
    empty = write_parquet(str(tmp_path / "e.parquet"), threshold_data(0))
    with pytest.raises(PcqrError, match="no rows"):
        open_dataset(empty, "private", label="label")
    with pytest.raises(PcqrError, match="no such file"):
        open_dataset(str(tmp_path / "nope"), "private", label="label")
    write_parquet(str(tmp_path / "m/a.parquet"), threshold_data(5))
    write_parquet(str(tmp_path / "m/b.parquet"), threshold_data(5, features=2))
    with pytest.raises(PcqrError, match="b.parquet: schema differs"):
        open_dataset(str(tmp_path / "m"), "private", label="label")
    (tmp_path / "bad.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(PcqrError, match="bad.parquet: not a readable Parquet file"):
        open_dataset(str(tmp_path / "bad.parquet"), "private", label="label")


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_non_finite_features_are_refused(tmp_path, value) -> None:
    cols = threshold_data(10)
    cols["x1"][3] = value
    path = write_parquet(str(tmp_path / "a.parquet"), cols)
    ds = open_dataset(path, "private", label="label")
    table = read_part(ds.parts(100)[0], ["x0", "x1", "x2", "label"])
    with pytest.raises(PcqrError, match="a.parquet: feature column 'x1' has missing, NaN or infinite"):
        feature_matrix(table, ds.features, path)


@pytest.mark.parametrize("labels", [[0, 1, 2], [0, -1, 1], [0, 1, None]])
def test_labels_outside_zero_one_are_refused(tmp_path, labels) -> None:
    import pyarrow as pa

    path = write_parquet(str(tmp_path / "a.parquet"), {"x0": [1.0, 2.0, 3.0], "label": pa.array(labels, pa.int64())})
    ds = open_dataset(path, "private", label="label")
    table = read_part(ds.parts(10)[0], ["label"])
    with pytest.raises(PcqrError, match="label column 'label' has values outside"):
        label_vector(table, "label", path)
