"""Datasets as Parquet: discovery and schema checks in the driver, reading and value checks on workers.

A dataset is one Parquet file or a directory of them (sorted by name; files
starting with ``.`` or ``_`` are skipped), at a local path or any URI pyarrow
understands (``s3://``, ``gs://``, ``hdfs://``, ``file://``), opened the one way
(:mod:`pcqr.pipeline.data.parquet_opener`). Which columns can be features, labels
and query ids, and as what, is :mod:`pcqr.pipeline.data.arrow_types`' table.

The driver reads only *metadata* (schemas, row counts per row group): that is
how it validates columns and plans the work without ever loading a private
row. Workers read their own row groups (:func:`read_part`) and check the
values (:func:`feature_matrix`, :func:`label_vector`).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)

from pcqr.pipeline.data import object_store
from pcqr.pipeline.data.arrow_types import as_float64, feature_refusal, id_refusal, label_refusal
from pcqr.pipeline.data.parquet_opener import dataset_files, parquet_file
from pcqr.pipeline.errors import PcqrError


@dataclass(frozen=True)
class Part:
    """A piece of a dataset a worker reads: some row groups of one file."""

    file: str
    row_groups: tuple[int, ...]
    rows: int
    start: int  # global position of the first row in the dataset


@dataclass(frozen=True)
class Dataset:
    """What the driver knows about a dataset: files, schema, row groups, chosen columns."""

    uri: str
    files: tuple[str, ...]
    schema: pa.Schema
    row_groups: tuple[tuple[int, ...], ...]  # rows per row group, per file
    features: tuple[str, ...]
    label: str | None
    id_column: str | None

    @property
    def rows(self) -> int:
        return sum(sum(groups) for groups in self.row_groups)

    def parts(self, target_rows: int) -> list[Part]:
        """Consecutive row groups of each file, grouped into parts of about target_rows."""
        parts: list[Part] = []
        start = 0
        for file, groups in zip(self.files, self.row_groups):
            chosen: list[int] = []
            rows = 0
            for index, count in enumerate(groups):
                if chosen and rows + count > target_rows:
                    parts.append(Part(file, tuple(chosen), rows, start))
                    start += rows
                    chosen, rows = [], 0
                chosen.append(index)
                rows += count
            if chosen and rows:
                parts.append(Part(file, tuple(chosen), rows, start))
                start += rows
        return parts


def scan_dataset(uri: str, role: str) -> Dataset:
    """A dataset's files, schema and row groups from metadata only, no column chosen (for a use
    that reads no feature: a budget, a truth file's files). Raises PcqrError naming the file on an
    unreadable file, files whose schemas differ, or no rows."""
    files = dataset_files(uri, role)
    first = parquet_file(files[0])
    schema = first.schema_arrow
    groups = []
    for file in files:
        pf = first if file == files[0] else parquet_file(file)
        if not pf.schema_arrow.equals(schema, check_metadata=False):
            raise PcqrError(
                f"{file}: schema differs from {files[0]} "
                f"({_schema_text(pf.schema_arrow)} vs {_schema_text(schema)})"
            )
        meta = pf.metadata
        groups.append(tuple(meta.row_group(i).num_rows for i in range(meta.num_row_groups)))
    dataset = Dataset(uri, tuple(files), schema, tuple(groups), (), None, None)
    if dataset.rows == 0:
        raise PcqrError(f"{role} dataset {uri}: no rows")
    return dataset


def open_dataset(
    uri: str,
    role: str,
    *,
    label: str | None = None,
    features: Sequence[str] | None = None,
    id_column: str | None = None,
    named_labels: bool = False,
) -> Dataset:
    """Discover a dataset from metadata only and check its columns (``named_labels``: the label column
    holds the names of ``--classes low,mid,high``: text or whole numbers).

    ``label`` is required to exist when given; ``features`` defaults to every column other than
    the label and the id column, each of which must then be of a type the table
    (:mod:`pcqr.pipeline.data.arrow_types`) reads as a feature. Raises PcqrError naming the file
    and column on an empty dataset, a missing column or one of a refused type, or files whose
    schemas differ.
    """
    dataset = scan_dataset(uri, role)
    schema, first = dataset.schema, dataset.files[0]
    names = schema.names
    for column, option in ((label, "--label"), (id_column, "id column")):
        if column is not None and column not in names:
            raise PcqrError(f"{first}: {role} dataset has no column {column!r} ({option}); columns: {', '.join(names)}")
    if label is not None and named_labels:
        kind = schema.field(label).type
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_integer(kind)):
            raise PcqrError(f"{first}: label column {label!r} is {kind}; with --classes names it must hold text or "
                            "whole numbers")
    elif label is not None and (refused := label_refusal(schema.field(label).type)):
        raise PcqrError(f"{first}: label column {label!r} {refused}")
    chosen = _choose_features(schema, first, role, features, {label, id_column})
    return replace(dataset, features=chosen, label=label, id_column=id_column)


_SINGULAR = {"queries": "query"}
#: The query id column used when ``--id-column`` is not given and the data has it.
QUERY_ID = "query_id"
INT64_MAX = 2**63 - 1


def check_id_type(schema: pa.Schema, file: str, column: str, option: str) -> None:
    """Query ids are integers that fit int64: a string, float or other column is refused (metadata
    only, before anything is charged); a uint64 column's values are checked by :func:`id_values`."""
    refused = id_refusal(schema.field(column).type)
    if refused:
        raise PcqrError(f"{file}: {option} column {column!r} {refused}")


def id_values(table: pa.Table, column: str, file: str, option: str = "--id-column") -> pa.Array:
    """The id column as int64 (runs on a worker): missing values or values beyond int64 are refused."""
    values = table.column(column)
    if values.null_count:
        raise PcqrError(f"{file}: {option} column {column!r} has missing values")
    if pa.types.is_uint64(values.type) and len(values) and pa.compute.max(values).as_py() > INT64_MAX:
        raise PcqrError(f"{file}: {option} column {column!r} has ids above 2^63 - 1 (int64)")
    return values.cast(pa.int64())


def open_matching(
    uri: str, role: str, features: Sequence[str], against: str, id_column: str | None = None
) -> Dataset:
    """A dataset that must hold the given feature columns (those of ``against``, e.g. "the
    private features"). ``id_column`` (``--id-column``) must exist when given; when it is None,
    the ``query_id`` column is the id if present, else row positions are. Metadata is read once."""
    probe = scan_dataset(uri, role)
    names = probe.schema.names
    missing = [f for f in features if f not in names]
    if missing:
        raise PcqrError(
            f"{probe.files[0]}: {_SINGULAR.get(role, role)} columns do not match {against}: missing "
            f"{', '.join(missing)} (expected: {', '.join(features)})"
        )
    if id_column is not None and id_column not in names:
        raise PcqrError(f"{probe.files[0]}: --id-column {id_column!r} is not a column of the {role} "
                        f"(columns: {', '.join(names)}); omit it to number the rows")
    ids = id_column if id_column is not None else QUERY_ID if QUERY_ID in names else None
    if ids is not None:
        check_id_type(probe.schema, probe.files[0], ids, "--id-column")
        if ids in features:
            raise PcqrError(f"{probe.files[0]}: --id-column {ids!r} is also a feature")
    chosen = _choose_features(probe.schema, probe.files[0], role, features, set())
    return replace(probe, features=chosen, id_column=ids)


def _choose_features(
    schema: pa.Schema, file: str, role: str, features: Sequence[str] | None, exclude: set[str | None]
) -> tuple[str, ...]:
    """The named feature columns, or by default every column but ``exclude``: each of a type the
    table reads as a feature, else one line naming it (a default column is never dropped silently)."""
    if features:
        for name in features:
            if name in exclude:
                raise PcqrError(f"{file}: --features {name!r} is the {role} dataset's label or id column, "
                                "not a feature")
            if name not in schema.names:
                raise PcqrError(f"{file}: {role} dataset has no feature column {name!r} (--features)")
            if refused := feature_refusal(schema.field(name).type):
                raise PcqrError(f"{file}: feature column {name!r} {refused}")
        return tuple(features)
    chosen = tuple(f.name for f in schema if f.name not in exclude)
    for name in chosen:
        if refused := feature_refusal(schema.field(name).type):
            raise PcqrError(f"{file}: column {name!r} {refused}; pass --features to name the feature columns")
    if not chosen:
        raise PcqrError(f"{file}: {role} dataset has no feature column")
    return chosen


def _schema_text(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name}: {f.type}" for f in schema)


def read_part(part: Part, columns: Sequence[str]) -> pa.Table:
    """Read one part's row groups (runs on a worker). Page checksums are verified where the file
    has them; a page that fails its checksum or does not decode is a one-line error naming the file."""
    try:
        return parquet_file(part.file).read_row_groups(list(part.row_groups), columns=list(columns))
    except (pa.ArrowException, OSError) as exc:
        raise _corrupt(part, exc) from None


def _corrupt(part: Part, exc: BaseException) -> PcqrError:
    return object_store.timed_out(part.file, exc) or PcqrError(
        f"{part.file}: corrupt Parquet data ({' '.join(str(exc).split())[:200]})")


def read_chunks(part: Part, columns: Sequence[str], rows: int, skip: int = 0) -> Iterator[pa.Table]:
    """One part's rows after its first ``skip``, as tables of exactly ``rows`` rows (the last may be
    shorter), streamed: memory holds about one chunk, however large the part's row groups are.
    Errors as :func:`read_part`."""
    pending: list[pa.RecordBatch] = []
    held = 0
    try:
        batches = parquet_file(part.file).iter_batches(
            batch_size=rows, row_groups=list(part.row_groups), columns=list(columns), use_threads=False)
        for batch in batches:
            if skip:
                dropped = min(skip, batch.num_rows)
                batch, skip = batch.slice(dropped), skip - dropped
            pending.append(batch)
            held += batch.num_rows
            while held >= rows:
                table = pa.Table.from_batches(pending)
                yield table.slice(0, rows)
                rest = table.slice(rows)
                pending, held = rest.to_batches(), rest.num_rows
    except (pa.ArrowException, OSError) as exc:
        raise _corrupt(part, exc) from None
    if held:
        yield pa.Table.from_batches(pending)


def check_features(table: pa.Table | pa.RecordBatch, features: Sequence[str], file: str) -> list[np.ndarray]:
    """The feature columns as float64 arrays (:func:`pcqr.pipeline.data.arrow_types.as_float64`: the
    table's conversion); PcqrError naming file and column on null, NaN or inf."""
    columns = []
    for name in features:
        column = table.column(name)
        values = as_float64(column)
        if column.null_count or not np.isfinite(values).all():
            raise PcqrError(f"{file}: feature column {name!r} has missing, NaN or infinite values")
        columns.append(values)
    return columns


def feature_matrix(table: pa.Table | pa.RecordBatch, features: Sequence[str], file: str) -> np.ndarray:
    """The features as a float64 matrix (column-major: each column is copied once, contiguously);
    PcqrError naming file and column on null, NaN or inf."""
    columns = check_features(table, features, file)
    matrix = np.empty((table.num_rows, len(columns)), dtype=np.float64, order="F")
    for j, values in enumerate(columns):
        matrix[:, j] = values
    return matrix


def label_vector(table: pa.Table, label: str, file: str, classes: int = 2,
                 names: Sequence[str] | None = None) -> np.ndarray:
    """The labels as int8; PcqrError naming file and column if any is not 0 or 1 (over ``classes`` c > 2:
    not a whole number in 0 .. c - 1). With ``names`` (``--classes low,mid,high``) each label is its name's
    index: a text column's values, or a whole-number column's as written (1, not 1.0). The value itself
    is not echoed: it is private."""
    column = table.column(label)
    if names is not None:
        return _named_labels(column, names, f"{file}: label column {label!r}")
    values = as_float64(column)
    if column.null_count or not np.isin(values, np.arange(classes)).all():
        allowed = "{0, 1}" if classes == 2 else f"0 .. {classes - 1} (--classes {classes})"
        raise PcqrError(f"{file}: label column {label!r} has values outside {allowed}")
    return values.astype(np.int8)


def _named_labels(column: pa.ChunkedArray, names: Sequence[str], where: str) -> np.ndarray:
    """Each value's index in ``names`` (int8); PcqrError if one is null or none of them (not echoed)."""
    refused = PcqrError(f"{where} has values outside --classes {','.join(names)} (or missing ones)")
    if column.null_count:
        raise refused
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        values = np.asarray(column.to_pylist(), dtype=object)
    elif pa.types.is_integer(column.type):
        values = np.asarray([str(v) for v in column.to_pylist()], dtype=object)
    else:
        raise PcqrError(f"{where} holds {column.type} values; with --classes names it must hold text or whole numbers")
    index = np.full(values.shape, -1, dtype=np.int8)
    for i, name in enumerate(names):
        index[values == name] = i
    if np.any(index < 0):
        raise refused
    return index


def load_features(part: Part, features: Sequence[str]) -> np.ndarray:
    """Worker task: one part's feature matrix, values checked (unlabelled use of a dataset)."""
    return feature_matrix(read_part(part, features), features, part.file)


def load_rows(part: Part, features: Sequence[str], label: str | None, lo: int, hi: int) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Worker task: the part's rows at global positions [lo, hi) of its dataset: the feature matrix,
    or (features, labels) when ``label`` is given. Without ``label`` the label column is not read;
    the part's other rows are dropped before any value is checked or used."""
    table = read_part(part, [*features, *([label] if label is not None else [])])
    first = min(max(lo - part.start, 0), part.rows)
    table = table.slice(first, max(min(hi - part.start, part.rows) - first, 0))
    X = feature_matrix(table, features, part.file)
    return X if label is None else (X, label_vector(table, label, part.file))


def read_public_features(public: Dataset, part_rows: int = 500_000) -> np.ndarray:
    """Every row of a PUBLIC dataset's features, in the driver (only ever for public data)."""
    pieces = [load_features(p, public.features) for p in public.parts(part_rows)]
    return np.concatenate(pieces) if pieces else np.zeros((0, len(public.features)))


def split_features(features: str | None) -> list[str] | None:
    """``--features a,b,c`` to a list (None when not given)."""
    if not features:
        return None
    return [f.strip() for f in features.split(",") if f.strip()]
