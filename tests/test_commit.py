"""Step 4 of the commit (pcqr.pipeline.session.commit.publish): the pending file becomes the log
file by a hard link, its bytes never written twice; a copy where the folders cannot share a file."""
from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from pcqr.pipeline.data import atomic
from pcqr.pipeline.session.commit import pending_path, publish, recover, stage
from pcqr.pipeline.public_log.batches import batch_path, sha256

DATA = b"PAR1 the batch's bytes PAR1"


def test_publish_links_the_pending_file_into_the_log(tmp_path: Path) -> None:
    state, log = str(tmp_path / "state"), str(tmp_path / "log")
    stage(state, 3, DATA)
    inode = os.stat(pending_path(state, 3)).st_ino
    publish(state, log, 3, DATA)
    published = os.stat(batch_path(log, 3))
    assert published.st_ino == inode and published.st_nlink == 1  # the same file; its pending name gone
    assert Path(batch_path(log, 3)).read_bytes() == DATA
    assert not os.path.exists(pending_path(state, 3)) and sorted(os.listdir(log)) == ["batch-00000003.parquet"]


@pytest.mark.parametrize("code", [errno.EXDEV, errno.EPERM])
def test_publish_copies_where_the_folders_cannot_share_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              code: int) -> None:
    def no_link(source: str, target: str) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(atomic.os, "link", no_link)
    state, log = str(tmp_path / "state"), str(tmp_path / "log")
    stage(state, 0, DATA)
    inode = os.stat(pending_path(state, 0)).st_ino
    publish(state, log, 0, DATA)
    assert os.stat(batch_path(log, 0)).st_ino != inode and Path(batch_path(log, 0)).read_bytes() == DATA
    assert not os.path.exists(pending_path(state, 0)) and os.listdir(log) == ["batch-00000000.parquet"]


def test_link_atomic_raises_other_errors_and_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        atomic.link_atomic(str(tmp_path / "missing"), str(tmp_path / "log" / "batch-00000000.parquet"))
    assert os.listdir(tmp_path / "log") == []


def test_a_crash_between_link_and_rename_leaves_a_temporary_that_recovery_removes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Killed after the link, before the rename: the log holds only a dot-temporary (never read as a
    batch), which the next run's recovery removes before publishing the state's pending batch."""
    state, log = str(tmp_path / "state"), str(tmp_path / "log")
    stage(state, 0, DATA)

    class Killed(BaseException):
        pass

    def die(source: str, target: str) -> None:
        raise Killed()

    with monkeypatch.context() as patch:
        patch.setattr(atomic.os, "replace", die)
        with pytest.raises(Killed):
            publish(state, log, 0, DATA)
    assert os.listdir(log) == []  # an exception removes the temporary link on its way out
    os.link(pending_path(state, 0), os.path.join(log, ".batch-00000000.parquet.0123456789abcdef.tmp"))  # SIGKILL's
    note = recover(state, log, 0, sha256(DATA))
    assert sorted(os.listdir(log)) == ["batch-00000000.parquet"]
    assert note is not None and "recovered batch 0" in note
    assert Path(batch_path(log, 0)).read_bytes() == DATA
