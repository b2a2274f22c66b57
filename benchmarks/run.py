#!/usr/bin/env python
"""pcqr benchmarks: measure, write the figures as JSON, print a short table.

    python benchmarks/run.py [--only NAME ...] [--quick] --out benchmarks/results.json

Benchmarks (see benchmarks/README.md for what each figure means):

* ``coordinator``       the SparseVector coordinator alone, on one core
* ``end_to_end``        ``pcqr answer`` Parquet -> Parquet log on a local 2-worker cluster
* ``training_speedup``  train_models with 1 and with 2 workers
* ``driver_memory``     peak RSS of the ``pcqr answer`` driver for two query counts
* ``answered_index``    issue 32: the answered-queries index alone at 10^6, 10^7 and 10^8 answered queries: peak RSS
* ``agnostic_at_scale`` ``pcqr answer --mode agnostic`` (A_AgPrivCl, Algorithm 3's parameters) on 5x10^7 rows
* ``relabel_stumps``    A_Relabel's exponential mechanism alone: stumps over 20 features, 10^6 and 10^7 rows
* ``sharded_em``        the sharded exponential mechanism over ~10^7 interval candidates, 1 and 2 workers
* ``sspp_intervals``    A_SSPP with intervals, 1 and 2 workers
* ``pap_thresholds``    ``pcqr release`` (A_PAP) with thresholds
* ``safety_overhead``   the ledger and crash-safe commit on vs off
* ``answer_logistic``   issue 12's setting: ``pcqr answer``, k = 100 logistic models, 20 features, vs its ceiling
* ``bns_point``         issue 14: ``pcqr learn --algorithm point`` (A_dist) on 10^6 rows, and its sample complexity
                        beside the exponential mechanism over the same class (domains of 2^32 and 2^64 points)
* ``bns_thresholds``    issue 14: ``pcqr learn --algorithm learn-thresholds`` on 10^6 rows, beside the EM over thresholds
* ``bns_sanitize``      issue 14: ``pcqr sanitize --algorithm san-points`` on 10^6 rows, its error beside a stable histogram;
                        ``--algorithm san-thresholds``, its error beside noisy counts on a binary tree
* ``practical_sanitizers`` issue 31: ``pcqr sanitize --algorithm histogram`` and ``cdf`` beside SanPoints and
                        SanThresholds at 10^6, 10^7 and 10^8 rows: error over every query and rows/s
* ``bns_label_private`` issue 14: ``pcqr learn --algorithm label-private`` on 10^6 rows beside A_SSPP on the same points
* ``auto_learner``      issue 26: PrivateClassifier(learner='auto') beside the default learner on Adult, XOR and an
                        imbalanced nonlinear task, at the estimator's defaults (epsilon 1)
* ``labels``            issue 29: ``--labels M`` sessions (gnmax) at M = 200 ... 2,000 on Adult, XOR and the corner
                        task: the teacher's released answers, its noise-free majority and three students on held-out rows
* ``utility``           issues 13 and 29: pcqr's accuracy per eps, gate and learner (and at its defaults) on UCI Adult in
                        two encodings, an imbalanced corner task and XOR, beside DP logistic regression (diffprivlib,
                        in a side environment), DP-EBM (the ``bench`` extra), the majority class and non-private
                        models; every cell a range over 3 runs (utility_report.py prints the tables)
* ``work_past_m``       issue 47: a 200,000-query stream on a stability session of ~12,000 trees whose m is
                        10,000, beside its first 10,000 queries alone, and the finished stream's re-run
* ``accuracy``          issue 48: pcqr's defaults per eps (5 runs, secure noise) beside the noise-free vote of
                        their own teachers, fixed settings, DP-LR (fresh noise, 10 fits) and DP-EBM (defaults and a
                        tuned grid) on a generated 140,000-row task, Adult, a 4,300-row task, corner and XOR
* ``teacher_rules``     issue 48: the public rules behind the defaults measured offline (no session; gnmax's noise
                        simulated at pcqr's sigma): the teachers' depth, M per eps, small data's M and k
* ``multiclass``        issue 49: the defaults over c > 2 classes (5 runs) beside their teachers' vote and
                        multi-class DP-LR (10 fits) on Adult's relationship and marital status and a generated
                        five-class task at 10^5 and 10^6 rows
* ``imbalance``         issue 29, item 4: gnmax's teachers offline (no session) where each sees few positives:
                        class-weighted trees and public vote thresholds, with and without the certified noise

One module per benchmark (benchmarks/<name>.py, its ``bench_<name>``), the shared pieces in
benchmarks/harness.py; this file runs them and writes the figures.

Nothing here asserts a speed: every figure is measured and written, next to
the aim it is compared with. Each benchmark works in its own temporary
directory under /tmp (removed at the end, also on failure) and closes every
Dask cluster it starts (the ``pcqr`` subprocesses close their own).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from accuracy import bench_accuracy
from agnostic_at_scale import bench_agnostic_at_scale
from answered_index import bench_answered_index
from answer_logistic import bench_answer_logistic
from auto_learner import bench_auto_learner
from bns_label_private import bench_bns_label_private
from bns_point import bench_bns_point
from bns_sanitize import bench_bns_sanitize
from bns_thresholds import bench_bns_thresholds
from labels import bench_labels
from ledger_cost import bench_ledger_cost
from practical_sanitizers import bench_practical_sanitizers
from coordinator import bench_coordinator
from driver_memory import bench_driver_memory
from end_to_end import bench_end_to_end
from imbalance import bench_imbalance
from pap_thresholds import bench_pap_thresholds
from relabel_stumps import bench_relabel_stumps
from safety_overhead import bench_safety_overhead
from sharded_em import bench_sharded_em
from sspp_intervals import bench_sspp_intervals
from teacher_rules import bench_teacher_rules
from multiclass import bench_multiclass
from training_speedup import bench_training_speedup
from work_past_m import bench_work_past_m
from utility import bench_utility
from harness import ROOT, log, machine_info

BENCHMARKS = (
    "coordinator", "end_to_end", "training_speedup", "driver_memory", "answered_index",
    "agnostic_at_scale", "relabel_stumps", "sharded_em", "sspp_intervals", "pap_thresholds",
    "safety_overhead", "answer_logistic", "utility", "bns_point", "bns_sanitize",
    "bns_thresholds", "bns_label_private", "auto_learner", "imbalance", "labels", "ledger_cost",
    "practical_sanitizers", "work_past_m", "accuracy", "teacher_rules", "multiclass",
)


# --------------------------------------------------------------------------- driver

RUNNERS: dict[str, Callable[[bool], dict[str, Any]]] = {
    "coordinator": bench_coordinator,
    "end_to_end": bench_end_to_end,
    "training_speedup": bench_training_speedup,
    "driver_memory": bench_driver_memory,
    "answered_index": bench_answered_index,
    "agnostic_at_scale": bench_agnostic_at_scale,
    "relabel_stumps": bench_relabel_stumps,
    "sharded_em": bench_sharded_em,
    "sspp_intervals": bench_sspp_intervals,
    "pap_thresholds": bench_pap_thresholds,
    "safety_overhead": bench_safety_overhead,
    "answer_logistic": bench_answer_logistic,
    "utility": bench_utility,
    "bns_point": bench_bns_point,
    "bns_sanitize": bench_bns_sanitize,
    "bns_thresholds": bench_bns_thresholds,
    "bns_label_private": bench_bns_label_private,
    "auto_learner": bench_auto_learner,
    "imbalance": bench_imbalance,
    "labels": bench_labels,
    "ledger_cost": bench_ledger_cost,
    "practical_sanitizers": bench_practical_sanitizers,
    "work_past_m": bench_work_past_m,
    "accuracy": bench_accuracy,
    "teacher_rules": bench_teacher_rules,
    "multiclass": bench_multiclass,
}


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-2):
            return f"{value:.3g}"
        return f"{value:,.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _agnostic_rows(r: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    b, size = "agnostic_at_scale", f"{r['private_rows']:,} rows, k = {r['parameters']['subsamples_k']:,}"

    def share(x: Any) -> str:  # a fraction of the answered queries, with the count
        return "-" if x is None else f"{x:.4f} ({round(x * r['answered'])} of {r['answered']})"

    return [
        (b, f"end-to-end s ({size}, train + answer)", _fmt(r["end_to_end_seconds"]), "< 600"),
        (b, f"driver / worker peak RSS MB, {size}",
         f"{_fmt(r['driver_peak_rss_mb'])} / {_fmt(r['workers_peak_rss_mb'])}", ""),
        (b, f"relabel s / train s (in process), {size}", f"{_fmt(r['timings_seconds'].get('relabel'))} / "
         f"{_fmt(r['timings_seconds'].get('train_models_on_resampled'))}", ""),
        (b, f"w / useful k, {size}",
         f"{_fmt(r['parameters']['threshold_w'])} / {_fmt(r['parameters'].get('useful_subsamples'))}", ""),
        (b, f"fraction answered, {size}", _fmt(r["fraction_answered"]), ""),
        (b, f"error of answered vs noisy truth, {size}", share(r["error_vs_noisy_truth"]), ""),
        (b, f"error of answered vs noiseless concept, {size}", share(r["error_vs_noiseless_concept"]), ""),
        (b, f"agreement of answered with h_hat, {size}", share(r["agreement_with_h_hat"]), ""),
    ]


def table_rows(results: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    rows: list[tuple[str, str, str, str]] = []
    results = {name: r for name, r in results.items() if not (isinstance(r, dict) and "error" in r)}
    r = results.get("coordinator")
    if r:
        for regime, reg in r["regimes"].items():
            for batch, v in reg["by_batch_size"].items():
                label = f"{regime}, batch {int(batch):,}"
                aim = ">= 1e+07" if regime == "paper" else ""
                rows.append(("coordinator", f"queries/s, {label}", _fmt(v["queries_per_second"]), aim))
                rows.append(("coordinator", f"fraction answered, {label}", _fmt(v["fraction_answered"]), ""))
                rows.append(("coordinator", f"abstentions, {label}", _fmt(v["abstentions"]), ""))
                rows.append(("coordinator", f"us per abstention, {label}", _fmt(v["microseconds_per_abstention"]), ""))
                rows.append(("coordinator", f"halted after (queries), {label}", _fmt(v["halted_after_queries"]), ""))
        d = r["diagnostics"]
        rows.append(("coordinator", "no-abstention ceiling queries/s", _fmt(d["no_abstention_ceiling_queries_per_second"]), ""))
        rows.append(("coordinator", "threshold noise draw (us)", _fmt(d["threshold_draw_microseconds"]), ""))
    r = results.get("end_to_end")
    if r:
        rows.append(("end_to_end", "answer queries/s (wall)", _fmt(r["answer_queries_per_second_wall"]), ">= 2e+05"))
        rows.append(("end_to_end", "answer queries/s (in-process)", _fmt(r["answer_queries_per_second_in_process"]), ""))
        rows.append(("end_to_end", "answer wall s", _fmt(r["answer_wall_seconds"]), ""))
        rows.append(("end_to_end", "coordinator share of in-process", _fmt(r["coordinator_share_of_in_process"]), ""))
        rows.append(("end_to_end", "queries/s outside the coordinator", _fmt(r.get("queries_per_second_outside_coordinator")), ""))
        rows.append(("end_to_end", "fraction answered", _fmt(r["fraction_answered"]), ""))
        u = r.get("unfiltered_stream")
        if u:
            rows.append(("end_to_end", f"unfiltered stream of {u['queries']:,}: answered / halted after",
                         f"{_fmt(u['answered'])} / {_fmt(u['halted_after_queries'])}", ""))
        rows.append(("end_to_end", "train s (not in answer)", _fmt(r["train_seconds"]), ""))
    r = results.get("training_speedup")
    if r:
        for n, v in r["workers"].items():
            rows.append(("training_speedup", f"seconds, {n} worker(s)", _fmt(v["seconds_median"]), ""))
        rows.append(("training_speedup", "speed-up 2 vs 1", _fmt(r["speedup"]), ">= 1.7"))
    r = results.get("driver_memory")
    if r:
        for n, v in r["runs"].items():
            rows.append(("driver_memory", f"driver peak RSS MB, {int(n):,} queries", _fmt(v["driver_peak_rss_mb"]), ""))
            rows.append(("driver_memory", f"worker peak RSS MB, {int(n):,} queries", _fmt(v["workers_peak_rss_mb"]), ""))
            rows.append(("driver_memory", f"  of which answer-loop peak MB, {int(n):,} queries",
                         _fmt(v["driver_peak_during_loop_mb"]), ""))
        rows.append(("driver_memory", "ratio big / small (driver peak)", _fmt(r["ratio_big_over_small"]), "~ 1"))
        rows.append(("driver_memory", "ratio big / small (answer-loop peak)",
                     _fmt(r.get("loop_ratio_big_over_small")), "~ 1"))
    r = results.get("answered_index")
    if r:
        for n, v in r["runs"].items():
            rows.append(("answered_index", f"peak RSS MB, {int(n):,} answered", _fmt(v["peak_rss_mb"]), ""))
            rows.append(("answered_index", f"  seconds a 10^5 batch at the end, {int(n):,}",
                         _fmt(v["seconds_per_batch_at_end"]), ""))
        rows.append(("answered_index", "peak RSS ratio largest / 10^6", _fmt(r["peak_rss_ratio"]), "<= 1.05"))
    r = results.get("agnostic_at_scale")
    if r and "error" not in r:
        rows += _agnostic_rows(r)
        if r.get("useful_size"):
            rows += _agnostic_rows(r["useful_size"])
    r = results.get("relabel_stumps")
    if r and "error" not in r:
        for n, v in r["sizes"].items():
            label = f"n' = {int(n):,}"
            if "error" in v:
                rows.append(("relabel_stumps", f"{label}: FAILED", v["error"].splitlines()[0][:60], ""))
                continue
            rows.append(("relabel_stumps", f"seconds, {label}", _fmt(v["seconds"]), ""))
            rows.append(("relabel_stumps", f"candidates, {label}", _fmt(v["candidates"]), ""))
            rows.append(("relabel_stumps", f"driver peak RSS MB during, {label}", _fmt(v["driver_peak_during_mb"]), "flat"))
        if "big_rows" in r:
            rows.append(("relabel_stumps", f"time ratio {r['big_rows']:,} / {r['small_rows']:,} rows",
                         _fmt(r.get("ratio_big_over_small")), f"<= {r['aim_ratio_for_these_sizes']:.1f}"))
    r = results.get("sharded_em")
    if r and "error" not in r:
        rows.append(("sharded_em", "candidates", _fmt(r["candidates"]), ""))
        for n, v in r["workers"].items():
            rows.append(("sharded_em", f"seconds, {n} worker(s)", _fmt(v["seconds_median"]), ""))
            rows.append(("sharded_em", f"candidates/s, {n} worker(s)", _fmt(v["candidates_per_second"]), ""))
        rows.append(("sharded_em", "speed-up 2 vs 1", _fmt(r["speedup"]), ">= 1.7"))
    r = results.get("sspp_intervals")
    if r and "error" not in r:
        rows.append(("sspp_intervals", f"candidates ({r['public_points']:,} public points)", _fmt(r["candidates"]), ""))
        for n, v in r["workers"].items():
            rows.append(("sspp_intervals", f"seconds vs {r['private_rows']:,} rows, {n} worker(s)", _fmt(v["seconds_median"]), ""))
        rows.append(("sspp_intervals", "speed-up 2 vs 1", _fmt(r["speedup"]), ""))
    r = results.get("pap_thresholds")
    if r and "error" not in r:
        for name, v in r["settings"].items():
            label = f"{r['public_points']:,} public, {r['private_rows']:,} private, {name}"
            rows.append(("pap_thresholds", f"wall s, {label}", _fmt(v["wall_seconds"]), ""))
            rows.append(("pap_thresholds", f"max error, {label}", _fmt(v["max_error"]), ""))
            rows.append(("pap_thresholds", f"public-only error, {label}", _fmt(v["public_only_error"]), ""))
            rows.append(("pap_thresholds", f"PMW updates, {label}", _fmt(v["pmw_updates"]), ""))
    r = results.get("answer_logistic")
    if r:
        b = "answer_logistic"
        rows.append((b, f"queries/s whole command ({r['queries']:,} queries)", _fmt(r["queries_per_second_wall"]), ">= 3e+05"))
        rows.append((b, "queries/s answer loop", _fmt(r["queries_per_second_loop"]), ""))
        rows.append((b, "no-sparse-vector ceiling queries/s", _fmt(r["no_sparse_vector_ceiling_queries_per_second"]), ""))
        rows.append((b, "ratio loop / ceiling", _fmt(r["ratio_loop_to_ceiling"]), ">= 0.9"))
        rows.append((b, "ratio whole command / loop ceiling", _fmt(r["ratio_wall_to_ceiling"]), ">= 0.8"))
        rows.append((b, "ratio whole command / validation pass and loop ceiling",
                     _fmt(r.get("ratio_wall_to_pass_and_loop_ceiling")), ""))
        rows.append((b, "seconds outside the validation pass and the loop",
                     _fmt(r.get("outside_pass_and_loop_seconds")), ""))
        rows.append((b, "ratio whole command / itself without the coordinator", _fmt(r.get("ratio_wall_to_wall_ceiling")),
                     ">= 0.9"))
        rows.append((b, "queries/s whole command, every run", ", ".join(_fmt(v) for v in r["queries_per_second_wall_all_runs"]), ""))
        guess = r.get("default_gate")
        if guess:
            rows.append((b, f"queries/s whole command, no --gate (pcqr chose {guess['gate']})",
                         _fmt(guess["queries_per_second_wall"]), ""))
        big = r.get("ten_million")
        if big:
            rows.append((b, f"queries/s whole command ({big['queries']:,} queries)", _fmt(big["queries_per_second_wall"]), ""))
            rows.append((b, "driver loop peak MB, 10^6 / 10^7 queries",
                         f"{_fmt(r['driver_answer_loop_peak_mb'])} / {_fmt(big['driver_answer_loop_peak_mb'])}", "flat"))
    r = results.get("safety_overhead")
    if r and "error" not in r:
        for batch, v in r["batch_sizes"].items():
            label = f"{r['queries']:,} queries, batches of {int(batch):,}"
            rows.append(("safety_overhead", f"loop q/s on / off, {label}",
                         f"{_fmt(v['loop_queries_per_second']['on'])} / {_fmt(v['loop_queries_per_second']['off'])}", ""))
            rows.append(("safety_overhead", f"overhead in the answer loop, {label}", _fmt(v["overhead_loop"]), "< 0.10"))
            rows.append(("safety_overhead", f"overhead of the whole command, {label}", _fmt(v["overhead_wall"]), ""))
    r = results.get("bns_point")
    if r and "error" not in r:
        e = r["end_to_end"]
        rows.append(("bns_point", f"rows/s, pcqr learn --algorithm point ({e['private_rows']:,} rows)",
                     _fmt(e["rows_per_second"]), ""))
        rows.append(("bns_point", "error of the released point on fresh rows", _fmt(e["error_on_10000_fresh_rows"]), "0"))
        for t in r["sample_complexity"]["table"]:
            rows.append(("bns_point", f"P(target), 2^{t['domain_bits']} domain, {t['rows']:,} rows: A_dist / EM",
                         f"{_fmt(t['adist_success'])} / {_fmt(t['em_success'])}", ""))
    r = results.get("bns_sanitize")
    if r and "error" not in r:
        e = r["end_to_end"]
        rows.append(("bns_sanitize", f"rows/s, pcqr sanitize --algorithm san-points ({e['private_rows']:,} rows)",
                     _fmt(e["rows_per_second"]), ""))
        rows.append(("bns_sanitize", "largest point-query error of the released table", _fmt(e["largest_error"]),
                     f"<= {e['alpha']}"))
        for t in r["errors"]["table"]:
            rows.append(("bns_sanitize", f"largest error, {t['rows']:,} rows: SanPoints / stable histogram",
                         f"{_fmt(t['san_points_error'])} / {_fmt(t['stable_histogram_error'])}", ""))
        h = r.get("thresholds")
        if h:
            e = h["end_to_end"]
            rows.append(("bns_sanitize", f"rows/s, pcqr sanitize --algorithm san-thresholds ({e['private_rows']:,} rows, "
                         f"eps {e['epsilon']:g})", _fmt(e["rows_per_second"]), ""))
            rows.append(("bns_sanitize", "largest threshold-query error of that table", _fmt(e["largest_error"]),
                         f"<= {e['alpha']}"))
            for t in h["errors"]["table"]:
                rows.append(("bns_sanitize", f"largest error, {t['rows']:,} rows, eps 1: SanThresholds / binary tree",
                             f"{_fmt(t['san_thresholds_error'])} / {_fmt(t['binary_tree_error'])}", ""))
    r = results.get("bns_label_private")
    if r and "error" not in r:
        for key, name in (("label_private", "label-private"), ("sspp_same_points", "sspp, the same points public")):
            e = r[key]
            rows.append(("bns_label_private", f"rows/s, pcqr learn --algorithm {name} ({r['private_rows']:,} rows)",
                         _fmt(e["rows_per_second"]), ""))
            rows.append(("bns_label_private", f"error on fresh rows, {name}", _fmt(e["error_on_10000_fresh_rows"]), ""))
    r = results.get("bns_thresholds")
    if r and "error" not in r:
        e = r["end_to_end"]
        rows.append(("bns_thresholds", f"rows/s, pcqr learn --algorithm learn-thresholds ({e['private_rows']:,} rows)",
                     _fmt(e["rows_per_second"]), ""))
        rows.append(("bns_thresholds", "error of the released threshold on the queries",
                     _fmt(e["error_on_10000_queries"]), ""))
        b = r.get("rectangle")
        if b:
            rows.append(("bns_thresholds", f"rows/s, pcqr learn --algorithm rectangle ({b['private_rows']:,} rows, 3-D)",
                         _fmt(b["rows_per_second"]), ""))
            rows.append(("bns_thresholds", "error of the released box on fresh rows (inside the target?)",
                         f"{_fmt(b['error_on_100000_fresh_rows'])} ({_fmt(b['inside_target'])})", "<= 0.1"))
        for t in r["sample_complexity"]["table"]:
            rows.append(("bns_thresholds", f"mean true error, 2^32 domain, {t['rows']:,} rows: RecConcave / EM",
                         f"{_fmt(t['rec_concave_mean_error'])} / {_fmt(t['em_mean_error'])}", ""))
    r = results.get("work_past_m")
    if r:
        for name, v in r["runs"].items():
            rows.append(("work_past_m", f"{name}: wall s (validation / loop / student fit)",
                         f"{_fmt(v['wall_seconds'])} ({_fmt(v['validate_seconds'])} / {_fmt(v['loop_seconds'])} / "
                         f"{_fmt(v['student_fit_seconds'])})", ""))
        rows.append(("work_past_m", f"stream of {r['stream']:,} / (first 10,000 + student fit)",
                     _fmt(r["stream_over_first_plus_student"]), "<= 1.3"))
        rows.append(("work_past_m", "re-run of the finished stream / its first run", _fmt(r["rerun_over_stream"]),
                     "<= 0.10"))
    for name, v in results.items():
        if isinstance(v, dict) and "error" in v:
            rows.append((name, "FAILED", v["error"].splitlines()[0][:60], ""))
    return rows


def print_table(results: dict[str, Any]) -> None:
    rows = [("benchmark", "figure", "value", "aim"), *table_rows(results)]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for i, row in enumerate(rows):
        print("  ".join(cell.ljust(widths[j]) if j != 2 else cell.rjust(widths[j]) for j, cell in enumerate(row)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=BENCHMARKS, metavar="NAME",
                        help=f"run only these ({', '.join(BENCHMARKS)})")
    parser.add_argument("--quick", action="store_true", help="shrink every size ~10x (smoke test)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results.json"), help="JSON file to write")
    args = parser.parse_args(argv)
    names = [n for n in BENCHMARKS if not args.only or n in args.only]
    scratch = tempfile.mkdtemp(prefix="pcqr-bench-ledger-")  # removed at the end: it holds the data's sketches
    os.environ.setdefault("PCQR_LEDGER", os.path.join(scratch, "ledger.sqlite"))  # never the user's ledger
    try:
        return _run(args, names)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _run(args: argparse.Namespace, names: list[str]) -> int:
    results: dict[str, Any] = {
        "machine": machine_info(),
        "run": {"quick": args.quick, "benchmarks": names, "seconds": {}},
    }
    started = time.perf_counter()
    failed = False
    for name in names:
        t0 = time.perf_counter()
        try:
            results[name] = RUNNERS[name](args.quick)
        except Exception as exc:  # report and go on with the others
            import traceback

            failed = True
            results[name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
            log(f"{name} FAILED: {exc}")
        results["run"]["seconds"][name] = round(time.perf_counter() - t0, 1)
        log(f"{name}: {results['run']['seconds'][name]} s")
    results["run"]["total_seconds"] = round(time.perf_counter() - started, 1)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.only and out.exists():  # keep the other benchmarks' figures from earlier runs
        earlier = json.loads(out.read_text(encoding="utf-8"))
        earlier.setdefault("runs", []).append(earlier.pop("run", None))
        earlier.update(results)
        results = earlier
    out.write_text(json.dumps(results, indent=2, sort_keys=False, default=str) + "\n", encoding="utf-8")
    print_table(results)
    print(f"\nwritten: {out}  (total {results['run']['total_seconds']} s{', quick' if args.quick else ''})")
    return 1 if failed else 0


if __name__ == "__main__":
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    sys.exit(main())
