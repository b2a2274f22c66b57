"""The answer loop's reads: the workers' validation pass over a query part, the driver's own read
of the same rows for the log, and the vote task.

The validation pass (:func:`check_queries`) runs on the workers, on every part of the query
dataset (public), before anything is released: values, ids, the queries' content identity (and
each chunk's share of it) and the misuse guard's hashes, on one read. The driver then reads the
stream itself, in log batches (:func:`read_ahead`, a thread a few batches ahead), checks each chunk
against the validation pass's share of it (:func:`verified_chunks`: a file changed between the two
reads is refused before any of its rows is released, so every logged query passed the validation
and the guard), and decides which rows need the k models' votes: only fresh queries the gate can
still test (issue 47). Those rows alone go to a vote task (:func:`count_votes`, with the
session's ensemble, private, held on the cluster), which returns ct(1) for each: 4 bytes a query.
A repeat, a query past m or after the halt costs no model evaluation.

This module imports only what the tasks need (no scikit-learn, no session state), so a fresh
worker process starts at once; :mod:`pcqr.pipeline.session.query_release` owns everything after.
"""
from __future__ import annotations

import queue
import threading
from dataclasses import dataclass
from typing import Generator, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa

from pcqr.pipeline.data.arrow_types import as_float64
from pcqr.pipeline.data.datasets import QUERY_ID, Part, check_features, feature_matrix, id_values, read_chunks
from pcqr.pipeline.budget.overlap import Found, Reach
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.models.votes import Ensemble
from pcqr.pipeline.public_log.answered import column_keys


#: The key of the queries' content identity (:func:`content_sum`): public and fixed, since the
#: identity is of public data and must be the same for a session's every run.
CONTENT_SEED = 0x7063717271756572  # "pcqrquer"


def content_sum(columns: Sequence[np.ndarray], ids: np.ndarray, positions: np.ndarray) -> int:
    """The rows' share of the queries' content identity (:mod:`pcqr.pipeline.session.inputs`): the sum
    mod 2^64 of a keyed 64-bit hash of each row's feature values, query id and position in the
    dataset (an int64 id as two exact float64 halves; a position < 2^53 is exact)."""
    keys = column_keys([*columns, *_id_halves(ids), np.asarray(positions, dtype=np.float64)], len(positions),
                       CONTENT_SEED)
    return int(np.sum(keys, dtype=np.uint64))


#: A part's validation: rows, content share, smallest and largest id, the guard's findings, and the
#: read check of each chunk of ``rows`` rows from the part's start (uint64, for the driver's read).
Checked = tuple[int, int, "int | None", "int | None", "list[Found] | None", np.ndarray]


def check_queries(part: Part, features: Sequence[str], id_column: str | None, rows: int,
                  reach: Reach | None = None, seed: int = 0) -> Checked:
    """Worker: the validation pass over queries before any answer is released (NaN / inf / null
    features, missing, out-of-range or repeated ids raise, naming the file and column); the part's
    row count, its share of the queries' content identity (:func:`content_sum`), each chunk's read
    check (:func:`read_check` under the session's row-key ``seed``: 8 bytes a batch, against which
    the driver checks its own read, :func:`query_chunks`) and its smallest and
    largest id (None without ``id_column``: row positions never repeat), for the driver's check
    across parts (:func:`overlapping_groups`, then :func:`part_ids` of those parts only). The ids
    themselves are not kept: held for every part until the pass ends, they were 8 bytes a query
    of the workers' memory (issue 32). With ``reach``, on the same read, what the misuse guard
    needs of the rows (:class:`pcqr.pipeline.budget.overlap.Reach`), chunk by chunk: the file is read
    once for both."""
    columns = list(dict.fromkeys([*features, *([id_column] if id_column else []), *(reach.needed if reach else ())]))
    count, total = 0, 0
    found: list[np.ndarray] = []
    seen: list[Found] = []
    checks: list[int] = []
    for table in read_chunks(part, columns, rows):
        values = check_features(table, features, part.file)
        positions = np.arange(part.start + count, part.start + count + table.num_rows, dtype=np.int64)
        ids = positions if id_column is None else id_values(table, id_column, part.file).to_numpy()
        if id_column is not None:
            found.append(ids)
        total = (total + content_sum(values, ids, positions)) % 2**64
        checks.append(read_check(column_keys(values, table.num_rows, seed), ids, seed))
        count += table.num_rows
        if reach is not None:
            seen.append(reach.in_range(table))
    ids = np.sort(np.concatenate(found)) if found else np.zeros(0, np.int64)
    if id_column is not None and (repeated := repeated_id(ids)) is not None:
        raise PcqrError(f"{part.file}: --id-column {id_column!r} repeats query id {repeated}; "
                        "each query needs its own id (the log and --truth join answers by it)")
    return (count, total, (int(ids[0]) if ids.size else None), (int(ids[-1]) if ids.size else None),
            seen if reach is not None else None, np.array(checks, dtype=np.uint64))


def _id_halves(ids: np.ndarray) -> list[np.ndarray]:
    """int64 ids as two exact float64 columns (their upper and lower 32 bits), for column_keys."""
    bits = np.asarray(ids, dtype=np.int64).view(np.uint64)
    return [(bits >> np.uint64(32)).astype(np.float64), (bits & np.uint64(0xFFFFFFFF)).astype(np.float64)]


def read_check(keys: np.ndarray, ids: np.ndarray, seed: int) -> int:
    """A chunk's read check: the sum mod 2^64 of its rows' keys (the session's keyed row hashes,
    :func:`pcqr.pipeline.public_log.answered.column_keys`) and of keyed hashes of its ids. The driver
    computes the keys anyway; a chunk whose rows or ids changed between two reads differs (but for
    a 2^-64 chance: the key is the session's secret)."""
    id_keys = column_keys(_id_halves(ids), len(ids), seed ^ 0x6964)  # "id"
    return (int(np.sum(keys, dtype=np.uint64)) + int(np.sum(id_keys, dtype=np.uint64))) % 2**64


def part_ids(part: Part, id_column: str, rows: int) -> np.ndarray:
    """Worker: a checked part's ids, sorted (read again, for the parts whose id ranges overlap another's)."""
    found = [id_values(table, id_column, part.file).to_numpy() for table in read_chunks(part, [id_column], rows)]
    return np.sort(np.concatenate(found)) if found else np.zeros(0, np.int64)


def overlapping_groups(ranges: Sequence[tuple[int | None, int | None]]) -> list[list[int]]:
    """The indices of the parts whose id ranges [lo, hi] overlap, in groups of two or more (a part
    with no ids is in none): only within a group can an id repeat across parts."""
    order = sorted((lo, hi, i) for i, (lo, hi) in enumerate(ranges) if lo is not None and hi is not None)
    groups: list[list[int]] = []
    reach: int | None = None
    for lo, hi, i in order:
        if reach is not None and lo <= reach:
            groups[-1].append(i)
            reach = max(reach, hi)
        else:
            groups.append([i])
            reach = hi
    return [g for g in groups if len(g) > 1]


def repeated_id(ids: np.ndarray) -> int | None:
    """An id that a sorted array of ids holds twice (None: every id is unique)."""
    twice = np.flatnonzero(ids[1:] == ids[:-1])
    return int(ids[twice[0]]) if twice.size else None


@dataclass(frozen=True)
class Batch:
    """A log batch as the driver read it (checked against the validation pass): its part (an index
    into the loop's parts), its rows (the features and the ids the log records) and their row keys.
    The feature matrix is made only where it is needed (:meth:`matrix`): the rows to vote on, and the
    batch's rows when a gate or the student reads the features."""

    part: int
    table: pa.Table
    keys: np.ndarray
    features: tuple[str, ...]

    def matrix(self, rows: np.ndarray | slice = slice(None)) -> np.ndarray:
        """The feature matrix of ``rows`` (datasets.feature_matrix: float64, column-major)."""
        if isinstance(rows, slice):
            start, stop, _ = rows.indices(self.table.num_rows)
            chosen = self.table.slice(start, stop - start)
        else:
            chosen = self.table.take(rows)
        return feature_matrix(chosen, self.features, "query batch")


def count_votes(ensemble: Ensemble, X: np.ndarray) -> np.ndarray:
    """Worker: ct(1) of the k models for each row of X (over c > 2 classes, the (n, c) counts ct(j)), the
    fresh queries the gate can still test (private: to the coordinator only)."""
    return ensemble.count_votes(X)


def query_chunks(part: Part, features: Sequence[str], id_column: str | None, rows: int, seed: int,
                 skip: int = 0, shares: np.ndarray | None = None) -> Iterator[tuple[pa.Table, np.ndarray]]:
    """Driver: the part's queries after its first ``skip`` rows, in the validation pass's chunks of
    ``rows`` rows from the part's start (the first one after ``skip`` cut short): each as (the table
    with the ids the log records, ``--id-column``'s or the row's position in the dataset; its row
    keys under ``seed``). With
    ``shares`` (the pass's :func:`check_queries` read checks under the same seed), a chunk whose
    rows or ids are not the ones validated is refused before it is yielded."""
    columns = [*features] + ([id_column] if id_column else [])
    offset = 0
    for number, table in enumerate(read_chunks(part, columns, rows)):
        n = table.num_rows
        if offset + n <= skip:  # committed by an earlier run: not released again
            offset += n
            continue
        expected = None if shares is None else (int(shares[number]) if number < shares.shape[0] else -1)
        table, keys = _checked_chunk(table, part, features, id_column, offset, seed, expected)
        drop = max(0, skip - offset)
        yield table.slice(drop), keys[drop:]
        offset += n


def _checked_chunk(table: pa.Table, part: Part, features: Sequence[str], id_column: str | None, offset: int,
                   seed: int, expected: int | None) -> tuple[pa.Table, np.ndarray]:
    """A chunk read ``offset`` rows into the part: the table with the ids the log records and its row
    keys, refused unless its read check is ``expected`` (None: not checked)."""
    n = table.num_rows
    # the validation pass checked these values; a changed file is caught by the read check
    try:
        keys = column_keys([as_float64(table.column(name)) for name in features], n, seed)
    except (pa.ArrowException, ValueError, TypeError):  # a column no longer of a feature's type
        raise _changed(part) from None
    if id_column is None:
        ids = pa.array(np.arange(part.start + offset, part.start + offset + n, dtype=np.int64))
        table = table.append_column(QUERY_ID, ids)
    else:
        ids = id_values(table, id_column, part.file)
        table = table.set_column(table.schema.get_field_index(id_column), id_column, ids)
    if expected is not None and read_check(keys, ids.to_numpy(), seed) != expected:
        raise _changed(part)
    return table, keys


def _changed(part: Part) -> PcqrError:
    return PcqrError(f"{part.file}: changed after its queries were checked (the rows read for the log are not "
                     "the rows validated); nothing of this batch was released: run the command again")


def read_ahead(parts: Sequence[Part], features: Sequence[str], id_column: str | None, rows: int, skip: int,
               seed: int, shares: Mapping[int, np.ndarray] | None = None,
               depth: int = 1) -> Generator[Batch, None, None]:
    """Driver: every :class:`Batch` after the stream's first ``skip`` rows, in order, read, checked
    against the validation pass (``shares``: each part's chunk shares by its start,
    :func:`query_chunks`) and hashed by a thread up to ``depth`` batches ahead of the caller (pyarrow
    and NumPy release the GIL: the read overlaps the coordinator and the log writes). An error in
    the thread is raised here, at the batch it concerns; the thread stops when the caller stops
    iterating."""
    ahead: queue.Queue[Batch | BaseException | None] = queue.Queue(depth)
    stop = threading.Event()

    def put(item: Batch | BaseException | None) -> bool:
        while not stop.is_set():
            try:
                ahead.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def read() -> None:
        try:
            for i, part in enumerate(parts):
                expected = None if shares is None else shares[part.start]
                for table, keys in query_chunks(part, features, id_column, rows, seed,
                                                max(0, skip - part.start), expected):
                    if not put(Batch(i, table, keys, tuple(features))):
                        return
            put(None)
        except BaseException as exc:  # noqa: BLE001 -- handed to the caller, raised there
            put(exc)

    thread = threading.Thread(target=read, name="pcqr-read-ahead", daemon=True)
    thread.start()
    try:
        while (item := ahead.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        thread.join()
