"""The DP peers beside pcqr in benchmarks/utility.py (issue 29, item 5), each run where it imports.

* DP logistic regression: IBM's diffprivlib. Its last release (0.6.6) does not import with
  scikit-learn 1.9 (it imports sklearn.tree._tree.DOUBLE and passes LogisticRegression(multi_class=...),
  both removed), so the benchmark makes, once, a side environment with scikit-learn 1.7.2 and
  diffprivlib 0.6.6 (``pip install`` from the package registries) in a cache folder outside the
  repository: ``$PCQR_PEERS_ENV``, else ~/.cache/pcqr-bench/peers-diffprivlib-0.6.6-sklearn-1.7.2.
  It is reused while its ``ready`` file is there (delete the folder to remake it).
* DP-EBM: InterpretML's DPExplainableBoostingClassifier (interpret-core) imports beside pcqr's
  scikit-learn: the ``bench`` extra installs it (``pip install 'pcqr[bench]'``), and it runs in pcqr's
  own interpreter.

Either way the peer runs in a subprocess (benchmarks/peer_fit.py) on the same arrays as pcqr, passed as
.npy files in a private temporary folder (mode 0700, removed afterwards). A peer that cannot run gives
its cell as "unavailable: <why>".
"""
from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from harness import SUBPROCESS_TIMEOUT, log, temp_dir

SIDE_PACKAGES = ("scikit-learn==1.7.2", "diffprivlib==0.6.6")
SIDE_ENV = Path(os.environ.get("PCQR_PEERS_ENV")
                or Path.home() / ".cache" / "pcqr-bench" / "peers-diffprivlib-0.6.6-sklearn-1.7.2")
PEER_FIT = Path(__file__).resolve().parent / "peer_fit.py"
PEERS = ("dp_logistic", "dp_ebm")


class PeerUnavailable(Exception):
    """A peer that cannot run here; the message says why."""


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


@functools.cache
def side_python() -> Path:
    """The side environment's interpreter, made on first use (PeerUnavailable if it cannot be)."""
    python, ready = SIDE_ENV / "bin" / "python", SIDE_ENV / "ready"
    if ready.exists():
        return python
    log(f"peers: making {SIDE_ENV} ({', '.join(SIDE_PACKAGES)})")
    steps = ([sys.executable, "-m", "venv", "--clear", str(SIDE_ENV)],
             [str(python), "-m", "pip", "install", "-q", *SIDE_PACKAGES],
             [str(python), "-c", "from diffprivlib.models import LogisticRegression; LogisticRegression(epsilon=1.0)"])
    for step in steps:
        try:
            done = subprocess.run(step, capture_output=True, text=True, timeout=1800)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise PeerUnavailable(f"cannot make {SIDE_ENV}: {exc}") from None
        if done.returncode != 0:
            raise PeerUnavailable(f"cannot make {SIDE_ENV}: {' '.join(step[2:4])}: {_last_line(done.stderr)}")
    ready.write_text(" ".join(SIDE_PACKAGES) + "\n")
    return python


def peer_python(peer: str) -> Path | str:
    """The interpreter ``peer`` runs in (PeerUnavailable, with why, if none)."""
    if peer == "dp_logistic":
        return side_python()
    if importlib.util.find_spec("interpret") is None:
        raise PeerUnavailable("interpret-core is not installed beside pcqr (pip install 'pcqr[bench]')")
    return sys.executable


def spread(values: list[float]) -> dict[str, Any]:
    """A cell: the range over the runs, their mean, and every run."""
    return {"min": min(values), "max": max(values), "mean": float(np.mean(values)), "runs": values}


def peer_accuracy(peer: str, data: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], epsilons: list[float],
                  seeds: int, fresh: bool = True, params: dict[str, Any] | None = None,
                  **options: Any) -> dict[str, Any]:
    """``peer`` fitted on (X, y) ``seeds`` times per epsilon, scored on the queries Q against ``truth``:
    {str(eps): spread} or {"unavailable": why}. ``fresh``: every fit draws fresh noise (random_state
    None, as a user runs it: issue 48 found fixed seeds 0, 1, 2 understated the spread); else
    random_state 0, 1, ... ``params``: the estimator's settings over its defaults (a tuned grid
    point). ``options``: data_norm (dp_logistic), bounds and delta (dp_ebm)."""
    jobs = [{"peer": peer, "epsilon": eps, "seed": None if fresh else seed, "params": params or {}, **options}
            for eps in epsilons for seed in range(seeds)]
    try:
        python = peer_python(peer)
        with temp_dir(f"peer-{peer}") as folder:
            for name, array in zip(("X", "y", "Q", "truth"), data):
                np.save(folder / f"{name}.npy", array)
            (folder / "jobs.json").write_text(json.dumps(jobs))
            done = subprocess.run([str(python), str(PEER_FIT), str(folder)], capture_output=True, text=True,
                                  timeout=SUBPROCESS_TIMEOUT)
            if done.returncode != 0:
                raise PeerUnavailable(f"{PEER_FIT.name} failed: {_last_line(done.stderr)}")
            accuracies = json.loads((folder / "results.json").read_text())
    except PeerUnavailable as exc:
        log(f"peers: {peer} unavailable: {exc}")
        return {"unavailable": str(exc)}
    cells = {str(eps): spread(accuracies[i * seeds:(i + 1) * seeds]) for i, eps in enumerate(epsilons)}
    log(f"peers: {peer} {params or ''} " + ", ".join(f"eps {e}: {c['min']:.3f}-{c['max']:.3f} (mean {c['mean']:.3f})"
                                             for e, c in cells.items()))
    return cells
