"""What a dataset IS, independent of how it is stored: its identity and its overlap sketches.

Identity. Every row is encoded canonically -- its columns sorted by name; per value a tag and its
bits: float64 (any float width widened, -0.0 folded into 0.0, every NaN the same), int64 (any
integer width and booleans; uint64 values above 2**63 - 1 with their own tag), strings and bytes
by a BLAKE2b-128 digest of their UTF-8/raw bytes with their length, null as a tag; other types by
their text -- and hashed with SipHash-2-4-128 (:mod:`pcqr.pipeline.budget.siphash`, vectorised; keyed by the
column names; a collision could only make two datasets share a budget, the safe side). The
identity is ``"rows:"`` + BLAKE2b-256 of (the row count, the SUM of the row hashes mod 2**128): a multiset
hash, so it does not depend on row order, file splitting, file names, compression or Parquet
encoding, only on the decoded rows (with their column names and value types). The rows are hashed
on the Dask workers, part by part (a part is a few row groups of one file); the driver only adds
the per-part sums and never reads a row. Per file, (rows, sum) is cached in the ledger keyed by
(file, size, mtime_ns), so an unchanged file is not read again (a rewrite keeping both the size
and the nanosecond modification time defeats the cache).

Sketches (bottom-k, or KMV: Bar-Yossef et al. 2002; Beyer et al. 2007). Of a multiset of 64-bit
hashes, the k smallest (:mod:`pcqr.pipeline.budget.sketch`) DISTINCT values with their multiplicities. Two are kept:
* the row sketch: the first 64 bits of each row's hash (the full rows, every column);
* a feature sketch per feature-column set: a separate 64-bit hash of the feature vector only
  (the named columns, sorted, as float64 -- the pipeline's own view of a feature --, chained
  through MurmurHash3's 64-bit finaliser, vectorised). Public files (queries, public data,
  truth) are compared with it by the columns they share with it, in the driver, so they need
  not hold the label or the other columns.
Each worker keeps the bottom-k of its part; the merge of bottom-k sketches is exact (a value
among the k smallest overall is among the k smallest of every part that holds it, with its full
count there). What the sketches estimate, and with what error, is in :mod:`pcqr.pipeline.budget.overlap`.

Both are deterministic functions of the private data, NOT private releases: they stay with the
private data (the ledger, the private state), never in a public output.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from pcqr.pipeline.data.arrow_types import as_float64
from pcqr.pipeline.data.datasets import Part, read_part
from pcqr.pipeline.data.parquet_opener import filesystem, metadata_of
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.budget.siphash import siphash128
from pcqr.pipeline.budget.sketch import Sketch

if TYPE_CHECKING:
    from pcqr.pipeline.budget.ledger import Ledger

PART_ROWS = 500_000  # rows per worker task
SLICE_ROWS = 8192  # rows hashed at a time
IDENTITY_PREFIX = "rows:"
_FORMAT = "rows-v1"  # the cached per-file entries and the identity's preimage
_MASK128 = (1 << 128) - 1
_NULL, _FLOAT, _INT, _UINT, _TEXT, _BYTES, _OTHER = (ord(c) for c in "nfiusyo")
_M1, _M2, _SHIFT = np.uint64(0xFF51AFD7ED558CCD), np.uint64(0xC4CEB9FE1A85EC53), np.uint64(33)


@dataclass(frozen=True)
class Fingerprint:
    """A dataset's identity and row count, with its row sketch and the feature sketch over
    ``features`` (sorted) when they were asked for."""

    identity: str
    rows: int
    row_sketch: Sketch | None = None
    features: tuple[str, ...] | None = None
    feature_sketch: Sketch | None = None


@dataclass(frozen=True)
class PartPrint:
    """A worker's result for one part: its rows, the sum of their hashes, its bottom-k sketches."""

    rows: int
    total: int
    row_sketch: Sketch | None
    feature_sketch: Sketch | None


# --- canonical encoding -------------------------------------------------------------------------

def canonical_floats(values: np.ndarray) -> np.ndarray:
    """float64 bit patterns (uint64) with -0.0 folded into 0.0 and every NaN the same."""
    x = np.array(values, dtype=np.float64)
    x[x == 0] = 0.0
    x[np.isnan(x)] = np.nan
    return x.view(np.uint64)


def _decoded(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    return array.dictionary_decode() if pa.types.is_dictionary(array.type) else array


def _column_words(array: pa.Array) -> tuple[np.ndarray, list[np.ndarray]]:
    """A column's per-value tags (uint8) and payload words (uint64 arrays): one word for null,
    float, integer and boolean values, two (a BLAKE2b-128 digest of length + bytes) for strings,
    bytes and other types (by their text)."""
    kind, n = array.type, len(array)
    if pa.types.is_null(kind):
        return np.full(n, _NULL, np.uint8), [np.zeros(n, np.uint64)]
    if pa.types.is_floating(kind):
        tags, payload = np.full(n, _FLOAT, np.uint8), [canonical_floats(array.to_numpy(zero_copy_only=False))]
    elif pa.types.is_integer(kind) or pa.types.is_boolean(kind):
        filled = array.fill_null(False if pa.types.is_boolean(kind) else 0) if array.null_count else array
        values = filled.to_numpy(zero_copy_only=False)
        if values.dtype == np.uint64:
            tags = np.where(values > np.uint64(np.iinfo(np.int64).max), _UINT, _INT).astype(np.uint8)
            payload = [values.astype(np.uint64)]
        else:
            tags, payload = np.full(n, _INT, np.uint8), [values.astype(np.int64).view(np.uint64)]
    else:
        tags, payload = _digested(array)
    if array.null_count:
        nulls = array.is_null().to_numpy(zero_copy_only=False)
        tags[nulls] = _NULL
        for word in payload:
            word[nulls] = 0
    return tags, payload


def _digested(array: pa.Array) -> tuple[np.ndarray, list[np.ndarray]]:
    kind = array.type
    textual = pa.types.is_string(kind) or pa.types.is_large_string(kind)
    raw = pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_fixed_size_binary(kind)
    digests = bytearray()
    for value in array.to_pylist():  # a Python loop: only for columns that are not numbers
        data = b"" if value is None else value.encode() if textual else value if raw else f"{kind}:{value!r}".encode()
        digests += hashlib.blake2b(len(data).to_bytes(8, "little") + data, digest_size=16).digest()
    words = np.frombuffer(bytes(digests), dtype="<u8").reshape(-1, 2).astype(np.uint64)
    tag = _TEXT if textual else _BYTES if raw else _OTHER
    return np.full(len(array), tag, np.uint8), [words[:, 0].copy(), words[:, 1].copy()]


def row_hashes(table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """SipHash-2-4-128 of every row's canonical encoding (:func:`row_words`), keyed by the column
    names: the two 64-bit halves (h0, h1) of each row's hash."""
    key, words = row_words(table)
    return siphash128(words, key)


def row_words(table: pa.Table) -> tuple[bytes, np.ndarray]:
    """Every row's canonical encoding as a column of 64-bit words -- the tags (a byte per column,
    columns sorted by name, zero-padded to whole words), then each column's payload words -- and
    the SipHash key of these column names."""
    names = sorted(table.column_names)
    key = hashlib.blake2b(("pcqr-rows-v1\0" + "\0".join(names)).encode(), digest_size=16).digest()
    n = table.num_rows
    tags: list[np.ndarray] = []
    payload: list[np.ndarray] = []
    for name in names:
        column_tags, words = _column_words(_decoded(table.column(name)))
        tags.append(column_tags)
        payload.extend(words)
    packed = []
    for start in range(0, len(tags), 8):
        word = np.zeros(n, np.uint64)
        for j, column_tags in enumerate(tags[start:start + 8]):
            word |= column_tags.astype(np.uint64) << np.uint64(8 * j)
        packed.append(word)
    return key, np.stack(packed + payload) if names else np.zeros((0, n), np.uint64)


def _fmix64(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finaliser: a bijection of uint64 with full avalanche."""
    h = h ^ (h >> _SHIFT)
    h = h * _M1
    h = h ^ (h >> _SHIFT)
    h = h * _M2
    return h ^ (h >> _SHIFT)


def _word(text: str) -> np.uint64:
    return np.uint64(int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big"))


def feature_hashes(table: pa.Table, features: Sequence[str]) -> np.ndarray:
    """A 64-bit hash of each row's feature vector: the named columns, sorted by name, as float64
    (canonical bits), so an integer column and a float column with the same values agree."""
    names = sorted(features)
    h = np.full(table.num_rows, _word("pcqr-features-v1\0" + "\0".join(names)), dtype=np.uint64)
    for name in names:
        values = as_float64(table.column(name))
        h = _fmix64(h ^ _fmix64(canonical_floats(values) ^ _word("column\0" + name)))
    return h


# --- worker task --------------------------------------------------------------------------------

def fingerprint_part(part: Part, columns: Sequence[str], features: Sequence[str] | None,
                     sketches: bool) -> PartPrint:
    """Worker task: one part's row count, sum of row hashes (mod 2**128) and bottom-k sketches."""
    try:
        table = read_part(part, columns)
    except (OSError, pa.ArrowException) as exc:
        raise PcqrError(f"{part.file}: cannot read it to fingerprint the private dataset ({exc})") from None
    n, low = table.num_rows, np.uint64(0xFFFFFFFF)
    key, words = row_words(table.slice(0, 0))
    words = np.empty((words.shape[0], n), np.uint64)
    feature_values = np.empty(n if features else 0, np.uint64)
    for start in range(0, n, SLICE_ROWS):  # small temporaries: Dask workers' malloc settings make big ones slow
        piece = table.slice(start, SLICE_ROWS)
        words[:, start:start + piece.num_rows] = row_words(piece)[1]
        if features:
            feature_values[start:start + piece.num_rows] = feature_hashes(piece, features)
    h0, h1 = siphash128(words, key)  # in place, a chunk at a time; the row's 128-bit hash is h0 + 2**64 h1
    limbs = [int(np.sum(limb, dtype=np.uint64)) for limb in (h0 & low, h0 >> np.uint64(32), h1 & low, h1 >> np.uint64(32))]
    total = sum(limb << (32 * j) for j, limb in enumerate(limbs)) & _MASK128  # each limb sum < 2**64
    row_sketch = Sketch.of(h0) if sketches else None
    feature_sketch = Sketch.of(feature_values) if sketches and features else None
    return PartPrint(table.num_rows, total, row_sketch, feature_sketch)


# --- the dataset's fingerprint -----------------------------------------------------------------

def normalise(file: str) -> str:
    return file if "://" in file else os.path.abspath(file)


def file_stat(file: str) -> tuple[int, int] | None:
    """(size, mtime_ns) of a file from its file system's metadata, or None when either is unknown."""
    fs, path = filesystem(file)
    info = fs.get_file_info(path)
    if info.type != pafs.FileType.File:
        raise PcqrError(f"{file}: no such file (fingerprinting the private dataset)")
    size, mtime_ns = info.size, info.mtime_ns
    return None if size is None or mtime_ns is None else (int(size), int(mtime_ns))


def _parts(file: str) -> tuple[list[Part], list[str]]:
    """A file's row groups in parts of about PART_ROWS rows, and its column names (metadata only)."""
    meta = metadata_of(file)
    parts: list[Part] = []
    chosen: list[int] = []
    rows = 0
    for index in range(meta.num_row_groups):
        count = meta.row_group(index).num_rows
        if chosen and rows + count > PART_ROWS:
            parts.append(Part(file, tuple(chosen), rows, 0))
            chosen, rows = [], 0
        chosen.append(index)
        rows += count
    if chosen:
        parts.append(Part(file, tuple(chosen), rows, 0))
    return parts, list(meta.schema.to_arrow_schema().names)


def _identity(rows: int, total: int) -> str:
    preimage = f"{_FORMAT}:{rows}:{total:032x}".encode()
    return IDENTITY_PREFIX + hashlib.blake2b(preimage, digest_size=32).hexdigest()


def _cached(ledger: Ledger | None, file: str, stat: tuple[int, int] | None) -> tuple[int, int] | None:
    entry = ledger.store.cached_hash(file, *stat) if ledger is not None and stat is not None else None
    if entry is None or not entry.startswith(_FORMAT + ":"):  # absent, or an older format's entry
        return None
    _, rows, total = entry.split(":")
    return int(rows), int(total, 16)


# This process's fingerprints taken with a ledger (a guard, then the charge, reuse one); without a
# ledger (universal mode's check of the private data) every call reads the rows.
_MEMO: dict[Any, list[Fingerprint]] = {}


def fingerprint_dataset(files: Sequence[str], client: Any = None, ledger: Ledger | None = None,
                        features: Sequence[str] | None = None, sketches: bool = True) -> Fingerprint:
    """A dataset's :class:`Fingerprint`: identity, rows, and (``sketches``) its row sketch and the
    feature sketch over ``features``.

    Parameters
    ----------
    files : sequence of str
        The dataset's files (``Dataset.files``): local paths or pyarrow URIs.
    client : distributed.Client, optional
        Hash on its workers, one task per part (the driver never reads a row). Without one,
        in this process (tests and small data).
    ledger : Ledger, optional
        Per-file (rows, sum) cached by (file, size, mtime_ns), and the sketches stored at the
        dataset's registration (:mod:`pcqr.pipeline.budget.overlap`): when all are there, nothing is read.
    """
    if not files:
        raise PcqrError("the private dataset has no files to fingerprint")
    names = list(dict.fromkeys(normalise(f) for f in files))
    stats = {f: file_stat(f) for f in names}
    columns = tuple(sorted(features)) if features else None
    key = tuple(stats.items())  # with a ledger only: the memo has its file cache's semantics
    for known in _MEMO.get(key, []) if ledger is not None and all(s is not None for s in stats.values()) else []:
        if not sketches or (known.row_sketch is not None and (columns is None or known.features == columns)):
            return known
    cached = {f: _cached(ledger, f, stats[f]) for f in names}
    if all(c is not None for c in cached.values()):
        rows = sum(c[0] for c in cached.values() if c is not None)
        identity = _identity(rows, sum(c[1] for c in cached.values() if c is not None) & _MASK128)
        stored = _stored(ledger, identity, rows, columns) if sketches else Fingerprint(identity, rows)
        if stored is not None:
            return _remember(key, stats, stored)
    found = _compute(names, stats, client, ledger, columns, sketches)
    return found if ledger is None else _remember(key, stats, found)


def _stored(ledger: Ledger | None, identity: str, rows: int, columns: tuple[str, ...] | None) -> Fingerprint | None:
    """The fingerprint from sketches the ledger already holds, or None if one is missing."""
    if ledger is None:
        return None
    row_sketch = ledger.load_sketch(identity, None)
    feature_sketch = ledger.load_sketch(identity, columns) if columns else None
    if row_sketch is None or (columns and feature_sketch is None):
        return None
    return Fingerprint(identity, rows, row_sketch, columns, feature_sketch)


def _remember(key: Any, stats: dict[str, Any], found: Fingerprint) -> Fingerprint:
    if all(s is not None for s in stats.values()):
        if len(_MEMO) > 16:
            _MEMO.clear()
        _MEMO.setdefault(key, []).insert(0, found)
    return found


def _compute(names: list[str], stats: dict[str, tuple[int, int] | None], client: Any, ledger: Ledger | None,
             columns: tuple[str, ...] | None, sketches: bool) -> Fingerprint:
    planned = [(part, schema) for file in names for parts, schema in [_parts(file)] for part in parts]
    if client is None:
        prints = [fingerprint_part(part, schema, columns, sketches) for part, schema in planned]
    else:
        prints = client.gather([client.submit(fingerprint_part, part, schema, columns, sketches, pure=False)
                                for part, schema in planned])
    per_file: dict[str, tuple[int, int]] = {f: (0, 0) for f in names}
    for (part, _), result in zip(planned, prints):
        rows, total = per_file[part.file]
        per_file[part.file] = (rows + result.rows, (total + result.total) & _MASK128)
    for file, (rows, total) in per_file.items():
        stat = stats[file]
        if ledger is not None and stat is not None and file_stat(file) == stat:  # unchanged meanwhile
            ledger.store.cache_hash(file, *stat, f"{_FORMAT}:{rows}:{total:032x}")
    rows = sum(r for r, _ in per_file.values())
    identity = _identity(rows, sum(t for _, t in per_file.values()) & _MASK128)
    if not sketches:
        return Fingerprint(identity, rows)
    row_sketch = Sketch.merge([p.row_sketch for p in prints if p.row_sketch is not None])
    feature_sketch = Sketch.merge([p.feature_sketch for p in prints if p.feature_sketch is not None]) if columns else None
    return Fingerprint(identity, rows, row_sketch, columns, feature_sketch)


def dataset_identity(files: Sequence[str], client: Any = None, ledger: Ledger | None = None) -> str:
    """A dataset's identity (``"rows:"`` + 64 hex digits; see the module docstring)."""
    return fingerprint_dataset(files, client, ledger, sketches=False).identity
