"""The answered-queries index: a repeated query gets its logged outcome, at no privacy cost.

Within a session, a query whose feature vector equals one already answered or abstained on
(earlier in the stream: an earlier batch, or earlier in its own batch, which the answer loop
settles itself) gets that outcome again: the logged label, or the logged abstention
(post-processing of a released value: no test, no noise, no budget), logged with ``source =
duplicate`` (issue 47: before, an abstained query asked again was tested again, so 20 copies of
one query could spend all T = 20 instances). Refused queries are not in the index: a session
refuses only once it can test no more queries, so a copy is refused too (or answered by the
after-halt student, whose answers are indexed).

Keys are 64-bit keyed hashes of the feature rows (-0.0 folded into 0.0), computed by the
workers; the key is a secret per-session seed in session.json, so nobody can craft colliding
queries. Each entry is one uint64 packed by the index's :class:`OutcomeLayout` (from the
session's class count c, issue 49): the outcome -- a class 0 .. c - 1, or the abstention, c -- in
the b = max(2, c.bit_length()) lowest bits, the key's upper 64 - b bits above them (b = 2 for two
and three classes, 3 for four to seven, 7 for 100). Two-class sessions keep the original layout bit
for bit: labels 0 and 1, abstained 2 (:data:`ABSTAINED_OUTCOME`), the key's upper 62 bits. The index
compares those upper 64 - b bits: two different queries share an entry with probability about
2^-(64-b) per pair (two classes: 2^-62, for 10^7 answered queries about 1e-5 per session; 100
classes: 2^-57, about 3.5e-4). A collision would hand one query the other's answer -- a wrong
repeated answer, an accuracy error, never a privacy one: the keys are keyed hashes of public query
features, and every answer handed out is already public.

The index is sorted runs of packed (key, outcome) entries, 8 bytes per answered query, merged
geometrically (amortised O(log) per insert). Up to :data:`MEMORY_ENTRIES` entries (4 MiB) live in
the driver's memory; beyond that the runs spill to files in a private folder (mode 0700, in the
session's state folder, removed with the index -- :class:`pcqr.pipeline.data.private_folder.PrivateFolder`
-- or, left by a killed run, when the next run opens the session), merged there the
same way by a streaming merge, and read back in chunks of :data:`CHUNK` entries at each lookup
(only the chunks a needle can be in, found by one fence per chunk held in memory: 8 bytes per 2^16
entries). So the driver's memory stays flat however long the stream (issue 32: 10^8 queries), and
a session under 2^19 (524,288) answered queries never touches the disk. A resumed session rebuilds
it from the public log (:func:`index_from_log`), after verifying the log's hash chain up to the
session's last hash.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Iterator, Sequence

import numpy as np

from pcqr.pipeline.data.private_folder import PrivateFolder, private_file

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.privacy.limits import MAX_CLASSES
from pcqr.pipeline.public_log.batches import PREV_HASH_KEY, batch_files, batch_path, sha256
from pcqr.pipeline.data.parquet_opener import parquet_bytes, read_parquet, schema_of

_MIX1, _MIX2, _GOLDEN = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB), np.uint64(0x9E3779B97F4A7C15)


_S2, _S6, _S27, _S30, _S31 = (np.uint64(v) for v in (2, 6, 27, 30, 31))


def column_keys(columns: Sequence[np.ndarray], rows: int, seed: int) -> np.ndarray:
    """Keyed 64-bit hashes of rows given as finite float columns (equal rows, equal keys): per
    column, h ^= bits + golden + (h << 6) + (h >> 2), then the splitmix64 finaliser; in place,
    one column at a time (no row-major copy, no temporaries per step)."""
    h = np.full(rows, np.uint64(seed % 2**64), dtype=np.uint64)
    step = np.empty(rows, dtype=np.uint64)
    value = np.empty(rows, dtype=np.float64)
    bits = value.view(np.uint64)
    with np.errstate(over="ignore"):
        for column in columns:
            np.add(column, 0.0, out=value)  # -0.0 + 0.0 is 0.0: the two zeros get one key
            np.left_shift(h, _S6, out=step)
            step += bits
            step += _GOLDEN
            step += h >> _S2
            h ^= step
            for shift, multiplier in ((_S30, _MIX1), (_S27, _MIX2), (_S31, None)):
                np.right_shift(h, shift, out=step)
                h ^= step
                if multiplier is not None:
                    h *= multiplier
    return h


def row_keys(X: np.ndarray, seed: int) -> np.ndarray:
    """Keyed 64-bit hashes of the rows of a finite float matrix (equal rows, equal keys)."""
    X = np.asarray(X, dtype=np.float64)
    return column_keys([X[:, j] for j in range(X.shape[1])], X.shape[0], seed)


#: A two-class entry's outcome, in its two lowest bits: the released label 0 or 1, or an abstention
#: (the two-class :class:`OutcomeLayout`'s; an index over c classes: its :attr:`AnsweredIndex.abstained`).
ABSTAINED_OUTCOME = 2
_OUTCOME_BITS = np.uint64(3)  # the two-class layout's outcome mask
_KEY_BITS = ~_OUTCOME_BITS  # a key's upper 62 bits (the two-class layout's key mask)
#: The most entries the index keeps in memory (4 MiB); more spill to disk.
MEMORY_ENTRIES = 2**19
#: Entries per read of a run on disk (512 KiB), and per fence.
CHUNK = 2**16
_ENTRY = np.dtype(np.uint64)


@dataclass(frozen=True)
class OutcomeLayout:
    """How an index over ``classes`` classes packs an outcome beside a key in one uint64 entry: the
    outcome -- a class 0 .. classes - 1, or :attr:`abstained` = ``classes`` -- in the :attr:`bits` =
    max(2, classes.bit_length()) lowest bits (:attr:`outcome_mask`), the key's upper 64 - bits bits
    above them (:attr:`key_mask`). Two and three classes keep 2 bits, four to seven use 3, 100 use 7.
    Two classes are the original layout, bit for bit (abstained 2, masks 3 and ~3: the module's
    :data:`ABSTAINED_OUTCOME`, ``_OUTCOME_BITS`` and ``_KEY_BITS``).

    Two different queries share an entry when their keys agree on the key bits: with b outcome bits,
    with probability about 2^-(64-b) per pair -- a wrong repeated answer, not a privacy matter (the
    keys are keyed hashes of public query features; every answer handed out is public). Outcomes are
    int8 in lookups: at most :data:`pcqr.pipeline.privacy.limits.MAX_CLASSES` (100) classes."""

    classes: int = 2
    bits: int = field(init=False, repr=False, compare=False)
    outcome_mask: np.uint64 = field(init=False, repr=False, compare=False)
    key_mask: np.uint64 = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        classes = self.classes
        if isinstance(classes, bool) or not isinstance(classes, (int, np.integer)) or not 2 <= classes <= MAX_CLASSES:
            raise ValueError(f"an answered-query index has 2 .. {MAX_CLASSES} classes, got {classes!r}")
        classes = int(classes)
        bits = max(2, classes.bit_length())
        object.__setattr__(self, "classes", classes)
        object.__setattr__(self, "bits", bits)
        object.__setattr__(self, "outcome_mask", np.uint64((1 << bits) - 1))
        object.__setattr__(self, "key_mask", ~np.uint64((1 << bits) - 1))

    @property
    def abstained(self) -> int:
        """The abstention's outcome: ``classes`` (2 for two classes, as :data:`ABSTAINED_OUTCOME`)."""
        return self.classes


_TWO_CLASSES = OutcomeLayout()
assert (_TWO_CLASSES.abstained, _TWO_CLASSES.outcome_mask, _TWO_CLASSES.key_mask) == (
    ABSTAINED_OUTCOME, _OUTCOME_BITS, _KEY_BITS)


@lru_cache(maxsize=None)
def _layout(classes: int) -> OutcomeLayout:
    """The layout of ``classes`` classes (one object per class count)."""
    return OutcomeLayout(classes)


def _match(run: np.ndarray, needles: np.ndarray, hits: np.ndarray, labels: np.ndarray,
           layout: OutcomeLayout = _TWO_CLASSES) -> None:
    """Mark the sorted ``needles`` found in the sorted ``run`` (key bits of ``layout`` equal) and take their outcomes."""
    entry = run[np.minimum(np.searchsorted(run, needles), run.shape[0] - 1)]
    hit = ~hits & ((entry & layout.key_mask) == needles)
    hits |= hit
    labels[hit] = (entry[hit] & layout.outcome_mask).astype(np.int8)


class DiskRun:
    """A sorted run in a file: read in chunks of :data:`CHUNK` entries, one fence (its first entry's
    key bits, by the index's ``layout``) per chunk kept in memory."""

    def __init__(self, path: str, size: int, fences: np.ndarray, layout: OutcomeLayout = _TWO_CLASSES) -> None:
        self.path, self.size, self.fences, self.layout = path, size, fences, layout
        self._file = open(path, "rb")  # noqa: SIM115 (closed by close(), when the index goes)

    @classmethod
    def write(cls, path: str, chunks: Iterator[np.ndarray], layout: OutcomeLayout = _TWO_CLASSES) -> DiskRun:
        """The run made of ``chunks`` (sorted, in order, packed by ``layout``), written to a new private file."""
        private_file(path)
        size, fences = 0, []
        with open(path, "wb") as out:
            for chunk in chunks:
                out.write(np.ascontiguousarray(chunk).data.cast("B"))
                # the entries at positions 0, CHUNK, 2 CHUNK, ... (copied: a view would keep the chunk alive)
                fences.append(chunk[(-size) % CHUNK::CHUNK].copy())
                size += chunk.shape[0]
        # a fence is compared with needles (outcomes cleared): an entry with outcome > 0 is above its needle
        return cls(path, size, (np.concatenate(fences) if fences else np.zeros(0, _ENTRY)) & layout.key_mask, layout)

    def chunk(self, number: int, buffer: np.ndarray) -> np.ndarray:
        """Chunk ``number`` of the run, read into ``buffer``."""
        count = min(CHUNK, self.size - number * CHUNK)
        self._file.seek(number * CHUNK * _ENTRY.itemsize)
        self._file.readinto(buffer[:count].data.cast("B"))
        return buffer[:count]

    def chunks(self, buffer: np.ndarray) -> Iterator[np.ndarray]:
        for number in range(self.fences.shape[0]):
            yield self.chunk(number, buffer)

    def lookup(self, needles: np.ndarray, hits: np.ndarray, labels: np.ndarray, buffer: np.ndarray) -> None:
        """:func:`_match` against the chunks that can hold a needle (sorted ``needles``), one at a time.
        Chunk c holds the needles from its fence to the next: found by searching the fences among the
        needles (memory per chunk, not two int64s per needle)."""
        first = np.searchsorted(needles, self.fences, side="left")  # each chunk's first needle
        last = np.append(first[1:], needles.shape[0])
        for number in np.flatnonzero(last > first).tolist():  # (slices are views: marked in place)
            a, b = int(first[number]), int(last[number])
            _match(self.chunk(number, buffer), needles[a:b], hits[a:b], labels[a:b], self.layout)

    def close(self) -> None:
        self._file.close()
        os.unlink(self.path)


def _merged(one: DiskRun, two: DiskRun) -> Iterator[np.ndarray]:
    """The entries of two disk runs in order, a chunk or two at a time (timsort merges two sorted runs)."""
    left, right = np.empty(CHUNK, _ENTRY), np.empty(CHUNK, _ENTRY)
    a, b = one.chunks(left), two.chunks(right)
    x, y = next(a, None), next(b, None)
    while x is not None and y is not None:
        limit = min(x[-1], y[-1])
        i, j = int(np.searchsorted(x, limit, side="right")), int(np.searchsorted(y, limit, side="right"))
        out = np.concatenate((x[:i], y[:j]))
        out.sort(kind="stable")
        yield out
        x, y = x[i:].copy() if i < x.shape[0] else next(a, None), y[j:].copy() if j < y.shape[0] else next(b, None)
    for rest, more in ((x, a), (y, b)):
        while rest is not None:
            yield rest.copy()
            rest = next(more, None)


class AnsweredIndex:
    """Sorted runs of packed entries, one uint64 per answered (or abstained) query, by the index's
    :class:`OutcomeLayout` over ``classes`` classes: the row key's upper 64 - b bits, the outcome (a
    class 0 .. classes - 1, or :attr:`abstained`) in the b lowest (two classes: the upper 62 bits,
    label 0 or 1 or :data:`ABSTAINED_OUTCOME`, as always). Runs are merged geometrically; at most
    :data:`MEMORY_ENTRIES` entries stay in memory (8 bytes each, about twice that while merging), the
    rest in runs on disk (:class:`DiskRun`, in a private folder removed with the index).

    ``classes`` is keyword-only (so the two positional defaults stay ``(memory_entries, spill)``)."""

    def __init__(self, memory_entries: int = MEMORY_ENTRIES, spill: str | None = None, *, classes: int = 2) -> None:
        self.layout = _layout(classes)
        self._runs: list[np.ndarray] = []
        self._disk: list[DiskRun] = []
        self._folder: PrivateFolder | None = None
        self._spill_parent = spill  # where the runs on disk go (a session's state folder), None: $TMPDIR
        self._memory_entries = memory_entries
        self._spilled = 0

    def __len__(self) -> int:
        return sum(run.shape[0] for run in self._runs) + sum(run.size for run in self._disk)

    @property
    def classes(self) -> int:
        """The session's class count c: outcomes are classes 0 .. c - 1 or :attr:`abstained`."""
        return self.layout.classes

    @property
    def abstained(self) -> int:
        """The abstention's outcome in this index: c (2 for two classes, :data:`ABSTAINED_OUTCOME`)."""
        return self.layout.abstained

    @property
    def nbytes(self) -> int:
        """The bytes of the entries in memory."""
        return sum(run.nbytes for run in self._runs)

    @property
    def disk_bytes(self) -> int:
        """The bytes of the entries spilled to disk."""
        return sum(run.size for run in self._disk) * _ENTRY.itemsize

    def lookup(self, keys: np.ndarray, order: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(found, outcome) per key: a class 0 .. c - 1 or :attr:`abstained` (int8); 0 where not found.
        ``order``: :func:`key_order` of ``keys`` over this index's classes, if the caller has it (else
        sorted here)."""
        found = np.zeros(keys.shape[0], dtype=bool)
        label = np.zeros(keys.shape[0], dtype=np.int8)
        if not (self._runs or self._disk) or not keys.shape[0]:
            return found, label
        layout = self.layout
        needles = keys & layout.key_mask
        if order is None:  # sorted needles: the binary searches walk each run in order (2-3x faster)
            order = np.argsort(needles)
        needles = needles[order]
        hits = np.zeros(keys.shape[0], dtype=bool)
        labels = np.zeros(keys.shape[0], dtype=np.int8)
        for run in self._runs:
            _match(run, needles, hits, labels, layout)
        if self._disk:
            buffer = np.empty(CHUNK, _ENTRY)
            for disk in self._disk:
                disk.lookup(needles, hits, labels, buffer)
        found[order], label[order] = hits, labels
        return found, label

    def add(self, keys: np.ndarray, labels: np.ndarray, absent: bool = False) -> None:
        """Insert answered or abstained queries with their outcomes (``labels``: a class 0 .. c - 1 or
        :attr:`abstained`, anything else refused: ValueError; keys already present are ignored; of equal
        keys, the first's).
        ``absent``: the caller has just looked every key up and found none (the answer loop's fresh
        answers), so the lookup is not repeated."""
        if keys.shape[0] == 0:
            return
        key_mask = self.layout.key_mask
        upper = keys & key_mask
        outcomes = _outcomes(labels, self.layout)
        run = np.sort(upper | outcomes)  # ~1 ms per 10^5 keys
        if np.any((run[1:] & key_mask) == (run[:-1] & key_mask)):  # a key twice: keep the first's outcome
            upper, first = np.unique(upper, return_index=True)  # a stable sort: ~10 ms per 10^5 keys
            run = upper | outcomes[first]
        if not absent:
            known, _ = self.lookup(run)  # (lookup compares the key bits only)
            run = run[~known]
        while self._runs and self._runs[-1].shape[0] <= 2 * run.shape[0]:
            run = np.concatenate((self._runs.pop(), run))
            run.sort(kind="stable")  # timsort: two sorted runs are merged in linear time
        if run.shape[0]:
            self._runs.append(run)
        if sum(r.shape[0] for r in self._runs) > self._memory_entries:
            self._spill()

    def _spill(self) -> None:
        """Move the runs in memory to a new run on disk, then merge disk runs geometrically."""
        run = np.concatenate(self._runs)
        run.sort(kind="stable")
        self._runs = []
        self._disk.append(DiskRun.write(self._new_file(), (run[i:i + CHUNK] for i in range(0, run.shape[0], CHUNK)),
                                        self.layout))
        del run
        while len(self._disk) > 1 and self._disk[-2].size <= 2 * self._disk[-1].size:
            two, one = self._disk.pop(), self._disk.pop()
            self._disk.append(DiskRun.write(self._new_file(), _merged(one, two), self.layout))
            one.close()
            two.close()

    def _new_file(self) -> str:
        if self._folder is None:
            self._folder = PrivateFolder(owner=self, parent=self._spill_parent)
        self._spilled += 1
        return self._folder.join(f"run-{self._spilled:06d}.u64")

    def close(self) -> None:
        """Remove the runs on disk (also done when the index is garbage-collected or at exit)."""
        for disk in self._disk:
            disk.close()
        self._disk = []
        if self._folder is not None:
            self._folder.close()


def key_order(keys: np.ndarray, classes: int = 2) -> np.ndarray:
    """The stable order that sorts rows by the bits of their keys an index over ``classes`` classes
    compares (equal keys keep their rows' order): :meth:`AnsweredIndex.lookup` and :func:`origins`
    both take it."""
    return np.argsort(compared(keys, classes), kind="stable")


def origins(keys: np.ndarray, order: np.ndarray | None = None, classes: int = 2) -> np.ndarray:
    """For every row, the position of the first row with the same key, as an index over ``classes``
    classes compares them (itself for a first): one sort (``order``, :func:`key_order` over the same
    classes, if the caller has it)."""
    n = keys.shape[0]
    order = key_order(keys, classes) if order is None else order
    ranked = compared(keys, classes)[order]
    starts = np.ones(n, dtype=bool)
    starts[1:] = ranked[1:] != ranked[:-1]
    if starts.all():
        return np.arange(n)
    origin = np.empty(n, dtype=np.int64)
    origin[order] = order[np.flatnonzero(starts)][np.cumsum(starts) - 1]  # a run's first is its earliest row
    return origin


def compared(keys: np.ndarray, classes: int = 2) -> np.ndarray:
    """The bits of row keys an index over ``classes`` classes compares (its layout's key bits: two rows
    are the same query iff these are equal)."""
    return np.asarray(keys, dtype=np.uint64) & _layout(classes).key_mask


def _outcomes(labels: np.ndarray, layout: OutcomeLayout = _TWO_CLASSES) -> np.ndarray:
    """Outcomes as entry bits, refusing anything but a class 0 .. c - 1 and ``layout``'s abstention."""
    outcomes = np.asarray(labels, dtype=np.int64)
    if outcomes.size and (outcomes.min() < 0 or outcomes.max() > layout.abstained):
        raise ValueError(f"an answered query's outcome is a class 0 .. {layout.classes - 1} "
                         f"or the abstention {layout.abstained}")
    return outcomes.astype(np.uint64)


def index_from_log(log_dir: str, features: Sequence[str], seed: int, batches: int, last_hash: str,
                   spill: str | None = None, classes: int = 2) -> AnsweredIndex:
    """The index of the first ``batches`` batch files of a session's log (answered and abstained rows),
    served only once their hash chain is verified (issue 11: verified before served), over the
    session's ``classes`` c: an answer outside 0 .. c - 1 is refused as tampering, an abstained row
    gets the index's :attr:`AnsweredIndex.abstained`.

    Each file's SHA-256 must be the one the next file records as its predecessor, and the last
    one's the session's ``last_hash`` (which the ledger vouches for: pcqr.pipeline.session.book),
    batch 0 recording none. By the collision resistance of SHA-256, every batch read is then the
    one the session committed. Any difference is refused in one line naming the batch file,
    before any repeat is answered. Each file is read once: its bytes are hashed, then parsed.
    """
    from pcqr.pipeline.data.datasets import feature_matrix

    index = AnsweredIndex(spill=spill, classes=classes)
    allowed = np.arange(classes)
    files = dict(batch_files(log_dir))
    previous = ""
    for number in range(batches):
        path = files.get(number)
        if path is None:
            raise PcqrError(f"{batch_path(log_dir, number)}: missing from the session's log; see pcqr replay")
        data = parquet_bytes(path)
        digest = sha256(data)
        try:
            table = read_parquet(path, [*features, "answer", "status"], data)
        except Exception:  # pyarrow raises several types for a file that is not what we wrote
            raise _tampered(path) from None
        recorded = (table.schema.metadata or {}).get(PREV_HASH_KEY, b"").decode(errors="replace")
        if recorded != previous:
            raise _tampered(_blame(files, number, digest, batches, last_hash))
        previous = digest
        status = table.column("status").to_numpy(zero_copy_only=False)
        kept = (status == "answered") | (status == "abstained")
        if kept.any():
            rows = table.filter(kept)
            X = feature_matrix(rows, features, path)
            answer = rows.column("answer").fill_null(0).to_numpy(zero_copy_only=False)
            if not np.isin(answer, allowed).all():  # not what pcqr writes (a class 0 .. c - 1)
                raise _tampered(path)
            outcome = np.where(status[kept] == "abstained", index.abstained, answer).astype(np.int8)
            index.add(row_keys(X, seed), outcome)
    if previous != last_hash:
        raise _tampered(files.get(batches - 1, log_dir))
    return index


def _blame(files: dict[int, str], number: int, digest: str, batches: int, last_hash: str) -> str:
    """The file to blame when batch ``number`` does not record its predecessor's hash: itself if it
    is not what its successor (or, for the last, the session) vouches for, else its predecessor."""
    if number == 0:
        return files[0]
    vouched = last_hash
    if number + 1 < batches:
        try:
            metadata = schema_of(files[number + 1]).metadata or {}
        except Exception:  # missing or unreadable: it vouches for nothing
            metadata = {}
        vouched = metadata.get(PREV_HASH_KEY, b"").decode(errors="replace")
    return files[number] if vouched != digest else files[number - 1]


def _tampered(path: str) -> PcqrError:
    return PcqrError(f"{path}: altered (its SHA-256 is not the one the session's hash chain records); "
                     "repeats are not served from a tampered log: see pcqr replay")
