"""`pcqr demo` in its temporary folder prints no path of that folder once it is gone (issue 47, item 8):
its summary (table or --json) and its notes say the folder was removed and how to keep one
(--out DIR, or --keep), never a log or state path to look at. A kept demo names them (tests in
tests/test_one_line_errors.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from pcqr.jobs import demo
from pcqr.jobs.cli import main
from pcqr.pipeline.session.demo import REMOVED_NOTE

SMALL = ["--rows", "20000", "--queries", "300", "--subsamples", "200", "--epsilon", "100"]


@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
def test_a_removed_demo_prints_none_of_its_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str], thread_cluster_yaml: str,
                                                 as_json: bool) -> None:
    folder = tmp_path / "pcqr-demo-x"
    monkeypatch.setattr(demo, "temporary_folder", lambda: (folder.mkdir(), str(folder))[1])
    assert main(["demo", *SMALL, "--cluster", thread_cluster_yaml, *(["--json"] if as_json else [])]) == 0
    out, err = capsys.readouterr()
    assert not folder.exists()
    first, *notes = err.strip().splitlines()
    assert first.startswith(f"demo: working in {folder} ")  # said while it is there, with "removed at the end"
    assert not [line for line in [out, *notes] if str(folder) in line], (out, notes)
    assert notes[-1] == REMOVED_NOTE and "--out DIR" in REMOVED_NOTE
    if as_json:
        summary = json.loads(out.strip().splitlines()[-1])
        assert "log" not in summary and "state" not in summary and summary["answered"] > 0
    else:
        assert not [line for line in out.splitlines() if line.split()[:1] in (["log"], ["state"])], out
        assert "answered  " in out


def test_demo_out_must_be_a_local_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, s3,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """``pcqr demo --out s3://...`` on a reachable S3 server (moto) is refused in one line (exit 2)
    before anything is made: the demo's folder holds its private state and ledger, which stay local.
    Before, the output check let the empty bucket prefix through and os.makedirs made a local folder
    named "s3:" in the working directory."""
    monkeypatch.chdir(tmp_path)
    out = s3.uri("demo")
    assert main(["demo", "--out", out]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--out {out}" in err[0] and "give a local path" in err[0], err
    assert not list(tmp_path.iterdir())
