"""Fit the DP peers of benchmarks/utility.py and score them: a script run by benchmarks/peers.py.

    python peer_fit.py FOLDER

FOLDER (private, removed by the caller) holds X.npy and y.npy (the private rows), Q.npy and
truth.npy (the queries pcqr answers and their labels) and jobs.json, a list of
``{"peer": "dp_logistic" | "dp_ebm", "epsilon": e, "delta": d, "seed": s | null, "data_norm": B,
"bounds": [lo, hi], "params": {...}}``; it writes results.json, one accuracy on the queries per job, in
order. ``seed`` null: fresh noise (the peer's own random source, different in every fit), as a user
gets it; ``params``: settings passed to the estimator over its defaults (DP-EBM's tuned grid).

It imports numpy, scikit-learn and the peer's own library only, never pcqr: it runs in the side
environment where diffprivlib 0.6.6 imports (beside scikit-learn 1.7.2), or in pcqr's own for DP-EBM.

* ``dp_logistic``: diffprivlib's LogisticRegression (objective perturbation, pure epsilon; Chaudhuri,
  Monteleoni and Sarwate 2011), ``data_norm`` the public bound on a row's L2 norm (rows beyond it are
  clipped by diffprivlib).
* ``dp_ebm``: InterpretML's DPExplainableBoostingClassifier (Nori, Caruana et al. 2021) at its
  default settings or the job's ``params``, (epsilon, delta), every feature continuous with the public ``bounds`` (so no
  budget is spent on finding them; values outside are clipped).
"""
from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np


def fit(job: dict[str, Any], X: np.ndarray, y: np.ndarray) -> Any:
    """The peer ``job["peer"]`` fitted on (X, y) with the job's budget and seed."""
    if job["peer"] == "dp_logistic":
        from diffprivlib.models import LogisticRegression

        return LogisticRegression(epsilon=job["epsilon"], data_norm=job["data_norm"], random_state=job["seed"],
                                  max_iter=2000, **job.get("params", {})).fit(X, y)
    if job["peer"] == "dp_ebm":
        from interpret.privacy import DPExplainableBoostingClassifier

        lo, hi = job["bounds"]
        return DPExplainableBoostingClassifier(
            feature_types=["continuous"] * X.shape[1], privacy_bounds=np.array([(lo, hi)] * X.shape[1]),
            epsilon=job["epsilon"], delta=job["delta"], random_state=job["seed"], n_jobs=1, **job.get("params", {})).fit(np.clip(X, lo, hi), y)
    raise ValueError(f"unknown peer {job['peer']!r}")


def main(folder: Path) -> None:
    X, y, Q, truth = (np.load(folder / f"{name}.npy") for name in ("X", "y", "Q", "truth"))
    accuracies = []
    for job in json.loads((folder / "jobs.json").read_text()):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = fit(job, X, y)
        accuracies.append(float(np.mean(model.predict(Q) == truth)))
    (folder / "results.json").write_text(json.dumps(accuracies))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
