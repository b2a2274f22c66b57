"""A released synthetic database (``pcqr.synthetic-database/1``): what Beimel-Nissim-Stemmer's
sanitizers (``pcqr sanitize``) release, and how any counting query of its class is answered from it.

One Parquet file: the sanitized feature column, named as in the private data (int64: the values are
integers of the public domain), and ``weight`` (float64): the row's share of the database. A
counting query h of the class is answered by sum of the weights of the rows h labels 1 (a point
query: the weight of that value, 0 if it is not in the table); the sanitizer's guarantee is that
every query of the class is within alpha of its true fraction of private rows, with probability
1 - beta. The schema metadata ``pcqr.sanitized`` holds the provenance: the algorithm, the class,
the public domain, every parameter and the certificate. Everything in the file is public:
post-processing of an (eps, delta)-DP release; answering from it costs nothing.
"""
from __future__ import annotations

import json
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pcqr.pipeline import __version__
from pcqr.pipeline.data.atomic import write_atomic
from pcqr.pipeline.data.user_files import parse_json
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.hypotheses.base import Hypothesis
from pcqr.pipeline.data.parquet_opener import read_parquet, schema_of

SYNTHETIC_FORMAT = "pcqr.synthetic-database/1"
METADATA_KEY = b"pcqr.sanitized"
WEIGHT_COLUMN = "weight"


def write_synthetic(path: str, feature: str, values: Sequence[int], weights: Sequence[float],
                    private: bool, **provenance: Any) -> None:
    """Write the table atomically (a reader never sees half a table); ``provenance`` adds public
    facts (class, domain, epsilon, the certificate...)."""
    if feature == WEIGHT_COLUMN:
        raise PcqrError(f"the feature column may not be called {WEIGHT_COLUMN!r} (the table's weight column)")
    metadata = {"format": SYNTHETIC_FORMAT, "features": [feature], "class_features": [feature], **provenance,
                "version": __version__, "privacy": "private" if private else "NOT PRIVATE (seeded noise)"}
    table = pa.table({feature: pa.array(list(values), pa.int64()), WEIGHT_COLUMN: pa.array(list(weights), pa.float64())})
    table = table.replace_schema_metadata({METADATA_KEY: json.dumps(metadata, sort_keys=True).encode()})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, write_page_checksum=True)
    write_atomic(path, sink.getvalue().to_pybytes())


def is_synthetic(path: str) -> bool:
    """Whether ``path`` is a Parquet file carrying this format's metadata (False on anything else)."""
    try:
        return METADATA_KEY in (schema_of(path).metadata or {})
    except PcqrError:
        return False


def read_synthetic(path: str) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """(values, weights, metadata) of a synthetic database; a one-line PcqrError naming the file on
    anything else (another format, a missing or mistyped column, a non-finite weight)."""
    try:
        table = read_parquet(path)
        metadata = parse_json((table.schema.metadata or {})[METADATA_KEY], f"{path}: not a pcqr synthetic database")
        if not isinstance(metadata, dict) or metadata.get("format") != SYNTHETIC_FORMAT:
            found = metadata.get("format") if isinstance(metadata, dict) else type(metadata).__name__
            raise ValueError(f"format is {found!r}, expected {SYNTHETIC_FORMAT}")
        feature = metadata["features"][0]
        values = table.column(feature).to_numpy(zero_copy_only=False)
        weights = table.column(WEIGHT_COLUMN).to_numpy(zero_copy_only=False)
        if values.dtype != np.int64 or weights.dtype != np.float64 or not np.isfinite(weights).all():
            raise ValueError(f"column {feature!r} must be int64 and {WEIGHT_COLUMN!r} finite float64")
    except (OSError, ValueError, KeyError, TypeError, IndexError, pa.ArrowException) as exc:
        raise PcqrError(f"{path}: not a pcqr synthetic database ({exc})") from None
    return values, weights, metadata


def answer(hypothesis: Hypothesis, values: np.ndarray, weights: np.ndarray) -> float:
    """The counting query's answer: the weights of the rows ``hypothesis`` labels 1, summed."""
    labels = hypothesis.predict(np.asarray(values, dtype=np.float64)[:, None])
    return float(np.sum(weights[labels == 1]))
