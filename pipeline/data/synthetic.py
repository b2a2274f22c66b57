"""Synthetic classification data for the demo, the tests and the benchmarks.

Features are i.i.d. standard normal (``x0..x{D-1}``, float64). The hidden concept
comes from the seed: ``threshold`` labels 1 iff ``x0 > t``, ``halfspace`` 1 iff
``<w, x> > b`` (``w`` a random unit vector); ``xor`` 1 iff exactly one of ``x0``, ``x1`` is
positive (issue 13's nonlinear task: no linear model beats 1/2, a depth-2 tree is exact); ``corner``
1 iff ``x0 > a`` and ``x1 > b`` (issue 29's imbalanced nonlinear task: a and b are set from the seed so
that a share ``positive_rate`` of the rows, 10% by default, is positive before any label noise); ``point``
makes ``x0`` an integer, floor(100 z) for z standard normal, and labels 1 iff ``x0 == j`` (j a seeded
integer in [-50, 50]: Beimel-Nissim-Stemmer's point functions, issue 14). ``agnostic`` data
(queries' true labels too) flips each label independently with probability ``noise``.

Rows are cut into fixed blocks (:func:`block_rows`); block ``k`` of stream ``s``
draws from ``SeedSequence(seed).spawn(..)[s].spawn(..)[k]`` (built from its spawn
key), so the data depend only on the seed and sizes, never on ``rows_per_file`` or
on which worker writes what. One Dask task writes each file, one block (= one row
group) at a time, so memory is one block per task whatever the number of rows.
"""
from __future__ import annotations

import json
import math
import re
import shutil
import os
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from statistics import NormalDist
from typing import Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from distributed import Client, as_completed

from pcqr.pipeline.data import locations
from pcqr.pipeline.data.atomic import write_atomic
from pcqr.pipeline.data.outputs import Named, Output, check_outputs
from pcqr.pipeline.data.user_files import parse_json
from pcqr.pipeline.options import MAX_CLASSES
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.data.parquet_opener import schema_of

KINDS = ("realizable", "agnostic")
CONCEPTS = ("threshold", "halfspace", "xor", "corner", "point")
#: The corner concept's share of positive rows (noise-free labels) unless --positive-rate says otherwise.
DEFAULT_POSITIVE_RATE = 0.1
#: Concepts on x0 and x1 (they need --features >= 2).
TWO_FEATURE_CONCEPTS = ("xor", "corner")
#: Concepts whose x0 may be an integer (--integer-scale): Beimel-Nissim-Stemmer's point and threshold learners.
INTEGER_CONCEPTS = ("point", "threshold")
#: The point concept's x0 is floor(POINT_SCALE z), z standard normal (--integer-scale changes it).
POINT_SCALE = 100.0
DATASETS = ("private", "queries", "truth")
DEFAULT_NOISE = 0.1
DEFAULT_ROWS_PER_FILE = 1_000_000
BLOCK_ROWS = 125_000  # unit of randomness and parquet row-group size (fewer if many features)
BLOCK_VALUES = 1 << 23  # at most 64 MiB of features per block
MAX_FILES = 100_000
CONCEPT_KEY = "pcqr.concept"
SYNTHETIC_KEY = "pcqr.synthetic"
_STREAM_IDS = {"private": 0, "queries": 1, "concept": 2}
_OURS = re.compile(r"part-\d+\.parquet|\.part-\d+\.parquet\.tmp-[0-9a-f]+")  # our files, temps


@dataclass(frozen=True)
class Concept:
    """Label 1 iff score(x) > bias; score is x0 (threshold) or <weights, x> (halfspace); xor: 1 iff
    (x0 > 0) != (x1 > 0) (bias 0, no weights); corner: 1 iff x0 > cuts[0] and x1 > cuts[1] (bias 0);
    point: 1 iff x0 == bias (an integer). Over c > 2 classes (halfspace only): the class
    argmax_j <w_j, x> - b_j, the c unit vectors w_j one after another in ``weights``, b_j in ``cuts``."""
    kind: str
    bias: float
    weights: tuple[float, ...] = ()
    cuts: tuple[float, ...] = ()
    classes: int = 2

    def labels(self, x: np.ndarray) -> np.ndarray:
        """Noise-free int8 labels of the rows of ``x`` (shape rows x features)."""
        if self.classes > 2:
            scores = x @ np.asarray(self.weights).reshape(self.classes, -1).T - np.asarray(self.cuts)
            return np.argmax(scores, axis=1).astype(np.int8)
        if self.kind == "xor":
            return ((x[:, 0] > 0) != (x[:, 1] > 0)).astype(np.int8)
        if self.kind == "corner":
            return ((x[:, 0] > self.cuts[0]) & (x[:, 1] > self.cuts[1])).astype(np.int8)
        if self.kind == "point":
            return (x[:, 0] == self.bias).astype(np.int8)
        score = x[:, 0] if self.kind == "threshold" else x @ np.asarray(self.weights)
        return (score > self.bias).astype(np.int8)

    def to_json(self) -> str:
        """The public description stored under :data:`CONCEPT_KEY`."""
        if self.classes > 2:
            return json.dumps({"kind": "halfspace", "classes": self.classes, "weights": list(self.weights),
                               "biases": list(self.cuts)}, sort_keys=True)
        if self.kind == "threshold":
            body: dict[str, object] = {"kind": "threshold", "feature": "x0", "threshold": self.bias}
        elif self.kind == "xor":
            body = {"kind": "xor", "features": ["x0", "x1"]}
        elif self.kind == "corner":
            body = {"kind": "corner", "features": ["x0", "x1"], "cuts": list(self.cuts)}
        elif self.kind == "point":
            body = {"kind": "point", "feature": "x0", "value": self.bias}
        else:
            body = {"kind": "halfspace", "weights": list(self.weights), "bias": self.bias}
        return json.dumps(body, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> Concept:
        """Inverse of :meth:`to_json` (floats round-trip exactly)."""
        body = parse_json(text, f"the generated data's {CONCEPT_KEY}")
        if body.get("classes", 2) > 2:
            return cls("halfspace", 0.0, tuple(float(w) for w in body["weights"]),
                       tuple(float(b) for b in body["biases"]), int(body["classes"]))
        if body["kind"] == "threshold":
            return cls("threshold", float(body["threshold"]))
        if body["kind"] == "xor":
            return cls("xor", 0.0)
        if body["kind"] == "corner":
            return cls("corner", 0.0, cuts=tuple(float(c) for c in body["cuts"]))
        if body["kind"] == "point":
            return cls("point", float(body["value"]))
        return cls("halfspace", float(body["bias"]), tuple(float(w) for w in body["weights"]))


@dataclass(frozen=True)
class DatasetSpec:
    """Validated parameters of one synthetic dataset (see :func:`make_spec`)."""
    kind: str
    concept: str
    rows: int
    features: int
    queries: int
    seed: int
    noise: float
    rows_per_file: int = DEFAULT_ROWS_PER_FILE
    integer_scale: float | None = None  # x0 = floor(S z) (the point concept: POINT_SCALE when None)
    positive_rate: float | None = None  # the corner concept's (DEFAULT_POSITIVE_RATE); None for the others
    classes: int = 2  # c: more than two with the halfspace concept only (the argmax of c linear scores)


@dataclass(frozen=True)
class Part:
    """One task: rows [start, stop) of a stream, written to ``paths`` (queries: query + truth)."""
    stream: str
    start: int
    stop: int
    paths: tuple[str, ...]


def make_spec(kind: str, concept: str, rows: int, features: int, queries: int, seed: int,
              noise: float | None = None,
              rows_per_file: int = DEFAULT_ROWS_PER_FILE, integer_scale: float | None = None,
              positive_rate: float | None = None, classes: int = 2) -> DatasetSpec:
    """Check the options (PcqrError naming the option) and fill in the default noise."""
    if isinstance(classes, bool) or not isinstance(classes, int) or not 2 <= classes <= MAX_CLASSES:
        raise PcqrError(f"--classes: must be a whole number of classes in [2, {MAX_CLASSES}], got {classes!r}")
    if classes > 2 and concept != "halfspace":
        raise PcqrError(f"--classes {classes}: the {concept} concept has two labels; more classes need --concept "
                        "halfspace (the argmax of c linear scores)")
    if kind not in KINDS:
        raise PcqrError(f"--kind: expected one of {', '.join(KINDS)}, got {kind!r}")
    if concept not in CONCEPTS:
        raise PcqrError(f"--concept: expected one of {', '.join(CONCEPTS)}, got {concept!r}")
    for option, value, least in (("--rows", rows, 1), ("--features", features, 1),
                                 ("--queries", queries, 0), ("--seed", seed, 0),
                                 ("--rows-per-file", rows_per_file, 1)):
        if value < least:
            raise PcqrError(f"{option}: must be at least {least}, got {value}")
    if concept in TWO_FEATURE_CONCEPTS and features < 2:
        raise PcqrError(f"--features: the {concept} concept needs at least 2 (x0 and x1), got {features}")
    if positive_rate is not None and concept != "corner":
        raise PcqrError(f"--positive-rate: only the corner concept has one (got --concept {concept})")
    if concept == "corner" and positive_rate is None:
        positive_rate = DEFAULT_POSITIVE_RATE
    if positive_rate is not None and not 0 < positive_rate < 1:
        raise PcqrError(f"--positive-rate: must be in (0, 1), got {positive_rate}")
    if noise is None:
        noise = DEFAULT_NOISE if kind == "agnostic" else 0.0
    if kind == "realizable" and noise != 0:
        raise PcqrError(f"--noise: realizable data has no label noise (got {noise}); "
                        "use --kind agnostic for noisy labels")
    if not 0 <= noise < 0.5:
        raise PcqrError(f"--noise: must be in [0, 0.5), got {noise}")
    if math.ceil(max(rows, queries) / rows_per_file) > MAX_FILES:
        raise PcqrError(f"--rows-per-file: {rows_per_file} would write more than {MAX_FILES} "
                        "files per directory; raise it")
    if integer_scale is not None and concept not in INTEGER_CONCEPTS:
        raise PcqrError(f"--integer-scale: only the {' and '.join(INTEGER_CONCEPTS)} concepts can have an integer x0 "
                        f"(got --concept {concept})")
    if integer_scale is None and concept == "point":
        integer_scale = POINT_SCALE
    if integer_scale is not None and not (math.isfinite(integer_scale) and 0 < integer_scale <= 2**40):
        raise PcqrError(f"--integer-scale: must be in (0, 2^40], got {integer_scale}")
    scale = None if integer_scale is None else float(integer_scale)
    rate = None if positive_rate is None else float(positive_rate)
    return DatasetSpec(kind, concept, rows, features, queries, seed, float(noise), rows_per_file, scale, rate, classes)


def concept_from_seed(concept: str, features: int, seed: int,
                      positive_rate: float = DEFAULT_POSITIVE_RATE, classes: int = 2) -> Concept:
    """The hidden concept for this seed: t, b ~ U(-1, 1), w uniform on the unit sphere, the point j
    uniform on the integers of [-50, 50]; xor has none. corner: P(x0 > a) = r^u with u ~ U(0.3, 0.7)
    and P(x1 > b) = r^(1 - u), so that P(x0 > a, x1 > b) = r (= ``positive_rate``: x0, x1 are
    independent standard normals). Over c > 2 classes (halfspace): c directions w_j uniform on the
    unit sphere and offsets b_j ~ U(-0.25, 0.25), the class argmax_j <w_j, x> - b_j."""
    if classes > 2:
        rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(_STREAM_IDS["concept"], classes)))
        w = rng.standard_normal((classes, features))
        w /= np.linalg.norm(w, axis=1, keepdims=True)
        offsets = rng.uniform(-0.25, 0.25, classes)
        return Concept("halfspace", 0.0, tuple(float(v) for v in w.ravel()), tuple(float(b) for b in offsets), classes)
    if concept == "xor":
        return Concept("xor", 0.0)
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(_STREAM_IDS["concept"],)))
    if concept == "corner":
        share = positive_rate ** rng.uniform(0.3, 0.7)
        return Concept("corner", 0.0, cuts=tuple(NormalDist().inv_cdf(1 - p) for p in (share, positive_rate / share)))
    if concept == "point":
        return Concept("point", float(rng.integers(-50, 51)))
    if concept == "threshold":
        return Concept("threshold", float(rng.uniform(-1.0, 1.0)))
    w = rng.standard_normal(features)
    w /= np.linalg.norm(w)
    return Concept("halfspace", float(rng.uniform(-1.0, 1.0)), tuple(float(v) for v in w))


def block_seed(seed: int, stream: str, block: int) -> np.random.SeedSequence:
    """The seed of block ``block`` of ``stream`` ("private" or "queries")."""
    return np.random.SeedSequence(seed, spawn_key=(_STREAM_IDS[stream], block))


def make_chunk(kind: str, concept: Concept, rows: int, features: int, noise: float,
               seed_seq: np.random.SeedSequence, integer_scale: float | None = None) -> pa.Table:
    """``rows`` rows (columns x0.., label) drawn from ``seed_seq``; pure and deterministic.

    Features and label flips use separate child streams, so the features do not
    depend on ``kind`` or ``noise`` and fewer rows give a prefix of more rows.
    """
    if kind == "realizable" and noise != 0:
        raise ValueError("realizable data has no label noise")
    x_seed, flip_seed = (np.random.SeedSequence(seed_seq.entropy,
                                                spawn_key=(*seed_seq.spawn_key, i)) for i in (0, 1))
    x = np.random.default_rng(x_seed).standard_normal((rows, features))
    if concept.kind == "point" or integer_scale is not None:  # the concept then labels the integer x0
        x[:, 0] = np.floor((POINT_SCALE if integer_scale is None else integer_scale) * x[:, 0])
    labels = concept.labels(x)
    if kind == "agnostic" and noise > 0:
        flip_rng = np.random.default_rng(flip_seed)
        flips = flip_rng.random(rows) < noise
        if concept.classes == 2:
            labels ^= flips.astype(np.int8)
        else:  # a flipped label is one of the other c - 1 classes, uniformly
            moved = (labels + flip_rng.integers(1, concept.classes, rows)) % concept.classes
            labels = np.where(flips, moved, labels).astype(np.int8)
    columns = {f"x{j}": np.ascontiguousarray(x[:, j]) for j in range(features)}
    return pa.table({**columns, "label": labels})


def _schema(spec: DatasetSpec, concept: Concept, dataset: str) -> pa.Schema:
    features = [pa.field(f"x{j}", pa.float64()) for j in range(spec.features)]
    label, query_id = pa.field("label", pa.int8()), pa.field("query_id", pa.int64())
    fields = {"private": [*features, label], "queries": [query_id, *features],
              "truth": [query_id, label]}[dataset]
    info = {"kind": spec.kind, "noise": spec.noise, "seed": spec.seed, "concept": spec.concept}
    if spec.integer_scale is not None and not (spec.concept == "point" and spec.integer_scale == POINT_SCALE):
        info["integer_scale"] = spec.integer_scale
    if spec.positive_rate is not None:
        info["positive_rate"] = spec.positive_rate
    if spec.classes > 2:
        info["classes"] = spec.classes
    metadata = {SYNTHETIC_KEY: json.dumps(info, sort_keys=True)}
    if dataset == "private":
        metadata[CONCEPT_KEY] = concept.to_json()
    return pa.schema(fields, metadata=metadata)


def plan_parts(spec: DatasetSpec, out: str) -> list[Part]:
    """The files to write, named so that sorting by name gives row (query) order."""
    parts = []
    for stream, total, dirs in (("private", spec.rows, ("private",)),
                                ("queries", spec.queries, ("queries", "truth"))):
        starts = range(0, total, spec.rows_per_file) or range(1)  # 0 queries: one empty file
        width = max(5, len(str(len(starts) - 1)))
        for i, start in enumerate(starts):
            name = f"part-{i:0{width}d}.parquet"
            stop = min(start + spec.rows_per_file, total)
            parts.append(Part(stream, start, stop, tuple(locations.join(locations.join(out, d), name) for d in dirs)))
    return parts


def block_rows(features: int) -> int:
    """Rows per block: :data:`BLOCK_ROWS`, halved while a block holds > BLOCK_VALUES floats."""
    rows = BLOCK_ROWS
    while rows * features > BLOCK_VALUES and rows > 1024:
        rows //= 2
    return rows


def iter_rows(spec: DatasetSpec, concept: Concept, stream: str, start: int,
              stop: int) -> Iterator[tuple[int, pa.Table]]:
    """(first row index, rows) for rows [start, stop) of ``stream``, one block at a time."""
    total, size = spec.rows if stream == "private" else spec.queries, block_rows(spec.features)
    for block in range(start // size, -(-stop // size)):
        first = block * size
        table = make_chunk(spec.kind, concept, min(size, total - first), spec.features,
                           spec.noise, block_seed(spec.seed, stream, block), spec.integer_scale)
        lo, hi = max(start, first) - first, min(stop, first + table.num_rows) - first
        yield first + lo, table.slice(lo, hi - lo)


@contextmanager
def _atomic_writer(path: str, schema: pa.Schema) -> Iterator[Callable[[dict], None]]:
    """Yield ``write(columns)``, appending a row group to a hidden temp renamed on success; at an
    ``s3://`` location, to a buffer in memory put as one object on success (no local copy)."""
    if locations.is_uri(path):
        sink = pa.BufferOutputStream()
        with pq.ParquetWriter(sink, schema, write_page_checksum=True) as writer:
            yield lambda columns: writer.write_table(pa.table(columns, schema=schema), row_group_size=BLOCK_ROWS)
        write_atomic(path, sink.getvalue().to_pybytes())
        return
    directory, name = os.path.split(path)
    tmp = os.path.join(directory, f".{name}.tmp-{uuid.uuid4().hex}")
    try:
        with pq.ParquetWriter(tmp, schema, write_page_checksum=True) as writer:
            yield lambda columns: writer.write_table(pa.table(columns, schema=schema),
                                                     row_group_size=BLOCK_ROWS)  # one per block
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write_part(part: Part, spec: DatasetSpec, concept: Concept) -> int:
    """Write one part (a Dask task on a worker); returns the number of rows written."""
    if part.stream == "private":
        with _atomic_writer(part.paths[0], _schema(spec, concept, "private")) as write:
            for _, table in iter_rows(spec, concept, "private", part.start, part.stop):
                write(dict(zip(table.column_names, table.columns)))
        return part.stop - part.start
    with _atomic_writer(part.paths[0], _schema(spec, concept, "queries")) as queries, \
            _atomic_writer(part.paths[1], _schema(spec, concept, "truth")) as truth:
        for first, table in iter_rows(spec, concept, "queries", part.start, part.stop):
            ids = pa.array(np.arange(first, first + table.num_rows, dtype=np.int64))
            features = {name: table[name] for name in table.column_names if name != "label"}
            queries({"query_id": ids, **features})
            truth({"query_id": ids, "label": table["label"]})
    return part.stop - part.start


def check_out(out: str, overwrite: bool, inputs: Sequence[Named] = ()) -> None:
    """The outputs, ``out``'s private/queries/truth folders, through the one rule
    (:func:`pcqr.pipeline.data.outputs.check_outputs`): not holding or inside one of ``inputs``, writable
    (at an ``s3://`` location: a bucket pcqr can write), and empty unless ``overwrite``."""
    check_outputs([Output("--out", locations.join(out, d), folder=True) for d in DATASETS], inputs, overwrite)


def _first_missing(path: str) -> str | None:
    """The outermost folder of ``path`` that does not exist yet (None: ``path`` exists)."""
    missing = None
    while not os.path.lexists(path):
        missing, parent = path, os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return missing


def _remove_stale(out: str, parts: list[Part]) -> None:
    keep = {path for part in parts for path in part.paths}
    for directory in (locations.join(out, d) for d in DATASETS):
        for name in filter(_OURS.fullmatch, locations.names_in(directory)):
            if locations.join(directory, name) not in keep:
                locations.remove(locations.join(directory, name))


def _remove_written(parts: list[Part]) -> None:
    """After a failed run into object storage: remove the objects this run may have put."""
    for part in parts:
        for path in part.paths:
            locations.remove(path)


def write_dataset(spec: DatasetSpec, out: str, client: Client, overwrite: bool = False,
                  on_done: Callable[[int], None] | None = None) -> dict[str, object]:
    """Write the dataset under ``out`` with one task per part on ``client``; returns a summary.

    ``on_done(1)`` is called as each part completes. With ``overwrite``, files
    from an earlier run that this run did not rewrite are removed at the end
    (only ``part-*.parquet`` and our temp files; anything else is left alone).
    """
    out = locations.absolute(out)
    check_out(out, overwrite)
    parts, futures = plan_parts(spec, out), []
    remote = locations.is_uri(out)
    made = None if remote else _first_missing(out)  # every folder from here down is this run's: removed if it fails
    try:
        for dataset in DATASETS if not remote else ():
            os.makedirs(os.path.join(out, dataset), exist_ok=True)
        concept = concept_from_seed(spec.concept, spec.features, spec.seed,
                                    spec.positive_rate or DEFAULT_POSITIVE_RATE, spec.classes)
        futures = client.map(write_part, parts, spec=spec, concept=concept, pure=False)
        for future in as_completed(futures):
            future.result()
            (on_done or (lambda _: None))(1)
    except BaseException as error:
        client.cancel(futures)
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)
        if remote and not overwrite:
            _remove_written(parts)
        if isinstance(error, OSError):
            raise PcqrError(f"--out: cannot write under {out}: {error}") from None
        raise
    if overwrite:
        _remove_stale(out, parts)
    return {"out": out, "kind": spec.kind, "concept": spec.concept, "rows": spec.rows,
            "features": spec.features, "queries": spec.queries, "noise": spec.noise,
            **({} if spec.positive_rate is None else {"positive_rate": spec.positive_rate}),
            "seed": spec.seed, "rows_per_file": spec.rows_per_file,
            "files": sum(len(part.paths) for part in parts)}


def read_concept(path: str) -> Concept:
    """The hidden concept recorded in a private part file's schema metadata."""
    metadata = schema_of(path).metadata or {}
    if CONCEPT_KEY.encode() not in metadata:
        raise PcqrError(f"{path}: no {CONCEPT_KEY} metadata; not written by pcqr generate")
    return Concept.from_json(metadata[CONCEPT_KEY.encode()])
