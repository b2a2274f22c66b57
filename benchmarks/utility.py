"""Benchmark ``utility``: how many queries pcqr answers per epsilon, and how well, beside a DP logistic
regression (issue 13, item 7), on UCI Adult.

Private rows: adult.data (32,561). Queries: the first 2,000 rows of adult.test; the other 14,281
score the released models (the student distilled from the public log, diffprivlib's DP logistic
regression, the non-private logistic regression). Features: the 6 numeric columns divided by fixed
PUBLIC constants (domain bounds, not statistics of the data: anything computed from the private rows
would have to be paid for) and one-hot columns of the 8 categorical ones (categories listed from
adult.names, public). For each eps and each (gate, profile, learner): ``pcqr answer --private``
with ``--truth`` and ``--after-halt student`` (a logistic-regression student of the log answers
what the halted session would refuse): the queries the gate answered and their accuracy, the
instances used, the accuracy over all 2,000 (gate, then student), and the ``pcqr distill`` model
file of the same student scored on the held-out rows; T = 20, m = 2,000,
delta = 1e-6 (``--allow-private-overlap``: a few test rows of Adult have the same features as
training rows -- different people, common profiles -- and the misuse guard says so). k: the guess gate's default; the stability gate's smallest useful k, but at least 5
private rows per model (below that the learners are noise).

The XOR task (``pcqr generate --kind agnostic --concept xor --noise 0.1``, 5 features: label 1 iff
exactly one of x0, x1 is positive, each label flipped with probability 0.1, so the Bayes accuracy is
0.90 and any linear model scores about 0.5) on 10^6 private rows (and 10^7 in the full run): 2,000
queries, accuracy against their noisy labels; per eps and gate, depth-4 trees, and a
histogram-gradient-boosted learner at eps = 1; k each gate's default (gnmax: 250 rows per model,
at most 10,000; guess: its default; stability: its smallest useful k, at least 5 rows per model).
Beside: the same learners fitted without privacy on 10^6 private rows, scored on 20,000 fresh
rows, where the distilled student is scored too.

The Adult files are not in the project (../shared/datasets/adult; ``--adult DIR`` elsewhere).
Run through benchmarks/run.py (``--only utility``). The DP logistic-regression baseline is IBM's
diffprivlib when it imports: its last release (0.6.6) does not with scikit-learn 1.9 (it imports
sklearn.tree._tree.DOUBLE and passes LogisticRegression(multi_class=...), both removed), so the
figure is recorded as unavailable with the reason; the unofficial "diffprivlib-fix" upload is not
used. Install diffprivlib beside an older scikit-learn to fill it.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from harness import log, pcqr, temp_dir, write_cluster_yaml

ADULT = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "adult"
NUMERIC = {"age": 100.0, "fnlwgt": 1.5e6, "education-num": 16.0, "capital-gain": 1e5, "capital-loss": 5e3,
           "hours-per-week": 100.0}  # public bounds: each scaled column lies in [0, 1]
COLUMNS = ["age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation",
           "relationship", "race", "sex", "capital-gain", "capital-loss", "hours-per-week", "native-country", "income"]
QUERIES = 2000
CUTOFF = 20
LEARNERS = {"stump": ["--learner", "stump"],
            "logistic": ["--learner", "sklearn.linear_model.LogisticRegression", "--learner-param", "C=10"]}
SETTINGS = [("gnmax", "tight"), ("guess", "tight"), ("stability", "tight"), ("stability", "paper")]
STUDENT = ["--after-halt", "student", "--student-learner", "sklearn.linear_model.LogisticRegression",
           "--student-learner-param", "C=10", "--student-learner-param", "max_iter=2000"]
MIN_ROWS_PER_MODEL = 5


def _categories(adult: Path) -> dict[str, list[str]]:
    """Each categorical column's values as adult.names lists them (public)."""
    found: dict[str, list[str]] = {}
    for line in (adult / "adult.names").read_text().splitlines():
        name, sep, values = line.partition(":")
        if sep and name in COLUMNS and "continuous" not in values:
            found[name] = [v.strip().rstrip(".") for v in values.split(",") if v.strip()]
    return found


def load_adult(adult: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """(X_train, y_train, X_test, y_test, feature names), encoded as the module docstring says."""
    categories = _categories(adult)

    def read(path: Path) -> tuple[np.ndarray, np.ndarray]:
        rows = [r.split(", ") for r in path.read_text().splitlines() if r and not r.startswith("|")]
        rows = [r for r in rows if len(r) == len(COLUMNS)]
        columns = []
        for i, name in enumerate(COLUMNS[:-1]):
            values = [r[i].strip() for r in rows]
            if name in NUMERIC:
                columns.append(np.array(values, dtype=float)[:, None] / NUMERIC[name])
            else:
                known = categories[name]
                columns.append(np.array([[v == c for c in known] for v in values], dtype=float))
        y = np.array([r[-1].strip().rstrip(".") == ">50K" for r in rows], dtype=np.int8)
        return np.hstack(columns), y

    names = []
    for name in COLUMNS[:-1]:
        names += [name] if name in NUMERIC else [f"{name}={c}" for c in categories[name]]
    X_train, y_train = read(adult / "adult.data")
    X_test, y_test = read(adult / "adult.test")
    return X_train, y_train, X_test, y_test, [n.replace(" ", "_") for n in names]


def _write(path: Path, X: np.ndarray, names: list[str], **extra: np.ndarray) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({**{n: X[:, i] for i, n in enumerate(names)}, **extra}), path / "part-0.parquet")


def _baselines(X: np.ndarray, y: np.ndarray, X_test: np.ndarray, y_test: np.ndarray, epsilons: list[float]) -> dict[str, Any]:
    from sklearn.linear_model import LogisticRegression

    out: dict[str, Any] = {"nonprivate_logistic": float(LogisticRegression(C=10, max_iter=2000).fit(X, y).score(X_test, y_test))}
    import warnings

    try:
        from diffprivlib.models import LogisticRegression as DPLogisticRegression

        DPLogisticRegression(epsilon=1.0)
    except Exception as exc:  # noqa: BLE001 -- not installed, or broken against this scikit-learn
        out["diffprivlib_logistic"] = f"unavailable: {type(exc).__name__}: {exc}"
        return out
    norm = float(np.sqrt(len(NUMERIC) + 8))  # every row's norm is at most this (scaled numerics, 8 one-hots)
    scores = {}
    for eps in epsilons:
        runs = []
        for seed in range(5):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model = DPLogisticRegression(epsilon=eps, data_norm=norm, random_state=seed, max_iter=2000)
                runs.append(float(model.fit(X, y).score(X_test, y_test)))
        scores[str(eps)] = {"mean": float(np.mean(runs)), "runs": runs}
    out["diffprivlib_logistic"] = scores
    return out


def _scores(log_dir: Path, truth: np.ndarray, X_test: np.ndarray, y_test: np.ndarray,
            student: tuple[str, dict[str, Any]] = ("sklearn.linear_model.LogisticRegression",
                                                   {"C": 10, "max_iter": 2000})) -> dict[str, Any]:
    """From the public log: the gate's answers (sources sparse_vector, guess, flipped) and their
    accuracy, the accuracy over every query (gate, then student); and the student written by
    ``pcqr distill`` (``student``: Adult's logistic regression by default), scored on the held-out rows."""
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
        out["distilled_student_accuracy"] = float(np.mean(model.predict(X_test) == y_test))
    except PcqrError as exc:  # a log the gate never answered in
        out["distilled_student_accuracy"] = f"none: {exc}"
    return out


XOR_LEARNERS: dict[str, tuple[str, dict[str, Any]]] = {
    "tree4": ("sklearn.tree.DecisionTreeClassifier", {"max_depth": 4}),
    "hgb": ("sklearn.ensemble.HistGradientBoostingClassifier", {"max_iter": 20, "max_depth": 2, "early_stopping": False}),
}
XOR_FEATURES, XOR_NOISE, XOR_HELD_OUT = 5, 0.1, 20_000


def _cutoff(gate: str) -> list[str]:
    """--cutoff T, except for gnmax (T = m: it halts after m answers and refuses another T)."""
    return [] if gate == "gnmax" else ["--cutoff", str(CUTOFF)]


def _learner_options(learner: str) -> list[str]:
    name, params = XOR_LEARNERS[learner]
    return ["--learner", name, *(a for k, v in params.items() for a in ("--learner-param", f"{k}={str(v).lower()}"))]


def _xor_held_out() -> tuple[np.ndarray, np.ndarray]:
    """Fresh XOR rows (another seed than any generated set) with their noisy labels."""
    from pcqr.pipeline.data.synthetic import Concept, make_chunk

    table = make_chunk("agnostic", Concept("xor", 0.0), XOR_HELD_OUT, XOR_FEATURES, XOR_NOISE,
                       np.random.SeedSequence(2026))
    X = np.column_stack([table.column(f"x{j}").to_numpy() for j in range(XOR_FEATURES)])
    return X, table.column("label").to_numpy().astype(int)


def _xor_baselines(private: Path, X_test: np.ndarray, y_test: np.ndarray) -> dict[str, Any]:
    """The learners without privacy, on the first 10^6 private rows."""
    import pyarrow.parquet as pq
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.tree import DecisionTreeClassifier

    first = sorted(private.glob("*.parquet"))[0]
    table = pq.read_table(first).slice(0, 1_000_000)
    X = np.column_stack([table.column(f"x{j}").to_numpy() for j in range(XOR_FEATURES)])
    y = table.column("label").to_numpy().astype(int)
    models = {"tree4": DecisionTreeClassifier(max_depth=4), "hgb": HistGradientBoostingClassifier(max_iter=20, max_depth=2),
              "logistic": LogisticRegression()}
    return {f"nonprivate_{name}": float(m.fit(X, y).score(X_test, y_test)) for name, m in models.items()}


def _xor_runs(work: Path, cluster: str, rows: int, settings: list[tuple[float, str, str]],
              held: tuple[np.ndarray, np.ndarray]) -> dict[str, Any]:
    """One XOR dataset of ``rows`` rows: each (eps, gate, learner), ``pcqr answer --private`` with the
    gate's default k (the student, the same learner, answers after a halt)."""
    import pyarrow.parquet as pq

    from pcqr.pipeline.privacy.subsamp import SubSampParameters

    name = f"xor-{rows:.0e}"
    data = work / name
    seconds, _ = pcqr(work, f"{name}-generate", "generate", "--kind", "agnostic", "--concept", "xor", "--noise",
                      str(XOR_NOISE), "--rows", str(rows), "--features", str(XOR_FEATURES), "--queries", str(QUERIES),
                      "--seed", "13", "--out", str(data), "--cluster", cluster)
    truth = pq.read_table(data / "truth").sort_by("query_id").column("label").to_numpy().astype(int)
    out: dict[str, Any] = {"private_rows": rows, "generate_seconds": round(seconds, 1),
                           **_xor_baselines(data / "private", *held), "runs": []}
    for eps, gate, learner in settings:
        params = SubSampParameters.create("tight", eps, 1e-6, CUTOFF, QUERIES, 0.05, gate=gate)
        k = {"gnmax": params.for_rows(rows).subsamples, "guess": params.subsamples,
             "stability": min(params.useful_subsamples(), rows // MIN_ROWS_PER_MODEL)}[gate]
        label = f"{name}-{gate}-{learner}-{eps:g}"
        log(f"utility: {label} (k = {k})")
        seconds, summary = pcqr(
            work, label, "answer", "--private", str(data / "private"), "--state", f"state-{label}", "--queries",
            str(data / "queries"), "--log", f"log-{label}", "--truth", str(data / "truth"), "--epsilon", str(eps),
            "--delta", "1e-6", *_cutoff(gate), "--queries-max", str(QUERIES), "--gate", gate,
            "--subsamples", str(k), *_learner_options(learner), "--after-halt", "student", "--cluster", cluster)
        out["runs"].append({
            "epsilon": eps, "gate": gate, "learner": learner, "subsamples": k, "rows_per_model": rows // k,
            "noise": summary.get("sigma", summary.get("lambda")), "instances_used": summary.get("budget_used"),
            "proven": [summary.get("proven_epsilon"), summary.get("proven_delta")],
            **_scores(work / f"log-{label}", truth, *held, student=XOR_LEARNERS[learner]),
            "seconds": round(seconds, 1),
        })
    return out


def bench_utility(quick: bool, adult: Path | None = None) -> dict[str, Any]:
    """Adult (when its files are there) and the XOR task."""
    result: dict[str, Any] = {"adult": _bench_adult(quick, adult)}
    epsilons = [1.0] if quick else [0.5, 1.0, 2.0, 4.0]
    held = _xor_held_out()
    with temp_dir("utility-xor") as work:
        cluster = str(write_cluster_yaml(work))
        grid = [(eps, gate, "tree4") for eps in epsilons for gate in ("gnmax", "guess", "stability")]
        if quick:
            result["xor_1e5"] = _xor_runs(work, cluster, 10**5, grid, held)
        else:
            result["xor_1e6"] = _xor_runs(work, cluster, 10**6, [*grid, (1.0, "gnmax", "hgb")], held)
            result["xor_1e7"] = _xor_runs(work, cluster, 10**7, [(1.0, "gnmax", "tree4"), (1.0, "guess", "tree4")],
                                          held)
    return result


def _bench_adult(quick: bool, adult: Path | None = None) -> dict[str, Any]:
    from pcqr.pipeline.privacy.subsamp import SubSampParameters

    adult = Path(os.environ.get("PCQR_ADULT", adult or ADULT))
    if not (adult / "adult.data").exists():
        return {"skipped": f"no Adult files in {adult} (set PCQR_ADULT)"}
    X, y, X_test, y_test, names = load_adult(adult)
    queries, truth = X_test[:QUERIES], y_test[:QUERIES]
    held_X, held_y = X_test[QUERIES:], y_test[QUERIES:]
    epsilons = [1.0] if quick else [0.5, 1.0, 2.0, 4.0]
    result: dict[str, Any] = {"private_rows": int(len(y)), "features": len(names), "queries": QUERIES,
                              "cutoff": CUTOFF, "delta": 1e-6, "held_out_rows": int(len(held_y)),
                              "majority_rate_queries": float(max(truth.mean(), 1 - truth.mean())),
                              **_baselines(X, y, held_X, held_y, epsilons), "runs": []}
    with temp_dir("utility") as work:
        cluster = str(write_cluster_yaml(work))
        _write(work / "private", X, names, label=y)
        _write(work / "queries", queries, names, query_id=np.arange(QUERIES))
        _write(work / "truth", np.zeros((QUERIES, 0)), [], query_id=np.arange(QUERIES), label=truth)
        for eps in epsilons:
            for gate, profile in SETTINGS:
                params = SubSampParameters.create(profile, eps, 1e-6, CUTOFF, QUERIES, 0.05, gate=gate)
                k = params.subsamples if gate in ("guess", "gnmax") else min(params.useful_subsamples(),
                                                                   len(y) // MIN_ROWS_PER_MODEL)
                for learner, options in LEARNERS.items():
                    label = f"{gate}-{profile}-{learner}-{eps:g}"
                    log(f"utility: {label} (k = {k})")
                    seconds, summary = pcqr(
                        work, label, "answer", "--private", "private", "--state", f"state-{label}", "--queries",
                        "queries", "--log", f"log-{label}", "--truth", "truth", "--epsilon", str(eps), "--delta",
                        "1e-6", *_cutoff(gate), "--queries-max", str(QUERIES), "--gate", gate,
                        "--profile", profile, "--subsamples", str(k), *options, *STUDENT, "--allow-private-overlap",
                        "--cluster", cluster)
                    result["runs"].append({
                        "epsilon": eps, "gate": gate, "profile": profile, "learner": learner, "subsamples": k,
                        "rows_per_model": len(y) // k, "lambda": summary.get("lambda", summary.get("sigma")),
                        "threshold": summary.get("threshold"), "instances_used": summary.get("budget_used"),
                        "proven": [summary.get("proven_epsilon"), summary.get("proven_delta")],
                        **_scores(work / f"log-{label}", truth, held_X, held_y),
                        "seconds": round(seconds, 1),
                    })
    return result
