"""Benchmark ``imbalance`` (issue 29, item 4): what lifts a GNMax ensemble whose teachers each see few positives.

Offline and in one process (no session, no ledger, no Dask): for each task the private rows are
split into k disjoint subsamples of (near-)equal size at random, as pcqr's training does
(:func:`pcqr.pipeline.models.subsample.subsample_sizes`), the k teachers are fitted with pcqr's own
:func:`~pcqr.pipeline.models.learners.fit_subsample` (a one-class subsample is a constant model) and
their votes counted with :class:`~pcqr.pipeline.models.votes.Ensemble`. k is gnmax's default for
the task's n and sigma the one pcqr certifies at epsilon 1, delta 1e-6, m = 2,000
(:func:`pcqr.pipeline.privacy.session_plan.realizable_parameters`, the PLD accountant: about 267).

On 2,000 held-out queries, each variant is scored (accuracy, positive recall, balanced accuracy)

* noise-free: label 1 iff ct(1) > tau k;
* with GNMax's noise: label 1 iff ct(1) + Z > tau k, Z ~ N_Z(0, sigma^2 / 2) drawn with pcqr's own
  table (:class:`~pcqr.pipeline.privacy.noise.DiscreteGaussianTail`), from a seeded source: a
  benchmark, not a release.

Variants: the teachers of ``--learner auto`` (a depth-d tree, d from
:func:`~pcqr.pipeline.models.learners.auto_learner` at n / k rows a model), the same trees with
``class_weight='balanced'`` (each teacher weighs by its own subsample's counts), each at vote
thresholds tau in :data:`TAUS` (0.5 is pcqr's majority). Tasks: ``pcqr generate --concept corner``
(5 features; 10^5 rows; realizable at positive rate 0.1 and 0.05, and benchmarks/utility.py's
``--kind agnostic --noise 0.01`` at 0.1), UCI Adult's 35-column encoding
(benchmarks/adult.py; queries the first 2,000 rows of adult.test), and XOR (``--kind agnostic
--concept xor --noise 0.1``, 10^6 rows [--quick: 10^5]) as the balanced control. Each cell is run
over 3 seeds (split, training randomness and noise; the data are fixed) and given as min-max.

    python benchmarks/imbalance.py [--quick] [--adult DIR] [--out FILE.json]

prints the markdown tables (about 75 s on 2 cores; --quick about 50 s).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np

QUERIES, SEEDS, EPSILON, DELTA = 2000, (0, 1, 2), 1.0, 1e-6
TAUS = (0.5, 0.4, 0.3, 0.2)
WEIGHTS: dict[str, dict[str, Any]] = {"plain": {}, "balanced": {"class_weight": "balanced"}}
Task = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _generated(kind: str, concept: str, rows: int, positive_rate: float | None = None, noise: float = 0.0,
               seed: int = 13) -> Task:
    """Rows as ``pcqr generate`` draws them (5 features, ``seed``; its functions, one block per
    stream, no files): the private rows, and 2,000 queries with their true labels."""
    from pcqr.pipeline.data.synthetic import block_seed, concept_from_seed, make_chunk

    hidden = concept_from_seed(concept, 5, seed, *(() if positive_rate is None else (positive_rate,)))

    def rows_of(stream: str, count: int) -> tuple[np.ndarray, np.ndarray]:
        table = make_chunk(kind, hidden, count, 5, noise, block_seed(seed, stream, 0))
        return np.column_stack([table.column(f"x{j}").to_numpy() for j in range(5)]), \
            table.column("label").to_numpy().astype(np.int8)

    return (*rows_of("private", rows), *rows_of("queries", QUERIES))


def _adult(folder: Path) -> Task:
    from adult import load_adult

    X, y, X_test, y_test, _ = load_adult(folder, "usual")
    return X, y, X_test[:QUERIES], y_test[:QUERIES]


def tasks(quick: bool, adult: Path | None) -> dict[str, Callable[[], Task]]:
    """Each task's name and how to make its arrays (Adult only when its files are in ``adult``)."""
    made: dict[str, Callable[[], Task]] = {
        "corner_0.10": lambda: _generated("realizable", "corner", 10**5, 0.10),
        "corner_0.05": lambda: _generated("realizable", "corner", 10**5, 0.05),
        "corner_0.10_noise_0.01": lambda: _generated("agnostic", "corner", 10**5, 0.10, noise=0.01),
    }
    if adult is not None and (adult / "adult.data").exists():
        made["adult_usual"] = lambda: _adult(adult)
    xor_rows = 10**5 if quick else 10**6
    made[f"xor_{'1e5' if quick else '1e6'}"] = lambda: _generated("agnostic", "xor", xor_rows, noise=0.1)
    return made


def gnmax_setting(rows: int) -> tuple[int, float]:
    """(k, sigma) of a gnmax session on ``rows`` private rows at pcqr's defaults for eps 1, delta 1e-6, m 2,000."""
    from pcqr.pipeline.options import TrainingOptions
    from pcqr.pipeline.privacy.session_plan import realizable_parameters

    options = TrainingOptions(state="-", gate="gnmax", epsilon=EPSILON, delta=DELTA, queries_max=QUERIES)
    params = realizable_parameters(options, "gnmax", rows)
    return params.subsamples, params.sigma


def teacher_votes(X: np.ndarray, y: np.ndarray, Q: np.ndarray, k: int, params: dict[str, Any], seed: int) -> np.ndarray:
    """ct(1) on ``Q`` of k teachers (``--learner auto``'s tree with ``params``) on a random equal split."""
    from pcqr.pipeline.models.learners import LearnerSpec, auto_learner, fit_subsample
    from pcqr.pipeline.models.subsample import subsample_sizes
    from pcqr.pipeline.models.votes import Ensemble

    rng = np.random.default_rng(seed)
    tree, rule = auto_learner(len(y) // k)
    spec = LearnerSpec(tree, {**rule, **params, "random_state": seed})
    edges = np.concatenate(([0], np.cumsum(subsample_sizes(len(y), k))))
    order = rng.permutation(len(y))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        models = [fit_subsample(spec, X[order[a:b]], y[order[a:b]]) for a, b in zip(edges[:-1], edges[1:])]
    return Ensemble(models).count_ones(Q).astype(np.int64)


def released(ones: np.ndarray, k: int, tau: float, sigma: float | None, seed: int) -> np.ndarray:
    """Label 1 iff ct(1) (+ Z) > tau k: Z >= floor(tau k) + 1 - ct(1), with pcqr's discrete Gaussian table."""
    from pcqr.pipeline.privacy.gnmax import count_sigma
    from pcqr.pipeline.privacy.noise import DiscreteGaussianTail, SeededNoise

    bar = int(np.floor(tau * k)) + 1
    if sigma is None:
        return (ones >= bar).astype(np.int8)
    noise = SeededNoise(10_000 + seed)
    return DiscreteGaussianTail(count_sigma(sigma)).draw_at_least(bar - ones, noise).astype(np.int8)


def scores(label: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """Accuracy, recall of the positives and balanced accuracy (the mean of both recalls)."""
    positives, negatives = truth == 1, truth == 0
    recall = float(np.mean(label[positives] == 1)) if positives.any() else float("nan")
    specificity = float(np.mean(label[negatives] == 0)) if negatives.any() else float("nan")
    return {"accuracy": float(np.mean(label == truth)), "recall": recall, "balanced": (recall + specificity) / 2}


def bench_task(data: Task, seeds: tuple[int, ...] = SEEDS) -> dict[str, Any]:
    """One task: every (weights, tau, noise-free or noisy) cell, min and max of each score over ``seeds``."""
    X, y, Q, truth = data
    k, sigma = gnmax_setting(len(y))
    runs: dict[str, list[dict[str, float]]] = {}
    for weights, params in WEIGHTS.items():
        for seed in seeds:
            ones = teacher_votes(X, y, Q, k, params, seed)
            for tau in TAUS:
                for noise, scale in (("noise_free", None), ("gnmax", sigma)):
                    runs.setdefault(f"{weights} tau={tau} {noise}", []).append(
                        scores(released(ones, k, tau, scale, seed), truth))
    cells = {name: {f"{score}_{end}": float(f([r[score] for r in rs])) for score in rs[0]
                    for end, f in (("min", np.min), ("max", np.max))} for name, rs in runs.items()}
    return {"private_rows": len(y), "positive_rate": float(np.mean(y)), "query_positive_rate": float(np.mean(truth)),
            "subsamples": k, "rows_per_model": len(y) // k, "sigma": sigma, "max_depth": _depth(len(y) // k),
            "majority_class_accuracy": float(max(np.mean(truth), 1 - np.mean(truth))), "cells": cells}


def _depth(rows_per_model: int) -> int:
    from pcqr.pipeline.models.learners import auto_learner

    return int(auto_learner(rows_per_model)[1]["max_depth"])


def bench_imbalance(quick: bool = False, adult: Path | None = None) -> dict[str, Any]:
    from adult import ADULT

    out: dict[str, Any] = {"epsilon": EPSILON, "delta": DELTA, "queries": QUERIES, "seeds": len(SEEDS),
                           "taus": list(TAUS), "tasks": {}}
    for name, make in tasks(quick, adult or ADULT).items():
        started = time.perf_counter()
        out["tasks"][name] = bench_task(make())
        out["tasks"][name]["seconds"] = time.perf_counter() - started
        print(f"imbalance {name}: {out['tasks'][name]['seconds']:.0f} s", file=sys.stderr)
    return out


def _range(cell: dict[str, float], score: str) -> str:
    low, high = cell[f"{score}_min"], cell[f"{score}_max"]
    return f"{low:.3f}" if f"{low:.3f}" == f"{high:.3f}" else f"{low:.3f}-{high:.3f}"


def markdown(result: dict[str, Any]) -> str:
    """One table per task: a row per (weights, tau), accuracy / recall / balanced accuracy noise-free and with GNMax."""
    lines: list[str] = []
    for name, task in result["tasks"].items():
        lines += [f"### {name}: n {task['private_rows']:,}, {task['positive_rate']:.1%} positives, "
                  f"k {task['subsamples']:,} ({task['rows_per_model']} rows a model), depth {task['max_depth']}, "
                  f"sigma {task['sigma']:.1f}; "
                  f"majority class {task['majority_class_accuracy']:.3f}", "",
                  "| teachers | tau | accuracy (no noise) | recall | balanced | accuracy (GNMax) | recall | balanced |",
                  "|---|---|---|---|---|---|---|---|"]
        for weights in WEIGHTS:
            for tau in TAUS:
                free, noisy = (task["cells"][f"{weights} tau={tau} {n}"] for n in ("noise_free", "gnmax"))
                lines.append(f"| {weights} | {tau} | " + " | ".join(
                    _range(c, s) for c in (free, noisy) for s in ("accuracy", "recall", "balanced")) + " |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="XOR at 10^5 rows instead of 10^6")
    parser.add_argument("--adult", type=Path, help="folder with adult.data, adult.test, adult.names (default: "
                        "$PCQR_ADULT, else ../shared/datasets/adult beside the checkout)")
    parser.add_argument("--out", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args(argv)
    result = bench_imbalance(args.quick, args.adult)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
