"""A sign of life on long work (issue 47, item 5): a fit of 198 s printed nothing, and an S3 endpoint that
accepted connections and never answered took 183 s to fail.

* pipeline/session/progress.py: a phase (``Reporter.phase``) shows a live line on a terminal (a bar
  when counted, a spinner and the time when not), elsewhere a line after every interval of silence,
  counted across phases (stderr off a terminal; the ``pcqr`` logger in the library: INFO, WARNING
  for PrivateClassifier), from a thread that stops with the phase. The interval is a parameter: the
  tests beat every 20 ms (in use 15 s).
* The phases wired: ``pcqr train``'s training, PrivateClassifier's fit, the student's fit.
* pipeline/data/object_store.py: connect and request timeouts, settable in cluster.yaml's ``pcqr:
  storage:``; an endpoint that never answers is one line naming the location and the setting.

No assertion is timed but upper bounds that catch a hang.
"""
from __future__ import annotations

import io
import logging
import os
import pickle
import re
import socket
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

from pcqr.jobs import common
from pcqr.jobs.cli import main
from pcqr.pipeline.data import object_store
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.session import progress
from pcqr.pipeline.session.progress import Console, Phase, Reporter
from tests.conftest import MECHANICS, STABILITY, privacy_options, threshold_data, write_parquet

BEAT = 0.02  # the tests' heartbeat interval, seconds
SLOW = "tests.slow_learner.SlowClassifier"


class Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def _console(stream: io.StringIO, **kwargs: float) -> tuple[Console, Reporter]:
    console = Console(stream=lambda: stream, **kwargs)
    return console, Reporter(note=console.note, shows=console.shows)


def _heartbeat_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("pcqr progress")]


# --- the reporter ----------------------------------------------------------------------------------


def test_a_phase_line_says_what_how_far_and_how_long() -> None:
    now = [100.0]
    counted = Phase("training models", 120, "models", clock=lambda: now[0])
    uncounted = Phase("checking queries", clock=lambda: now[0])
    counted.update(30)
    counted.update(7)
    now[0] += 45.4
    assert counted.line() == "training models: 37 of 120 models, 45 s"
    now[0] += 200
    assert uncounted.line() == "checking queries: 4 min 05 s"
    now[0] += 7200
    assert uncounted.line() == "checking queries: 2 h 04 min"


def test_an_uncounted_phase_beats_off_a_terminal_and_stops_with_it() -> None:
    stream = io.StringIO()
    _, reporter = _console(stream, interval=BEAT)
    with reporter.phase("reading the log"):
        time.sleep(BEAT * 15)
    beats = stream.getvalue().splitlines()
    assert len(beats) >= 2 and all(re.fullmatch(r"reading the log: \d+ s", b) for b in beats), beats
    assert not _heartbeat_threads()  # joined when the phase ended
    time.sleep(BEAT * 5)
    assert stream.getvalue().splitlines() == beats


def test_a_counted_phase_beats_with_its_count_and_a_short_one_says_nothing() -> None:
    stream = io.StringIO()
    _, reporter = _console(stream, interval=BEAT)
    with reporter.phase("training models", total=10, unit="models") as phase:
        phase.update(3)
        time.sleep(BEAT * 15)
    beats = stream.getvalue().splitlines()
    assert beats and all(re.fullmatch(r"training models: 3 of 10 models, \d+ s", b) for b in beats), beats
    quiet = io.StringIO()
    _, reporter = _console(quiet, interval=60)
    with reporter.progress(2, "answering queries") as bar:  # the older call: a counted phase
        bar.update(2)
    reporter.note("done")
    assert quiet.getvalue() == "done\n"


def test_silence_is_counted_across_short_phases_and_starts_again_after_a_pause() -> None:
    stream = io.StringIO()
    _, reporter = _console(stream, interval=BEAT * 5)
    for step in range(8):  # each phase shorter than the interval, together 4 intervals: no 4 intervals of silence
        with reporter.phase(f"step {step}"):
            time.sleep(BEAT * 2.5)
    beats = stream.getvalue().splitlines()
    assert len(beats) >= 2 and all(re.fullmatch(r"step \d: \d+ s", b) for b in beats), beats
    quiet = io.StringIO()
    _, reporter = _console(quiet, interval=0.5)
    for _ in range(2):  # two short phases a pause apart: the second's silence starts at its start
        with reporter.phase("short"):
            time.sleep(0.02)
        time.sleep(1.0)
    assert quiet.getvalue() == ""


def test_a_terminal_gets_a_live_line_that_notes_clear_and_that_stays_when_done() -> None:
    terminal = Terminal()
    _, reporter = _console(terminal, interval=60, redraw=BEAT, keep=0)
    with reporter.phase("training models", total=10, unit="models") as phase:
        phase.update(4)
        time.sleep(BEAT * 10)
        reporter.note("a note")
        time.sleep(BEAT * 10)
    with reporter.phase("fitting the student"):
        time.sleep(BEAT * 10)
    shown = terminal.getvalue()
    assert re.search(r"\rtraining models \[#+-+\] 4/10 models \d+ s\x1b\[K", shown), repr(shown)
    assert "\r\x1b[Ka note\n" in shown  # the live line cleared, the note on a line of its own
    assert re.search(r"\rtraining models \[#+-+\] 4/10 models \d+ s\x1b\[K\r\x1b\[Ktraining models: 4 of 10 "
                     r"models, \d+ s\n", shown), repr(shown)  # drawn again after the note, then its last line
    assert re.search(r"\rfitting the student [|/\\-] \d+ s\x1b\[K", shown), repr(shown)  # a spinner: no count
    assert re.search(r"fitting the student: \d+ s\n$", shown), repr(shown)
    assert not _heartbeat_threads()
    brief = Terminal()
    _, reporter = _console(brief, interval=60, redraw=BEAT)  # a phase shorter than 2 s is erased when done
    with reporter.phase("checking queries"):
        time.sleep(BEAT * 10)
    assert re.search(r"\rchecking queries [|/\\-] \d+ s", brief.getvalue()), repr(brief.getvalue())
    assert brief.getvalue().endswith("\r\x1b[K")
    failing = Terminal()
    _, reporter = _console(failing, interval=60, redraw=BEAT, keep=0)
    with pytest.raises(PcqrError):  # a failed phase leaves no last line: the error is the line
        with reporter.phase("reading the log"):
            time.sleep(BEAT * 10)
            raise PcqrError("s3://b/log: no answer")
    assert "\rreading the log " in failing.getvalue() and failing.getvalue().endswith("\r\x1b[K")
    assert "reading the log:" not in failing.getvalue()


def test_the_library_logs_its_beats(caplog: pytest.LogCaptureFixture) -> None:
    reporter = Reporter(shows=progress.logged(logging.INFO, interval=BEAT))
    with caplog.at_level(logging.INFO, logger="pcqr"):
        with reporter.phase("training models", total=5, unit="models"):
            time.sleep(BEAT * 15)
    records = [r for r in caplog.records if r.name == "pcqr"]
    assert records and {r.levelno for r in records} == {logging.INFO}
    assert all(re.fullmatch(r"training models: 0 of 5 models, \d+ s", r.getMessage()) for r in records)


@pytest.mark.parametrize("name, level", [("LOGGING", logging.INFO), ("ESTIMATOR", logging.WARNING)])
def test_the_default_reporters_beat_every_heartbeat_interval(name: str, level: int, caplog: pytest.LogCaptureFixture,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "HEARTBEAT_S", BEAT)  # read when a phase starts
    with caplog.at_level(logging.DEBUG, logger="pcqr"):
        with getattr(progress, name).phase("voting"):
            time.sleep(BEAT * 15)
    assert {r.levelno for r in caplog.records if r.name == "pcqr"} == {level}


# --- the phases wired ------------------------------------------------------------------------------


@pytest.fixture
def slow_cluster(tmp_path: Path, thread_cluster_yaml: str) -> str:
    """A cluster of threads whose cluster.yaml allows the slow learner."""
    allowing = tmp_path / "allowing.yaml"
    allowing.write_text(Path(thread_cluster_yaml).read_text() + "  learners:\n    allow: [tests.slow_learner]\n")
    return str(allowing)


def test_pcqr_train_beats_on_stderr_when_it_is_not_a_terminal(tmp_path: Path, slow_cluster: str,
                                                              capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(common.CONSOLE.heartbeat, "interval", BEAT)
    write_parquet(str(tmp_path / "private/part-0.parquet"), threshold_data(5000, seed=1))
    capsys.readouterr()
    code = main(["train", "--private", str(tmp_path / "private"), "--state", str(tmp_path / "state"),
                 "--cluster", slow_cluster, "--queries-max", "100000", *privacy_options(MECHANICS), *STABILITY,
                 "--learner", SLOW, "--learner-param", "seconds=0.02"])  # 50 models: at least 0.5 s on 2 threads
    out, err = capsys.readouterr()
    assert code == 0, err
    beats = [line for line in err.splitlines() if line.startswith("training models")]
    assert len(beats) >= 2, err
    assert all(re.fullmatch(r"training models: \d+ of 50 models, \d+ s", b) for b in beats), beats
    assert "models" in out  # the summary, on stdout as before


def test_a_private_classifier_fit_says_it_is_working_without_any_logging_set_up(
        tmp_path: Path, slow_cluster: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    import pcqr

    monkeypatch.setattr(progress, "HEARTBEAT_S", BEAT)
    data = threshold_data(2000, seed=3)
    X, y = np.column_stack([data["x0"], data["x1"], data["x2"]]), data["label"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pcqr.PrivateClassifier(epsilon=8.0, subsamples=20, learner=SLOW, learner_params={"seconds": 0.03},
                                    cluster=slow_cluster) as clf:
            clf.fit(X, y)
    beats = [r for r in caplog.records if r.name == "pcqr" and r.getMessage().startswith("training models")]
    assert beats, [r.getMessage() for r in caplog.records]
    assert {r.levelno for r in beats} == {logging.WARNING}  # shown by Python's default logging (stderr)
    assert all(re.fullmatch(r"training models: \d+ of 20 models, \d+ s", r.getMessage()) for r in beats)


def test_the_students_fit_beats() -> None:
    from pcqr.pipeline.session.distillation import TeacherAnswers, fit_on_teacher

    stream = io.StringIO()
    _, reporter = _console(stream, interval=BEAT)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 2))
    answers = TeacherAnswers(X, (X[:, 0] > 0).astype(np.int8), 200)
    chosen, model = fit_on_teacher(answers, {"name": SLOW, "params": {"seconds": BEAT * 15}},
                                   ("tests.slow_learner",), reporter)
    assert chosen["name"] == SLOW and model.predict(X[:5]).shape == (5,)
    beats = stream.getvalue().splitlines()
    assert beats and all(re.fullmatch(r"fitting the student on 200 answers: \d+ s", b) for b in beats), beats


# --- object storage: timeouts ----------------------------------------------------------------------


class SilentEndpoint:
    """A TCP server on 127.0.0.1 that accepts every connection and never sends a byte."""

    def __init__(self) -> None:
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"http://127.0.0.1:{self.socket.getsockname()[1]}"
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                self.held.append(self.socket.accept()[0])
            except OSError:  # closed
                return

    def close(self) -> None:
        self.socket.close()
        for connection in self.held:
            connection.close()


@pytest.fixture
def silent() -> Iterator[SilentEndpoint]:
    server = SilentEndpoint()
    try:
        yield server
    finally:
        server.close()


def test_settings_hold_the_timeouts_and_reach_the_workers() -> None:
    from pcqr.pipeline.data.cluster import StorageSettings

    assert (object_store.S3Settings().connect_timeout, object_store.S3Settings().request_timeout) == (10.0, 30.0)
    chosen = object_store.settings_from({}, {"connect-timeout": 1.5, "request-timeout": 4})
    assert (chosen.connect_timeout, chosen.request_timeout) == (1.5, 4.0)
    plugin = pickle.loads(pickle.dumps(StorageSettings(chosen)))  # as the worker receives it
    try:
        plugin.setup(None)
        assert object_store.current().request_timeout == 4.0
    finally:
        object_store.configure(None)
    with pytest.raises(PcqrError, match=r"^cluster.yaml: pcqr.storage.request-timeout: expected a number of "
                                        r"seconds in \(0, 3600\], got 0$"):
        object_store.settings_from({}, {"request-timeout": 0})


def test_an_endpoint_that_never_answers_a_read_fails_in_one_line(tmp_path: Path, silent: SilentEndpoint) -> None:
    (tmp_path / "cluster.yaml").write_text("pcqr:\n  storage:\n    connect-timeout: 2\n    request-timeout: 2\n")
    env = {**os.environ, "AWS_ENDPOINT_URL": silent.endpoint, "AWS_REGION": "us-east-1",
           "AWS_ACCESS_KEY_ID": "AKIAPCQRSILENT", "AWS_SECRET_ACCESS_KEY": "silent-secret"}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pcqr.jobs.cli", "replay", "s3://bucket/log"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)
    took = time.monotonic() - started
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0] == ("pcqr: error: s3://bucket/log: no answer from the S3 endpoint within 2 s "
                        "(pcqr: storage: request-timeout; 3 attempts)"), lines[0]
    assert took < 30, took  # 3 attempts of 2 s, with the interpreter's start (was 181 s at 60 s a request)


def test_an_endpoint_that_never_answers_a_write_fails_in_one_line(silent: SilentEndpoint) -> None:
    object_store.configure(object_store.S3Settings(
        endpoint_url=silent.endpoint, region="us-east-1", access_key_id="AKIAPCQRSILENT",
        secret_access_key="silent-secret", connect_timeout=1, request_timeout=1))
    started = time.monotonic()
    try:
        with pytest.raises(PcqrError) as refused:
            object_store.put("s3://bucket/key", b"data")
    finally:
        object_store.configure(None)
    assert str(refused.value) == ("s3://bucket/key: no answer from the S3 endpoint within 1 s "
                                  "(pcqr: storage: request-timeout; 3 attempts)")
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("message, setting", [
    ("When getting information for key 'log' in bucket 'b': AWS Error NETWORK_CONNECTION during HeadObject "
     "operation: curlCode: 28, Timeout was reached; Details: Operation too slow. Less than 1 bytes/s", "request"),
    ("AWS Error NETWORK_CONNECTION during HeadObject operation: curlCode: 28, Timeout was reached; Details: "
     "Connection timed out after 2001 milliseconds", "connect"),
    ("AWS Error NETWORK_CONNECTION during HeadObject operation: curlCode: 7, Couldn't connect to server", None),
    ("[Errno 2] No such file or directory", None),
])
def test_an_arrow_timeout_is_told_from_other_failures(message: str, setting: str | None) -> None:
    settings = object_store.S3Settings(connect_timeout=2, request_timeout=5)
    object_store.configure(settings)
    try:
        line = object_store.timed_out("s3://b/log", OSError(message))
    finally:
        object_store.configure(None)
    if setting is None:
        assert line is None
    else:
        assert line is not None and str(line) == (
            f"s3://b/log: no answer from the S3 endpoint within {2 if setting == 'connect' else 5} s "
            f"(pcqr: storage: {setting}-timeout; 3 attempts)")
