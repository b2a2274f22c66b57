"""Benchmark ``labels`` (issue 29, item 3): a session that spends its budget on the first M answers
(``--labels M``) and a student that answers every later query, at M = 200, 500, 1,000 and 2,000.

Each run is one seeded session (``Session.create(labels=M, gate='gnmax', learner='auto')`` at eps 1,
delta 1e-6; seeded noise: the figures are measurements, not private releases) asked a stream of
2,000 queries (the teacher answers the first M, the after-halt student the rest), then scored on
held-out rows the session never saw:

* ``released``: the gnmax-released answers, on the M queries they were given for;
* ``majority``: the noise-free majority of the same k models (their votes: private, read here only
  because this is a benchmark on our own data), on the held-out rows;
* ``student <learner>``: a student fitted on the M released answers (exactly as
  pcqr.pipeline.session.distillation fits one), on the held-out rows: ``auto`` (the session's own
  after-halt student), ``hgb`` (HistGradientBoostingClassifier) and ``forest`` (RandomForestClassifier,
  100 trees), both with a plain public form (pcqr.pipeline.models.portable);
* ``self-trained``: the best fixed student refitted once on the M answers plus the stream's other
  queries whose predict_proba is at least SELF_TRAINING_CONFIDENCE (pseudo-labels; public log only);
* ``stream``: the session's own log over all 2,000 queries (teacher then its after-halt student, the
  session's 'auto'), against the truth; ``stream hgb`` and ``stream forest``: the same with that
  student instead (what ``--student-learner`` gives: the same fit on the same answers).

Tasks: UCI Adult (the usual 35-column encoding, benchmarks/adult.py; 32,561 private rows; adult.test:
the first 2,000 rows the stream, the other 14,281 held out; ``--adult DIR``, else benchmarks/adult.py's
ADULT; absent: skipped), XOR and the corner task from ``pcqr generate`` (``--kind agnostic --concept xor``: 10% label noise, Bayes
accuracy 0.90; ``--concept corner --positive-rate 0.1``: realizable, 10% positives), 10^5 private
rows each and 16,000 queries (2,000 the stream, 14,000 held out).

Run: ``python benchmarks/run.py --only labels`` (Adult from benchmarks/adult.py's ADULT), or
``python benchmarks/labels.py --adult ADULT_DIR --seeds 3 --out table.md`` (``--quick``: one
seed, 20,000 generated rows, M = 200 and 1,000 only). Prints the markdown table (min-max over seeds).
"""
from __future__ import annotations

import argparse
import json
import os
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from adult import ADULT, load_adult
from harness import log, temp_dir, write_cluster_yaml

LABELS = (200, 500, 1000, 2000)
STREAM = 2000
STUDENTS = {
    "auto": {"name": "auto", "params": {}},
    "hgb": {"name": "sklearn.ensemble.HistGradientBoostingClassifier", "params": {}},
    "forest": {"name": "sklearn.ensemble.RandomForestClassifier", "params": {"n_estimators": 100}},
}
#: A pseudo-label is kept when the student's predict_proba of its label is at least this (public).
SELF_TRAINING_CONFIDENCE = 0.9

Task = dict[str, Any]  # private (Parquet path), features, stream (X), stream_truth, held (X), held_truth


def adult_task(work: Path, adult: Path) -> Task:
    X, y, X_test, y_test, _ = load_adult(adult, "usual")
    features = [f"f{i}" for i in range(X.shape[1])]
    path = work / "adult" / "private.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(pa.table({**{f: X[:, i] for i, f in enumerate(features)}, "label": y}), path)
    return {"private": str(path), "features": features, "rows": len(y), "stream": X_test[:STREAM],
            "stream_truth": y_test[:STREAM], "held": X_test[STREAM:], "held_truth": y_test[STREAM:]}


def generated_task(work: Path, cluster: str, name: str, rows: int, extra: list[str]) -> Task:
    from pcqr.jobs.cli import main

    out = work / name
    assert main(["generate", "--out", str(out), "--rows", str(rows), "--queries", "16000", "--seed", "1",
                 "--cluster", cluster, *extra]) == 0
    queries = pq.read_table(out / "queries").sort_by("query_id")
    truth = pq.read_table(out / "truth").sort_by("query_id").column("label").to_numpy()
    features = [c for c in queries.column_names if c != "query_id"]
    Q = np.column_stack([queries.column(f).to_numpy() for f in features])
    return {"private": str(out / "private"), "features": features, "rows": rows, "stream": Q[:STREAM],
            "stream_truth": truth[:STREAM], "held": Q[STREAM:], "held_truth": truth[STREAM:]}


def self_trained(named: dict[str, Any], X: np.ndarray, y: np.ndarray, unlabelled: np.ndarray) -> Any:
    """The student refitted once on its confident pseudo-labels of ``unlabelled`` (public queries)."""
    from pcqr.pipeline.gates.public_guess import fit_student

    student = fit_student(named, X, y)
    if not len(unlabelled) or not hasattr(student, "predict_proba"):
        return student
    proba = student.predict_proba(unlabelled)
    keep = proba.max(axis=1) >= SELF_TRAINING_CONFIDENCE
    pseudo = student.classes_[proba.argmax(axis=1)][keep].astype(np.int8)
    return fit_student(named, np.vstack([X, unlabelled[keep]]), np.concatenate([y, pseudo]))


def one_run(task: Task, labels: int, seed: int, work: Path, cluster: str, gate: str = "gnmax") -> dict[str, float]:
    import pcqr
    from pcqr.pipeline.gates.public_guess import fit_student
    from pcqr.pipeline.session.distillation import TEACHER_SOURCES
    from pcqr.pipeline.session.state import load_models, load_session

    run = work / f"run-{gate}-{labels}-{seed}"
    features = task["features"]
    stream = pa.table({"query_id": np.arange(STREAM), **{f: task["stream"][:, i] for i, f in enumerate(features)}})
    with pcqr.Session.create(str(run / "state"), task["private"], epsilon=1.0, delta=1e-6, labels=labels,
                             gate=gate, learner="auto", features=features, seed=seed, insecure_seed=True,
                             cluster=cluster, ledger=str(run / "ledger.sqlite"), local_threads=True) as session:
        answers = session.answer(stream, log=str(run / "log"), after_halt="student",
                                 allow_private_overlap=True)  # adult.test shares rows with adult.data (35 columns)
        summary = session.summary()
    answers = answers.sort_by("query_id")
    label = answers.column("answer").to_numpy(zero_copy_only=False).astype(np.int8)
    source = np.asarray(answers.column("source").to_pylist())
    teacher = np.isin(source, TEACHER_SOURCES)
    X, y = task["stream"][teacher], label[teacher]
    held, held_truth = task["held"], task["held_truth"]
    state = str(run / "state")
    ensemble = load_models(state, load_session(state))
    k = ensemble.size
    figures = {"k": float(k), "sigma": float(summary.get("sigma", summary.get("lambda"))), "rows_per_model": float(task["rows"] // k),
               "released": float(np.mean(y == task["stream_truth"][teacher])),
               "majority": float(np.mean((2 * ensemble.count_ones(held) > k) == held_truth)),
               "stream": float(np.mean(label == task["stream_truth"]))}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, named in STUDENTS.items():
            student = fit_student(named, X, y)
            figures[name] = float(np.mean(student.predict(held) == held_truth))
            later = np.where(teacher, label, student.predict(task["stream"]))  # the student after the first M
            figures[f"stream_{name}"] = float(np.mean(later == task["stream_truth"]))
            figures[f"self_{name}"] = float(np.mean(
                self_trained(named, X, y, task["stream"][~teacher]).predict(held) == held_truth))
    return figures


def measure(tasks: dict[str, Task], labels: tuple[int, ...], seeds: int, work: Path, cluster: str,
            gate: str = "gnmax") -> dict[str, Any]:
    results: dict[str, Any] = {}
    for name, task in tasks.items():
        base = max(np.mean(task["held_truth"]), 1 - np.mean(task["held_truth"]))
        results[name] = {"majority_class": float(base), "cells": {}}
        for m in labels:
            runs = []
            for seed in range(seeds):
                started = time.perf_counter()
                runs.append(one_run(task, m, seed, work / name, cluster, gate))
                log(f"labels {name} M={m} seed={seed}: {json.dumps({k: round(v, 3) for k, v in runs[-1].items()})} "
                    f"({time.perf_counter() - started:.0f} s)")
            results[name]["cells"][m] = {key: [min(r[key] for r in runs), max(r[key] for r in runs)] for key in runs[0]}
    return results


COLUMNS = [("k", "k"), ("rows_per_model", "rows/model"), ("sigma", "sigma"), ("released", "released (on M)"),
           ("majority", "majority (held out)"), ("auto", "student auto"), ("hgb", "student hgb"),
           ("forest", "student forest"), ("self_auto", "self-trained auto"), ("self_hgb", "self-trained hgb"),
           ("self_forest", "self-trained forest"), ("stream", "stream (all 2,000)"), ("stream_hgb", "stream, hgb student"),
           ("stream_forest", "stream, forest student")]


FORMATS = {"k": "{:,.0f}", "rows_per_model": "{:,.0f}", "sigma": "{:.1f}"}  # accuracies: {:.3f}


def cell(key: str, low: float, high: float) -> str:
    """One cell: the value, or the min-max range over the seeds."""
    form = FORMATS.get(key, "{:.3f}")
    return form.format(low) if form.format(low) == form.format(high) else f"{form.format(low)}-{form.format(high)}"


def table(results: dict[str, Any], seeds: int, gate: str = "gnmax") -> str:
    lines = [f"eps 1, delta 1e-6, --gate {gate}, --learner auto; {seeds} seed(s) a cell (min-max); accuracy on "
             "held-out rows unless said", ""]
    for name, result in results.items():
        lines += [f"**{name}** (majority class on the held-out rows: {result['majority_class']:.3f})", "",
                  "| M | " + " | ".join(title for _, title in COLUMNS) + " |",
                  "|---|" + "---|" * len(COLUMNS)]
        for m, figures in result["cells"].items():
            lines.append(f"| {m:,} | " + " | ".join(cell(key, *figures[key]) for key, _ in COLUMNS) + " |")
        lines.append("")
    return "\n".join(lines)


def bench_labels(quick: bool = False, adult: str | None = None, seeds: int | None = None,
                 xor_rows: int | None = None, only: list[str] | None = None,
                 labels: tuple[int, ...] | None = None, gate: str = "gnmax") -> dict[str, Any]:
    seeds = seeds or (1 if quick else 3)
    adult = adult or (str(ADULT) if ADULT.exists() else None)
    rows = 20_000 if quick else 100_000
    labels = labels or ((200, 1000) if quick else LABELS)
    with temp_dir("labels") as work:
        cluster = str(write_cluster_yaml(work))
        wanted = set(only or ("adult", "xor", "corner"))
        tasks: dict[str, Task] = {}
        if adult and "adult" in wanted:
            tasks["adult (35 columns)"] = adult_task(work, Path(adult))
        if "xor" in wanted:
            tasks["xor"] = generated_task(work, cluster, "xor", xor_rows or rows,
                                          ["--kind", "agnostic", "--concept", "xor"])
        if "corner" in wanted:
            tasks["corner"] = generated_task(work, cluster, "corner", rows,
                                             ["--concept", "corner", "--positive-rate", "0.1"])
        results = measure(tasks, labels, seeds, work, cluster, gate)
    return {"seeds": seeds, "gate": gate, "results": results, "table": table(results, seeds, gate)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--adult", default=os.environ.get("PCQR_ADULT"), help="the UCI Adult folder (adult.data, "
                        "adult.test, adult.names); default $PCQR_ADULT, else Adult is skipped")
    parser.add_argument("--seeds", type=int, default=None, help="runs a cell (default 3; --quick 1)")
    parser.add_argument("--xor-rows", type=int, default=None, help="XOR's private rows (default 10^5)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--labels", nargs="*", type=int, default=None, help=f"the M to run (default {LABELS})")
    parser.add_argument("--gate", default="gnmax", help="the sessions' gate (default gnmax; sigma is lambda otherwise)")
    parser.add_argument("--only", nargs="*", default=None, help="tasks to run: adult xor corner")
    parser.add_argument("--out", default=None, help="write the markdown table here (and its JSON beside it)")
    args = parser.parse_args(argv)
    out = bench_labels(args.quick, args.adult, args.seeds, args.xor_rows, args.only,
                       tuple(args.labels) if args.labels else None, args.gate)
    print(out["table"])
    if args.out:
        Path(args.out).write_text(out["table"] + "\n", encoding="utf-8")
        Path(args.out).with_suffix(".json").write_text(json.dumps(out["results"], indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
