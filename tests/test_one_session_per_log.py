"""One session per log (issue 47; pcqr.pipeline.public_log.owner).

Before: two sessions given one --log both exited 0 on a local disk and the log held one session's
batches only (the other's published answers replaced without a word); in a bucket the loser was
refused forever as an "altered log", even given a new --log, and nothing named the other session.
Now a session claims its log before it asks any query; another session is refused in one line naming
both sessions and the way out, nothing asked and nothing spent, and a new --log works.
"""
from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from pcqr.jobs.cli import main
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.public_log import owner
from pcqr.pipeline.public_log.batches import CLAIM_FILE
from pcqr.pipeline.public_log.replay import verify_log
from tests.conftest import MECHANICS_PRIVACY, write_session_data

A, B = "a" * 32, "b" * 32


def _session_id(state: Path) -> str:
    return json.loads((state / "session.json").read_text())["session_id"]


def _trained(tmp_path: Path, cluster: str, *names: str) -> None:
    write_session_data(tmp_path, rows=4000, queries=300)
    for name in names:
        assert main(["train", "--private", str(tmp_path / "private"), "--state", str(tmp_path / name),
                     *MECHANICS_PRIVACY, "--cluster", cluster]) == 0


def _answer(tmp_path: Path, name: str, log: str, cluster: str) -> list[str]:
    return ["answer", "--state", str(tmp_path / name), "--queries", str(tmp_path / "queries"), "--log", log,
            "--cluster", cluster, "--batch-size", "100"]


def test_a_second_session_is_refused_naming_both_and_a_new_log_works(tmp_path, capsys, thread_cluster_yaml) -> None:
    _trained(tmp_path, thread_cluster_yaml, "one", "two")
    log = str(tmp_path / "log")
    assert main(_answer(tmp_path, "one", log, thread_cluster_yaml)) == 0
    before = {p.name: p.read_bytes() for p in Path(log).iterdir()}
    state_before = (tmp_path / "two" / "session.json").read_bytes()
    capsys.readouterr()
    assert main(_answer(tmp_path, "two", log, thread_cluster_yaml)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    one, two = _session_id(tmp_path / "one"), _session_id(tmp_path / "two")
    assert f"holds the log of session {one}" in err and f"this session ({two})" in err and "new, empty folder" in err
    assert {p.name: p.read_bytes() for p in Path(log).iterdir()} == before  # the first session's log untouched
    assert (tmp_path / "two" / "session.json").read_bytes() == state_before  # nothing asked
    assert main(_answer(tmp_path, "two", str(tmp_path / "log-two"), thread_cluster_yaml)) == 0
    assert pq.read_table(tmp_path / "log-two").num_rows == 300 and verify_log(log).ok
    assert verify_log(log).other_files == []  # the claim is the log's own file, not an unexpected one


def test_a_new_one_shot_session_is_refused_before_its_charge(tmp_path, capsys, thread_cluster_yaml,
                                                           monkeypatch) -> None:
    ledger = str(tmp_path / "ledger.sqlite")
    monkeypatch.setenv("PCQR_LEDGER", ledger)
    _trained(tmp_path, thread_cluster_yaml, "one")
    log = str(tmp_path / "log")
    assert main(_answer(tmp_path, "one", log, thread_cluster_yaml)) == 0
    capsys.readouterr()
    assert main(["answer", "--private", str(tmp_path / "private"), "--state", str(tmp_path / "fresh"),
                 "--queries", str(tmp_path / "queries"), "--log", log, *MECHANICS_PRIVACY,
                 "--cluster", thread_cluster_yaml]) == 2
    err = capsys.readouterr().err
    assert "a new session cannot write there" in err and _session_id(tmp_path / "one") in err
    assert not (tmp_path / "fresh" / "session.json").exists()
    capsys.readouterr()
    assert main(["budget", "show", str(tmp_path / "private"), "--json"]) == 0
    charges = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["charges"]
    assert [c["job"] for c in charges] == ["train"]  # the training's only: no charge for the refused answer


def test_a_session_that_lost_the_race_may_take_a_new_log(tmp_path, capsys, thread_cluster_yaml) -> None:
    """The race: another session claims the log between this session's check and its claim (here,
    the claim file is made first, as by a session that won). The loser is refused with the same line
    before it asks anything, and is not tied to that log: a new --log works."""
    _trained(tmp_path, thread_cluster_yaml, "two")
    log = tmp_path / "log"
    log.mkdir()
    owner.claim(str(log), A)
    capsys.readouterr()
    assert main(_answer(tmp_path, "two", str(log), thread_cluster_yaml)) == 2
    assert f"holds the log of session {A}" in capsys.readouterr().err
    assert main(_answer(tmp_path, "two", str(tmp_path / "elsewhere"), thread_cluster_yaml)) == 0


def test_of_sessions_racing_for_one_log_exactly_one_claims_it(tmp_path) -> None:
    for attempt in range(20):
        log = tmp_path / f"log{attempt}"
        log.mkdir()
        won: list[str] = []
        lost: list[str] = []

        def race(session: str) -> None:
            try:
                owner.claim(str(log), session)
                won.append(session)
            except PcqrError as exc:
                lost.append(str(exc))

        threads = [threading.Thread(target=race, args=(s,)) for s in (A, B, "c" * 32, "d" * 32)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(won) == 1 and len(lost) == 3, (won, lost)
        assert all(f"holds the log of session {won[0]}" in message for message in lost)
        assert sorted(p.name for p in log.iterdir()) == [CLAIM_FILE]  # no temporary left
        owner.claim(str(log), won[0])  # the winner again: nothing to do


def test_a_log_in_a_bucket_is_claimed_once(s3) -> None:
    log = s3.uri("log")
    owner.claim(log, A)
    owner.claim(log, A)
    with pytest.raises(PcqrError, match=f"holds the log of session {A}; this session \\({B}\\)"):
        owner.claim(log, B)
    assert owner.owner(log) == A


def test_a_log_from_before_claims_is_its_first_batchs_session(tmp_path, thread_cluster_yaml) -> None:
    _trained(tmp_path, thread_cluster_yaml, "one")
    log = tmp_path / "log"
    assert main(_answer(tmp_path, "one", str(log), thread_cluster_yaml)) == 0
    (log / CLAIM_FILE).unlink()  # as pcqr before issue 47 left it
    assert owner.owner(str(log)) == _session_id(tmp_path / "one")
    with pytest.raises(PcqrError, match="a new session cannot write there"):
        owner.check_owner(str(log), None)
    assert main(_answer(tmp_path, "one", str(log), thread_cluster_yaml)) == 0  # its own session goes on


@pytest.mark.parametrize("content", [b"", b"[]", b'{"session_id": "../x"}', b"\xff"])
def test_an_edited_claim_is_refused_in_one_line(tmp_path, content: bytes) -> None:
    (tmp_path / CLAIM_FILE).write_bytes(content)
    with pytest.raises(PcqrError) as caught:
        owner.check_owner(str(tmp_path), A)
    assert CLAIM_FILE in str(caught.value) and "\n" not in str(caught.value)
    assert np.all([True])


def test_the_python_api_is_told_in_its_own_words(tmp_path) -> None:
    from pcqr.pipeline.spelling import python_spelling

    owner.claim(str(tmp_path), A)
    with python_spelling(), pytest.raises(PcqrError) as caught:
        owner.check_owner(str(tmp_path), B)
    assert str(caught.value).startswith(f"log={tmp_path}: holds the log of session {A}")
    assert "folder as log," in str(caught.value) and "own state" in str(caught.value)


@pytest.mark.parametrize("content", [b"not json", b'{"session_id": 7}', b"\x00" * 5000])
def test_answer_with_an_edited_claim_in_its_log_is_one_line(tmp_path, capsys, thread_cluster_yaml, content) -> None:
    """An operator's (or anyone's) edit of a log's claim: `pcqr answer` refuses in one line, exit 2,
    before anything is asked, and the session's state is unchanged."""
    _trained(tmp_path, thread_cluster_yaml, "one")
    log = tmp_path / "log"
    log.mkdir()
    (log / CLAIM_FILE).write_bytes(content)
    before = (tmp_path / "one" / "session.json").read_bytes()
    capsys.readouterr()
    assert main(_answer(tmp_path, "one", str(log), thread_cluster_yaml)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and CLAIM_FILE in err, err
    assert (tmp_path / "one" / "session.json").read_bytes() == before
    assert sorted(p.name for p in log.iterdir()) == [CLAIM_FILE]
