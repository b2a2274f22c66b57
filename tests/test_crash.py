"""Crash safety of the answer loop (pipeline/session/commit.py): ``pcqr answer`` is killed with SIGKILL at
20 random moments of a long query stream and resumed each time (each run forked from a process that
has imported pcqr: tests/fault_injection.py's PreloadedCli; the last one a new process). The same, at
6 moments, with the log in a bucket of a real S3 server (issue 32: batches put once, never replaced).

After every kill: no half-written Parquet file is visible in the log; every published batch file
is byte-identical to what it was when first seen (so no answer ever changes); every query_id
appears once; c never decreases and equals the abstentions in the log plus those of a committed
batch still waiting in the state's pending directory (its commit is "uncertain" to an observer of
the log). At the end an uninterrupted run completes the stream: every query answered once.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import random
import re
import subprocess
from pathlib import Path
from typing import Callable

import pyarrow.parquet as pq
import pytest

from pcqr.jobs.cli import main
from tests.conftest import DENSE_BOTTOMS_PRIVACY, write_thread_cluster
from tests.fault_injection import PreloadedCli, cli_env, pcqr_command, sigkill_at_a_random_moment

KILLS = 20  # 11 of them wait for the answer loop (the seeded rng below decides which)
# All KILLS must land before the stream ends: at batches of 250 the faster answer loop of issue 12
# had done 208,000 of 300,000 queries after the 50th kill on the dev machine; at 200, 131,000; with
# runs forked after their imports (and killed within 0-1.5 s of the fork), 85,400 on a quiet machine,
# so about 34,000 after 20 (issue 27 cut 50 kills to 20, as issue 10 asked, and the stream to 200,000,
# for the suite's time).
QUERIES, BATCH = 200_000, 200
FINISH_BATCH = 5_000
#: The bucket's test: 6 kills (3 in the loop, as the seeded rng below decides) on a stream of 10,000
#: (8 kills had reached 3,000 queries on the dev machine).
BUCKET_KILLS, BUCKET_QUERIES = 6, 10_000
_BATCH_FILE = re.compile(r"^batch-\d{8}\.parquet$")


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    root = tmp_path_factory.mktemp("crash")
    return root, _trained(root, QUERIES, seed=2)


def _trained(root: Path, queries: int, seed: int) -> Path:
    """Data and a trained session (dense bottoms) under ``root``; returns its threads cluster.yaml."""
    cluster = Path(write_thread_cluster(root))
    assert main(["generate", "--kind", "realizable", "--rows", "20000", "--features", "3", "--queries",
                 str(queries), "--seed", str(seed), "--out", str(root / "data"), "--cluster", str(cluster)]) == 0
    assert main(["train", "--private", str(root / "data" / "private"), "--state", str(root / "state"),
                 *DENSE_BOTTOMS_PRIVACY, "--cluster", str(cluster)]) == 0
    return cluster


def _kill_and_check(root: Path, argv: list[str], kills_wanted: int, queries: int, rng: random.Random,
                    published: Callable[[], int], check: Callable[[int], int]) -> tuple[int, int, int]:
    """SIGKILL runs of ``argv`` at random moments until ``kills_wanted`` kills or the stream's end,
    ``check(c)`` after each; (kills, how many waited for the answer loop, c)."""
    c = kills = in_loop = 0
    with PreloadedCli(cli_env(), "answer") as cli:
        while kills < kills_wanted:
            state = _state(root)
            if state.get("input") and state["input"]["done"] >= queries:
                break  # the stream is complete
            waited, _ = sigkill_at_a_random_moment(cli, argv, rng, published)
            in_loop += waited
            kills += 1
            c = check(c)
    return kills, in_loop, c


def _answer_argv(root: Path, cluster: Path, log: str | None = None, queries: str = "queries") -> list[str]:
    return ["answer", "--state", str(root / "state"), "--queries", str(root / "data" / queries), "--log",
            log or str(root / "log"), "--batch-size", str(BATCH), "--cluster", str(cluster), "--json"]


def _state(root: Path) -> dict:
    return json.loads((root / "state" / "session.json").read_text())


def _visible(log: Path) -> list[str]:
    """Visible names of the log: batch files only (temporaries of atomic writes start with '.'; the
    session's claim, _session.json, is not a batch)."""
    names = [n for n in os.listdir(log) if not n.startswith(".") and n != "_session.json"] if log.exists() else []
    for name in names:
        assert _BATCH_FILE.match(name), f"unexpected visible file {name}"
    return names


class Batch:
    """What a published batch file held when first seen."""

    def __init__(self, data: bytes) -> None:
        table = pq.read_table(io.BytesIO(data))  # parses in full: never half-written
        self.digest = hashlib.sha256(data).hexdigest()
        self.ids = table.column("query_id").to_pylist()
        self.abstained = table.column("status").to_pylist().count("abstained")


def _abstained(data: bytes) -> int:
    return Batch(data).abstained


def _check(root: Path, seen: dict[int, tuple[tuple[int, int, int], Batch]], last_c: int) -> int:
    log = root / "log"
    numbers = []
    for name in _visible(log):
        number, info = int(name[6:14]), os.stat(log / name)
        key = (info.st_ino, info.st_mtime_ns, info.st_size)
        if number not in seen:
            seen[number] = (key, Batch((log / name).read_bytes()))
        elif seen[number][0] != key:  # replaced: it must hold the very same bytes
            assert Batch((log / name).read_bytes()).digest == seen[number][1].digest, f"batch {number} changed"
        numbers.append(number)
    assert sorted(numbers) == list(range(len(numbers))), "the log has a gap"
    ids = [i for n in numbers for i in seen[n][1].ids]
    assert len(ids) == len(set(ids)), "a query was answered twice"
    state = _state(root)
    c = state["sparse_vector"]["bottoms"]
    assert c >= last_c, "c went backwards"
    in_log = sum(seen[n][1].abstained for n in numbers)
    log = dict.fromkeys(numbers)
    pending = state.get("pending_batch")
    uncertain = 0
    if pending is not None and pending not in log:
        staged = root / "state" / "pending" / f"batch-{pending:08d}.parquet"
        assert staged.exists(), "a committed batch is neither published nor pending"
        uncertain = _abstained(staged.read_bytes())
    assert c == in_log + uncertain, (c, in_log, uncertain)
    return c


@pytest.mark.slow
def test_sigkill_at_random_moments_then_resume(session) -> None:
    root, cluster = session
    seen: dict[int, tuple[tuple[int, int, int], Batch]] = {}
    kills, in_loop, c = _kill_and_check(root, _answer_argv(root, cluster), KILLS, QUERIES, random.Random(20261121),
                                        lambda: len(_visible(root / "log")), lambda c: _check(root, seen, c))
    assert kills == KILLS and in_loop >= 10, (kills, in_loop)
    # finish without interruption, as a new process (in batches of 5,000: the same commit steps, and
    # the test takes 28 s instead of 40; a resumed run may choose its own batch size)
    finish = _answer_argv(root, cluster)
    finish[finish.index("--batch-size") + 1] = str(FINISH_BATCH)
    done = subprocess.run(pcqr_command(finish), capture_output=True, text=True, env=cli_env())
    assert done.returncode == 0, done.stderr
    c = _check(root, seen, c)
    table = pq.read_table(root / "log")
    ids = table.column("query_id").to_pylist()
    assert sorted(ids) == list(range(QUERIES))  # every query answered exactly once
    assert table.column("status").to_pylist().count("abstained") == c
    assert not os.listdir(root / "state" / "pending")


@pytest.mark.slow
def test_sigkill_with_the_log_in_a_bucket_then_resume(s3, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same checks with ``--log s3://...``: after every kill each batch object is the one first seen,
    byte for byte (a conditional put never replaces it), the batches are contiguous, no query twice,
    c never decreases and equals the log's abstentions plus a committed batch still pending. At the end
    the stream is complete and ``pcqr replay`` verifies the bucket's log."""
    root = tmp_path
    cluster = _trained(root, BUCKET_QUERIES, seed=3)
    log = s3.uri("log")
    argv = _answer_argv(root, cluster, log)
    seen: dict[int, str] = {}
    kills, in_loop, c = _kill_and_check(root, argv, BUCKET_KILLS, BUCKET_QUERIES, random.Random(20261128),
                                        lambda: len(_batch_keys(s3)), lambda c: _check_bucket(root, s3, seen, c))
    assert kills == BUCKET_KILLS and in_loop >= 3, (kills, in_loop)
    finish = [*argv]  # the rest in larger batches, as above
    finish[finish.index("--batch-size") + 1] = str(FINISH_BATCH)
    done = subprocess.run(pcqr_command(finish), capture_output=True, text=True, env=cli_env())
    assert done.returncode == 0, done.stderr
    c = _check_bucket(root, s3, seen, c)
    ids = [i for key in _batch_keys(s3) for i in Batch(s3.read(key)).ids]
    assert sorted(ids) == list(range(BUCKET_QUERIES))  # every query answered exactly once
    assert not os.listdir(root / "state" / "pending")
    capsys.readouterr()
    assert main(["replay", log, "--json"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["queries"] == BUCKET_QUERIES


def _batch_keys(s3) -> list[str]:
    """The log's batch objects (not the session's claim, _session.json)."""
    return [key for key in s3.keys("log/") if not key.endswith("/_session.json")]


def _check_bucket(root: Path, s3, seen: dict[int, str], last_c: int) -> int:
    """The bucket's log after a kill: what _check asserts of a folder (seen: each batch's first digest)."""
    batches = {}
    for key in s3.keys("log/"):
        name = key.rsplit("/", 1)[1]
        if name == "_session.json":  # the session's claim on its log, not a batch
            continue
        assert _BATCH_FILE.match(name), f"unexpected object {key}"
        batch = batches[int(name[6:14])] = Batch(s3.read(key))  # parses in full: never half-written
        assert seen.setdefault(int(name[6:14]), batch.digest) == batch.digest, f"{key} changed"
    assert sorted(batches) == list(range(len(batches))), "the log has a gap"
    ids = [i for b in batches.values() for i in b.ids]
    assert len(ids) == len(set(ids)), "a query was answered twice"
    state = _state(root)
    c = state["sparse_vector"]["bottoms"]
    assert c >= last_c, "c went backwards"
    pending, uncertain = state.get("pending_batch"), 0
    if pending is not None and pending not in batches:
        staged = root / "state" / "pending" / f"batch-{pending:08d}.parquet"
        assert staged.exists(), "a committed batch is neither published nor pending"
        uncertain = _abstained(staged.read_bytes())
    assert c == sum(b.abstained for b in batches.values()) + uncertain
    return c
