"""One line, one prefix (issue 11, Deliver 8 and 9): a PcqrError raised on a worker reaches the user
without distributed's "Compute Failed" block (thread and process workers) while a bug keeps it; a
cluster with no worker fails in one line; click's usage errors and a user's OSError carry the same
``pcqr: error: `` prefix; the demo leaves the user's ledger and disk as they were."""
from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest
from distributed import Client, LocalCluster

from pcqr.jobs import cli, demo
from pcqr.jobs.cli import main
from pcqr.pipeline.errors import BudgetExhausted, PcqrError
from pcqr.pipeline.data.worker_errors import QuietExpectedErrors
from tests.conftest import MECHANICS_PRIVACY, threshold_data, write_parquet
from tests.fault_injection import cli_env

ROOT = Path(__file__).resolve().parent.parent


def _record(exception: BaseException, msg: str = "Compute Failed\nKey: %s\nState: %s\nTask: %s\nException: %r\n"
            ) -> logging.LogRecord:
    """A record as distributed.worker logs a failed task (the exception's repr as its 4th argument)."""
    return logging.LogRecord("distributed.worker", logging.ERROR, __file__, 1, msg,
                             ("load_part-1", "executing", "<Task>", repr(exception), "tb"), None)


def test_the_filter_drops_only_expected_errors() -> None:
    quiet = QuietExpectedErrors()
    assert not quiet.filter(_record(PcqrError("p.parquet: feature column 'x1' has NaN")))
    assert not quiet.filter(_record(BudgetExhausted("spent")))  # subclasses too

    class LaterError(PcqrError):  # defined after the filter: still an expected error
        pass

    assert not quiet.filter(_record(LaterError("late")))
    assert quiet.filter(_record(ValueError("a bug")))  # a bug keeps its block
    assert quiet.filter(_record(KeyError("PcqrError(")))  # the name inside another exception's text
    other = logging.LogRecord("distributed.worker", logging.ERROR, __file__, 1, "Worker stream died", (), None)
    assert quiet.filter(other)


def test_a_local_clusters_workers_drop_only_the_heartbeat_failure_of_its_shutdown() -> None:
    """On a local cluster pcqr started (and closes), a heartbeat that finds the scheduler gone is not
    logged with its traceback; every other record passes. The plugin reaches worker processes."""
    from pcqr.pipeline.data.worker_errors import QuietLocalShutdown, quiet_expected_errors

    quiet = QuietLocalShutdown()
    heartbeat = logging.LogRecord("distributed.worker", logging.ERROR, __file__, 1,
                                  "Failed to communicate with scheduler during heartbeat.", (), None)
    assert not quiet.filter(heartbeat)
    assert quiet.filter(logging.LogRecord("distributed.worker", logging.ERROR, __file__, 1,
                                          "Unexpected exception during heartbeat. Closing worker.", (), None))
    assert quiet.filter(_record(ValueError("a bug")))
    with LocalCluster(n_workers=1, processes=True, dashboard_address=None) as cluster, Client(cluster) as client:
        quiet_expected_errors(client, local=True)

        def filters() -> list[str]:
            return [type(f).__name__ for f in logging.getLogger("distributed.worker").filters]

        assert "QuietLocalShutdown" in next(iter(client.run(filters).values()))


def _stderr_lines(err: str) -> list[str]:
    return [line for line in err.strip().splitlines() if not line.startswith("dashboard:")]


@pytest.fixture(scope="module")
def bad_private(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Private rows with one NaN: found by a worker while it reads its part (after the charge)."""
    root = tmp_path_factory.mktemp("bad")
    columns = threshold_data(20_000, seed=1)
    columns["x1"][5] = np.nan
    write_parquet(str(root / "private" / "p.parquet"), columns, row_group_size=5000)
    return root


def _cluster_yaml(folder: Path, processes: bool) -> Path:
    path = folder / "cluster.yaml"
    workers = "n-workers: 2\n    threads-per-worker: 1" if processes else "n-workers: 1\n    threads-per-worker: 2"
    path.write_text(f"pcqr:\n  cluster:\n    backend: local\n    {workers}\n    processes: {str(processes).lower()}\n")
    return path


@pytest.mark.parametrize("processes", [False, True], ids=["threads", "processes"])
def test_a_worker_side_error_is_one_line(bad_private: Path, tmp_path: Path, processes: bool) -> None:
    """The pcqr process's whole stderr: the dashboard line and pcqr's one line, nothing from distributed."""
    argv = [sys.executable, "-m", "pcqr.jobs.cli", "train", "--private", str(bad_private / "private"), "--state",
            str(tmp_path / "state"), "--cluster", str(_cluster_yaml(tmp_path, processes)), *MECHANICS_PRIVACY]
    env = {**cli_env(), "PCQR_LEDGER": str(tmp_path / "ledger.sqlite")}
    result = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    lines = _stderr_lines(result.stderr)
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and lines[0].startswith("pcqr: error: "), result.stderr
    assert "p.parquet: feature column 'x1'" in lines[0] and "Compute Failed" not in result.stderr


def test_a_bug_on_a_process_worker_keeps_its_traceback(tmp_path: Path) -> None:
    """Through open_client on worker processes: a task's PcqrError is silent in the workers' log, a
    task's ValueError is logged with its block as before."""
    script = textwrap.dedent(f"""
        from pcqr.pipeline.data.cluster import open_client
        from pcqr.pipeline.errors import PcqrError

        def expected():
            raise PcqrError("EXPECTED-ONE-LINE")

        def bug():
            raise ValueError("A-REAL-BUG")

        with open_client({str(_cluster_yaml(tmp_path, True))!r}) as client:
            for task in (expected, bug):
                try:
                    client.submit(task, pure=False).result()
                except Exception as exc:
                    print(type(exc).__name__)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=cli_env(),
                            cwd=ROOT, timeout=120)
    assert result.stdout.split() == ["PcqrError", "ValueError"], result.stderr
    assert result.stderr.count("Compute Failed") == 1 and "A-REAL-BUG" in result.stderr, result.stderr
    assert "EXPECTED-ONE-LINE" not in result.stderr


def _charges(path: str) -> list[tuple[Any, ...]] | None:
    """The ledger's charges (refunds included), read without writing: None if there is no ledger."""
    if not os.path.exists(path):
        return None
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        return db.execute("SELECT * FROM charges ORDER BY id").fetchall()


@pytest.fixture
def session_data(tmp_path: Path) -> Path:
    write_parquet(str(tmp_path / "private" / "p.parquet"), threshold_data(20_000, seed=1), row_group_size=5000)
    return tmp_path


def test_a_cluster_without_workers_fails_in_one_line(session_data: Path, capsys: pytest.CaptureFixture[str],
                                                     test_ledger: str) -> None:
    """A scheduler that never gets a worker: refused after distributed.scheduler.no-workers-timeout
    (1 s here; 5 minutes by default), before anything is charged or written."""
    before = _charges(test_ledger)
    with LocalCluster(n_workers=0, processes=False, host="127.0.0.1", protocol="tcp://",
                      dashboard_address=":0") as empty:
        path = session_data / "cluster.yaml"
        path.write_text(f"pcqr:\n  cluster:\n    backend: address\n    address: {empty.scheduler_address}\n"
                        "distributed:\n  scheduler:\n    no-workers-timeout: 1s\n")
        code = main(["train", "--private", str(session_data / "private"), "--state", str(session_data / "state"),
                     "--cluster", str(path), *MECHANICS_PRIVACY])
    lines = _stderr_lines(capsys.readouterr().err)
    assert code == 2 and len(lines) == 1 and lines[0].startswith("pcqr: error: "), lines
    assert "pcqr.cluster.address" in lines[0] and "no-workers-timeout" in lines[0]
    assert not (session_data / "state").exists() and _charges(test_ledger) == before


def test_no_workers_timeout_has_a_default() -> None:
    import dask.config

    import pcqr.pipeline.data.cluster  # noqa: F401 -- loads pcqr's defaults

    assert dask.config.get("distributed.scheduler.no-workers-timeout") == "5 minutes"


def test_a_local_cluster_of_no_workers_is_refused(session_data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = session_data / "cluster.yaml"
    path.write_text("pcqr:\n  cluster:\n    n-workers: 0\n")
    code = main(["train", "--private", str(session_data / "private"), "--state", str(session_data / "state"),
                 "--cluster", str(path), *MECHANICS_PRIVACY])
    lines = _stderr_lines(capsys.readouterr().err)
    assert code == 2 and lines == [f"pcqr: error: {path}: pcqr.cluster.n-workers: expected a whole number >= 1 "
                                   "or null, got 0"]
    assert not (session_data / "state").exists()


@pytest.mark.parametrize("argv,needles", [
    (["answer"], ["Missing option '--state'", "(see pcqr answer --help)"]),
    (["answer", "--state"], ["Option '--state' requires an argument", "(see pcqr answer --help)"]),
    (["train", "--statx", "st"], ["No such option '--statx'", "(see pcqr train --help)"]),
    (["generate", "--out", "x", "--rows", "many"], ["'--rows'", "'many' is not a valid integer"]),
    (["generate", "--out", "x", "--kind", "noisy"], ["'--kind'", "'noisy' is not one of"]),
    (["fly"], ["No such command 'fly'", "(see pcqr --help)"]),
    (["budget", "set"], ["Missing argument 'DATASET'", "(see pcqr budget set --help)"]),
    (["release-answer"], ["Missing argument 'TABLE'"]),
    (["answer", "--fallback-label", "100", "--state", "s", "--queries", "q"], ["'--fallback-label'", "100 is not in the range"]),
])
def test_click_usage_errors_have_pcqr_prefix_in_one_line(argv: list[str], needles: list[str], tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code = main(argv)
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("pcqr: error: "), err
    assert "Usage:" not in err and "Error:" not in err.replace("pcqr: error:", "") and out == ""
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert os.listdir(tmp_path) == []


def test_no_arguments_print_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in ([], ["budget"]):
        assert main(argv) == 0
        out, err = capsys.readouterr()
        assert out.startswith("Usage: pcqr") and err == ""


@pytest.mark.parametrize("raised,expected", [
    (PermissionError(errno.EACCES, "Permission denied", "/data/state/session.json"),
     "pcqr: error: /data/state/session.json: Permission denied"),
    (OSError(errno.EROFS, "Read-only file system", "/data/log/batch-00000000.parquet"),
     "pcqr: error: /data/log/batch-00000000.parquet: Read-only file system"),
    (OSError(errno.ENOSPC, "No space left on device", "/data/log/.tmp", None, "/data/log/b.parquet"),
     "pcqr: error: /data/log/.tmp -> /data/log/b.parquet: No space left on device"),
])
def test_a_users_oserror_is_one_line_naming_the_file(raised: OSError, expected: str, capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: Any, **kwargs: Any) -> None:
        raise raised
    monkeypatch.setattr(cli.pcqr, "main", fail)
    assert main(["budget", "show", "x"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [expected]


@pytest.mark.parametrize("raised", [OSError(errno.EIO, "Input/output error"),  # no file named: not the user's
                                    OSError(errno.EBADF, "Bad file descriptor", "f"),  # a bug
                                    ConnectionResetError(errno.ECONNRESET, "reset")])
def test_other_oserrors_keep_their_traceback(raised: OSError, monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: Any, **kwargs: Any) -> None:
        raise raised
    monkeypatch.setattr(cli.pcqr, "main", fail)
    with pytest.raises(OSError):
        main(["budget", "show", "x"])


def test_a_read_only_log_directory_is_refused_before_anything(session_data: Path, capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              thread_cluster_yaml: str, test_ledger: str) -> None:
    """A log folder that cannot be written (read-only, or under a file) is refused before the charge
    (root ignores permission bits, so read-only is os.access saying no, as on a read-only mount)."""
    q = {k: v for k, v in threshold_data(100, seed=2).items() if k != "label"}
    write_parquet(str(session_data / "queries" / "p.parquet"), {"query_id": np.arange(100), **q})
    (session_data / "afile").write_text("")
    readonly = session_data / "readonly"
    readonly.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if str(p) == str(readonly) else real_access(p, mode))
    before = _charges(test_ledger)
    for log, needle in [(session_data / "afile" / "log", "is a file, not a directory"),
                        (readonly / "log", "read-only or no permission")]:
        code = main(["answer", "--private", str(session_data / "private"), "--queries", str(session_data / "queries"),
                     "--state", str(session_data / "state"), "--log", str(log), "--cluster", thread_cluster_yaml,
                     *MECHANICS_PRIVACY])
        lines = _stderr_lines(capsys.readouterr().err)
        assert code == 2 and len(lines) == 1 and lines[0].startswith(f"pcqr: error: --log {log}: "), lines
        assert needle in lines[0]
        assert not (session_data / "state" / "session.json").exists() and _charges(test_ledger) == before


# --- the demo ---------------------------------------------------------------------------------------

DEMO_SMALL = ["--rows", "20000", "--queries", "500", "--subsamples", "200", "--epsilon", "100"]


@pytest.fixture
def demo_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The demo's temporary folder, made where the test can look."""
    folder = tmp_path / "pcqr-demo-x"
    monkeypatch.setattr(demo, "temporary_folder", lambda: (folder.mkdir(), str(folder))[1])
    yield folder


def test_demo_uses_its_own_ledger_and_removes_its_folder(demo_folder: Path, capsys: pytest.CaptureFixture[str],
                                                         thread_cluster_yaml: str, test_ledger: str) -> None:
    before = _charges(test_ledger)
    assert main(["demo", *DEMO_SMALL, "--cluster", thread_cluster_yaml]) == 0
    out, err = capsys.readouterr()
    assert _charges(test_ledger) == before  # the user's ledger (PCQR_LEDGER) untouched
    assert not demo_folder.exists()
    assert err.splitlines()[0] == (f"demo: working in {demo_folder} with its own privacy ledger (yours is not "
                                   "charged); removed at the end (--keep keeps it)")
    lines = out.splitlines()
    answered = int(next(line for line in lines if line.startswith("answered  ")).split()[1])
    assert lines[0].startswith(f"answered {answered:,} of 500 queries (")
    assert lines[1].startswith("accuracy of the answers ")
    # the demo's delta is below 1/n of its rows (issue 47, item 7): 1e-5 at 20,000
    assert lines[2].startswith("privacy proven: (eps, delta) = (") and "requested (100, 1e-05)" in lines[2]
    assert "Kairouz-Oh-Viswanath; --profile tight" in lines[2]  # the default profile, said in words
    assert lines[3].startswith("abstentions used ") and " of 20 (budget_used of the cutoff T)" in lines[3]
    assert lines[4] == "" and lines[5].startswith("answered  ")


def test_demo_keep_says_where_and_json_keeps_the_answer_keys(demo_folder: Path, capsys: pytest.CaptureFixture[str],
                                                             thread_cluster_yaml: str, test_ledger: str) -> None:
    before = _charges(test_ledger)
    assert main(["demo", *DEMO_SMALL, "--cluster", thread_cluster_yaml, "--keep", "--json"]) == 0
    out, err = capsys.readouterr()
    summary = json.loads(out.strip().splitlines()[-1])
    assert len(out.strip().splitlines()) == 1  # --json: the answer summary alone
    for key in ("answered", "abstained", "refused", "budget_used", "cutoff", "proven_epsilon", "proven_delta",
                "accuracy", "ledger", "log", "state"):
        assert key in summary
    assert "kept at the end" in err.splitlines()[0]
    assert (demo_folder / "ledger.sqlite").is_file() and (demo_folder / "log").is_dir()
    assert summary["log"] == str(demo_folder / "log") and _charges(test_ledger) == before
    (charge,) = _charges(str(demo_folder / "ledger.sqlite")) or []  # the demo's one charge, in its own ledger
    assert charge[3] == "answer" and charge[5] == 100.0


def test_demo_refuses_a_folder_in_use(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "mine.txt").write_text("keep")
    assert main(["demo", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == (f"pcqr: error: --out {tmp_path}: is not empty; give a new or empty "
                                               "folder")
    assert os.listdir(tmp_path) == ["mine.txt"]


# --- an empty PCQR_LEDGER (issue 26, item 5) -----------------------------------------------------

LEDGER_COMMANDS = [
    "train --private {p} --state {s}",
    "answer --state {s} --queries {q} --log {l}",
    "answer --state {s} --queries {q} --log {l} --private {p}",
    "learn --private {p} --public {q} --hypothesis threshold --features x0 --out {o}/m.json",
    "release --private {p} --public {q} --hypothesis threshold --features x0 --out {o}/t.parquet",
    "sanitize --private {p} --features x0 --domain 0:10 --out {o}/s.parquet",
    "replay {l} --into {s}",
    "budget set {p} --epsilon 1 --delta 0",
    "budget show {p}",
    "run {spec}",
]


@pytest.mark.parametrize("command", LEDGER_COMMANDS)
def test_an_empty_pcqr_ledger_is_refused_before_anything(command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Not the home folder's ledger, silently: one line naming PCQR_LEDGER, exit 2, before any file is
    read (every path here is missing: reading one would be another error) or anything is written."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PCQR_LEDGER", "")
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"job: train\nprivate: {tmp_path / 'private'}\nstate: {tmp_path / 'state'}\n")
    paths = {"p": tmp_path / "private", "s": tmp_path / "state", "q": tmp_path / "queries", "l": tmp_path / "log",
             "o": tmp_path / "out", "spec": spec}
    code = main(command.format(**{k: str(v) for k, v in paths.items()}).split())
    lines = _stderr_lines(capsys.readouterr().err)
    assert code == 2 and len(lines) == 1 and lines[0].startswith("pcqr: error: PCQR_LEDGER is set but empty"), lines
    assert sorted(os.listdir(tmp_path)) == ["spec.yaml"]  # no state, log, output or home ledger


def test_an_empty_ledger_is_refused_by_the_python_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pcqr

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PCQR_LEDGER", " ")
    private, state, out = str(tmp_path / "private"), str(tmp_path / "state"), str(tmp_path / "out")
    calls = [lambda: pcqr.Session.create(state, private), lambda: pcqr.Session.open(state),
             lambda: pcqr.learn_without_public_data(private, out, algorithm="point", domain="0:10"),
             lambda: pcqr.sanitize(private, out, domain="0:10"),
             lambda: pcqr.PrivateClassifier(state=state).fit(np.zeros((4, 1)), np.array([0, 1, 0, 1]))]
    for call in calls:
        with pytest.raises(PcqrError, match="^PCQR_LEDGER is set but empty"):
            call()
    monkeypatch.delenv("PCQR_LEDGER")
    with pytest.raises(PcqrError, match="^ledger is empty"):  # its Python name (tests/test_estimator_params.py)
        pcqr.Session.open(state, ledger="")
    assert os.listdir(tmp_path) == []


def test_demo_keep_prints_commands_that_paste_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str], thread_cluster_yaml: str) -> None:
    """Every path pcqr prints for pasting is shell-quoted: a kept demo in a folder with a space and a
    quote says where it is, and each command it suggests runs as pasted."""
    import shlex

    folder = tmp_path / "it's a demo"
    monkeypatch.setattr(demo, "temporary_folder", lambda: (folder.mkdir(), str(folder))[1])
    assert main(["demo", *DEMO_SMALL, "--cluster", thread_cluster_yaml, "--keep", "--json"]) == 0
    lines = _stderr_lines(capsys.readouterr().err)
    assert lines[0].startswith(f"demo: working in {shlex.quote(str(folder))} with its own privacy ledger")
    where = f"demo: the data, state, log and ledger are in {shlex.quote(str(folder))}; look with: "
    assert lines[-1].startswith(where)
    for pasted in lines[-1][len(where):].split("; "):
        words = shlex.split(pasted)
        assert words[0] == "pcqr" and main(words[1:]) == 0, pasted
    assert (folder / "replayed.parquet").is_file()
