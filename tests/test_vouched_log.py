"""`pcqr report` and `pcqr distill` check a log as `pcqr replay` does (issue 47, item 8).

The last batch of a log is vouched for by no later batch: only the session's state, which records
its hash, can show it altered or batches after it lost. With ``--state`` both commands refuse such
a log in one line naming the first bad batch, before writing anything; without it they say, in the
very line replay prints, that the log was checked against itself only.
"""
from __future__ import annotations

import html
import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pcqr.jobs.cli import main
from pcqr.pipeline.public_log.batches import batch_path
from tests.conftest import MECHANICS_PRIVACY, write_session_data, write_thread_cluster

pytest.importorskip("matplotlib")  # pcqr report draws with it

BATCHES = 3
CAVEAT = "(the last) is vouched for by no later batch"
MATCHED = f"batch {BATCHES - 1} (the last) matches the session's last hash"


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ROOT/state and ROOT/log: a seeded session of 1,500 queries in 3 batches (stump models, whose
    answers a student can learn)."""
    root = tmp_path_factory.mktemp("vouched")
    write_session_data(root, rows=20_000, queries=1500)
    cluster = write_thread_cluster(root)
    assert main(["answer", "--private", str(root / "private"), "--queries", str(root / "queries"),
                 "--state", str(root / "state"), "--log", str(root / "log"), "--batch-size", "500",
                 *MECHANICS_PRIVACY, "--seed", "4", "--insecure-seed", "--cluster", cluster]) == 0
    assert len(list((root / "log").glob("batch-*.parquet"))) == BATCHES
    return root


def _altered_last_batch(session: Path, tmp_path: Path) -> str:
    """A copy of the log whose last batch's answers are flipped, its metadata (provenance, the chain's
    link to the batch before) kept: the chain alone cannot see it."""
    log = tmp_path / "log"
    shutil.copytree(session / "log", log)
    path = batch_path(str(log), BATCHES - 1)
    table = pq.read_table(path)
    answers = table.column("answer").to_pylist()
    flipped = pa.array([None if a is None else 1 - a for a in answers], type=table.schema.field("answer").type)
    table = table.set_column(table.schema.get_field_index("answer"), "answer", flipped)
    pq.write_table(table.replace_schema_metadata(pq.read_schema(path).metadata), path)
    return str(log)


def _truncated(session: Path, tmp_path: Path) -> str:
    """A copy of the log without its last batch: contiguous, its chain intact."""
    log = tmp_path / "log"
    shutil.copytree(session / "log", log)
    os.remove(batch_path(str(log), BATCHES - 1))
    return str(log)


def _report(log: str, out: Path, *more: str) -> list[str]:
    return ["report", "--log", log, "--out", str(out), *more]


def _distill(log: str, out: Path, *more: str) -> list[str]:
    return ["distill", "--log", log, "--out", str(out), *more]


COMMANDS = {"report": (_report, "r.html"), "distill": (_distill, "s.json")}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("fault,needle", [
    ("altered", f"batch {BATCHES - 1} is altered, or batches after it are missing"),
    ("truncated", f"batch {BATCHES - 2} is altered, or batches after it are missing"),
])
def test_with_state_a_log_not_ending_at_the_states_last_hash_is_refused(session, tmp_path, capsys, command,
                                                                        fault, needle) -> None:
    log = (_altered_last_batch if fault == "altered" else _truncated)(session, tmp_path)
    argv, name = COMMANDS[command]
    out = tmp_path / "out" / name
    assert main(argv(log, out, "--state", str(session / "state"))) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"pcqr: error: --log {log}: ") and needle in err[0], err
    assert not (tmp_path / "out").exists()  # nothing written


@pytest.mark.parametrize("command", COMMANDS)
def test_with_state_an_intact_log_is_vouched_for_to_its_end(session, tmp_path, capsys, command) -> None:
    argv, name = COMMANDS[command]
    out = tmp_path / name
    assert main(argv(str(session / "log"), out, "--state", str(session / "state"), "--json")) == 0
    captured = capsys.readouterr()
    assert MATCHED in captured.err and CAVEAT not in captured.err
    assert json.loads(captured.out.strip().splitlines()[-1])["last_batch_vouched"] is True
    assert out.is_file()


@pytest.mark.parametrize("command", COMMANDS)
def test_without_state_the_caveat_is_replays_line(session, tmp_path, capsys, command) -> None:
    """The altered last batch goes through (nothing can see it) but not silently: the same line as
    `pcqr replay` prints for the same log."""
    log = _altered_last_batch(session, tmp_path)
    assert main(["replay", log, "--out", str(tmp_path / "replayed.parquet")]) == 0
    (caveat,) = [line for line in capsys.readouterr().err.splitlines() if CAVEAT in line]
    assert caveat.startswith(f"batch {BATCHES - 1} {CAVEAT}")
    argv, name = COMMANDS[command]
    assert main(argv(log, tmp_path / name, "--json")) == 0
    captured = capsys.readouterr()
    assert caveat in captured.err.splitlines() and MATCHED not in captured.err
    assert json.loads(captured.out.strip().splitlines()[-1])["last_batch_vouched"] is False


def test_report_notes_on_the_page_whether_the_last_batch_was_vouched(session, tmp_path, capsys) -> None:
    log = _altered_last_batch(session, tmp_path)
    assert main(_report(log, tmp_path / "r.html")) == 0
    assert CAVEAT in html.unescape((tmp_path / "r.html").read_text())
    assert main(_report(str(session / "log"), tmp_path / "s.html", "--state", str(session / "state"))) == 0
    assert MATCHED in html.unescape((tmp_path / "s.html").read_text())


def test_distill_state_that_holds_no_session_is_refused(session, tmp_path, capsys) -> None:
    out = tmp_path / "s.json"
    assert main(_distill(str(session / "log"), out, "--state", str(session / "private"))) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--state {session / 'private'}: no session here" in err[0], err
    assert not out.exists()
