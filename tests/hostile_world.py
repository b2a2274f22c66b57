"""The world tests/test_hostile.py runs its cases in: the sandbox, the edits a case makes to it
(undone after), and what a case compares before and after (files, ledger)."""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shlex
import shutil
import sqlite3
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from distributed import LocalCluster

from pcqr.jobs.cli import main, pcqr
from pcqr.pipeline.session.state_lock import LOCK_FILE
from tests.conftest import MECHANICS_PRIVACY, threshold_data, write_parquet

PRIVACY = " ".join([*MECHANICS_PRIVACY, "--queries-max", "100000"])
LEDGER_FILES = ("ledger.sqlite", "ledger.sqlite-wal", "ledger.sqlite-shm", "ledger.sqlite-journal")


# --- the world ---------------------------------------------------------------------------------------


@dataclass
class World:
    """The sandbox's paths (for ``{name}`` in a case's command line) and the checkpoint a case is undone to."""

    root: Path
    paths: dict[str, str] = field(default_factory=dict)
    saved: dict[Path, bytes] = field(default_factory=dict)

    def path(self, name: str) -> Path:
        return Path(self.paths[name])

    def case_file(self, name: str) -> Path:
        """A new input file for one case (under cases/, removed when the case ends)."""
        path = self.root / "cases" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def parquet(self, name: str, columns: dict[str, Any]) -> str:
        """A new Parquet dataset cases/NAME/p.parquet; returns its folder."""
        write_parquet(str(self.case_file(f"{name}/p.parquet")), columns)
        return str(self.root / "cases" / name)

    def text(self, name: str, content: str) -> str:
        path = self.case_file(name)
        path.write_text(content)
        return str(path)

    def tamper(self, path: Path, content: bytes | None) -> None:
        """Replace (None: delete) a file of the world; undone when the case ends."""
        if content is None:
            path.unlink()
        else:
            path.write_bytes(content)

    def edit_json(self, path: Path, edit: Callable[[Any], None]) -> None:
        data = json.loads(path.read_text())
        edit(data)
        self.tamper(path, json.dumps(data).encode())

    def checkpoint(self) -> None:
        """Keep the bytes of the session's state, its log, the outputs and the ledger: a case that
        edits them, or a command that wrongly runs, is undone so the next case sees the same world."""
        keep = [p for p in (self.root / "out").rglob("*") if p.is_file()]
        keep += [self.root / name for name in LEDGER_FILES if (self.root / name).exists()]
        self.saved = {path: path.read_bytes() for path in keep}

    def restore(self) -> None:
        shutil.rmtree(self.root / "cases", ignore_errors=True)
        shutil.rmtree(self.root / "new", ignore_errors=True)
        extra = [p for p in (self.root / "out").rglob("*") if p.is_file() and p not in self.saved]
        extra += [self.root / name for name in LEDGER_FILES if (self.root / name) not in self.saved]
        for path in extra:
            path.unlink(missing_ok=True)
        for path, content in self.saved.items():
            if not path.exists() or path.read_bytes() != content:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(content)


def _queries(rows: int, seed: int) -> dict[str, Any]:
    q = threshold_data(rows, seed=seed)
    return {"query_id": np.arange(rows), **{k: v for k, v in q.items() if k != "label"}}


def _ok(argv: str) -> None:
    code = main(shlex.split(argv))
    assert code == 0, argv


@contextlib.contextmanager
def built_world(root: Path) -> Iterator[World]:
    """The world in ``root``, its cluster running until the block ends."""
    w = World(root)
    private = threshold_data(20_000, seed=1)
    truth = threshold_data(500, seed=2)
    write_parquet(str(root / "data/private/p.parquet"), private, row_group_size=5000)
    queries = _queries(500, 2)
    queries["x0"][:5] = 0.1  # on the concept's cut: near-ties, so the session has abstained (c > 0)
    write_parquet(str(root / "data/queries/p.parquet"), queries)
    write_parquet(str(root / "data/queries2/p.parquet"), _queries(300, 4))  # never answered: no resume note
    write_parquet(str(root / "data/truth/p.parquet"), {"query_id": np.arange(500), "label": truth["label"]})
    write_parquet(str(root / "data/public/p.parquet"), {k: v for k, v in threshold_data(400, seed=3).items() if k != "label"})
    with contextlib.ExitStack() as stack:
        patch = stack.enter_context(pytest.MonkeyPatch.context())
        patch.setenv("PCQR_LEDGER", str(root / "ledger.sqlite"))
        patch.chdir(root)
        cluster = stack.enter_context(LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                                   host="127.0.0.1", protocol="tcp://", dashboard_address=":0"))
        (root / "cluster.yaml").unlink(missing_ok=True)
        cluster_yaml = root / "conf" / "cluster.yaml"
        cluster_yaml.parent.mkdir()
        cluster_yaml.write_text(f"pcqr:\n  cluster:\n    backend: address\n    address: {cluster.scheduler_address}\n")
        w.paths = {name: str(root / rel) for name, rel in [
            ("root", "."), ("private", "data/private"), ("queries", "data/queries"), ("queries2", "data/queries2"),
            ("truth", "data/truth"),
            ("public", "data/public"), ("state", "out/state"), ("log", "out/log"), ("model", "out/model.json"),
            ("table", "out/table.parquet"), ("cluster", "conf/cluster.yaml"), ("ledger", "ledger.sqlite"),
            ("afile", "data/afile"), ("new", "new"), ("guess_state", "out/guess-state")]}
        (root / "data" / "afile").write_text("a file, not a folder\n")
        p = w.paths
        _ok(f"train --private {p['private']} --state {p['state']} --cluster {p['cluster']} {PRIVACY}")
        _ok(f"answer --state {p['state']} --queries {p['queries']} --log {p['log']} --cluster {p['cluster']} "
            "--batch-size 200")  # three batches: an altered first one is seen from the log alone
        _ok(f"train --private {p['private']} --state {root}/other --features x0,x1 --cluster {p['cluster']} "
            + PRIVACY.replace("--subsamples 50", "--subsamples 60"))  # another session: other k, other features
        _ok(f"train --private {p['private']} --state {p['guess_state']} --cluster {p['cluster']} {PRIVACY} "
            "--gate guess")  # a guess-gate session (its public guess spec: refits lagged)
        _ok(f"learn --private {p['private']} --public {p['public']} --features x0 --hypothesis threshold "
            f"--epsilon 1 --out {p['model']} --cluster {p['cluster']}")
        _ok(f"release --private {p['private']} --public {p['public']} --features x0 --hypothesis threshold "
            f"--epsilon 1 --delta 1e-6 --alpha 0.3 --out {p['table']} --cluster {p['cluster']}")
        assert json.loads((root / "out/state/session.json").read_text())["sparse_vector"]["bottoms"] > 0
        yield w


# --- what a case checks ------------------------------------------------------------------------------


def files(root: Path) -> dict[str, str]:
    """Every folder and every file under the sandbox but the ledger, by content (a state's lock file
    by its presence: whoever takes the lock writes its pid there, to be named to a refused process)."""
    found = {}
    for folder, folders, names in os.walk(root):
        for name in folders:
            found[str((Path(folder) / name).relative_to(root))] = "folder"
        for name in names:
            path = Path(folder) / name
            if name == LOCK_FILE:
                found[str(path.relative_to(root))] = "lock"
            elif not path.is_file():  # a case's FIFO, socket or link loop: never read (a FIFO would block)
                found[str(path.relative_to(root))] = "special"
            elif name not in LEDGER_FILES:
                found[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def ledger_rows(path: str) -> dict[str, list[tuple[Any, ...]]]:
    """What the ledger holds that counts: budgets, sessions, and the charges not refunded."""
    if not os.path.exists(path):
        return {}
    queries = {"budgets": "SELECT * FROM budgets ORDER BY identity",
               "charges": "SELECT * FROM charges WHERE refunded IS NULL ORDER BY id",
               "sessions": "SELECT * FROM sessions ORDER BY session_id"}
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        return {name: db.execute(sql).fetchall() for name, sql in queries.items() if name in tables}


class CurrentStderr(logging.Handler):
    """distributed's log records, written to whatever sys.stderr is now (capsys's): a stray warning or
    traceback from the cluster counts as a second line."""

    def emit(self, record: logging.LogRecord) -> None:
        sys.stderr.write(self.format(record) + "\n")


def command_of(argv: list[str]) -> click.Command:
    command: click.Command = pcqr
    for word in argv:
        if not isinstance(command, click.Group) or word not in command.commands:
            break
        command = command.commands[word]
    return command


def with_cluster(argv: list[str], cluster: str) -> list[str]:
    """Every command that takes --cluster gets the world's, unless the case gives its own."""
    if argv[0] in ("run", "submit"):  # the spec says (a job without a cluster refuses --cluster)
        return argv
    takes = any("--cluster" in getattr(p, "opts", ()) for p in command_of(argv).params)
    return [*argv, "--cluster", cluster] if takes and "--cluster" not in argv else argv


# --- edits a case makes to the world ---------------------------------------------------------------------


def private_with(edit: Callable[[dict[str, Any]], None]) -> Callable[[World], None]:
    def mutate(w: World) -> None:
        columns = threshold_data(20_000, seed=1)
        edit(columns)
        w.paths["bad"] = w.parquet("bad", columns)
    return mutate


def queries_with(edit: Callable[[dict[str, Any]], None], rows: int = 50) -> Callable[[World], None]:
    def mutate(w: World) -> None:
        columns = _queries(rows, 9)
        edit(columns)
        w.paths["bad"] = w.parquet("bad", columns)
    return mutate


def spec(text: str) -> Callable[[World], None]:
    def mutate(w: World) -> None:
        w.paths["spec"] = w.text("spec.yaml", text.format(**w.paths))
    return mutate


def cluster_yaml(text: str) -> Callable[[World], None]:
    def mutate(w: World) -> None:
        w.paths["bad_cluster"] = w.text("cluster.yaml", text)
    return mutate


def state_json(edit: Callable[[Any], None]) -> Callable[[World], None]:
    return lambda w: w.edit_json(w.path("state") / "session.json", edit)


def state_file(name: str, content: Callable[[bytes], bytes | None]) -> Callable[[World], None]:
    def mutate(w: World) -> None:
        path = w.path("state") / name
        w.tamper(path, content(path.read_bytes() if path.exists() else b""))
    return mutate


def corrupt_pages(w: World) -> None:
    """The private rows written with page checksums, then a page's values overwritten by other finite
    doubles (0x3F bytes read as 4.8e-4 at any alignment), the footer intact: silently wrong rows
    unless the checksums are verified."""
    path = w.case_file("corrupt/p.parquet")
    pq.write_table(pa.table(threshold_data(20_000, seed=1)), path, row_group_size=5000, write_page_checksum=True)
    column = pq.read_metadata(path).row_group(1).column(1)
    start = (column.dictionary_page_offset or column.data_page_offset) + 64
    data = bytearray(path.read_bytes())
    data[start:start + 512] = b"\x3f" * 512
    path.write_bytes(bytes(data))
    w.paths["bad"] = str(path.parent)


def model_json(edit: Callable[[Any], None]) -> Callable[[World], None]:
    def mutate(w: World) -> None:
        data = json.loads(w.path("model").read_text())
        edit(data)
        w.paths["bad"] = w.text("model.json", json.dumps(data))
    return mutate


def first_log_batch(edit: Callable[[pa.Table], pa.Table]) -> Callable[[World], None]:
    def mutate(w: World) -> None:
        path = sorted(w.path("log").glob("batch-*.parquet"))[0]
        table = pq.read_table(path)
        sink = pa.BufferOutputStream()
        pq.write_table(edit(table).replace_schema_metadata(table.schema.metadata), sink)
        w.tamper(path, sink.getvalue().to_pybytes())
    return mutate


def flip_answers(table: pa.Table) -> pa.Table:
    answers = np.array(table.column("answer").to_pylist(), dtype=object)
    flipped = pa.array([None if a is None else 1 - a for a in answers], type=table.schema.field("answer").type)
    return table.set_column(table.schema.get_field_index("answer"), "answer", flipped)


def set_key(key: str, value: Any) -> Callable[[Any], None]:
    def edit(data: Any) -> None:
        *path, last = key.split(".")
        for part in path:
            data = data[part]
        data[last] = value
    return edit


