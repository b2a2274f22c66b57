"""Benchmark ``multiclass`` (issue 49): pcqr's defaults over c > 2 classes beside their own teachers and
DP logistic regression, each measured as a user would meet it.

Every cell: 2,000 queries, accuracy over all of them (an unanswered query counts as wrong), delta 1e-6,
``queries_max`` 2,000, ``Session.create(..., classes=c)`` and nothing else: the plan chooses gnmax (the
only gate built for c classes), M, k and the teachers. Secure noise: RUNS runs a cell, min, max and
mean. Beside each, the teachers' noise-free plurality vote on the same queries (read from the run's own
model files: private, read here because this is a benchmark on data we made or hold), and
diffprivlib's multi-class LogisticRegression (one-vs-rest, fresh noise, PEER_FITS fits; benchmarks/peers.py's
side environment).

Tasks:

* ``adult_relationship`` (6 classes) and ``adult_marital`` (7 classes): UCI Adult's relationship and
  marital-status from the other columns of the usual 35-column encoding (benchmarks/adult.py, the
  target's own columns left out; 32,561 private rows, the first 2,000 rows of adult.test the queries).
  Skipped when the files are absent.
* ``five`` and ``five_1e6``: ``pcqr generate --kind agnostic --concept halfspace --classes 5 --noise 0.05
  --features 6`` (seed 13) at 10^5 and 10^6 rows: the argmax of five seeded linear scores, 5% of the
  labels moved to another class (Bayes accuracy 0.95).

Run: ``python benchmarks/multiclass.py --out /tmp/multiclass.json [--tasks five five_1e6] [--runs 5]
[--epsilons 1 2] [--no-peers]``; it prints the markdown table.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from accuracy import PEER_FITS, QUERIES, RUNS, _range, arguments, cell, generate_arrays, print_and_save, write_tasks
from adult import ADULT, load_adult, norm_bound
from harness import temp_dir, write_cluster_yaml
from peers import peer_accuracy

EPSILONS = (1.0, 2.0)
#: name -> (Adult's target column, its classes)
ADULT_TASKS = {"adult_relationship": ("relationship", 6), "adult_marital": ("marital-status", 7)}
#: name -> the rows of the generated five-class task
GENERATED = {"five": 10**5, "five_1e6": 10**6}
CLASSES = 5


def generated_arrays(work: Path, rows: int, cluster: str) -> tuple[np.ndarray, ...]:
    """(X, y, Q, truth) of ``pcqr generate`` (the module docstring) at ``rows`` private rows."""
    return generate_arrays(work / f"five-{rows}", ["--kind", "agnostic", "--concept", "halfspace", "--classes",
                                                   str(CLASSES), "--noise", "0.05", "--rows", str(rows), "--features",
                                                   "6"], cluster)


def tasks(work: Path, wanted: list[str], cluster: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, (target, classes) in ADULT_TASKS.items():
        if name in wanted and ADULT.exists():
            X, y, Xt, yt, _ = load_adult(ADULT, "usual", target)
            out[name] = {"arrays": (X, y, Xt[:QUERIES], yt[:QUERIES]), "classes": classes,
                         "peer": {"data_norm": norm_bound("usual")}}
    for name, rows in GENERATED.items():
        if name in wanted:
            out[name] = {"arrays": generated_arrays(work, rows, cluster), "classes": CLASSES,
                         "peer": {"data_norm": 6.0}}
    return write_tasks(work, out)


def bench_multiclass(wanted: list[str] | None = None, runs: int | None = None,
                     epsilons: tuple[float, ...] | None = None, peers: bool = True) -> dict[str, Any]:
    runs, epsilons = runs or RUNS, epsilons or EPSILONS
    out: dict[str, Any] = {"runs": runs, "epsilons": list(epsilons)}
    with temp_dir("multiclass") as work:
        cluster = str(write_cluster_yaml(work))
        for name, task in tasks(work, wanted or [*ADULT_TASKS, *GENERATED], cluster).items():
            result: dict[str, Any] = {"classes": task["classes"], "defaults": {}}
            for eps in epsilons:
                result["defaults"][str(eps)] = cell(task, eps, runs, work / name, cluster, "defaults")
            if peers:
                result["dp_logistic"] = peer_accuracy("dp_logistic", task["arrays"], list(epsilons), PEER_FITS,
                                                      data_norm=task["peer"]["data_norm"])
            X, y, Q, truth = task["arrays"]
            result["majority_class"] = float(np.mean(truth == np.bincount(y).argmax()))  # the public floor
            out[name] = result
    out["table"] = table(out)
    return out


def table(out: dict[str, Any]) -> str:
    lines = ["| task | c | eps | pcqr defaults | plan (M, k) | teachers' noise-free vote | DP-LR (fresh noise) "
             "| the largest class |", "|---|---|---|---|---|---|---|---|"]
    for name, result in out.items():
        if not isinstance(result, dict) or "defaults" not in result:
            continue
        for eps, cell_ in result["defaults"].items():
            plan = cell_["plan"]
            peer = result.get("dp_logistic", {}).get(eps)
            lines.append(f"| {name} | {result['classes']} | {eps} | {_range(cell_['accuracy'])} | {plan['labels']:,}, "
                         f"{plan['k']:,} | {_range(cell_['teachers'])} | {_range(peer)} | "
                         f"{result['majority_class']:.3f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = arguments(__doc__.split("\n\n")[0], " ".join([*ADULT_TASKS, *GENERATED]), EPSILONS).parse_args(argv)
    return print_and_save(bench_multiclass(args.tasks, args.runs, tuple(args.epsilons) if args.epsilons else None,
                                           not args.no_peers), args.out)


if __name__ == "__main__":
    raise SystemExit(main())
