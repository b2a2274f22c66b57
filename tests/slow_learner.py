"""A learner that takes its time, for tests of what long work shows (tests/test_sign_of_life.py): usable only
when a cluster.yaml lists ``tests.slow_learner`` under ``pcqr: learners: allow:``.

Each fit sleeps ``seconds`` before fitting the nearest-mean classifier of tests/allowed_learner.py, so a
phase that trains k models lasts at least k x seconds / worker threads, whatever the machine.
"""
from __future__ import annotations

import time

import numpy as np

from tests.allowed_learner import NearestMeanClassifier


class SlowClassifier(NearestMeanClassifier):
    """:class:`NearestMeanClassifier`, after ``seconds`` of sleep per fit."""

    def __init__(self, shrink: float = 0.0, seconds: float = 0.01) -> None:
        super().__init__(shrink)
        self.seconds = seconds

    def fit(self, X: np.ndarray, y: np.ndarray) -> SlowClassifier:
        time.sleep(self.seconds)
        super().fit(X, y)
        return self
