"""The answer loop's reads: the worker tasks that check a query part and count its votes, and the
driver's own read of the same rows for the log.

A task runs on a Dask worker, on one part of the query dataset (public), with the session's
ensemble (private: the k models) as an argument, and returns one small array per query (vote
counts ct(1), or h_priv's labels) and the queries' row keys
(:func:`pcqr.pipeline.public_log.answered.column_keys`). The driver reads the part again, in log
batches (:func:`query_chunks`), rather than receiving the rows: the transfer is then 12 bytes a
query, and the driver's memory is one log batch whatever the files' row-group size. Before a
batch is released the driver checks the keys of the rows it read against the keys of the rows
the votes were counted on (:func:`check_same_rows`; the driver reads ahead in a thread: :func:`read_ahead`): a file changed between the two reads is
refused, so every logged query is the one that was voted on.

Parts are streamed in chunks of ``rows`` on the workers too. This module imports only what the
tasks need (no scikit-learn, no session state), so a fresh worker process starts at once;
:mod:`pcqr.pipeline.session.query_release` submits the tasks and owns everything after.
"""
from __future__ import annotations

import queue
import threading
from typing import Any, Callable, Generator, Iterator, Sequence

import numpy as np
import pyarrow as pa

from pcqr.pipeline.data.arrow_types import as_float64
from pcqr.pipeline.data.datasets import QUERY_ID, Part, check_features, feature_matrix, id_values, read_chunks
from pcqr.pipeline.budget.overlap import Found, Reach
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.models.votes import Ensemble
from pcqr.pipeline.public_log.answered import column_keys

#: What a task's values are: vote counts ct(1), nothing (a halted session refuses), h_priv's labels.
VOTES, REFUSED_ALL, LABELS = "votes", "refused", "labels"

Values = tuple[np.ndarray, np.ndarray]  # per-query values, row keys


#: The key of the queries' content identity (:func:`content_sum`): public and fixed, since the
#: identity is of public data and must be the same for a session's every run.
CONTENT_SEED = 0x7063717271756572  # "pcqrquer"


def content_sum(columns: Sequence[np.ndarray], ids: np.ndarray, positions: np.ndarray) -> int:
    """The rows' share of the queries' content identity (:mod:`pcqr.pipeline.session.inputs`): the sum
    mod 2^64 of a keyed 64-bit hash of each row's feature values, query id and position in the
    dataset (an int64 id as two exact float64 halves; a position < 2^53 is exact)."""
    bits = np.asarray(ids, dtype=np.int64).view(np.uint64)
    halves = [(bits >> np.uint64(32)).astype(np.float64), (bits & np.uint64(0xFFFFFFFF)).astype(np.float64)]
    keys = column_keys([*columns, *halves, np.asarray(positions, dtype=np.float64)], len(positions), CONTENT_SEED)
    return int(np.sum(keys, dtype=np.uint64))


Checked = tuple[int, int, "int | None", "int | None", "list[Found] | None"]


def check_queries(part: Part, features: Sequence[str], id_column: str | None, rows: int,
                  reach: Reach | None = None) -> Checked:
    """Worker: the validation pass over queries before any answer is released (NaN / inf / null
    features, missing, out-of-range or repeated ids raise, naming the file and column); the part's
    row count, its share of the queries' content identity (:func:`content_sum`) and its smallest and
    largest id (None without ``id_column``: row positions never repeat), for the driver's check
    across parts (:func:`overlapping_groups`, then :func:`part_ids` of those parts only). The ids
    themselves are not kept: held for every part until the pass ends, they were 8 bytes a query
    of the workers' memory (issue 32). With ``reach``, on the same read, what the misuse guard
    needs of the rows (:class:`pcqr.pipeline.budget.overlap.Reach`), chunk by chunk: the file is read
    once for both."""
    return _checked(part, features, id_column, rows, reach)


def check_and_vote(part: Part, features: Sequence[str], id_column: str | None, rows: int, reach: Reach | None,
                   ensemble: Ensemble, seed: int) -> tuple[Checked, Values]:
    """Worker: :func:`check_queries` and :func:`vote_batch` on one read of the part (the first parts of a
    continuing session's stream: pcqr.pipeline.session.query_release.EarlyVotes). The votes are
    private and go to the coordinator only, which releases nothing before the whole pass is done."""
    pieces: list[Values] = []
    checked = _checked(part, features, id_column, rows, reach,
                       lambda table: pieces.append(_chunk_values(table, features, part.file, seed, ensemble.count_ones)))
    return checked, _joined(pieces)


def _checked(part: Part, features: Sequence[str], id_column: str | None, rows: int, reach: Reach | None,
             each: Callable[[pa.Table], None] | None = None) -> Checked:
    """:func:`check_queries`'s pass, calling ``each`` on every chunk once it is checked."""
    columns = list(dict.fromkeys([*features, *([id_column] if id_column else []), *(reach.needed if reach else ())]))
    count, total = 0, 0
    found: list[np.ndarray] = []
    seen: list[Found] = []
    for table in read_chunks(part, columns, rows):
        values = check_features(table, features, part.file)
        positions = np.arange(part.start + count, part.start + count + table.num_rows, dtype=np.int64)
        ids = positions if id_column is None else id_values(table, id_column, part.file).to_numpy()
        if id_column is not None:
            found.append(ids)
        total = (total + content_sum(values, ids, positions)) % 2**64
        count += table.num_rows
        if reach is not None:
            seen.append(reach.in_range(table))
        if each is not None:
            each(table)
    ids = np.sort(np.concatenate(found)) if found else np.zeros(0, np.int64)
    if id_column is not None and (repeated := repeated_id(ids)) is not None:
        raise PcqrError(f"{part.file}: --id-column {id_column!r} repeats query id {repeated}; "
                        "each query needs its own id (the log and --truth join answers by it)")
    return (count, total, (int(ids[0]) if ids.size else None), (int(ids[-1]) if ids.size else None),
            seen if reach is not None else None)


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


def _chunk_values(table: pa.Table, features: Sequence[str], file: str, seed: int, values: Any) -> Values:
    """``values(X)`` of one chunk's feature matrix X, and its rows' keys."""
    X = feature_matrix(table, features, file)
    return values(X), column_keys([X[:, j] for j in range(X.shape[1])], X.shape[0], seed)


def _joined(pieces: Sequence[Values]) -> Values:
    """The chunks' values and keys, concatenated."""
    if not pieces:
        return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.uint64)
    return np.concatenate([v for v, _ in pieces]), np.concatenate([k for _, k in pieces])


def _per_chunk(part: Part, features: Sequence[str], rows: int, seed: int, values: Any) -> Values:
    """``values(X)`` and the row keys of each chunk of the part, concatenated."""
    return _joined([_chunk_values(table, features, part.file, seed, values)
                    for table in read_chunks(part, features, rows)])


def vote_batch(part: Part, features: Sequence[str], ensemble: Ensemble, seed: int, rows: int) -> Values:
    """Worker: the part's private vote counts ct(1) and its row keys."""
    return _per_chunk(part, features, rows, seed, ensemble.count_ones)


def refused_batch(part: Part, features: Sequence[str], seed: int, rows: int) -> Values:
    """Worker: a part of a halted session: no votes are needed (only repeats get answers)."""
    return _per_chunk(part, features, rows, seed, lambda X: np.zeros(X.shape[0], dtype=np.int32))


def model_batch(part: Part, features: Sequence[str], hypothesis: Any, seed: int, rows: int) -> Values:
    """Worker: h_priv's labels on the part (universal mode after the switch: post-processing)."""
    return _per_chunk(part, features, rows, seed, lambda X: np.asarray(hypothesis.predict(X), dtype=np.int8))


def query_chunks(part: Part, features: Sequence[str], id_column: str | None, rows: int,
                 skip: int = 0) -> Iterator[pa.Table]:
    """Driver: the part's queries after its first ``skip`` rows, in tables of ``rows`` rows, each
    with the ids the log records (``--id-column``'s, or the row's position in the dataset)."""
    columns = [*features] + ([id_column] if id_column else [])
    start = part.start + skip
    for table in read_chunks(part, columns, rows, skip):
        if id_column is None:
            ids = pa.array(np.arange(start, start + table.num_rows, dtype=np.int64))
            table = table.append_column(QUERY_ID, ids)
        else:
            table = table.set_column(table.schema.get_field_index(id_column), id_column,
                                     id_values(table, id_column, part.file))
        start += table.num_rows
        yield table


def table_keys(table: pa.Table, features: Sequence[str], seed: int) -> np.ndarray:
    """Driver: the row keys of a batch it read (the same function the workers apply)."""
    return column_keys([as_float64(table.column(name)) for name in features], table.num_rows, seed)


def read_ahead(parts: Sequence[Part], features: Sequence[str], id_column: str | None, rows: int, skip: int,
               seed: int, depth: int = 2) -> Generator[tuple[int, pa.Table, np.ndarray], None, None]:
    """Driver: (part index, batch table, its row keys) for every batch after the stream's first
    ``skip`` rows, in order, read and hashed by a thread up to ``depth`` batches ahead of the
    caller (pyarrow and NumPy release the GIL: the read overlaps the coordinator and the log
    writes). An error in the thread is raised here, at the batch it concerns; the thread stops
    when the caller stops iterating."""
    ahead: queue.Queue[tuple[int, pa.Table, np.ndarray] | BaseException | None] = queue.Queue(depth)
    stop = threading.Event()

    def put(item: tuple[int, pa.Table, np.ndarray] | BaseException | None) -> bool:
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
                for table in query_chunks(part, features, id_column, rows, max(0, skip - part.start)):
                    if not put((i, table, table_keys(table, features, seed))):
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


def check_same_rows(own: np.ndarray, keys: np.ndarray, file: str) -> None:
    """Driver: refuse a batch whose rows (keys ``own``, from the driver's read) are not the ones
    the workers voted on (``keys``)."""
    if not np.array_equal(own, keys):
        raise PcqrError(f"{file}: changed while its queries were being answered (the rows read for the log "
                        "are not the rows voted on); nothing of this batch was released: run the command again")
