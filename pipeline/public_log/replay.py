"""Verifying and re-serving a public answered-query log (``pcqr replay``).

Everything here reads the public log only (:mod:`pcqr.pipeline.public_log.batches`): no private
row, no private state, no budget. :func:`verify_log` checks a log directory and
names the first missing, altered or out-of-order batch; :func:`read_answers`
gives its logged answers exactly as they were written.

How a batch is judged. Each batch file ``N`` records the SHA-256 of file
``N - 1``'s bytes, so file ``N - 1`` is vouched for by file ``N``. A failed link
(file ``N`` records a hash that is not file ``N - 1``'s) is blamed, assuming one
fault at a time, on

* file ``N`` when file ``N`` itself is already at fault (unreadable, wrong
  ``batch`` column, foreign provenance...), when its recorded hash is file
  ``N - 1``'s with a few bytes changed (its own chain field was edited), when it
  is the hash of another file of the log (the files were reordered), or when
  the next link fails too (one altered file ``N`` breaks both of its links);
* file ``N - 1`` otherwise: its bytes differ from those file ``N`` vouched for.

A log whose chain is intact can still break its session's budget: the abstentions it holds may not
exceed the cutoff T its provenance states (A_SubSamp halts at T; the gnmax gate's T is m, one per
answer), which is checked from the log alone.

The last file has no successor to vouch for it: an alteration of it, or the
loss of any number of batches after it, cannot be seen from the log alone. The
session's private state records the hash of the last batch it wrote
(``last_hash``); pass it as ``expected_last_hash`` to close that gap.
"""
from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pcqr.pipeline.data import locations
from pcqr.pipeline.data.user_files import MODEL_JSON_LIMIT, parse_json
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.public_log.batches import CLAIM_FILE, DUPLICATE, PREV_HASH_KEY, PROVENANCE_KEY, SPENDING_SOURCES, batch_files, sha256
from pcqr.pipeline.data.parquet_opener import parquet_bytes, parquet_file, read_parquet

ANSWER_COLUMNS = ("query_id", "answer", "status", "source", "batch")
ANSWER_TYPES: dict[str, pa.DataType] = {
    "query_id": pa.int64(),
    "answer": pa.int8(),
    "status": pa.string(),
    "source": pa.string(),
    "batch": pa.int32(),
}
ANSWER_SCHEMA = pa.schema([(name, ANSWER_TYPES[name]) for name in ANSWER_COLUMNS])
STATUSES = ("answered", "abstained", "refused")
# Provenance keys fixed for a whole session (others, e.g. fallback_label or version, may change
# from one `pcqr answer` run of the session to the next).
SESSION_KEYS = (
    "session_id", "mode", "parameters", "epsilon", "delta", "cutoff", "subsamples", "threshold",
    "learner", "features", "private_rows", "seeded", "agnostic_parameters", "universal_parameters", "gate", "guess",
)
_NEAR_BYTES = 4  # a recorded hash this close to the real one was edited in place


@dataclass
class LogReport:
    """The outcome of :func:`verify_log`.

    ``first_bad`` is the lowest batch number with a problem and ``problem`` its
    one-line description (``"batch 3 is missing"``, ``"batch 2 is altered: ..."``,
    ``"batch 1 is out of order: ..."``); ``problems`` lists every problem found,
    in batch order. ``provenance`` is batch 0's (None if unreadable).
    ``last_vouched`` says whether the last batch was checked against an
    expected last hash; ``notes`` are remarks that are not failures.
    """

    log: str
    ok: bool
    batches: int
    queries: int
    first_bad: int | None
    problem: str | None
    provenance: dict[str, Any] | None
    problems: list[tuple[int, str]] = field(default_factory=list)
    last_sha256: str | None = None
    last_vouched: bool = False
    notes: list[str] = field(default_factory=list)
    other_files: list[str] = field(default_factory=list)


@dataclass
class _Batch:
    """What one batch file says about itself."""

    number: int
    path: str
    digest: str
    rows: int = 0
    prev: bytes | None = None
    provenance: dict[str, Any] | None = None
    held: int | None = None  # the value of its batch column, when it has a single one
    abstained: int = 0  # instances spent: rows with status "abstained" or source "flipped" or "gnmax"
    fault: str | None = None  # the first problem found in the file alone


def verify_log(log_dir: str, expected_last_hash: str | None = None) -> LogReport:
    """Check a log directory: contiguity, Parquet, hash chain, batch numbers, provenance.

    Reads the public batch files only. Raises :class:`PcqrError` when
    ``log_dir`` is not a directory; every problem of the log itself is in the
    returned report (``ok`` False).
    """
    if not locations.is_folder(log_dir):
        raise PcqrError(f"{log_dir}: no such log directory")
    files = batch_files(log_dir)
    names = {posixpath.basename(path) for _, path in files}
    other = sorted(name for name in locations.names_in(log_dir) if name not in names and name != CLAIM_FILE)
    problems: list[tuple[int, str]] = []

    # 1. batch numbers contiguous from 0
    numbers = [n for n, _ in files]
    present = set(numbers)
    for n in range(max(numbers, default=-1) + 1):
        if n not in present:
            problems.append((n, f"batch {n} is missing"))
    if not files:
        problems.append((0, "batch 0 is missing: the directory holds no batch files"))

    # 2. each file alone: Parquet, metadata, columns, batch column, content
    batches = {n: _inspect(n, path) for n, path in files}

    # 3. provenance: present (checked above) and the same session throughout
    reference, source = _session_provenance(batches)
    if reference is not None:
        for b in batches.values():
            if b.fault is None and b.provenance is not None:
                differs = _provenance_difference(reference, b.provenance)
                if differs is not None:
                    b.fault = (f"batch {b.number} is altered or from another session: its provenance "
                               f"{differs!r} differs from {source}")
    _diagnose_batch_columns(batches)

    # 4. the last batch against the session's record, if given
    last = max(batches) if batches else None
    last_vouched = False
    if last is not None and expected_last_hash is not None:
        if batches[last].digest == expected_last_hash:
            last_vouched = True
        else:
            known = [n for n, b in batches.items() if b.digest == expected_last_hash]
            if known:
                problems.append((known[0] + 1, (
                    f"batch {known[0] + 1} is not in the session's record: the session's last batch is "
                    f"{known[0]}, batches {known[0] + 1} to {last} were added")))
            elif batches[last].fault is None:
                batches[last].fault = (
                    f"batch {last} is altered, or batches after it are missing: its SHA-256 differs "
                    "from the session's last hash")

    for b in batches.values():
        if b.fault is not None:
            problems.append((b.number, b.fault))

    # 5. the hash chain, blamed as the module docstring says
    problems.extend(_chain_problems(batches))
    problems.extend(_released_model_problems(log_dir, batches))
    problems.extend(_cutoff_problems(reference, batches))

    problems = _first_per_batch(problems)
    first = problems[0] if problems else None
    notes = []
    if last is not None and not last_vouched and expected_last_hash is None:
        notes.append(
            f"batch {last} (the last) is vouched for by no later batch: an alteration of it, or the loss of "
            "batches after it, cannot be seen from the log alone (compare its SHA-256 with the session's "
            "last hash)")
    elif last_vouched:
        notes.append(f"batch {last} (the last) matches the session's last hash")
    batch0 = batches.get(0)
    return LogReport(
        log=log_dir,
        ok=first is None,
        batches=len(files),
        queries=sum(b.rows for b in batches.values()),
        first_bad=first[0] if first else None,
        problem=first[1] if first else None,
        provenance=batch0.provenance if batch0 is not None else None,
        problems=problems,
        last_sha256=batches[last].digest if last is not None else None,
        last_vouched=last_vouched,
        notes=notes,
        other_files=other,
    )


def read_answers(log_dir: str) -> pa.Table:
    """The logged answers, in log order: query_id, answer, status, source, batch.

    Exactly the values and types of the batch files (no schema metadata).
    Verify the log first (:func:`verify_log`): this reads whatever is there.
    """
    tables = [
        read_parquet(path, list(ANSWER_COLUMNS)).replace_schema_metadata(None)
        for _, path in batch_files(log_dir)
    ]
    if not tables:
        return ANSWER_SCHEMA.empty_table()
    return pa.concat_tables(tables)


def read_queries(log_dir: str, features: list[str]) -> Iterable[pa.Table]:
    """The logged queries batch by batch: query_id and the feature columns (public)."""
    for _, path in batch_files(log_dir):
        yield read_parquet(path, ["query_id", *features]).replace_schema_metadata(None)


def status_counts(table: pa.Table) -> dict[str, int]:
    """How many rows of an answers table have each status."""
    status = table.column("status").to_numpy(zero_copy_only=False)
    return {name: int(np.count_nonzero(status == name)) for name in STATUSES}


# ---------------------------------------------------------------------------------------------


def _inspect(number: int, path: str) -> _Batch:
    """Read one batch file and find what is wrong with it on its own, if anything."""
    data = parquet_bytes(path)
    batch = _Batch(number, path, sha256(data))
    if data[:4] != b"PAR1":  # pyarrow checks only the trailing magic
        batch.fault = f"batch {number} is altered: not a Parquet file (no leading PAR1)"
        return batch
    try:
        # page CRCs are checked when the writer stored them (pcqr.pipeline.public_log.batches does not yet)
        parquet = parquet_file(path, data)
        table = parquet.read()
        table.validate(full=True)  # e.g. invalid UTF-8 in a string column
        metadata = parquet.metadata.metadata or {}  # the footer's key-value pairs
        embedded = parquet.schema_arrow.metadata or {}  # pyarrow's copy inside ARROW:schema
    except Exception as exc:  # pyarrow raises several types (ArrowInvalid, OSError, ...)
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        batch.fault = f"batch {number} is altered: not a readable Parquet file ({reason[:120]})"
        return batch
    batch.rows = table.num_rows
    for key in (PREV_HASH_KEY, PROVENANCE_KEY):
        if key in embedded and embedded.get(key) != metadata.get(key):
            batch.fault = f"batch {number} is altered: its two copies of {key.decode()} differ"
            return batch
    batch.prev = metadata.get(PREV_HASH_KEY)
    raw = metadata.get(PROVENANCE_KEY)
    if raw is not None:
        try:
            provenance = parse_json(raw, "provenance")
        except PcqrError:  # not what a writer of ours produces: the batch's content check names it
            provenance = None
        if isinstance(provenance, dict):
            batch.provenance = provenance
    try:
        batch.fault = _content_fault(number, table, batch, raw is not None)
    except (pa.ArrowException, ValueError, TypeError) as exc:  # values no writer of ours produces
        batch.fault = f"batch {number} is altered: unreadable values ({str(exc)[:120]})"
    return batch


def class_names_of(provenance: dict[str, Any] | None) -> list[str] | None:
    """The class names a batch's session was trained with (``--classes low,mid,high``), or None."""
    names = provenance.get("class_names") if isinstance(provenance, dict) else None
    return names if isinstance(names, list) and all(isinstance(n, str) for n in names) else None


def classes_of(provenance: dict[str, Any] | None) -> int:
    """c, the classes a batch's session answers (its parameters' ``classes``; 2 when absent, as every
    session before issue 49 wrote), or 2 for a value that is not a whole number in range (the answer
    check then refuses any index above 1)."""
    from pcqr.pipeline.privacy.limits import MAX_CLASSES

    value = (provenance.get("parameters") or {}).get("classes", 2) if isinstance(provenance, dict) else 2
    return value if isinstance(value, int) and not isinstance(value, bool) and 2 <= value <= MAX_CLASSES else 2


def _content_fault(number: int, table: pa.Table, batch: _Batch, has_provenance: bool) -> str | None:
    """The first thing wrong in a parsed batch file alone (None: nothing)."""
    altered = f"batch {number} is altered"
    if batch.prev is None:
        return f"{altered}: its metadata has no {PREV_HASH_KEY.decode()}"
    if not has_provenance:
        return f"{altered}: its metadata has no {PROVENANCE_KEY.decode()}"
    if batch.provenance is None:
        return f"{altered}: its provenance is not a JSON object"
    if not batch.provenance.get("session_id"):
        return f"{altered}: its provenance has no session_id"
    features = batch.provenance.get("features")
    expected: dict[str, pa.DataType | None] = dict(ANSWER_TYPES)
    if isinstance(features, list):
        expected.update({str(name): None for name in features})
    for name, kind in expected.items():
        if name not in table.column_names:
            return f"{altered}: column {name!r} is missing"
        if kind is not None and table.schema.field(name).type != kind:
            return f"{altered}: column {name!r} is {table.schema.field(name).type}, expected {kind}"
    values = pc.unique(table.column("batch")).to_pylist()
    if len(values) > 1 or None in values:
        return f"{altered}: its batch column holds {sorted(v for v in values if v is not None)[:5]}"
    if values:
        batch.held = int(values[0])
    if table.column("query_id").null_count:
        return f"{altered}: query_id has missing values"
    status = table.column("status").to_numpy(zero_copy_only=False)
    bad = sorted({str(s) for s in status} - set(STATUSES))
    if bad:
        return f"{altered}: its status column holds {bad[0]!r}"
    # instances spent: abstentions, the guess gate's flipped answers, the gnmax gate's answers (its
    # refusals after the halt carry the source gnmax too, and spend nothing)
    source = table.column("source").to_numpy(zero_copy_only=False)
    spending = np.isin(source, SPENDING_SOURCES)
    # an abstention repeated for a copy of an abstained query (source duplicate) spends nothing
    batch.abstained = int(np.count_nonzero((status == "abstained") & (source != DUPLICATE))) + int(
        np.count_nonzero(spending & (status == "answered")))
    answer = table.column("answer")
    known = pc.drop_null(answer).to_numpy()
    classes = classes_of(batch.provenance)
    if np.any((known < 0) | (known >= classes)):
        held = "0, 1" if classes == 2 else f"the class indices 0 .. {classes - 1}"
        return f"{altered}: its answer column holds values other than {held} and null"
    given = answer.is_valid().to_numpy(zero_copy_only=False)
    answered = status == "answered"
    if np.any(answered & ~given):
        return f"{altered}: an answered query has no answer"
    if batch.provenance.get("fallback_label") is None and np.any(~answered & given):
        return f"{altered}: an unanswered query has an answer and the run had no fallback label"
    if table.column("source").null_count:
        return f"{altered}: source has missing values"
    return None


def _session_provenance(batches: dict[int, _Batch]) -> tuple[dict[str, Any] | None, str]:
    """The session's provenance: that of most readable batches (ties: the earliest), and whose."""
    signatures: dict[str, list[int]] = {}
    for n, b in sorted(batches.items()):
        if b.fault is None and b.provenance is not None:
            fixed = {key: b.provenance[key] for key in SESSION_KEYS if key in b.provenance}
            signatures.setdefault(json.dumps(fixed, sort_keys=True, default=str), []).append(n)
    if not signatures:
        return None, ""
    holders = max(signatures.values(), key=lambda ns: (len(ns), -ns[0]))
    provenance = batches[holders[0]].provenance
    if len(holders) == 1:
        return provenance, f"batch {holders[0]}'s"
    return provenance, f"that of batches {holders[0]}, {holders[1]}{', ...' if len(holders) > 2 else ''}"


def _provenance_difference(reference: dict[str, Any], provenance: dict[str, Any]) -> str | None:
    """The first session-wide provenance key on which two batches differ (None: same session)."""
    for key in SESSION_KEYS:
        if key in reference and provenance.get(key) != reference[key]:
            return key
    return None


def _diagnose_batch_columns(batches: dict[int, _Batch]) -> None:
    """A file whose batch column names another batch: reordered, or renamed over a missing one."""
    held = {b.held for b in batches.values() if b.fault is None and b.held is not None}
    for b in batches.values():
        if b.fault is None and b.held is not None and b.held != b.number:
            before = batches.get(b.number - 1)
            chained = b.prev == (before.digest.encode() if before is not None else b"" if b.number == 0 else None)
            if chained and (before is None or before.held == b.number - 1):
                # the file is where the chain puts it, after a file that is in place: its column was changed
                b.fault = f"batch {b.number} is altered: its batch column holds {b.held}"
            elif b.number in held:
                b.fault = (f"batch {b.number} is out of order: its file holds batch {b.held} "
                           "(batch files reordered or renamed)")
            else:
                b.fault = (f"batch {b.number} is missing: the file named batch {b.number} holds batch "
                           f"{b.held} (batch files renamed or copied)")


def _near(recorded: bytes, digest: str) -> bool:
    """A recorded hash that is the real one with a few bytes changed."""
    real = digest.encode()
    return len(recorded) == len(real) and sum(a != b for a, b in zip(recorded, real)) <= _NEAR_BYTES


def _chain_problems(batches: dict[int, _Batch]) -> list[tuple[int, str]]:
    """Problems the hash chain shows that the files alone do not."""
    by_digest = {b.digest: n for n, b in batches.items()}
    problems: list[tuple[int, str]] = []

    def broken(n: int) -> bool:
        """Link n fails between two files that are fine on their own."""
        b, before = batches.get(n), batches.get(n - 1)
        return (b is not None and before is not None and b.fault is None and before.fault is None
                and b.prev != before.digest.encode())

    for n, b in sorted(batches.items()):
        if b.fault is not None or b.prev is None:
            continue  # already reported; its links are explained by it
        if n == 0:
            if b.prev != b"":
                follows = by_digest.get(b.prev.decode(errors="replace"))
                problems.append((0, f"batch 0 is out of order: its file follows batch {follows}'s file "
                                    "(batch files reordered or renamed)" if follows is not None else
                                 "batch 0 is altered, or is not the first batch of its session: it records "
                                 "a previous batch"))
            continue
        if not broken(n):
            continue
        before = batches[n - 1]
        follows = by_digest.get(b.prev.decode(errors="replace"))
        if follows is not None and follows != n - 1:
            problems.append((n, f"batch {n} is out of order: its file follows batch {follows}'s file "
                                "(batch files reordered or renamed)"))
        elif _near(b.prev, before.digest):
            problems.append((n, f"batch {n} is altered: its record of batch {n - 1}'s SHA-256 was changed"))
        elif broken(n + 1):
            problems.append((n, f"batch {n} is altered (or batches {n - 1} and {n} both are): batch {n} records "
                                f"another hash for batch {n - 1}, and batch {n + 1} another hash for it"))
        else:
            problems.append((n - 1, f"batch {n - 1} is altered: its SHA-256 differs from the one batch {n} "
                                    "records"))
    return problems


def _released_model_problems(log_dir: str, batches: dict[int, _Batch]) -> list[tuple[int, str]]:
    """Universal mode: the released model file must be the one the batches it answered name."""
    for n, b in sorted(batches.items()):
        record = (b.provenance or {}).get("released_model")
        if not isinstance(record, dict) or "file" not in record:
            continue
        name = posixpath.basename(str(record["file"]))
        path = locations.join(log_dir, name)
        if not locations.exists(path):
            return [(n, f"batch {n} is answered by the released model {name}, which is missing")]
        if sha256(locations.read_file(path, "the released model", MODEL_JSON_LIMIT)) != record.get("sha256"):
            return [(n, f"{name} is altered: its SHA-256 differs from the one batch {n} records")]
        return []
    return []


def _cutoff_problems(reference: dict[str, Any] | None, batches: dict[int, _Batch]) -> list[tuple[int, str]]:
    """A_SubSamp halts after T abstentions: a log holding more breaks its own provenance's budget
    (e.g. an edited state re-opened a halted session). Public information only: T and the statuses."""
    cutoff = (reference or {}).get("cutoff")
    if not isinstance(cutoff, int) or isinstance(cutoff, bool):
        return []
    total = 0
    for n, b in sorted(batches.items()):
        total += b.abstained
        if total > cutoff:
            return [(n, f"batch {n} exceeds the session's budget: the log holds {total} abstentions (or flipped or gnmax answers) by its end, "
                        f"more than the cutoff T = {cutoff} of its provenance (a halted session re-opened?)")]
    return []


def _first_per_batch(problems: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Problems in batch order, the first found for each batch only."""
    seen: dict[int, str] = {}
    for n, message in problems:
        seen.setdefault(n, message)
    return sorted(seen.items())
