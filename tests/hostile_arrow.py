"""Edits for tests/test_hostile.py's ARROW_CASES (issue 27: one way in for Parquet, one table of
Arrow types): columns of every refused Arrow type, duplicate column names and query ids, special
files (FIFO, socket, device, symlink loop) and Parquet files with a hostile footer.

A FIFO case must not hang the run if a regression opens it: the FIFO is made by
:func:`tests.hostile_files.make_special`, whose rescuer opens its other end after 10 s, so a blocked
reader sees end of file and the case fails instead of hanging.
"""
from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tests.conftest import threshold_data
from tests.hostile_files import make_special
from tests.hostile_world import World, _queries

ROWS = 20_000  # the world's private rows


def _texts(n: int) -> list[str]:
    return [f"v{i % 7}" for i in range(n)]


#: A column of each Arrow type the table refuses, n rows long (each survives a Parquet round trip).
REFUSED_TYPES: dict[str, Callable[[int], pa.Array]] = {
    "timestamp": lambda n: pa.array(np.arange(n).astype("datetime64[s]")),
    "timestamp-tz": lambda n: pa.array(np.arange(n, dtype=np.int64), pa.timestamp("ms", tz="UTC")),
    "date32": lambda n: pa.array(np.arange(n, dtype=np.int32), pa.date32()),
    "time64": lambda n: pa.array(np.arange(n, dtype=np.int64), pa.time64("us")),
    "duration": lambda n: pa.array(np.arange(n, dtype=np.int64), pa.duration("s")),
    "string": lambda n: pa.array(_texts(n)),
    "large-string": lambda n: pa.array(_texts(n), pa.large_string()),
    "binary": lambda n: pa.array([b"ab"] * n),
    "fixed-size-binary": lambda n: pa.array([b"ab"] * n, pa.binary(2)),
    "list": lambda n: pa.array([[1.0]] * n),
    "struct": lambda n: pa.array([{"a": 1.0}] * n),
    "map": lambda n: pa.array([[("a", 1.0)]] * n, pa.map_(pa.string(), pa.float64())),
    "null": lambda n: pa.nulls(n),
    "uuid": lambda n: pa.array([uuid.UUID(int=i).bytes for i in range(n)], pa.uuid()),
    "dictionary-of-strings": lambda n: pa.array(_texts(n)).dictionary_encode(),
}


def private_column(name: str, values: Callable[[int], Any]) -> Callable[[World], None]:
    """The world's private rows with one more column ``name``."""
    def mutate(w: World) -> None:
        columns: dict[str, Any] = dict(threshold_data(ROWS, seed=1))
        columns[name] = values(ROWS)
        w.paths["bad"] = w.parquet("bad", columns)
    return mutate


def queries_column(name: str, values: Callable[[int], Any], rows: int = 50) -> Callable[[World], None]:
    """Queries whose column ``name`` (a feature, or query_id) is replaced."""
    def mutate(w: World) -> None:
        columns: dict[str, Any] = dict(_queries(rows, 9))
        columns[name] = values(rows)
        w.paths["bad"] = w.parquet("bad", columns)
    return mutate


def queries_in_two_files(w: World) -> None:
    """Queries in two files, each numbered 0..49: every id repeats across the files."""
    queries_column("query_id", lambda n: np.arange(n))(w)
    folder = Path(w.paths["bad"])
    (folder / "q.parquet").write_bytes((folder / "p.parquet").read_bytes())


def log_reuses_ids(w: World) -> None:
    """The world's session answers queries2 (ids 0..299, other queries) into its log, whose first 500
    queries have ids 0..499: each run's ids are unique, but ids 0..299 now name two queries."""
    from pcqr.jobs.cli import main

    assert main(["answer", "--state", w.paths["state"], "--queries", w.paths["queries2"], "--log", w.paths["log"],
                 "--cluster", w.paths["cluster"]]) == 0


def public_column(name: str, values: Callable[[int], Any]) -> Callable[[World], None]:
    """Public points whose column ``name`` is replaced."""
    def mutate(w: World) -> None:
        columns: dict[str, Any] = {k: v for k, v in threshold_data(400, seed=3).items() if k != "label"}
        columns[name] = values(400)
        w.paths["bad"] = w.parquet("bad", columns)
    return mutate


def truth_column(name: str, values: Callable[[int], Any]) -> Callable[[World], None]:
    """A truth file (query_id, label) whose column ``name`` is replaced."""
    def mutate(w: World) -> None:
        columns: dict[str, Any] = {"query_id": np.arange(500), "label": threshold_data(500, seed=2)["label"]}
        columns[name] = values(500)
        w.paths["bad"] = w.parquet("bad", columns)
    return mutate


def twice_named(source: str, column: str = "x0") -> Callable[[World], None]:
    """The world's ``source`` file (private, queries, public, truth) with a second column named ``column``."""
    def mutate(w: World) -> None:
        table = pq.read_table(os.path.join(w.paths[source], "p.parquet"))
        arrays = [*table.columns, table.column(column if column in table.column_names else 0)]
        path = w.case_file("twice/p.parquet")
        pq.write_table(pa.Table.from_arrays(arrays, names=[*table.column_names, column]), path)
        w.paths["bad"] = str(path.parent)
    return mutate


def special(kind: str, inside: bool = False) -> Callable[[World], None]:
    """``{bad}``: a FIFO, a socket, a symlink loop, /dev/zero (``zero``); ``inside``: a folder holding
    a good Parquet file and that special file named ``q.parquet``."""
    def mutate(w: World) -> None:
        if inside:
            folder = Path(w.parquet("mixed", {"x0": np.zeros(3), "x1": np.zeros(3), "x2": np.zeros(3),
                                              "label": np.zeros(3, np.int8)}))
            target = Path("/dev/zero") if kind == "zero" else folder / "q.parquet"
            if kind == "zero":
                os.symlink(target, folder / "q.parquet")
            else:
                make_special(target, kind)
            w.paths["bad"] = str(folder)
            return
        if kind == "zero":
            w.paths["bad"] = "/dev/zero"
            return
        path = w.case_file(f"special/{kind}.parquet")
        make_special(path, kind)
        w.paths["bad"] = str(path)
    return mutate


def folder_loop(w: World) -> None:
    """A dataset folder holding a link to itself (a symlink loop through folders)."""
    folder = Path(w.parquet("looped", dict(threshold_data(100, seed=1))))
    os.symlink(folder, folder / "again")
    w.paths["bad"] = str(folder)


def raw_file(name: str, content: Callable[[bytes], bytes]) -> Callable[[World], None]:
    """``{bad}``: cases/NAME/p.parquet with bytes made from a small good Parquet file's bytes."""
    def mutate(w: World) -> None:
        sink = pa.BufferOutputStream()
        pq.write_table(pa.table(dict(threshold_data(100, seed=1))), sink)
        path = w.case_file(f"{name}/p.parquet")
        path.write_bytes(content(sink.getvalue().to_pybytes()))
        w.paths["bad"] = str(path.parent)
    return mutate


def declared_footer(size: int) -> Callable[[bytes], bytes]:
    """The file with its footer length (the 4 bytes before the trailing PAR1) replaced by ``size``."""
    return lambda data: data[:-8] + size.to_bytes(4, "little") + b"PAR1"


def padded_footer(data: bytes) -> bytes:
    """A file that really is as long as a footer of 65 MiB it declares (its bytes before the footer
    padded, the declared length covering them): beyond the opener's 64 MiB, refused before parsing."""
    size = 65 * 2**20
    return b"PAR1" + b"\0" * size + size.to_bytes(4, "little") + b"PAR1"


def schema_only(columns: dict[str, pa.DataType]) -> Callable[[World], None]:
    """``{bad}``: a Parquet file with these columns and no row group (or no column at all)."""
    def mutate(w: World) -> None:
        path = w.case_file("schema/p.parquet")
        pq.write_table(pa.schema(columns).empty_table(), path)
        w.paths["bad"] = str(path.parent)
    return mutate
