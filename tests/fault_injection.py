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


def cli_env() -> dict[str, str]:
    """The environment for a ``pcqr`` subprocess that must import this checkout's tests too."""
    root = str(Path(__file__).resolve().parents[1])
    return {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}


def sigkill_at_a_random_moment(argv: list[str], env: dict[str, str], rng: random.Random,
                               published: Callable[[], int]) -> tuple[bool, bool]:
    """Start ``argv`` in its own process group and SIGKILL the group: half the time after a random
    0-2.5 s (start-up, recovery or the loop), half just after it publishes one more log batch
    (``published()`` counts them). Returns (waited for the answer loop, killed it alive)."""
    before = published()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                            start_new_session=True)
    in_loop = rng.random() >= 0.5
    if not in_loop:
        time.sleep(rng.uniform(0.0, 2.5))
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
