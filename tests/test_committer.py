"""The answer loop's committer thread (pcqr.pipeline.session.committer): batches committed in order on
the hash chain, byte for byte what committing them one after the other in the loop wrote; a failed
commit stops every later one and reaches the coordinator; closing commits what was handed over."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import pcqr.pipeline.session.committer as committer_module
from pcqr.pipeline.public_log.batches import batch_files, encode_batch, sha256
from pcqr.pipeline.session.committer import DEPTH, Committer, Handover


class Book:
    """The ledger row: records each commit's (batch count, hash), refuses the ``refuse``-th."""

    def __init__(self, refuse: int | None = None) -> None:
        self.commits: list[tuple[int, str]] = []
        self.refuse = refuse

    def commit(self, session: Any) -> None:
        if self.refuse is not None and session.next_batch == self.refuse + 1:
            raise RuntimeError(f"the ledger refuses batch {self.refuse}")
        self.commits.append((session.next_batch, session.last_hash))


def handovers(count: int) -> list[Handover]:
    out = []
    for n in range(count):
        log = pa.table({"query_id": np.arange(n * 10, n * 10 + 10), "x0": np.linspace(0, 1, 10) + n})
        out.append(Handover(log, {"session_id": "s", "batch": n}, SimpleNamespace(next_batch=n + 1, last_hash="")))
    return out


@pytest.fixture
def saved(monkeypatch) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    monkeypatch.setattr(committer_module, "save_session",
                        lambda state_dir, session: found.append((session.next_batch, session.last_hash)))
    return found


def test_batches_are_committed_in_order_on_the_hash_chain(tmp_path, saved) -> None:
    book, items = Book(), handovers(7)
    committer = Committer(str(tmp_path / "state"), str(tmp_path / "log"), book, "")  # type: ignore[arg-type]
    for item in items:
        committer.put(item)
    committer.drain()
    committer.close()
    prev, hashes, written = "", [], []
    for item in items:  # what the loop wrote when it committed each batch itself
        written.append(encode_batch(item.log, item.provenance, prev))
        prev = sha256(written[-1])
        hashes.append(prev)
    assert book.commits == saved == [(n + 1, h) for n, h in enumerate(hashes)]
    assert [open(path, "rb").read() for _, path in batch_files(str(tmp_path / "log"))] == written
    assert committer.last_hash == hashes[-1]
    assert not list((tmp_path / "state" / "pending").glob("*.parquet"))  # every pending copy published


def test_a_failed_commit_stops_every_later_one_and_reaches_the_coordinator(tmp_path, saved) -> None:
    committer = Committer(str(tmp_path / "state"), str(tmp_path / "log"), Book(refuse=2), "")  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="refuses batch 2"):
        for item in handovers(3 + DEPTH + 5):  # the coordinator goes on handing over until it hears of it
            committer.put(item)
        committer.drain()
    committer.close()
    assert [n for n, _ in saved] == [1, 2]
    assert [n for n, _ in batch_files(str(tmp_path / "log"))] == [0, 1]


def test_closing_commits_what_was_handed_over(tmp_path, saved) -> None:
    """A loop stopped by an error of its own (or an interrupt) still commits the batches it handed over."""
    committer = Committer(str(tmp_path / "state"), str(tmp_path / "log"), Book(), "")  # type: ignore[arg-type]
    for item in handovers(DEPTH):
        committer.put(item)
    committer.close()
    assert [n for n, _ in saved] == list(range(1, DEPTH + 1))
    assert len(batch_files(str(tmp_path / "log"))) == DEPTH


PROBE = """
import os, pyarrow as pa
from pcqr.pipeline.data.allocators import prefer_system_pool
prefer_system_pool()
print(pa.default_memory_pool().backend_name, os.environ["ARROW_DEFAULT_MEMORY_POOL"])
"""


@pytest.mark.parametrize("chosen, expected", [(None, "system system"), ("jemalloc", "jemalloc jemalloc")])
def test_pcqrs_processes_use_the_system_allocator_unless_the_user_chose_one(chosen, expected) -> None:
    """pcqr.pipeline.data.allocators: the pcqr script's Arrow pool, inherited by its local worker
    processes through the environment; a pool the user named is kept."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    if chosen:
        env["ARROW_DEFAULT_MEMORY_POOL"] = chosen
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=60)
    assert done.stdout.strip() == expected, done.stderr


def test_the_heap_trim_is_found_without_starting_a_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """trim_free_memory's malloc_trim comes from the symbols already loaded: looking it up must not
    fork the driver (ctypes.util.find_library runs ``ldconfig -p`` in a child process)."""
    import os
    import platform
    import subprocess

    from pcqr.pipeline.data import allocators

    def no_child(*args, **kwargs):
        raise AssertionError(f"a child process was started: {args}")

    monkeypatch.setattr(subprocess, "Popen", no_child)
    monkeypatch.setattr(os, "fork", no_child)
    allocators._malloc_trim.cache_clear()
    try:
        trim = allocators._malloc_trim()
        allocators.trim_free_memory()
    finally:
        allocators._malloc_trim.cache_clear()
    if platform.libc_ver()[0] == "glibc":
        assert callable(trim)
