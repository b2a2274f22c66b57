"""The answered-query log: public Parquet files, one per batch, hash-chained.

Each batch file ``batch-00000000.parquet`` holds, for every query of the
batch: ``query_id``, the query's feature columns, ``answer`` (nullable int8:
the released label, null when abstained or refused), ``status`` (answered /
abstained / refused), ``source`` (which path produced the answer:
``sparse_vector`` -- the k models' vote through the coordinator -- or
``released_model`` -- h_priv of the universal mode, see
:mod:`pcqr.pipeline.mechanisms.universal` -- or ``duplicate`` -- the logged answer of an
earlier identical query, see :mod:`pcqr.pipeline.public_log.answered` -- or, under ``--gate guess``,
``guess`` -- the public guess g(x), released at no cost -- or ``flipped`` -- 1 - g(x), released
after the gate spent one of the T instances, see :mod:`pcqr.pipeline.gates.public_guess` -- or
``student`` -- after the halt, the student distilled from the log's earlier answers, see
:mod:`pcqr.pipeline.session.distillation` -- or, under ``--gate gnmax``, ``gnmax`` -- the Gaussian
noisy majority, one of the m answers, see :mod:`pcqr.pipeline.gates.noisy_argmax`) and ``batch``. Its schema metadata carries

* ``pcqr.provenance``: JSON with the package version, every parameter,
  epsilon, delta, T, k, w, and whether the noise was seeded ("not private");
* ``pcqr.prev_sha256``: the SHA-256 of the previous batch file's bytes (empty
  for the first), so a lost, altered or reordered batch is detectable.

Files are written atomically (:mod:`pcqr.pipeline.data.atomic`). Everything here is
public: only released answers and public query features go in.
"""
from __future__ import annotations

import hashlib
import io
import json
import re
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pcqr.pipeline.data import locations
from pcqr.pipeline.data.atomic import write_atomic
from pcqr.pipeline.data.datasets import feature_matrix
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.data.parquet_opener import read_parquet

ANSWERED, ABSTAINED, REFUSED = 0, 1, 2  # a query's status in the log
STATUS_NAMES = ("answered", "abstained", "refused")
PROVENANCE_KEY = b"pcqr.provenance"
#: The session's claim on its log (pcqr.pipeline.public_log.owner; a leading underscore: not a batch,
#: skipped by Parquet dataset readers).
CLAIM_FILE = "_session.json"
PREV_HASH_KEY = b"pcqr.prev_sha256"
SPARSE_VECTOR = "sparse_vector"
RELEASED_MODEL = "released_model"
DUPLICATE = "duplicate"  # the logged answer of an earlier identical query (pcqr.pipeline.public_log.answered)
GUESS = "guess"  # the guess gate released the public guess g(x) (free)
FLIPPED = "flipped"  # the guess gate spent an instance and released 1 - g(x)
STUDENT = "student"  # after the halt: the student distilled from the log (post-processing, free)
GNMAX = "gnmax"  # the Gaussian noisy argmax released the noisy majority (one of the m answers)
SOURCE_NAMES = (SPARSE_VECTOR, RELEASED_MODEL, DUPLICATE, GUESS, FLIPPED, STUDENT, GNMAX)  # source codes 0 .. 6
#: The source codes: each name's index in SOURCE_NAMES, as the gates and the answer loop fill the int8 column.
SPARSE_VECTOR_CODE = SOURCE_NAMES.index(SPARSE_VECTOR)
RELEASED_MODEL_CODE = SOURCE_NAMES.index(RELEASED_MODEL)
DUPLICATE_CODE = SOURCE_NAMES.index(DUPLICATE)
GUESS_CODE = SOURCE_NAMES.index(GUESS)
FLIPPED_CODE = SOURCE_NAMES.index(FLIPPED)
STUDENT_CODE = SOURCE_NAMES.index(STUDENT)
GNMAX_CODE = SOURCE_NAMES.index(GNMAX)
#: The sources of answers the k models' votes decided through a gate (the teacher of a distilled student).
GATED_SOURCES = (SPARSE_VECTOR, GUESS, FLIPPED, GNMAX)
#: The sources of answers that spent an instance (besides every abstention).
SPENDING_SOURCES = (FLIPPED, GNMAX)
_BATCH_FILE = re.compile(r"^batch-(\d{8})\.parquet$")


def batch_path(log_dir: str, batch: int) -> str:
    """Batch ``batch``'s file in the log (a local folder or an ``s3://`` prefix)."""
    return locations.join(log_dir, f"batch-{batch:08d}.parquet")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def batch_table(
    queries: pa.Table,
    id_column: str,
    features: list[str],
    status: np.ndarray,
    label: np.ndarray,
    batch: int,
    fallback_label: int | None = None,
    source: str | np.ndarray = SPARSE_VECTOR,
) -> pa.Table:
    """The public log table of one batch: ids, features, released answers, statuses.

    ``answer`` is the released label where answered and null otherwise, or
    ``fallback_label`` there when one is given (post-processing; ``status``
    still says abstained / refused).
    """
    answered = status == ANSWERED
    if fallback_label is None:
        answer = pa.array(label, type=pa.int8(), mask=~answered)
    else:
        answer = pa.array(np.where(answered, label, fallback_label), type=pa.int8())
    columns = {"query_id": queries.column(id_column).cast(pa.int64())}
    for name in features:
        columns[name] = queries.column(name)
    columns["answer"] = answer
    columns["status"] = _names(status, STATUS_NAMES)
    if isinstance(source, str):
        source = np.full(len(status), SOURCE_NAMES.index(source), dtype=np.int8)
    columns["source"] = _names(source, SOURCE_NAMES)
    columns["batch"] = pa.array(np.full(len(status), batch, dtype=np.int32))
    return pa.table(columns)


def _names(codes: np.ndarray, names: tuple[str, ...]) -> pa.Array:
    """A string column from small integer codes (taken in Arrow: no Python string per row)."""
    return pa.DictionaryArray.from_arrays(pa.array(codes, type=pa.int8()), pa.array(names)).cast(pa.string())


#: Parquet options of every log batch. Only the short string columns are dictionary-encoded:
#: feature values are mostly distinct, and trying a dictionary for them first cost 60% of the
#: encoding time (benchmarks/answer_logistic). LZ4: a 10^5-query batch of 20 float features encodes
#: in about half zstd level 1's time, 7% larger (the features are mostly incompressible mantissas).
LOG_WRITE_OPTIONS: dict[str, Any] = dict(compression="lz4", write_page_checksum=True,
                                         use_dictionary=["status", "source"])


def encode_batch(table: pa.Table, provenance: dict[str, Any], prev_hash: str) -> bytes:
    """Serialise a batch table with its provenance and chain hash into Parquet bytes."""
    metadata = {
        PROVENANCE_KEY: json.dumps(provenance, sort_keys=True, default=str).encode(),
        PREV_HASH_KEY: prev_hash.encode(),
    }
    sink = io.BytesIO()
    pq.write_table(table.replace_schema_metadata(metadata), sink, **LOG_WRITE_OPTIONS)
    return sink.getvalue()


def append_batch(log_dir: str, batch: int, data: bytes) -> None:
    """Write one encoded batch file atomically."""
    write_atomic(batch_path(log_dir, batch), data)


def batch_files(log_dir: str) -> list[tuple[int, str]]:
    """The log's batch files as (batch number, path), in order ([] when there is no such folder)."""
    found = []
    for name in locations.names_in(log_dir):
        match = _BATCH_FILE.match(name)
        if match:
            found.append((int(match.group(1)), locations.join(log_dir, name)))
    return sorted(found)


def read_batches(log_dir: str) -> Iterator[pa.Table]:
    """The log's batch tables in order."""
    for _, path in batch_files(log_dir):
        yield read_parquet(path)


def public_sample(log_dir: str, features: list[str], count: int) -> np.ndarray:
    """T_pub of A_UnvPrivCl (pipeline/mechanisms/universal.py): the feature vectors of the first ``count`` queries of the public log, in order.

    The log is public, so reading it here is reading public data; a log missing
    rows (a batch lost in a crash) cannot give T_pub and is refused.
    """
    pieces, have = [], 0
    for _, path in batch_files(log_dir):
        if have >= count:
            break
        table = read_parquet(path, features)
        take = min(table.num_rows, count - have)
        pieces.append(feature_matrix(table.slice(0, take), features, path))
        have += take
    if have < count:
        raise PcqrError(
            f"{log_dir}: the log holds {have} answered queries, A_UnvPrivCl needs the first {count} "
            "as its public sample (is a batch file missing?)"
        )
    return np.concatenate(pieces)


def released_rows(log_dir: str, features: list[str], sources: tuple[str, ...],
                  batches: int | None = None) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """For each batch file (the first ``batches``; all if None), in order, its answered rows whose
    ``source`` is one of ``sources``: (features, released labels as int8, source names). Batches
    with no such row are skipped. Public data only; verify the log first."""
    for number, path in batch_files(log_dir):
        if batches is not None and number >= batches:
            break
        table = read_parquet(path, [*features, "answer", "status", "source"])
        source = table.column("source").to_numpy(zero_copy_only=False)
        rows = np.flatnonzero((table.column("status").to_numpy(zero_copy_only=False) == "answered")
                              & np.isin(source, sources))
        if rows.size:
            picked = table.take(rows)
            yield (feature_matrix(picked, features, path),
                   picked.column("answer").to_numpy(zero_copy_only=False).astype(np.int8), source[rows])
