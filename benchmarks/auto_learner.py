"""Benchmark ``auto_learner``: ``PrivateClassifier(learner='auto')`` (a tree as deep as n / k rows a
model support, chosen from public parameters: pcqr.pipeline.models.learners.auto_learner) against
the fixed default learner (``stump``), both at the estimator's other defaults (epsilon 1, delta
1e-6, the gate chosen from public parameters, ``after_halt='student'``), issue 26.

Three tasks, 2,000 queries each, accuracy over all 2,000 (every query is answered: the gate, then
the student):

* UCI Adult (benchmarks/utility.py's encoding: 32,561 private rows, 105 columns; the first 2,000
  rows of adult.test as queries); 24% positives.
* XOR: 5 standard-normal features, label 1 iff exactly one of x0, x1 is positive, each label
  flipped with probability 0.1 (Bayes accuracy 0.90; a linear model about 0.5); 200,000 rows.
* Imbalanced nonlinear: 5 standard-normal features, label 1 inside the disc x0^2 + x1^2 < 0.35
  (about 16% positives), flipped with probability 0.02; 200,000 rows.

Beside each: a non-private decision tree (depth 6) and the majority-class rate on the same queries.
Each cell is run ``runs`` times (secure noise: every run differs) and given as min-max.
"""
from __future__ import annotations

import os
import time
import warnings
from typing import Any

import numpy as np

from harness import log, temp_dir, write_cluster_yaml
from adult import ADULT, load_adult
from utility import QUERIES


def _xor(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(rows, 5))
    y = ((X[:, 0] > 0) ^ (X[:, 1] > 0)).astype(np.int8)
    return X, y ^ (rng.random(rows) < 0.1).astype(np.int8)


def _disc(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(rows, 5))
    y = (X[:, 0] ** 2 + X[:, 1] ** 2 < 0.35).astype(np.int8)
    return X, y ^ (rng.random(rows) < 0.02).astype(np.int8)


def _tasks(quick: bool) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    rows = 50_000 if quick else 200_000
    tasks = {}
    if ADULT.exists():
        X, y, X_test, y_test, _ = load_adult(ADULT)
        tasks["adult"] = (X, y, X_test[:QUERIES], y_test[:QUERIES])
    for name, make in (("xor", _xor), ("imbalanced_disc", _disc)):
        X, y = make(rows, 1)
        Q, truth = make(QUERIES, 2)
        tasks[name] = (X, y, Q, truth)
    return tasks


def bench_auto_learner(quick: bool = False) -> dict[str, Any]:
    import pcqr
    from sklearn.tree import DecisionTreeClassifier

    runs = 1 if quick else 3
    out: dict[str, Any] = {"epsilon": 1.0, "delta": 1e-6, "queries": QUERIES, "runs": runs, "tasks": {}}
    with temp_dir("auto_learner") as work:
        cluster = str(write_cluster_yaml(work))
        os.environ.setdefault("PCQR_LEDGER", str(work / "ledger.sqlite"))
        for task, (X, y, Q, truth) in _tasks(quick).items():
            cell: dict[str, Any] = {"private_rows": len(y), "positives": float(np.mean(y)),
                                    "majority_rate": float(max(np.mean(truth), 1 - np.mean(truth))),
                                    "nonprivate_tree_depth6": float(DecisionTreeClassifier(max_depth=6).fit(X, y)
                                                                    .score(Q, truth))}
            for learner in ("stump", "auto"):
                scores, seconds, chosen = [], [], None
                for _ in range(runs):
                    started = time.perf_counter()
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        with pcqr.PrivateClassifier(learner=learner, cluster=cluster) as clf:
                            predicted = clf.fit(X, y).predict(Q)
                            with pcqr.Session.open(clf.state_, cluster=cluster) as session:
                                summary = session.summary()
                    seconds.append(time.perf_counter() - started)
                    scores.append(float(np.mean(predicted == truth)))
                    chosen = {k: summary.get(k) for k in ("gate", "subsamples", "learner")}
                cell[learner] = {"accuracy_min": min(scores), "accuracy_max": max(scores), "seconds": min(seconds),
                                 "session": chosen}
                log(f"auto_learner {task} {learner}: accuracy {min(scores):.3f}-{max(scores):.3f} ({chosen})")
            out["tasks"][task] = cell
    return out
