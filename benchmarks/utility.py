"""Benchmark ``utility``: how well pcqr answers per epsilon, beside its DP peers (issues 13 and 29).

Every task: 2,000 queries (accuracy over all of them, an unanswered query counting as wrong), delta
1e-6, m = 2,000, T = 20. Each cell is run ``RUNS`` = 3 times (pcqr: secure noise, every run differs;
a peer: fresh noise, random_state None -- issue 48: fixed seeds 0, 1, 2 understated the spread) and
given as the range over the runs, min-max (and the mean).

pcqr cells: ``pcqr answer --private --truth --after-halt student`` per eps and (gate, profile,
learner): the queries the gate answered and their accuracy, the instances used, the accuracy over
all 2,000 (gate, then the student after the halt), and the ``pcqr distill`` model file of the same
student scored on held-out rows. k: the guess gate's default; gnmax's default (Adult: Algorithm 5's
k; the generated tasks: 250 rows per model, at most 10,000); the stability gate's smallest useful k,
at least 5 rows per model. ``defaults``: pcqr answer with only --epsilon, --delta and --queries-max
2000 (the gate, learner, k, T and what happens after a halt are pcqr's defaults).

Beside them, on the same private rows and scored on the same 2,000 queries (benchmarks/peers.py):
diffprivlib's DP logistic regression (every eps; its own environment beside scikit-learn 1.7.2),
DP-EBM (InterpretML; eps 1 and 8), the majority class, and without privacy a logistic regression and
a depth-4 tree (XOR: also gradient boosting).

Tasks:
* ``adult_wide`` and ``adult_usual``: UCI Adult in its two encodings (benchmarks/adult.py: 105 and 35
  columns); queries the first 2,000 rows of adult.test, the other 14,281 score the distilled student;
  learners stump and logistic regression (C = 10), the student a logistic regression
  (``--allow-private-overlap``: a few test rows have the same features as training rows -- different
  people, common profiles -- and the misuse guard says so). Skipped when the files are absent.
* ``corner_1e5``: the imbalanced nonlinear task, ``pcqr generate --kind agnostic --concept corner
  --noise 0.01``, 10^5 rows, 5 features (label 1 iff x0 > a and x1 > b, 10% before the flips, 10.8%
  after; Bayes accuracy 0.99); depth-4 trees.
* ``xor_1e6`` [quick: ``xor_1e5``] and, in the full run, ``xor_1e7`` (pcqr only): ``--concept xor
  --noise 0.1``, 5 features (Bayes accuracy 0.90, a linear model about 0.5); depth-4 trees, and
  gradient boosting with gnmax at eps 1.
The generated tasks' distilled students are scored on 20,000 fresh rows of the same distribution.

Full: eps 0.5, 1, 2, 4, every gate and profile (~1.5 h on 2 cores); ``--quick``: eps 1 only, the gnmax
and guess gates (tight profile), XOR at 10^5 rows (~15 min, plus ~1 min to make the peers'
environment the first time). Run through benchmarks/run.py (``--only utility``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from adult import ADULT, ENCODINGS, load_adult, norm_bound
from harness import log, pcqr, temp_dir, write_cluster_yaml
from peers import peer_accuracy, spread

QUERIES, CUTOFF, RUNS, MIN_ROWS_PER_MODEL, HELD_OUT = 2000, 20, 3, 5, 20_000
EBM_EPSILONS = [1.0, 8.0]
SYNTHETIC_NORM, SYNTHETIC_BOUNDS = 4.0, [-4.0, 4.0]  # public: 5 standard-normal features, clipped beyond
Learner = tuple[str, dict[str, Any]]
LEARNERS: dict[str, Learner] = {
    "stump": ("stump", {}),
    "logistic": ("sklearn.linear_model.LogisticRegression", {"C": 10}),
    "tree4": ("sklearn.tree.DecisionTreeClassifier", {"max_depth": 4}),
    "hgb": ("sklearn.ensemble.HistGradientBoostingClassifier", {"max_iter": 20, "max_depth": 2, "early_stopping": False}),
}
ADULT_STUDENT: Learner = ("sklearn.linear_model.LogisticRegression", {"C": 10, "max_iter": 2000})


@dataclass
class Task:
    """One dataset: its files under ``folder`` (private/, queries/, truth/), the same as arrays, the
    held-out rows, its pcqr cells (eps, gate, profile, learner; gate "defaults": pcqr's own), the
    student (None: the teachers' learner), the peers' public bounds and pcqr's extra options."""
    folder: Path
    arrays: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
    held: tuple[np.ndarray, np.ndarray]
    cells: list[tuple[float, str, str, str]]
    rows: int
    student: Learner | None = None
    peer_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    extra: list[str] = field(default_factory=list)
    gnmax_by_rows: bool = True


def _options(flag: str, learner: Learner) -> list[str]:
    name, params = learner
    return [f"--{flag}", name, *(a for k, v in params.items() for a in (f"--{flag}-param", f"{k}={str(v).lower()}"))]


def _subsamples(gate: str, profile: str, eps: float, rows: int, by_rows: bool) -> int:
    from pcqr.pipeline.privacy.subsamp import SubSampParameters

    params = SubSampParameters.create(profile, eps, 1e-6, CUTOFF, QUERIES, 0.05, gate=gate)
    if gate == "gnmax":
        return params.for_rows(rows).subsamples if by_rows else params.subsamples
    if gate == "guess":
        return params.subsamples
    return min(params.useful_subsamples(), rows // MIN_ROWS_PER_MODEL)


def _scores(log_dir: Path, truth: np.ndarray, held: tuple[np.ndarray, np.ndarray], student: Learner) -> dict[str, Any]:
    """From the public log: the gate's answers (sources sparse_vector, guess, flipped) and their
    accuracy, the accuracy over every query (gate, then student); and the student written by
    ``pcqr distill``, scored on the held-out rows."""
    import pyarrow.parquet as pq

    from pcqr.pipeline.errors import PcqrError
    from pcqr.pipeline.models.released import load_model
    from pcqr.pipeline.session.distillation import TEACHER_SOURCES, distill_log

    table = pq.read_table(log_dir).sort_by("query_id")
    source = table.column("source").to_numpy(zero_copy_only=False)
    answered = table.column("status").to_numpy(zero_copy_only=False) == "answered"
    answer = table.column("answer").to_numpy(zero_copy_only=False)
    expected = truth[table.column("query_id").to_numpy()]
    gate = answered & np.isin(source, TEACHER_SOURCES)
    out: dict[str, Any] = {
        "gate_answered": int(gate.sum()),
        "gate_accuracy": float(np.mean(answer[gate] == expected[gate])) if gate.any() else None,
        "all_answered": int(answered.sum()),
        "accuracy_over_all_queries": float(np.mean(np.where(answered, answer, -1) == expected)),
    }
    try:
        distill_log(str(log_dir), str(log_dir) + "-student.json", *student)
        model, _, _ = load_model(str(log_dir) + "-student.json")
        out["distilled_student_accuracy"] = float(np.mean(model.predict(held[0]) == held[1]))
    except PcqrError as exc:  # a log the gate never answered in
        out["distilled_student_accuracy"] = None
        out["distilled_student_none"] = str(exc)
    return out


def _cell(work: Path, cluster: str, name: str, task: Task, eps: float, gate: str, profile: str,
          learner: str) -> dict[str, Any]:
    """One pcqr cell, RUNS sessions (each a fresh state and log): every figure's range."""
    rows = task.rows
    if gate == "defaults":
        args: list[str] = []
    else:
        k = _subsamples(gate, profile, eps, rows, task.gnmax_by_rows)
        student = [] if task.student is None else _options("student-learner", task.student)
        args = ["--gate", gate, "--profile", profile, "--subsamples", str(k), *_options("learner", LEARNERS[learner]),
                *([] if gate == "gnmax" else ["--cutoff", str(CUTOFF)]), "--after-halt", "student", *student]
    student = task.student or LEARNERS["tree4" if gate == "defaults" else learner]
    runs, summary = [], {}
    for run in range(RUNS):
        label = f"{name}-{gate}-{profile}-{learner}-{eps:g}-{run}"
        seconds, summary = pcqr(work, label, "answer", "--private", str(task.folder / "private"), "--state",
                                f"state-{label}", "--queries", str(task.folder / "queries"), "--log", f"log-{label}",
                                "--truth", str(task.folder / "truth"), "--epsilon", str(eps), "--delta", "1e-6",
                                "--queries-max", str(QUERIES), *args, *task.extra, "--cluster", cluster)
        runs.append({**_scores(work / f"log-{label}", task.arrays[3], task.held, student), "seconds": round(seconds, 1)})
    figures = ("accuracy_over_all_queries", "gate_answered", "gate_accuracy", "all_answered",
               "distilled_student_accuracy")
    cell = {"epsilon": eps, "gate": gate, "profile": profile, "learner": learner,
            "session": {key: summary.get(key) for key in ("gate", "learner", "subsamples", "cutoff", "sigma", "lambda",
                                                          "threshold", "accountant", "proven_epsilon", "proven_delta")},
            "instances_used": summary.get("budget_used"),
            **{f: spread([r[f] for r in runs]) if all(r[f] is not None for r in runs) else [r[f] for r in runs]
               for f in figures},
            "seconds": [r["seconds"] for r in runs]}
    a = cell["accuracy_over_all_queries"]
    log(f"utility: {name} {gate}-{profile}-{learner} eps {eps:g}: {a['min']:.3f}-{a['max']:.3f}")
    return cell


def _baselines(task: Task, epsilons: list[float], peers: bool, nonprivate: tuple[str, ...]) -> dict[str, Any]:
    from sklearn.base import clone
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.tree import DecisionTreeClassifier

    X, y, Q, truth = task.arrays
    models = {"logistic": LogisticRegression(C=10, max_iter=2000), "tree4": DecisionTreeClassifier(max_depth=4),
              "hgb": HistGradientBoostingClassifier(max_iter=20, max_depth=2)}
    out: dict[str, Any] = {"private_rows": int(len(y)), "features": int(X.shape[1]), "positives": float(y.mean()),
                           "majority_class": float(max(truth.mean(), 1 - truth.mean())),
                           **{f"nonprivate_{m}": float(clone(models[m]).fit(X, y).score(Q, truth)) for m in nonprivate}}
    if peers:
        out["dp_logistic"] = peer_accuracy("dp_logistic", task.arrays, epsilons, RUNS, **task.peer_options["dp_logistic"])
        out["dp_ebm"] = peer_accuracy("dp_ebm", task.arrays, EBM_EPSILONS, RUNS, delta=1e-6,
                                      **task.peer_options["dp_ebm"])
    return out


def _run_task(work: Path, cluster: str, name: str, task: Task, epsilons: list[float], peers: bool = True,
              nonprivate: tuple[str, ...] = ("logistic", "tree4")) -> dict[str, Any]:
    result = _baselines(task, epsilons, peers, nonprivate)
    result["cells"] = [_cell(work, cluster, name, task, *cell) for cell in task.cells]
    return result


def _write(path: Path, X: np.ndarray, names: list[str], **extra: np.ndarray) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({**{n: X[:, i] for i, n in enumerate(names)}, **extra}), path / "part-0.parquet")


def _adult_task(folder: Path, encoding: str, epsilons: list[float], settings: list[tuple[str, str]]) -> Task:
    X, y, X_test, y_test, names = load_adult(ADULT, encoding)
    Q, truth = X_test[:QUERIES], y_test[:QUERIES]
    _write(folder / "private", X, names, label=y)
    _write(folder / "queries", Q, names, query_id=np.arange(QUERIES))
    _write(folder / "truth", np.zeros((QUERIES, 0)), [], query_id=np.arange(QUERIES), label=truth)
    cells = [(eps, gate, profile, learner) for eps in epsilons for gate, profile in settings
             for learner in ("stump", "logistic")] + [(eps, "defaults", "-", "-") for eps in epsilons]
    return Task(folder, (X, y, Q, truth), (X_test[QUERIES:], y_test[QUERIES:]), cells, len(y), ADULT_STUDENT,
                {"dp_logistic": {"data_norm": norm_bound(encoding)}, "dp_ebm": {"bounds": [0.0, 1.0]}},
                ["--allow-private-overlap"], gnmax_by_rows=False)


def _features(table: Any) -> np.ndarray:
    return np.column_stack([table.column(n).to_numpy() for n in table.column_names if n.startswith("x")])


def _generated_task(work: Path, cluster: str, name: str, concept: str, noise: float, rows: int,
                    cells: list[tuple[float, str, str, str]]) -> Task:
    """``pcqr generate --kind agnostic --concept CONCEPT``, 5 features, seed 13; the held-out rows
    are fresh ones (another seed) labelled by the recorded concept, with the same noise. The arrays
    (the peers' and the non-private models' rows) are the first file's, at most 10^6 rows."""
    import pyarrow.parquet as pq

    from pcqr.pipeline.data.synthetic import make_chunk, read_concept

    folder = work / name
    pcqr(work, f"{name}-generate", "generate", "--kind", "agnostic", "--concept", concept, "--noise", str(noise),
         "--rows", str(rows), "--features", "5", "--queries", str(QUERIES), "--seed", "13", "--out", str(folder),
         "--cluster", cluster)
    first = sorted((folder / "private").glob("*.parquet"))[0]
    fresh = make_chunk("agnostic", read_concept(str(first)), HELD_OUT, 5, noise, np.random.SeedSequence(2026))
    private = pq.read_table(first)
    queries = pq.read_table(folder / "queries").sort_by("query_id")
    truth = pq.read_table(folder / "truth").sort_by("query_id").column("label").to_numpy().astype(int)
    data = (_features(private), private.column("label").to_numpy().astype(int), _features(queries), truth)
    return Task(folder, data, (_features(fresh), fresh.column("label").to_numpy().astype(int)), cells, rows,
                peer_options={"dp_logistic": {"data_norm": SYNTHETIC_NORM}, "dp_ebm": {"bounds": SYNTHETIC_BOUNDS}})


def bench_utility(quick: bool) -> dict[str, Any]:
    """Adult in both encodings (when its files are there), the imbalanced corner task and XOR."""
    epsilons = [1.0] if quick else [0.5, 1.0, 2.0, 4.0]
    adult_settings = [("gnmax", "tight"), ("guess", "tight")] + ([] if quick else [("stability", "tight"),
                                                                                   ("stability", "paper")])
    gates = ["gnmax", "guess"] + ([] if quick else ["stability"])
    result: dict[str, Any] = {"queries": QUERIES, "cutoff": CUTOFF, "delta": 1e-6, "runs_per_cell": RUNS,
                              "epsilons": epsilons, "dp_ebm_epsilons": EBM_EPSILONS}
    with temp_dir("utility") as work:
        cluster = str(write_cluster_yaml(work))
        for encoding in ENCODINGS:
            if not (ADULT / "adult.data").exists():
                result[f"adult_{encoding}"] = {"skipped": f"no Adult files in {ADULT} (set PCQR_ADULT)"}
                continue
            task = _adult_task(work / f"adult-{encoding}", encoding, epsilons, adult_settings)
            result[f"adult_{encoding}"] = _run_task(work, cluster, f"adult-{encoding}", task, epsilons)
        tree_cells = [(eps, gate, "tight", "tree4") for eps in epsilons for gate in gates]
        defaults = [(eps, "defaults", "-", "-") for eps in epsilons]
        task = _generated_task(work, cluster, "corner_1e5", "corner", 0.01, 10**5, tree_cells + defaults)
        result["corner_1e5"] = _run_task(work, cluster, "corner_1e5", task, epsilons)
        name, rows = ("xor_1e5", 10**5) if quick else ("xor_1e6", 10**6)
        xor_cells = tree_cells + defaults + ([] if quick else [(1.0, "gnmax", "tight", "hgb")])
        task = _generated_task(work, cluster, name, "xor", 0.1, rows, xor_cells)
        result[name] = _run_task(work, cluster, name, task, epsilons, nonprivate=("logistic", "tree4", "hgb"))
        if not quick:
            big = [(1.0, "gnmax", "tight", "tree4"), (1.0, "guess", "tight", "tree4"), (1.0, "defaults", "-", "-")]
            task = _generated_task(work, cluster, "xor_1e7", "xor", 0.1, 10**7, big)
            result["xor_1e7"] = _run_task(work, cluster, "xor_1e7", task, epsilons, peers=False)
    return result
