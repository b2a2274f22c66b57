"""Fault injection for the real-cluster tests: a learner that kills its own Dask worker, once.

``pcqr answer --learner tests.fault_injection.KillOnceClassifier
--learner-param kill_fit=PATH --learner-param kill_predict=PATH`` trains decision stumps
(the same exact ERM as the built-in ``stump`` learner, so the models and therefore every
answer are the same as without the faults). The first ``fit`` anywhere in the cluster
that finds ``kill_fit`` absent creates that file and SIGKILLs the worker process running
it (a training task dies with its worker); the same for the first ``predict`` and
``kill_predict`` (a vote task dies). The marker file is created with O_EXCL, so each
fault happens exactly once however many workers race for it; without the parameters
nothing is killed. With ``--learner-param kills=N`` each kind of fault fires N times,
in N different worker processes (markers PATH, PATH.2, ..., PATH.N).

The class is deliberately neither a ``pcqr.pipeline.models.learners._StumpModel`` nor linear, so the
vote counter calls each model's ``predict`` on the workers (pipeline/models/votes.py's generic
counter): that is where the second fault fires.

Workers import this module as ``tests.fault_injection``: start them from the repository
root with the root on PYTHONPATH.
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin

from pcqr.pipeline.models.learners import best_threshold


def _inside_a_dask_worker() -> bool:
    try:
        from distributed import get_worker

        get_worker()
    except (ImportError, ValueError):
        return False
    return True


def markers(marker: str, kills: int) -> list[str]:
    """The marker files of ``kills`` faults: PATH, PATH.2, ..., PATH.<kills>."""
    return [marker if i == 1 else f"{marker}.{i}" for i in range(1, kills + 1)]


def kill_once(marker: str | None, what: str, kills: int = 1) -> None:
    """SIGKILL this worker process if one of ``markers(marker, kills)`` does not exist yet (and create it)."""
    if not marker or not _inside_a_dask_worker():  # never the driver or the test process
        return
    for path in markers(marker, kills):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            break
        except FileExistsError:
            continue
    else:
        return
    with os.fdopen(fd, "w") as handle:
        handle.write(f"{what} {os.getpid()}\n")
        handle.flush()
        os.fsync(handle.fileno())
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


class KillOnceClassifier(ClassifierMixin, BaseEstimator):
    """Exact ERM decision stumps that kill their worker once in ``fit`` and once in ``predict``."""

    def __init__(self, kill_fit: str | None = None, kill_predict: str | None = None, kills: int = 1) -> None:
        self.kill_fit = kill_fit
        self.kill_predict = kill_predict
        self.kills = kills

    def fit(self, X: np.ndarray, y: np.ndarray) -> KillOnceClassifier:
        kill_once(self.kill_fit, "fit", self.kills)
        X, y = np.asarray(X), np.asarray(y)
        fits = [best_threshold(X[:, j], y) for j in range(X.shape[1])]
        self.feature_ = int(np.argmin([f[2] for f in fits]))
        self.threshold_, self.polarity_, _ = fits[self.feature_]
        self.classes_ = np.array([0, 1])
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        kill_once(self.kill_predict, "predict", self.kills)
        above = np.asarray(X)[:, self.feature_] > self.threshold_
        return (above == bool(self.polarity_)).astype(np.int8)


def pcqr_command(argv: list[str]) -> list[str]:
    """The command line of a new ``pcqr`` process running ``argv`` with this interpreter."""
    return [sys.executable, "-c", "import sys; from pcqr.jobs.cli import main; sys.exit(main(sys.argv[1:]))", *argv]


def cli_env() -> dict[str, str]:
    """The environment for a ``pcqr`` subprocess that must import this checkout's tests too."""
    root = str(Path(__file__).resolve().parents[1])
    return {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}


# A Python process that has imported pcqr's command line once and forks one run of it per request:
# each run starts where a fresh ``pcqr`` would start after its imports (about a second of CPU that
# killing a run 70 times would otherwise pay again each time). Single-threaded, so forking is safe;
# requests and replies are JSON lines: ["run", argv] -> pid, ["poll", pid] -> exit code or null,
# ["wait", pid] -> exit code. A run is its own process group, its output discarded (its stderr kept
# in a file if asked: PreloadedCli.start).
_PRELOADED = r"""
import json, os, sys
import pyarrow.dataset
from pcqr.jobs.cli import COMMANDS, main
for name in sys.argv[1:]:
    __import__("pcqr.jobs." + COMMANDS[name][0])
for line in sys.stdin:
    op, arg = json.loads(line)
    if op == "run":
        # arg: the argv, or {"argv", "stderr" (a file for stderr), "halt" ([Class path, method, stop
        # file]: after that method returns, touch the stop file and wait to be killed)}
        spec = arg if isinstance(arg, dict) else {"argv": arg}
        pid = os.fork()
        if pid == 0:
            os.setpgid(0, 0)
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            if spec.get("stderr"):
                os.dup2(os.open(spec["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 2)
            if spec.get("halt"):
                import importlib, time
                where, name, stop = spec["halt"]
                module, _, cls = where.rpartition(".")
                owner = getattr(importlib.import_module(module), cls)
                original = getattr(owner, name)
                def halting(self, *args, original=original, stop=stop):
                    result = original(self, *args)
                    open(stop, "w").close()
                    while True:
                        time.sleep(1)
                setattr(owner, name, halting)
            code = 1
            try:
                code = main(spec["argv"])
            finally:
                os._exit(code)
        try:
            os.setpgid(pid, pid)  # the child's own call may come second: the group exists when we reply
        except OSError:
            pass  # the child already did it, or has exited
        reply = pid
    else:
        done, status = os.waitpid(arg, os.WNOHANG if op == "poll" else 0)
        reply = os.waitstatus_to_exitcode(status) if done else None
    print(json.dumps(reply), flush=True)
"""


class PreloadedCli:
    """Runs of ``pcqr`` forked from one process that has imported it (see _PRELOADED), for the
    SIGKILL loops; ``commands``: the subcommands to import beforehand. Use as a context manager."""

    def __init__(self, env: dict[str, str], *commands: str) -> None:
        self.server = subprocess.Popen([sys.executable, "-c", _PRELOADED, *commands], env=env, text=True,
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def _ask(self, op: str, arg: object) -> object:
        assert self.server.stdin is not None and self.server.stdout is not None
        self.server.stdin.write(json.dumps([op, arg]) + "\n")
        self.server.stdin.flush()
        reply = self.server.stdout.readline()
        assert reply, f"the preloaded pcqr exited ({self.server.wait()})"
        return json.loads(reply)

    def start(self, argv: list[str], stderr: str | None = None,
              halt: tuple[str, str, str] | None = None) -> PreloadedRun:
        """A forked run of ``argv``; ``stderr``: a file for its stderr (else discarded); ``halt``:
        (class path, method, stop file): once that method returns, the run touches the stop file and
        waits to be killed (a crash at a chosen point, e.g. inside a transaction)."""
        if stderr is None and halt is None:
            return PreloadedRun(self, int(str(self._ask("run", argv))))
        return PreloadedRun(self, int(str(self._ask("run", {"argv": argv, "stderr": stderr, "halt": halt}))))

    def __enter__(self) -> PreloadedCli:
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.server.stdin is not None
        self.server.stdin.close()
        self.server.wait(timeout=60)


class PreloadedRun:
    """One forked run: the part of subprocess.Popen the loops use (pid, poll, wait)."""

    def __init__(self, cli: PreloadedCli, pid: int) -> None:
        self.cli, self.pid, self.returncode = cli, pid, None

    def _reap(self, op: str) -> int | None:
        if self.returncode is None:
            reply = self.cli._ask(op, self.pid)
            self.returncode = None if reply is None else int(str(reply))
        return self.returncode

    def poll(self) -> int | None:
        return self._reap("poll")

    def wait(self) -> int:
        code = self._reap("wait")
        assert code is not None
        return code


def sigkill_at_a_random_moment(cli: PreloadedCli, argv: list[str], rng: random.Random,
                               published: Callable[[], int]) -> tuple[bool, bool]:
    """Start a ``pcqr`` run of ``argv`` (its imports done: see PreloadedCli) and SIGKILL its process
    group: half the time after a random 0-1.5 s (start-up, recovery or the loop; a fresh interpreter
    would first spend about a second importing, so this is the 0-2.5 s of a new process), half just
    after it publishes one more log batch (``published()`` counts them). Returns (waited for the
    answer loop, killed it alive)."""
    before = published()
    proc = cli.start(argv)
    in_loop = rng.random() >= 0.5
    if not in_loop:
        time.sleep(rng.uniform(0.0, 1.5))
    else:
        deadline = time.monotonic() + 60
        while published() <= before and proc.poll() is None:
            assert time.monotonic() < deadline, "the answer run made no progress"
            time.sleep(0.005)
        time.sleep(rng.uniform(0.0, 0.05))
    killed = proc.poll() is None
    if killed:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return in_loop, killed
