"""Benchmark ``teacher_rules`` (issue 48): the public rules behind pcqr's defaults, measured offline.

Not a session: for each task, seed and setting, k teachers (decision trees) are trained in this
process on k disjoint subsamples of the private rows, gnmax's noise is simulated with NumPy at the
sigma and k pcqr's plan would use (``gate_choice.gate_parameters``; continuous Gaussians, not pcqr's
discrete sampler: these are measurements of the rules, never releases), the first M of a stream of
2,000 queries get the noisy majority and pcqr's cross-validated student
(``student_selection.select_student`` / ``public_guess.fit_student``) answers the rest. Figures:
``vote`` (the teachers' noise-free majority on the 2,000 queries) and ``stream`` (accuracy over all
2,000, noisy answers then the student). benchmarks/accuracy.py measures the chosen defaults end to end.

* ``depth``: at pcqr's default M and k, the teachers' depth by the old rule (round(log2(n/k)) - 3, in
  [1, 6]) against the new one (``learners.auto_learner``: - 1, in [3, 6]).
* ``labels``: M = 200, 500, 1,000, 2,000 at each eps, k = gnmax's for M (raised to n / 250): the
  basis of ``gate_choice.LABELS_MIN_ROWS_PER_MODEL`` and ``LABELS_NEAR_FLOOR``.
* ``small``: the 4,300-row task at M = 50, 100, 200 and 10 or 20 rows a model: the basis of
  ``gate_choice.SMALL_DATA_LABELS``.

Tasks: ``mid`` and ``small`` of benchmarks/accuracy.py, Adult (35 columns; skipped without its files),
and ``corner`` (10^5 rows, 5 features, label 1 iff x0 > 0.524 and x1 > 0.524: 9% positive) and
``xor`` (10^5 rows, 5 features, 10% flipped), generated here with NumPy.

Run: ``python benchmarks/teacher_rules.py --part depth labels small --seeds 2 --out FILE.json``
(~25 minutes for all three at 2 seeds on 2 cores).
"""
from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np

from accuracy import mid_arrays, small_arrays
from adult import ADULT, load_adult
from harness import log

STREAM = 2000
Arrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _corner(seed: int, rows: int = 10**5) -> Arrays:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((rows + STREAM, 5))
    y = ((X[:, 0] > 0.524) & (X[:, 1] > 0.524)).astype(np.int8)
    return X[:rows], y[:rows], X[rows:], y[rows:]


def _xor(seed: int, rows: int = 10**5) -> Arrays:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((rows + STREAM, 5))
    y = (((X[:, 0] > 0) ^ (X[:, 1] > 0)) ^ (rng.random(rows + STREAM) < 0.1)).astype(np.int8)
    return X[:rows], y[:rows], X[rows:], y[rows:]


def _adult(seed: int) -> Arrays:
    X, y, Q, truth, _ = load_adult(ADULT, "usual")
    return X, y, Q[:STREAM], truth[:STREAM]


TASKS: dict[str, Callable[[int], Arrays]] = {
    "mid": lambda seed: mid_arrays(seed=seed), "small": lambda seed: small_arrays(seed=seed),  # 2,000 queries each
    "adult": _adult, "corner": _corner, "xor": _xor,
}


def old_depth(rows_per_model: int) -> int:
    """The auto rule before issue 48."""
    return min(6, max(1, round(np.log2(max(rows_per_model, 1))) - 3))


def new_depth(rows_per_model: int) -> int:
    from pcqr.pipeline.models.learners import auto_learner

    return int(auto_learner(rows_per_model)[1]["max_depth"])


def run(arrays: Arrays, seed: int, eps: float, labels: int, k: int, depth: int) -> dict[str, float]:
    """One offline run (the module docstring): the teachers' vote and the stream's accuracy."""
    from sklearn.tree import DecisionTreeClassifier

    from pcqr.pipeline.gates.public_guess import fit_student
    from pcqr.pipeline.models.student_selection import select_student
    from pcqr.pipeline.privacy.gate_choice import gate_parameters

    X, y, Q, truth = arrays
    sigma = gate_parameters("gnmax", eps, 1e-6, 20, labels, 0.05, None).lam
    ones = np.zeros(len(Q))
    for part in np.array_split(np.random.default_rng(seed).permutation(len(y)), k):
        if part.size and y[part].min() != y[part].max():
            ones += DecisionTreeClassifier(max_depth=depth).fit(X[part], y[part]).predict(Q)
        elif part.size:
            ones += y[part][0]
    rng = np.random.default_rng(1000 * seed + labels)
    noisy = (ones + rng.normal(0, sigma, len(Q)) > (k - ones) + rng.normal(0, sigma, len(Q))).astype(np.int8)
    answers = noisy
    if labels < len(Q):
        named, _ = select_student({"name": "cross-validated", "params": {}}, Q[:labels], noisy[:labels])
        student = fit_student(named, Q[:labels], noisy[:labels])
        answers = np.concatenate([noisy[:labels], student.predict(Q[labels:])])
    return {"vote": float(np.mean((2 * ones > k) == truth)), "stream": float(np.mean(answers == truth))}


def _k(rows: int, eps: float, labels: int) -> int:
    from pcqr.pipeline.privacy.gate_choice import gate_parameters

    return gate_parameters("gnmax", eps, 1e-6, 20, labels, 0.05, None).for_rows(rows).subsamples


def part_depth(tasks: list[str], seeds: int) -> list[dict[str, Any]]:
    from pcqr.pipeline.privacy.gate_choice import recommend_labels

    out = []
    for name in tasks:
        for seed in range(seeds):
            arrays = TASKS[name](seed)
            rows = len(arrays[1])
            labels, _, k, _ = recommend_labels(rows, 1.0, 1e-6, 20, STREAM, 0.05)
            for rule, depth in (("old", old_depth(rows // k)), ("new", new_depth(rows // k))):
                out.append({"task": name, "seed": seed, "M": labels, "k": k, "rule": rule, "depth": depth,
                            **run(arrays, seed, 1.0, labels, k, depth)})
                log(f"teacher_rules depth: {out[-1]}")
    return out


def part_labels(tasks: list[str], seeds: int, epsilons: tuple[float, ...] = (0.5, 1.0, 2.0)) -> list[dict[str, Any]]:
    out = []
    for name in tasks:
        for seed in range(seeds):
            arrays = TASKS[name](seed)
            rows = len(arrays[1])
            for eps in epsilons:
                for labels in (200, 500, 1000, 2000):
                    k = _k(rows, eps, labels)
                    out.append({"task": name, "seed": seed, "eps": eps, "M": labels, "k": k,
                                "rows_per_model": rows // k, **run(arrays, seed, eps, labels, k, new_depth(rows // k))})
                    log(f"teacher_rules labels: {out[-1]}")
    return out


def part_small(seeds: int, epsilons: tuple[float, ...] = (0.5, 1.0)) -> list[dict[str, Any]]:
    out = []
    for seed in range(seeds):
        arrays = TASKS["small"](seed)
        rows = len(arrays[1])
        for eps in epsilons:
            for labels in (50, 100, 200):
                for per_model in (10, 20):
                    k = rows // per_model
                    out.append({"task": "small", "seed": seed, "eps": eps, "M": labels, "k": k, "rows_per_model": per_model,
                                **run(arrays, seed, eps, labels, k, new_depth(per_model))})
                    log(f"teacher_rules small: {out[-1]}")
    return out


def bench_teacher_rules(quick: bool = False, parts: list[str] | None = None, seeds: int | None = None) -> dict[str, Any]:
    seeds = seeds or (1 if quick else 2)
    tasks = [t for t in TASKS if t != "adult" or ADULT.exists()]
    parts = parts or ["depth", "labels", "small"]
    out: dict[str, Any] = {"seeds": seeds}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if "depth" in parts:
            out["depth"] = part_depth(tasks, seeds)
        if "labels" in parts:
            out["labels"] = part_labels([t for t in tasks if t != "small"] if quick else tasks, seeds,
                                        (1.0,) if quick else (0.5, 1.0, 2.0))
        if "small" in parts:
            out["small"] = part_small(seeds)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", nargs="*", default=None, help="depth labels small (default: all)")
    parser.add_argument("--seeds", type=int, default=None, help="seeds a setting (default 2)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=None, help="write the figures here as JSON")
    args = parser.parse_args(argv)
    out = bench_teacher_rules(args.quick, args.part, args.seeds)
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
