"""The public Parquet format of A_PAP's released answer table (``pcqr.query-release/1``; ``pcqr release``).

One Parquet file: a row per member of the cover H_tilde with its parameters (``class``, ``feature``,
``threshold``/``direction``, ``low``/``high`` or ``value``), ``answer`` (the released fraction of
private rows the query labels 1), ``measured`` (whether PMW spent a noisy measurement on it) and
``public_labelling`` (the key of its labelling of the public points, which is how any query is
projected onto the cover: :mod:`pcqr.pipeline.mechanisms.counting_queries`). The schema metadata
``pcqr.release`` holds the provenance: class, features, the public dataset and its fingerprint
(:func:`public_fingerprint`), every parameter and the privacy and error statements.

Everything here is public: the answers are A_PAP's output, the rest comes from the public data.
"""
from __future__ import annotations

import hashlib
import io
import json
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pcqr.pipeline.data.atomic import write_atomic
from pcqr.pipeline.data.parquet_opener import read_parquet
from pcqr.pipeline.data.user_files import parse_json
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.hypotheses.representatives import RepresentativeDomain

TABLE_FORMAT = "pcqr.query-release/1"
METADATA_KEY = b"pcqr.release"
_PARAMETER_COLUMNS = {"threshold": pa.float64(), "direction": pa.string(), "low": pa.float64(),
                      "high": pa.float64(), "value": pa.float64()}


def public_fingerprint(domain: RepresentativeDomain) -> str:
    """SHA-256 of the public data's distinct values per chosen feature (what the cover depends on)."""
    digest = hashlib.sha256()
    for values in domain.values:
        digest.update(np.ascontiguousarray(values, dtype=np.float64).tobytes())
        digest.update(b"|")
    return digest.hexdigest()


def answer_table(members: Sequence[dict[str, Any]], features: Sequence[str], answers: np.ndarray,
                 measured: np.ndarray, keys: Sequence[str]) -> pa.Table:
    """The table's columns: each member of H_tilde (its record, in PMW order) with its released
    answer, whether PMW measured it, and the key of its public labelling."""
    columns: dict[str, list[Any]] = {"index": [], "class": [], "feature": []}
    columns.update({name: [] for name in _PARAMETER_COLUMNS})
    for i, member in enumerate(members):
        columns["index"].append(i)
        columns["class"].append(member["class"])
        columns["feature"].append(features[int(member["feature"])])
        for name in _PARAMETER_COLUMNS:
            value = member.get(name)
            columns[name].append(value if value is None or name == "direction" else float(value))
    arrays = {"index": pa.array(columns["index"], pa.int64()), "class": pa.array(columns["class"], pa.string()),
              "feature": pa.array(columns["feature"], pa.string())}
    for name, kind in _PARAMETER_COLUMNS.items():
        if any(v is not None for v in columns[name]):
            arrays[name] = pa.array(columns[name], kind)
    arrays["answer"] = pa.array(answers, pa.float64())
    arrays["measured"] = pa.array(measured, pa.bool_())
    arrays["public_labelling"] = pa.array(keys, pa.string())
    return pa.table(arrays)


def write_answer_table(path: str, table: pa.Table, metadata: dict[str, Any]) -> None:
    """Write the table with its provenance (``format`` is set here) as one Parquet file, atomically."""
    provenance = {"format": TABLE_FORMAT, **metadata}
    table = table.replace_schema_metadata({METADATA_KEY: json.dumps(provenance, default=str).encode()})
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd", write_page_checksum=True)
    write_atomic(path, sink.getvalue())


def read_answer_table(path: str) -> tuple[pa.Table, dict[str, Any]]:
    """The table and its provenance; anything else is one line naming ``path``."""
    table = read_parquet(path)
    if METADATA_KEY not in (table.schema.metadata or {}):
        raise PcqrError(f"{path}: not a pcqr release table (no {METADATA_KEY.decode()} metadata: neither pcqr release's "
                        "nor pcqr sanitize's output)")
    try:
        metadata = parse_json(table.schema.metadata[METADATA_KEY], f"{path}: not a pcqr release table")
        if metadata.get("format") != TABLE_FORMAT:
            raise ValueError(f"format is {metadata.get('format')!r}, expected {TABLE_FORMAT}")
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowException) as exc:
        raise PcqrError(f"{path}: not a pcqr release table ({exc})") from None
    return table, metadata
