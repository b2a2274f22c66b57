#!/usr/bin/env python
"""pcqr benchmarks: measure, write the figures as JSON, print a short table.

    python benchmarks/run.py [--only NAME ...] [--quick] --out benchmarks/results.json

Benchmarks (see benchmarks/README.md for what each figure means):

* ``coordinator``       the SparseVector coordinator alone, on one core
* ``end_to_end``        ``pcqr answer`` Parquet -> Parquet log on a local 2-worker cluster
* ``training_speedup``  train_models with 1 and with 2 workers
* ``driver_memory``     peak RSS of the ``pcqr answer`` driver for two query counts
* ``agnostic_at_scale`` ``pcqr answer --mode agnostic`` (A_AgPrivCl, Algorithm 3's parameters) on 5x10^7 rows
* ``relabel_stumps``    A_Relabel's exponential mechanism alone: stumps over 20 features, 10^6 and 10^7 rows
* ``sharded_em``        the sharded exponential mechanism over ~10^7 interval candidates, 1 and 2 workers

Nothing here asserts a speed: every figure is measured and written, next to
the aim it is compared with. Each benchmark works in its own temporary
directory under /tmp (removed at the end, also on failure) and closes every
Dask cluster it starts (the ``pcqr`` subprocesses close their own).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = (
    "coordinator", "end_to_end", "training_speedup", "driver_memory",
    "agnostic_at_scale", "relabel_stumps", "sharded_em", "sspp_intervals", "pap_thresholds",
    "safety_overhead",
)
CLUSTER_YAML = "pcqr: {cluster: {backend: local, n-workers: 2, threads-per-worker: 1}}\n"
SUBPROCESS_TIMEOUT = 3600

# Runs one `pcqr ...` command in a fresh Python process (the same entry point as the
# `pcqr` script: pcqr.jobs.cli.main), times pieces of it by wrapping functions at run time
# (no project file is changed), and writes, after the command returns, its own peak
# RSS (RUSAGE_SELF: this process only) and the largest peak RSS among its terminated,
# waited-for descendants (RUSAGE_CHILDREN: the Dask worker processes) to a JSON file.
CHILD_CODE = r"""
import json, resource, sys, time
out, argv = sys.argv[1], sys.argv[2:]
timings, inside = {}, []

def timed(owner, name, key, only_inside=False):
    original = getattr(owner, name)
    def wrapper(*args, **kwargs):
        if only_inside and not inside:
            return original(*args, **kwargs)
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            entry = timings.setdefault(key, {"seconds": 0.0, "calls": 0})
            entry["seconds"] += time.perf_counter() - started
            entry["calls"] += 1
    setattr(owner, name, wrapper)

import distributed
import pcqr.pipeline.session.answering
import pcqr.pipeline.privacy.noise as noise
import pcqr.pipeline.session.query_release as qr
import pcqr.pipeline.session.sparse_vector as sv
release = pcqr.pipeline.session.answering.release_answers
def release_answers(*args, **kwargs):
    inside.append(True)
    try:
        return release(*args, **kwargs)
    finally:
        inside.pop()
pcqr.pipeline.session.answering.release_answers = release_answers
timed(pcqr.pipeline.session.answering, "release_answers", "release_answers")
timed(pcqr.pipeline.session.answering, "validate_queries", "validate_queries")
timed(pcqr.pipeline.session.answering, "load_models", "load_models")
def vmhwm_kb():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return None
marks = {}
process = sv.SparseVector.process
def process_marking(self, *args, **kwargs):
    if "before_loop_kb" not in marks:  # first batch: the coordinator and its tables exist
        marks["before_loop_kb"] = max(vmhwm_kb() or 0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
        try:  # reset this process's peak-RSS mark (Linux >= 4.0): from here on, the loop's peak
            with open("/proc/self/clear_refs", "w") as refs:
                refs.write("5")
            marks["reset"] = True
        except OSError:
            marks["reset"] = False
    return process(self, *args, **kwargs)
sv.SparseVector.process = process_marking
timed(sv.SparseVector, "process", "coordinator")
timed(noise.DiscreteLaplaceTail, "__init__", "tail_table_build")
timed(distributed.Future, "result", "wait_for_votes", only_inside=True)
timed(distributed.Client, "scatter", "scatter_models", only_inside=True)
for name in ("batch_table", "encode_batch", "append_batch", "save_session"):
    timed(qr, name, name)
import pcqr.pipeline.session.planning  # agnostic mode: A_Relabel (steps 2-4 of Algorithm 3) and training on S_hat
timed(pcqr.pipeline.session.planning, "_relabel", "relabel")
timed(pcqr.pipeline.session.planning, "train_models_on", "train_models_on_resampled")
timed(pcqr.pipeline.session.answering, "train_session", "train_session")  # imported by name there
import contextlib, os
if os.environ.get("PCQR_BENCH_SAFETY") == "off":  # the durability benchmark's baseline
    qr.DURABLE = False  # log batch written straight after the session save (no pending copy)
    class NoBook:  # no ledger row: commits advance nothing
        def commit(self, session):
            pass
    class NoCharge:
        charged = {"label": "-", "epsilon": 0.0, "delta": 0.0, "spent_epsilon": 0.0, "spent_delta": 0.0,
                   "limited": False}
        def register(self, session):
            return NoBook()
        def __getitem__(self, key):  # train's summary reads the charge like the dict it was
            return self.charged[key]
    @contextlib.contextmanager
    def no_charge(*args, **kwargs):
        yield NoCharge()
    pcqr.pipeline.session.planning.session_charge = no_charge
    pcqr.pipeline.session.answering.session_charge = no_charge
from pcqr.jobs.cli import main
started = time.perf_counter()
rc = main(argv)
seconds = time.perf_counter() - started
# VmHWM, not ru_maxrss, for the loop: the kernel also folds the peak into ru_maxrss
# whenever a thread exits, and clear_refs does not reset that copy.
loop_kb = vmhwm_kb() if marks.get("reset") else None
report = {
    "rc": rc,
    "peak_before_loop_kb": marks.get("before_loop_kb"),
    "peak_during_loop_kb": loop_kb,
    "main_seconds": seconds,
    "timings": timings,
    "maxrss_self_kb": max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, loop_kb or 0,
                          marks.get("before_loop_kb") or 0),
    "maxrss_children_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
}
with open(out, "w") as handle:
    json.dump(report, handle)
sys.exit(rc)
"""


# --------------------------------------------------------------------------- helpers


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@contextmanager
def temp_dir(name: str) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=f"pcqr-bench-{name}-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def write_cluster_yaml(work: Path) -> Path:
    path = work / "cluster.yaml"
    path.write_text(CLUSTER_YAML, encoding="utf-8")
    return path


def run_command(argv: list[str], work: Path, label: str) -> tuple[float, str]:
    """Run a command in ``work`` (stdout/stderr to files); returns (wall seconds, stdout)."""
    out, err = work / f"{label}.stdout", work / f"{label}.stderr"
    started = time.perf_counter()
    with open(out, "wb") as o, open(err, "wb") as e:
        proc = subprocess.Popen(argv, cwd=work, stdout=o, stderr=e)
        try:
            rc = proc.wait(timeout=SUBPROCESS_TIMEOUT)
        except BaseException:
            proc.terminate()  # the child's own cluster shuts down with it
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            raise
    seconds = time.perf_counter() - started
    if rc != 0:
        tail = err.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{label}: {' '.join(argv)} exited {rc}:\n{tail}")
    return seconds, out.read_text(errors="replace")


def last_json(stdout: str) -> dict[str, Any]:
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"no JSON summary in output: {stdout[-500:]}")


def pcqr(work: Path, label: str, *args: str) -> tuple[float, dict[str, Any]]:
    """``pcqr ARGS --json`` as a subprocess; (wall seconds, its JSON summary)."""
    seconds, stdout = run_command([sys.executable, "-m", "pcqr.jobs.cli", *args, "--json"], work, label)
    return seconds, last_json(stdout)


def pcqr_instrumented(work: Path, label: str, *args: str) -> tuple[float, dict[str, Any], dict[str, Any]]:
    """Like :func:`pcqr` but through CHILD_CODE: also in-process timings and peak RSS."""
    report_file = work / f"{label}.report.json"
    argv = [sys.executable, "-c", CHILD_CODE, str(report_file), *args, "--json"]
    seconds, stdout = run_command(argv, work, label)
    return seconds, last_json(stdout), json.loads(report_file.read_text())


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def rate(count: float, seconds: float) -> float | None:
    return count / seconds if seconds > 0 else None


def machine_info() -> dict[str, Any]:
    import dask
    import distributed
    import numpy
    import pyarrow
    import sklearn

    try:
        import opendp

        opendp_version = getattr(opendp, "__version__", None)
        if opendp_version is None:
            from importlib.metadata import version

            opendp_version = version("opendp")
    except Exception:  # pragma: no cover - informational only
        opendp_version = None
    cpu_model = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_total = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_total = round(int(line.split()[1]) / 1024)
    except OSError:
        pass
    return {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "cpu_count": os.cpu_count(),
        "cpus_available": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu_model": cpu_model,
        "memory_mb": mem_total,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "dask": dask.__version__,
        "distributed": distributed.__version__,
        "pyarrow": pyarrow.__version__,
        "scikit_learn": sklearn.__version__,
        "opendp": opendp_version,
    }


@contextmanager
def one_core() -> Iterator[int | None]:
    """Pin this process to one CPU for the block (restored afterwards)."""
    if not hasattr(os, "sched_setaffinity"):
        yield None
        return
    before = os.sched_getaffinity(0)
    cpu = max(before)
    os.sched_setaffinity(0, {cpu})
    try:
        yield cpu
    finally:
        os.sched_setaffinity(0, before)


# --------------------------------------------------------------------------- 1. coordinator


def vote_counts(n: int, k: int, threshold: float, near_fraction: float, seed: int) -> "Any":
    """Realistic ct(1): mostly near-unanimous, a few percent with gap near the threshold.

    Stable queries (1 - near_fraction): ones ~ Binomial(k, 0.03) or k - that (either
    label, 50/50), so gap = |2 ones - k| is about 0.88 k, far above 2w. Near
    queries: gap uniform on [0, 4w] (the noisy threshold is 2w + noise in gap units).
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    minority = rng.binomial(k, 0.03, size=n)
    ones = np.where(rng.random(n) < 0.5, minority, k - minority)
    near = rng.random(n) < near_fraction
    gaps = rng.integers(0, int(4 * threshold) + 1, size=int(near.sum()))
    signs = np.where(rng.random(gaps.size) < 0.5, -1, 1)
    ones[near] = np.clip((k + signs * gaps) // 2, 0, k)
    return ones.astype(np.int32)


# A certifiable regime (issue 10) like `pcqr demo`'s: eps 4, delta 1e-6, T 20, stump models on
# generated threshold data, w left to pcqr (the smallest certifiable: 791.5; proven (1.66, 9.9e-7)).
# k = 3,200 (not the demo's 2,500) so that a unanimous query abstains with probability 3.5e-8: a
# stream of 10^7 agreed-on queries then fits the T = 20 abstentions (at k = 2,500 it is 4.9e-5).
CERTIFIED = ["--epsilon", "4", "--delta", "1e-6", "--cutoff", "20", "--subsamples", "3200", "--learner", "stump"]
CERTIFIED_ROWS = 4_000_000  # 1,250 rows per model
STABLE_MARGIN = 0.02


def stable_queries(work: Path, margin: float = STABLE_MARGIN) -> dict[str, Any]:
    """Copy the generated queries at least ``margin`` away from the hidden concept's boundary into
    data/stable-queries, file by file (one output file per input file, so this process stays small:
    its peak RSS is inherited by the pcqr processes it starts, whose peaks the benchmarks read).
    At a certifiable setting a session allows T = 20 abstentions, so a stream of 10^6 queries
    cannot contain the ~0.1% that sit where the models disagree (each costs one): the throughput
    and memory runs answer the stream the sparse vector is built for, queries the models agree on.
    Queries are public."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pcqr.pipeline.data.synthetic import read_concept

    concept = read_concept(str(sorted((work / "data" / "private").glob("*.parquet"))[0]))
    out = work / "data" / "stable-queries"
    out.mkdir(parents=True, exist_ok=True)
    generated = kept = 0
    for i, path in enumerate(sorted((work / "data" / "queries").glob("*.parquet"))):
        table = pq.read_table(str(path))
        x = np.column_stack([table.column(n).to_numpy() for n in table.column_names if n.startswith("x")])
        score = x[:, 0] if concept.kind == "threshold" else x @ np.asarray(concept.weights)
        stable = table.filter(pa.array(np.abs(score - concept.bias) > margin))
        pq.write_table(stable, str(out / f"part-{i:05d}.parquet"))
        generated, kept = generated + table.num_rows, kept + stable.num_rows
    return {"stable_margin": margin, "queries_generated": generated, "queries_kept": kept}


def certificate_of(summary: dict[str, Any]) -> dict[str, Any]:
    """A pcqr summary's privacy certificate: w (``threshold``), ``proven_epsilon``, every
    ``delta_<term>`` and ``proven_delta``."""
    keys = ("threshold", "proven_epsilon", "proven_delta")
    return {key: value for key, value in summary.items() if key in keys or key.startswith("delta_")}


def _coordinator_regime(params: Any, ones: Any, k: int, batch_sizes: tuple[int, ...]) -> dict[str, Any]:
    """Time SparseVector.process over ``ones`` in each batch size (secure noise)."""
    import numpy as np

    from pcqr.pipeline.privacy.noise import SecureNoise
    from pcqr.pipeline.session.sparse_vector import ABSTAINED, ANSWERED, REFUSED, SparseVector

    total, out = int(ones.size), {}
    for batch in batch_sizes:
        log(f"coordinator: {total:,} queries in batches of {batch:,} (T={params.cutoff})")
        coordinator = SparseVector.create(params, SecureNoise())
        counts = np.zeros(3, dtype=np.int64)
        elapsed, halt_seconds, halt_seen = 0.0, None, None
        for start in range(0, total, batch):
            chunk = ones[start : start + batch]
            t0 = time.perf_counter()
            status, _ = coordinator.process(chunk, k)
            elapsed += time.perf_counter() - t0
            counts += np.bincount(status, minlength=3)
            if coordinator.halted and halt_seconds is None:
                halt_seconds, halt_seen = elapsed, coordinator.state.queries_seen
        tested = coordinator.state.queries_seen
        tested_seconds = halt_seconds if halt_seconds is not None else elapsed
        out[str(batch)] = {
            "seconds": elapsed,
            "queries_per_second": rate(total, elapsed),
            "tested_queries": int(tested),
            "tested_queries_per_second": rate(tested, tested_seconds),
            "fraction_answered": float(counts[ANSWERED] / total),
            "fraction_abstained": float(counts[ABSTAINED] / total),
            "fraction_refused": float(counts[REFUSED] / total),
            "abstentions": int(counts[ABSTAINED]),
            "halted": bool(coordinator.halted),
            "halted_after_queries": int(halt_seen) if halt_seen is not None else None,
            "microseconds_per_abstention": (tested_seconds / counts[ABSTAINED] * 1e6)
            if counts[ABSTAINED] else None,
        }
    return out


def bench_coordinator(quick: bool) -> dict[str, Any]:
    """Two regimes, both certifiable (w is pcqr's smallest certifiable): the paper's (k of
    Algorithm 5, T = 50: abstentions are rare, which is what the sparse vector is for), and an
    abstention-heavy one (T = 10^6 makes lambda ~ 5,400 and w ~ 300,000 >> k = 2,000: every
    query abstains until the T-th)."""
    import numpy as np

    from pcqr.pipeline.session import sparse_vector
    from pcqr.pipeline.privacy.noise import DiscreteLaplaceTail, SecureNoise
    from pcqr.pipeline.privacy.subsamp import SubSampParameters

    total = 2 * 10**5 if quick else 10**7
    batch_sizes = (10**4, 10**5) if quick else (10**5, 10**6)
    result: dict[str, Any] = {"queries": total, "aim_queries_per_second": 1e7, "regimes": {}}
    paper = SubSampParameters.paper(epsilon=4, delta=1e-6, cutoff=50, queries_max=total, beta=0.05)
    heavy = SubSampParameters.paper(
        epsilon=4, delta=1e-6, cutoff=10**6, queries_max=10**9, beta=0.05, subsamples=2000
    )
    # paper regime: ~40 near-threshold queries in the whole stream, so T = 50 is not reached
    near_paper = 40 / total
    for name, params, near in (("paper", paper, near_paper), ("abstention_heavy", heavy, 0.03)):
        k = params.subsamples
        log(f"coordinator: generating {total:,} vote counts (k={k})")
        ones = vote_counts(total, k, params.threshold, near, seed=12345)
        gap = np.abs(2 * ones.astype(np.int64) - k)
        with one_core() as cpu:
            runs = _coordinator_regime(params, ones, k, batch_sizes)
        result["regimes"][name] = {
            "parameters": {
                "epsilon": params.epsilon, "delta": params.delta, "cutoff_T": params.cutoff,
                "queries_max": params.queries_max, "subsamples_k": k, "threshold_w": params.threshold,
                "lambda": params.lam, "query_noise_scale_gap_units": params.query_noise_scale,
                **params.certificate(),
            },
            "vote_counts": {
                "near_threshold_fraction": near,
                "median_gap": float(np.median(gap)),
                "how": "stable: ones ~ Bin(k, 0.03) or k - Bin(k, 0.03); near: gap ~ U[0, 4w]",
            },
            "cpu_pinned": cpu,
            "by_batch_size": runs,
        }
    # Diagnostics: the cost of the parts of one abstention.
    noise, reps = SecureNoise(), (2000 if quick else 20000)
    tail = DiscreteLaplaceTail(heavy.query_noise_scale)
    a = np.zeros(min(total, 10**6), dtype=np.int64)
    t0 = time.perf_counter()
    for start in range(0, total, a.size):
        tail.draw_at_least(a[: min(a.size, total - start)], noise)
    draw_seconds = time.perf_counter() - t0
    noise.discrete_laplace(heavy.threshold_noise_scale)
    t0 = time.perf_counter()
    for _ in range(reps):
        noise.discrete_laplace(heavy.threshold_noise_scale)
    threshold_us = (time.perf_counter() - t0) / reps * 1e6
    min_stretch = int(getattr(sparse_vector, "_MIN_STRETCH", 64))
    t0 = time.perf_counter()
    for _ in range(reps):
        tail.draw_at_least(a[:min_stretch], noise)
    stretch_us = (time.perf_counter() - t0) / reps * 1e6
    result["diagnostics"] = {
        "no_abstention_ceiling_queries_per_second": rate(total, draw_seconds),
        "no_abstention_ceiling_how": "DiscreteLaplaceTail.draw_at_least alone, batches of 10^6",
        "threshold_draw_microseconds": threshold_us,
        "min_stretch": min_stretch,
        "min_stretch_draw_microseconds": stretch_us,
    }
    main = result["regimes"]["paper"]["by_batch_size"][str(batch_sizes[-1])]
    result["queries_per_second"] = main["queries_per_second"]
    result["fraction_answered"] = main["fraction_answered"]
    result["meets_aim"] = bool(main["queries_per_second"] >= result["aim_queries_per_second"])
    return result


# --------------------------------------------------------------------------- 2. end to end


def bench_end_to_end(quick: bool) -> dict[str, Any]:
    rows, features, queries = (300_000, 5, 10**5) if quick else (CERTIFIED_ROWS, 5, 10**6)
    k = 3200
    privacy = [*CERTIFIED, "--queries-max", str(2 * queries)]
    learner = "stump"
    with temp_dir("e2e") as work:
        cluster = str(write_cluster_yaml(work))
        log(f"end_to_end: generating {rows:,} private rows, {queries:,} queries, {features} features")
        gen_s, _ = pcqr(
            work, "generate", "generate", "--kind", "realizable", "--concept", "threshold",
            "--rows", str(rows), "--features", str(features), "--queries", str(queries),
            "--out", "data", "--cluster", cluster,
        )
        stable = stable_queries(work)
        queries = stable["queries_kept"]
        log(f"end_to_end: training k={k} {learner}")
        train_s, train_summary = pcqr(
            work, "train", "train", "--private", "data/private", "--state", "state",
            *privacy, "--cluster", cluster,
        )
        shutil.copytree(work / "state", work / "state-unfiltered")
        log(f"end_to_end: answering {queries:,} queries")
        answer_s, summary, report = pcqr_instrumented(
            work, "answer", "answer", "--state", "state", "--queries", "data/stable-queries",
            "--log", "log", "--cluster", cluster,
        )
        log_bytes = dir_bytes(work / "log")
        query_bytes = dir_bytes(work / "data" / "queries")
        log(f"end_to_end: the same trained session on all {stable['queries_generated']:,} generated queries")
        _, full = pcqr(work, "answer-unfiltered", "answer", "--state", "state-unfiltered", "--queries",
                       "data/queries", "--log", "log-unfiltered", "--cluster", cluster)
    t = report["timings"]
    release = t.get("release_answers", {}).get("seconds", 0.0)
    coordinator = t.get("coordinator", {}).get("seconds", 0.0)
    inside = {key: round(v["seconds"], 3) for key, v in sorted(t.items())}
    return {
        "queries": queries,
        "private_rows": rows,
        "features": features,
        "subsamples_k": k,
        "learner": learner,
        "cluster": CLUSTER_YAML.strip(),
        "parameters": {
            "command_options": " ".join(privacy),
            "lambda": train_summary.get("lambda"),
            "why": "pcqr demo's certifiable regime (w the smallest certifiable) on a stream of queries "
            "the models agree on (stable_queries): see stable_queries for why",
            **certificate_of(train_summary),
            **stable,
        },
        "generate_seconds": gen_s,
        "train_seconds": train_s,
        "answer_wall_seconds": answer_s,
        "answer_queries_per_second_wall": rate(queries, answer_s),
        "answer_in_process_seconds": release,
        "answer_queries_per_second_in_process": rate(queries, release),
        "in_process_how": "time inside pcqr.pipeline.session.query_release.release_answers (after cluster start, "
        "model load and the validation pass)",
        "coordinator_seconds": coordinator,
        "coordinator_share_of_in_process": coordinator / release if release else None,
        "queries_per_second_outside_coordinator": rate(queries, release - coordinator)
        if release and coordinator is not None else None,
        "outside_coordinator_how": "queries / (in-process seconds - coordinator seconds): the pipeline "
        "(reading, votes, log) without the abstention-dominated sparse-vector cost",
        "timings_seconds": inside,
        "batches": summary.get("batches"),
        "answered": summary.get("answered"),
        "abstained": summary.get("abstained"),
        "refused": summary.get("refused"),
        "fraction_answered": summary["answered"] / queries,
        "halted": summary.get("budget_spent"),
        "query_mb": query_bytes / 2**20,
        "log_mb": log_bytes / 2**20,
        "unfiltered_stream": {
            "how": "a copy of the same trained state answering every generated query, near-boundary ones "
            "included (not timed): where a certifiable session stops",
            "queries": stable["queries_generated"],
            **{key: full.get(key) for key in ("answered", "abstained", "refused")},
            "halted": full.get("budget_spent"),
            "halted_after_queries": full["answered"] + full["abstained"] if full.get("budget_spent") else None,
        },
        "aim_queries_per_second": 2e5,
        "meets_aim": bool((rate(queries, answer_s) or 0) >= 2e5),
    }


# --------------------------------------------------------------------------- 3. training speed-up


def _task_breakdown(events: list[dict[str, Any]]) -> dict[str, float]:
    """Seconds of compute per task kind, and of transfers, from a Dask task stream."""
    from dask.utils import key_split

    out: dict[str, float] = {}
    for event in events:
        prefix = key_split(event["key"])
        for part in event.get("startstops", ()):
            name = prefix if part["action"] == "compute" else part["action"]
            out[name] = out.get(name, 0.0) + part["stop"] - part["start"]
    return {key: round(value, 3) for key, value in sorted(out.items())}


def bench_training_speedup(quick: bool) -> dict[str, Any]:
    from distributed import Client, LocalCluster

    from pcqr.pipeline.data.datasets import open_dataset
    from pcqr.pipeline.models.learners import LearnerSpec
    from pcqr.pipeline.models.subsample import train_models

    rows, features, k = (200_000, 10, 200) if quick else (2_000_000, 10, 200)
    repeats = 5
    learner = LearnerSpec("sklearn.linear_model.LogisticRegression", {})
    result: dict[str, Any] = {
        "rows": rows,
        "features": features,
        "subsamples_k": k,
        "learner": learner.name + " (default parameters)",
        "repeats": repeats,
        "how": "pcqr.pipeline.models.subsample.train_models on a LocalCluster(n_workers=N, threads_per_worker=1, "
        "processes), same data, after one warm-up training (k=20) per cluster; median of the repeats",
        "workers": {},
        "aim_speedup": 1.7,
    }
    with temp_dir("train") as work:
        cluster = str(write_cluster_yaml(work))
        log(f"training_speedup: generating {rows:,} rows x {features} features")
        pcqr(
            work, "generate", "generate", "--kind", "agnostic", "--concept", "halfspace",
            "--rows", str(rows), "--features", str(features), "--queries", "0",
            "--out", "data", "--cluster", cluster,
        )
        dataset = open_dataset(str(work / "data" / "private"), "private", label="label")
        for n_workers in (1, 2):
            log(f"training_speedup: k={k} on {n_workers} worker(s)")
            with LocalCluster(
                n_workers=n_workers, threads_per_worker=1, host="127.0.0.1", dashboard_address=":0",
                processes=True,
            ) as cluster_obj, Client(cluster_obj) as client:
                train_models(client, dataset, 20, learner, seed=1)  # warm-up: imports, page cache
                times, breakdown = [], {}
                for rep in range(repeats):
                    if rep == 0:
                        from distributed import get_task_stream

                        with get_task_stream(client) as stream:
                            t0 = time.perf_counter()
                            ensemble = train_models(client, dataset, k, learner, seed=2 + rep)
                            times.append(time.perf_counter() - t0)
                        breakdown = _task_breakdown(stream.data)
                    else:
                        t0 = time.perf_counter()
                        ensemble = train_models(client, dataset, k, learner, seed=2 + rep)
                        times.append(time.perf_counter() - t0)
                    assert ensemble.size == k
            result["workers"][str(n_workers)] = {
                "seconds_median": statistics.median(times),
                "seconds_all": times,
                "task_seconds_first_repeat": breakdown,
            }
    one, two = result["workers"]["1"]["seconds_median"], result["workers"]["2"]["seconds_median"]
    result["speedup"] = one / two if two else None
    result["meets_aim"] = bool(result["speedup"] and result["speedup"] >= 1.7)
    return result


# --------------------------------------------------------------------------- 4. driver memory


def bench_driver_memory(quick: bool) -> dict[str, Any]:
    small, big = (10**5, 10**6) if quick else (10**6, 10**7)
    rows, features, k = (300_000 if quick else CERTIFIED_ROWS), 5, 3200
    privacy = [*CERTIFIED, "--queries-max", str(2 * big)]
    result: dict[str, Any] = {
        "query_counts": [small, big],
        "subsamples_k": k,
        "learner": "stump",
        "features": features,
        "private_rows": rows,
        "cluster": CLUSTER_YAML.strip(),
        "parameters": " ".join(privacy),
        "how": "pcqr answer in a fresh Python process; the driver's peak RSS is its own "
        "getrusage(RUSAGE_SELF).ru_maxrss read at exit (after the cluster is closed); "
        "workers_peak is getrusage(RUSAGE_CHILDREN) in that process: the largest peak among "
        "its waited-for descendants, i.e. the Dask worker processes. The driver's peak-RSS mark "
        "is also read and reset (/proc/self/clear_refs) when the coordinator gets its first "
        "batch: driver_peak_before_loop_mb covers start-up (cluster, models, the coordinator's "
        "noise tables), driver_peak_during_loop_mb the answer loop to the end",
        "runs": {},
        "aim": "driver peak RSS does not grow with the query count (ratio ~ 1)",
    }
    with temp_dir("mem") as work:
        cluster = str(write_cluster_yaml(work))
        log(f"driver_memory: generating {big:,} queries ({features} features)")
        gen_s, _ = pcqr(
            work, "generate", "generate", "--kind", "realizable", "--concept", "threshold",
            "--rows", str(rows), "--features", str(features), "--queries", str(big),
            "--rows-per-file", str(small), "--out", "data", "--cluster", cluster,
        )
        result["generate_seconds"] = gen_s
        result.update(stable_queries(work))
        log(f"driver_memory: training k={k} stumps")
        _, train_summary = pcqr(work, "train", "train", "--private", "data/private", "--state", "state0",
                                *privacy, "--cluster", cluster)
        result["certificate"] = certificate_of(train_summary)
        first_file = sorted((work / "data" / "stable-queries").glob("part-*.parquet"))[0]
        for n, queries in ((small, str(first_file)), (big, "data/stable-queries")):
            log(f"driver_memory: answering {n:,} queries")
            state = work / f"state-{n}"
            shutil.copytree(work / "state0", state)
            wall, summary, report = pcqr_instrumented(
                work, f"answer-{n}", "answer", "--state", str(state), "--queries", queries,
                "--log", f"log-{n}", "--cluster", cluster,
            )
            total = summary["answered"] + summary["abstained"] + summary["refused"]
            result["runs"][str(n)] = {
                "queries": total,
                "driver_peak_rss_mb": report["maxrss_self_kb"] / 1024,
                "driver_peak_before_loop_mb": (report["peak_before_loop_kb"] or 0) / 1024,
                "driver_peak_during_loop_mb": report["peak_during_loop_kb"] / 1024
                if report["peak_during_loop_kb"] is not None else None,
                "tail_table_build_seconds": report["timings"].get("tail_table_build", {}).get("seconds"),
                "coordinator_seconds": report["timings"].get("coordinator", {}).get("seconds"),
                "release_answers_seconds": report["timings"].get("release_answers", {}).get("seconds"),
                "workers_peak_rss_mb": report["maxrss_children_kb"] / 1024,
                "wall_seconds": wall,
                "answered": summary["answered"],
                "abstained": summary["abstained"],
                "refused": summary["refused"],
                "halted": summary["budget_spent"],
                "batches": summary["batches"],
                "log_mb": dir_bytes(work / f"log-{n}") / 2**20,
            }
            shutil.rmtree(work / f"log-{n}", ignore_errors=True)
    a, b = result["runs"][str(small)], result["runs"][str(big)]
    result["driver_peak_rss_mb_small"] = a["driver_peak_rss_mb"]
    result["driver_peak_rss_mb_big"] = b["driver_peak_rss_mb"]
    result["ratio_big_over_small"] = b["driver_peak_rss_mb"] / a["driver_peak_rss_mb"]
    if a["driver_peak_during_loop_mb"] and b["driver_peak_during_loop_mb"]:
        result["loop_ratio_big_over_small"] = b["driver_peak_during_loop_mb"] / a["driver_peak_during_loop_mb"]
    result["meets_aim"] = bool(result["ratio_big_over_small"] <= 1.1)
    return result


# --------------------------------------------------------------------------- 5. agnostic at scale

AGNOSTIC_CLUSTER_YAML = (
    "pcqr: {cluster: {backend: local, n-workers: 2, threads-per-worker: 1, memory-limit: 8GiB}}\n"
)


def _read_log(log_dir: Path) -> dict[str, Any]:
    """query_id, answer, status and the feature columns of every batch file of an answer log."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.concat_tables([pq.read_table(f) for f in sorted(log_dir.glob("*.parquet"))])
    return {name: np.asarray(table.column(name).to_numpy(zero_copy_only=False)) for name in table.column_names}


# Algorithm 3's parameters; m = 1,000 queries. w is pcqr's smallest certifiable at A_SubSamp's
# (eps_hat, delta_hat): 78,095 >> k / 2 at the aim's k = 40,000 (so nothing is answered there),
# and a unanimous query needs k >= 179,879 (useful_subsamples). AGNOSTIC_USEFUL is the largest
# size that runs here in a few minutes with k above that (22 rows per model, as at the aim's size):
# 3x10^8 rows (2.9 GB of Parquet), k = 240,000 (a unanimous query abstains w.p. 8e-6).
AGNOSTIC_OPTIONS = [
    "--mode", "agnostic", "--hypothesis", "threshold", "--alpha", "0.1", "--epsilon", "1",
    "--delta", "1e-6", "--beta", "0.05",
]
AGNOSTIC_AIM, AGNOSTIC_AIM_QUICK, AGNOSTIC_USEFUL = (5 * 10**7, 40_000), (5 * 10**6, 4000), (3 * 10**8, 240_000)


def bench_agnostic_at_scale(quick: bool) -> dict[str, Any]:
    """A_AgPrivCl end to end: one ``pcqr answer --mode agnostic`` (train + answer) at the aim's
    size (top-level figures) and, in a full run, at AGNOSTIC_USEFUL (``useful_size``)."""
    result = _agnostic_run(*(AGNOSTIC_AIM_QUICK if quick else AGNOSTIC_AIM))
    result["quick_sizes"] = "5x10^6 rows, --subsamples 4000; no useful_size run" if quick else None
    result["useful_size"] = None if quick else _agnostic_run(*AGNOSTIC_USEFUL)
    return result


def _agnostic_run(rows: int, k: int) -> dict[str, Any]:
    import numpy as np
    import pyarrow.parquet as pq

    from pcqr.pipeline.hypotheses import hypothesis_from_dict
    from pcqr.pipeline.privacy.subsamp import SubSampParameters
    from pcqr.pipeline.data.synthetic import read_concept

    queries, features, noise = 1000, 1, 0.1
    options = [*AGNOSTIC_OPTIONS, "--queries-max", str(queries), "--subsamples", str(k)]
    result: dict[str, Any] = {
        "private_rows": rows,
        "features": features,
        "label_noise": noise,
        "queries": queries,
        "hypothesis_class": "threshold",
        "cluster": AGNOSTIC_CLUSTER_YAML.strip(),
        "command_options": " ".join(options),
        "how": "pcqr generate (not timed), then one `pcqr answer --mode agnostic --private ... --state "
        "... --queries ... --log ... --truth ...` (train + answer, one shot) in a fresh Python process "
        "(CHILD_CODE: peak RSS via getrusage(RUSAGE_SELF) at exit, in-process timings by wrapping). "
        "Errors of the answered queries: vs the noisy truth (the summary's accuracy), vs the noiseless "
        "concept x0 > t (t from the private files' pcqr.concept metadata), and agreement with h_hat "
        "(the session's private relabeller, rebuilt with hypothesis_from_dict)",
        "aim_seconds": 600,
    }
    with temp_dir("agnostic") as work:
        cluster = work / "cluster.yaml"
        cluster.write_text(AGNOSTIC_CLUSTER_YAML, encoding="utf-8")
        log(f"agnostic_at_scale: generating {rows:,} private rows ({features} feature, noise {noise}), "
            f"{queries:,} queries")
        gen_s, _ = pcqr(
            work, "generate", "generate", "--kind", "agnostic", "--noise", str(noise), "--rows", str(rows),
            "--features", str(features), "--queries", str(queries), "--out", "data", "--cluster", str(cluster),
        )
        result["generate_seconds"] = gen_s
        result["private_mb"] = dir_bytes(work / "data" / "private") / 2**20
        log(f"agnostic_at_scale: pcqr answer --mode agnostic (k={k}) on {rows:,} rows")
        wall, summary, report = pcqr_instrumented(
            work, "answer", "answer", *options, "--private", "data/private", "--state", "state",
            "--queries", "data/queries", "--log", "log", "--truth", "data/truth", "--cluster", str(cluster),
        )
        logged = _read_log(work / "log")
        session = json.loads((work / "state" / "session.json").read_text())
        subsamp = SubSampParameters.from_dict(session["params"])
        concept = read_concept(str(sorted((work / "data" / "private").glob("*.parquet"))[0]))
        truth = pq.read_table(str(work / "data" / "truth"))
        truth_ids = np.asarray(truth.column("query_id").to_numpy())
        truth_labels = np.asarray(truth.column("label").to_numpy())
    answered = logged["status"] == "answered"
    ids, answers = logged["query_id"][answered], logged["answer"][answered].astype(np.int8)
    X = np.column_stack([logged[f"x{j}"][answered] for j in range(features)]).astype(np.float64)
    order = np.argsort(truth_ids)
    noisy = truth_labels[order][np.searchsorted(truth_ids[order], ids)].astype(np.int8)
    clean = concept.labels(X)
    relabeller = session.get("relabeller")
    h_hat = hypothesis_from_dict(relabeller) if relabeller else None
    agree = float(np.mean(np.asarray(h_hat.predict(X)).astype(np.int8) == answers)) if h_hat and ids.size else None
    t = report["timings"]
    agnostic = summary.get("agnostic", {})
    total = summary["answered"] + summary["abstained"] + summary["refused"]
    result.update({
        "end_to_end_seconds": wall,
        "driver_peak_rss_mb": report["maxrss_self_kb"] / 1024,
        "driver_peak_before_loop_mb": (report["peak_before_loop_kb"] or 0) / 1024,
        "workers_peak_rss_mb": report["maxrss_children_kb"] / 1024,
        "timings_seconds": {key: round(v["seconds"], 3) for key, v in sorted(t.items())},
        "parameters": {
            "subsamples_k": summary.get("subsamples"),
            "threshold_w": summary.get("threshold"),
            "lambda": summary.get("lambda"),
            "cutoff_T_derived": summary.get("cutoff"),
            "sample_rows_n_prime": agnostic.get("sample_rows"),
            "rows_per_subsample": (agnostic.get("sample_rows") or 0) / k,
            "subsamp_epsilon": summary.get("subsamp_epsilon"),
            "subsamp_delta": summary.get("subsamp_delta"),
            "unanimous_abstention": subsamp.unanimous_abstention(),
            "useful_subsamples": subsamp.useful_subsamples(),
            **certificate_of(summary),
        },
        "answered": summary["answered"],
        "abstained": summary["abstained"],
        "refused": summary["refused"],
        "halted": summary.get("budget_spent"),
        "fraction_answered": summary["answered"] / total if total else None,
        "error_vs_noisy_truth": 1 - summary["accuracy"] if summary.get("accuracy") is not None else None,
        "error_vs_noisy_truth_recomputed": float(np.mean(answers != noisy)) if ids.size else None,
        "error_vs_noiseless_concept": float(np.mean(answers != clean)) if ids.size else None,
        "agreement_with_h_hat": agree,
        "h_hat": relabeller,
        "concept": concept.to_json(),
        "meets_aim": bool(wall < 600),
    })
    return result


# --------------------------------------------------------------------------- 6. relabel with stumps


def _stump_sample(n: int, features: int, noise: float, seed: int) -> tuple[Any, Any]:
    """Worker: n rows x features N(0, 1); label x3 > 0.2, flipped with probability ``noise``."""
    import numpy as np

    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, features))
    y = (X[:, 3] > 0.2) ^ (rng.random(n) < noise)
    return X, y.astype(np.int8)


def _enumerate(name: str, features: int, data: tuple[Any, Any]) -> Any:
    from pcqr.pipeline.hypotheses import make_class

    return make_class(name, features).enumerate(data[0])


def _size(enumeration: Any) -> int:
    return int(enumeration.size())


def _vmhwm_kb() -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
        return True
    except OSError:
        return False


def _run_with_deadline(fn: Callable[[], Any], seconds: float) -> Any:
    """fn() in a thread; TimeoutError if it has not returned after ``seconds`` (the caller closes
    the cluster, which makes fn fail)."""
    import concurrent.futures

    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        return pool.submit(fn).result(timeout=seconds)
    finally:
        pool.shutdown(wait=False)


def bench_relabel_stumps(quick: bool) -> dict[str, Any]:
    import resource

    from distributed import Client, LocalCluster
    from distributed import wait as distributed_wait

    from pcqr.pipeline.mechanisms.exponential import select_hypothesis
    from pcqr.pipeline.privacy.noise import SecureNoise

    import math

    import dask

    features, noise = 20, 0.1
    sizes = [10**5, 10**6] if quick else [10**6, 10**7]
    # If the big size does not fit (a worker killed at its memory limit, or the deadline), try
    # these in turn: the largest that fits is measured.
    fallbacks = [] if quick else [5 * 10**6, 2 * 10**6, 15 * 10**5]
    deadline = 600
    result: dict[str, Any] = {
        "features": features,
        "label": "x3 > 0.2 flipped with probability 0.1; features N(0,1), so u_j = n distinct values",
        "how": "LocalCluster(n_workers=2, threads_per_worker=1, memory_limit=10GiB, allowed-failures 0 so "
        "a worker killed at its memory limit fails the size at once); the sample is made by a task (the "
        "driver never holds it); timed: enumeration = make_class('stump', 20).enumerate(X) as a task + "
        "select_hypothesis(client, enumeration, data, 1.0, SecureNoise()) (default shard size 2^20); a "
        "fresh cluster per size; driver peak = VmHWM after resetting it (/proc/self/clear_refs) at the start",
        "deadline_seconds_per_size": deadline,
        "sizes": {},
        "aim_ratio": "<= ~12 for 10x the rows (n log n: 11.7 from 10^6 to 10^7)",
    }
    todo, measured = list(sizes), []
    while todo:
        n = todo.pop(0)
        log(f"relabel_stumps: n' = {n:,} rows x {features} features")
        entry: dict[str, Any] = {}
        with dask.config.set({"distributed.scheduler.allowed-failures": 0}), LocalCluster(
            n_workers=2, threads_per_worker=1, host="127.0.0.1", memory_limit="10GiB",
            dashboard_address=":0", processes=True,
        ) as cluster, Client(cluster) as client:
            data = client.submit(_stump_sample, n, features, noise, 7, pure=False)
            distributed_wait([data])
            rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            reset = _reset_peak()
            t0 = time.perf_counter()

            def run() -> tuple[Any, int, float]:
                enumeration = client.submit(_enumerate, "stump", features, data, pure=False)
                h = select_hypothesis(client, enumeration, data, 1.0, SecureNoise())
                seconds = time.perf_counter() - t0
                return h, client.submit(_size, enumeration, pure=False).result(), seconds

            try:
                h, size, seconds = _run_with_deadline(run, deadline)
                entry.update({
                    "seconds": seconds,
                    "candidates": size,
                    "candidates_per_second": rate(size, seconds),
                    "chosen": h.to_dict(),
                })
                measured.append(n)
            except Exception as exc:
                import concurrent.futures

                kind = "timed out" if isinstance(exc, concurrent.futures.TimeoutError) else "failed"
                entry["error"] = f"{kind} after {time.perf_counter() - t0:.0f} s: {type(exc).__name__}: {exc}"[:500]
                log(f"relabel_stumps: n' = {n:,}: {entry['error']}")
            entry["driver_maxrss_before_mb"] = rss_before / 1024
            entry["driver_maxrss_after_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            entry["driver_peak_during_mb"] = (_vmhwm_kb() or 0) / 1024 if reset else None
        result["sizes"][str(n)] = entry
        if "error" in entry and n != sizes[0] and fallbacks:
            todo.append(fallbacks.pop(0))
    if len(measured) >= 2:
        small, big = measured[0], max(measured)
        a, b = result["sizes"][str(small)], result["sizes"][str(big)]
        n_log_n = big * math.log(big) / (small * math.log(small))
        result.update({
            "small_rows": small,
            "big_rows": big,
            "big_is_requested_size": big == sizes[-1],
            "rows_ratio": big / small,
            "ratio_big_over_small": b["seconds"] / a["seconds"],
            "n_log_n_ratio": n_log_n,
            "aim_ratio_for_these_sizes": 12 / 11.67 * n_log_n,
            "driver_peak_during_mb_small_big": [a["driver_peak_during_mb"], b["driver_peak_during_mb"]],
        })
        result["meets_aim"] = bool(result["ratio_big_over_small"] <= result["aim_ratio_for_these_sizes"])
    return result


# --------------------------------------------------------------------------- 7. sharded exponential mechanism


def _interval_sample(u: int, n: int, seed: int) -> tuple[Any, Any]:
    """n labelled rows on the u distinct points 0..u-1 (each at least once): 1 inside [u/3, 2u/3), 10% noise."""
    import numpy as np

    rng = np.random.default_rng(seed)
    x = np.concatenate([np.arange(u), rng.integers(0, u, n - u)]).astype(np.float64)
    y = ((x >= u / 3) & (x < 2 * u / 3)) ^ (rng.random(n) < 0.1)
    return x.reshape(-1, 1), y.astype(np.int8)


def bench_sharded_em(quick: bool) -> dict[str, Any]:
    from distributed import Client, LocalCluster

    from pcqr.pipeline.mechanisms.exponential import select_hypothesis
    from pcqr.pipeline.privacy.noise import SecureNoise

    # quick: shards of 2^18 so that each worker still gets several shards
    u, n, repeats = (1500 if quick else 4500), 10**5, 3
    shard_size = (1 << 18) if quick else (1 << 20)
    result: dict[str, Any] = {
        "distinct_points_u": u,
        "rows": n,
        "shard_size": shard_size,
        "repeats": repeats,
        "how": "make_class('interval', 1).enumerate on u distinct values (a task), scored against n "
        "labelled rows (a task); timed: select_hypothesis(client, enumeration, data, 1.0, SecureNoise(), "
        "shard_size) on a LocalCluster(n_workers=N, threads_per_worker=1), after one warm-up call; "
        "median of the repeats",
        "workers": {},
        "aim_speedup": 1.7,
    }
    for n_workers in (1, 2):
        log(f"sharded_em: u = {u:,} on {n_workers} worker(s)")
        with LocalCluster(
            n_workers=n_workers, threads_per_worker=1, host="127.0.0.1", dashboard_address=":0",
            processes=True,
        ) as cluster, Client(cluster) as client:
            data = client.submit(_interval_sample, u, n, 3, pure=False)
            enumeration = client.submit(_enumerate, "interval", 1, data, pure=False)
            size = client.submit(_size, enumeration, pure=False).result()
            if n_workers > 1:  # both workers hold the (small) data and enumeration before timing
                client.replicate([data, enumeration])
            select_hypothesis(client, enumeration, data, 1.0, SecureNoise(), shard_size)  # warm-up
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                h = select_hypothesis(client, enumeration, data, 1.0, SecureNoise(), shard_size)
                times.append(time.perf_counter() - t0)
        median = statistics.median(times)
        result["candidates"] = size
        result["shards"] = -(-size // shard_size)
        result["workers"][str(n_workers)] = {
            "seconds_median": median,
            "seconds_all": times,
            "candidates_per_second": rate(size, median),
            "chosen": h.to_dict(),
        }
    one, two = result["workers"]["1"]["seconds_median"], result["workers"]["2"]["seconds_median"]
    result["speedup"] = one / two if two else None
    result["meets_aim"] = bool(result["speedup"] and result["speedup"] >= 1.7)
    return result


def _interval_rows(n: int, seed: int) -> tuple[Any, Any]:
    """n labelled private rows: x ~ N(0, 1), 1 inside (-0.5, 0.8], labels flipped with probability 0.1."""
    import numpy as np

    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    y = ((x > -0.5) & (x <= 0.8)) ^ (rng.random(n) < 0.1)
    return x.reshape(-1, 1), y.astype(np.int8)


def bench_sspp_intervals(quick: bool) -> dict[str, Any]:
    """A_SSPP (semi_private_learner) with intervals: u public points -> u(u+1)/2 + 1 candidates,
    scored against n private rows held on the workers in parts."""
    import numpy as np
    from distributed import Client, LocalCluster

    from pcqr.pipeline.hypotheses import make_class
    from pcqr.pipeline.mechanisms.sspp import semi_private_learner
    from pcqr.pipeline.privacy.noise import SecureNoise

    u, n, parts, repeats = (600, 10**5, 2, 3) if quick else (2000, 10**6, 2, 3)
    public = np.random.default_rng(1).normal(size=(u, 1))
    hclass = make_class("interval", 1)
    result: dict[str, Any] = {
        "public_points": u, "private_rows": n, "private_parts": parts, "repeats": repeats,
        "how": "semi_private_learner(client, interval class, u public N(0,1) points, private parts (futures "
        "made on the workers), eps 1, SecureNoise()) on a LocalCluster(n_workers=N, threads_per_worker=1); "
        "one warm-up call, then the median of the repeats",
        "workers": {},
    }
    for n_workers in (1, 2):
        log(f"sspp_intervals: u = {u:,}, n = {n:,} on {n_workers} worker(s)")
        with LocalCluster(n_workers=n_workers, threads_per_worker=1, host="127.0.0.1", dashboard_address=":0",
                          processes=True) as cluster, Client(cluster) as client:
            private = [client.submit(_interval_rows, n // parts, seed, pure=False) for seed in range(parts)]
            client.gather(private, errors="raise")  # loaded before timing
            semi_private_learner(client, hclass, public, private, 1.0, SecureNoise())  # warm-up
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                h, candidates = semi_private_learner(client, hclass, public, private, 1.0, SecureNoise())
                times.append(time.perf_counter() - t0)
        median = statistics.median(times)
        result["candidates"] = candidates
        result["workers"][str(n_workers)] = {"seconds_median": median, "seconds_all": times,
                                             "candidates_per_second": rate(candidates, median), "chosen": h.to_dict()}
    one, two = result["workers"]["1"]["seconds_median"], result["workers"]["2"]["seconds_median"]
    result["speedup"] = one / two if two else None
    return result


def bench_pap_thresholds(quick: bool) -> dict[str, Any]:
    """``pcqr release --hypothesis threshold`` end to end (a subprocess) and the exact worst error
    of its answers over every threshold, against the private data's own fractions."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pcqr.pipeline.session.evaluation import max_threshold_error
    from pcqr.pipeline.mechanisms.pap import public_key

    n_pub, n = (1000, 10**5) if quick else (4000, 10**6)
    result: dict[str, Any] = {
        "public_points": n_pub, "private_rows": n,
        "how": "public x ~ N(0,1); private x ~ N(shift, 1); pcqr release --hypothesis threshold --epsilon 1 "
        "--delta 1e-6 --alpha A --beta 0.05 on the local 2-worker cluster; max_error = sup over all "
        "thresholds t and both directions of |answer(projection of h_t) - fraction of private rows h_t "
        "labels 1| (exact, pcqr.pipeline.session.evaluation.max_threshold_error); public_only_error = the same for the "
        "answers the public data alone gives (PMW's uniform start on X_tilde)",
        "settings": {},
    }
    with temp_dir("pap") as work:
        cluster = write_cluster_yaml(work)
        rng = np.random.default_rng(5)
        public = rng.normal(size=n_pub)
        (work / "public").mkdir()
        pq.write_table(pa.table({"x0": public}), work / "public" / "p.parquet")
        privates = {shift: rng.normal(shift, 1, size=n) for shift in (0.0, 0.5)}
        for shift, private in privates.items():
            (work / f"private-{shift}").mkdir()
            pq.write_table(pa.table({"x0": private}), work / f"private-{shift}" / "p.parquet", row_group_size=250_000)
        for shift, alpha, constants in ((0.0, 0.1, "dwork-roth"), (0.5, 0.1, "dwork-roth"),
                                        (0.5, 0.3, "dwork-roth"), (0.5, 0.3, "calibrated")):
            private = privates[shift]
            out = work / f"table-{shift}-{alpha}-{constants}.parquet"
            seconds, summary = pcqr(work, f"release-{shift}-{alpha}-{constants}", "release", "--private",
                                    str(work / f"private-{shift}"), "--public", str(work / "public"),
                                    "--hypothesis", "threshold", "--epsilon", "1", "--alpha", str(alpha),
                                    "--pmw-constants", constants, "--out", str(out), "--cluster", str(cluster))
            table = pq.read_table(out)
            answer = dict(zip(table.column("public_labelling").to_pylist(), table.column("answer").to_pylist()))
            v = np.unique(public)

            def prior(labels: Any) -> float:
                return float(labels.mean()) if labels.size else 0.0  # uniform weight on the u public cells

            result["settings"][f"shift {shift}, alpha {alpha}, {constants}"] = {
                "wall_seconds": seconds,
                "queries": summary["queries"],
                "pmw_updates": summary["pmw_updates"],
                "pmw_threshold": summary["pmw_threshold"],
                "pmw_error_bound": summary["pmw_error_bound"],
                "pmw_rows_needed": summary["pmw_rows_needed"],
                "proven_epsilon": summary["proven_epsilon"],
                "max_error": max_threshold_error(lambda labels: answer[public_key(labels)], public, private),
                "public_only_error": max_threshold_error(prior, v, private),
            }
    return result


@contextmanager
def environment(**values: str) -> Iterator[None]:
    """Set environment variables for the subprocesses started inside the block."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


def bench_safety_overhead(quick: bool) -> dict[str, Any]:
    """One-shot ``pcqr answer --private`` (ledger charge + training + 10^6 answers) with the ledger
    and the crash-safe commit on, against both off (CHILD_CODE's PCQR_BENCH_SAFETY=off: no ledger
    charge, log batch written straight after the session save). Runs alternate on/off."""
    rows, queries, repeats = (300_000, 10**5, 2) if quick else (CERTIFIED_ROWS, 10**6, 3)
    privacy = [*CERTIFIED, "--queries-max", str(2 * queries)]
    result: dict[str, Any] = {
        "queries": queries, "private_rows": rows, "repeats": repeats, "options": " ".join(privacy),
        "how": "pcqr answer --private (one shot: ledger charge, training, answers) through CHILD_CODE; "
        "loop = seconds inside release_answers; on and off alternate, medians compared",
        "batch_sizes": {},
    }
    with temp_dir("safety") as work:
        cluster = str(write_cluster_yaml(work))
        pcqr(work, "generate", "generate", "--kind", "realizable", "--rows", str(rows), "--features", "5",
             "--queries", str(queries), "--out", "data", "--cluster", cluster)
        result.update(stable_queries(work))
        kept = result["queries_kept"]
        for batch in (100_000, 10_000):
            runs: dict[str, dict[str, list[float]]] = {"on": {"wall": [], "loop": []}, "off": {"wall": [], "loop": []}}
            for r in range(repeats):
                for mode in ("on", "off"):
                    label = f"answer-{batch}-{mode}-{r}"
                    log(f"safety_overhead: batch {batch:,}, {mode}, run {r + 1}")
                    with environment(PCQR_BENCH_SAFETY=mode, PCQR_LEDGER=str(work / "ledger.sqlite")):
                        wall, summary, report = pcqr_instrumented(
                            work, label, "answer", "--private", "data/private", "--queries", "data/stable-queries",
                            "--state", f"state-{label}", "--log", f"log-{label}", "--batch-size", str(batch),
                            *privacy, "--cluster", cluster)
                    runs[mode]["wall"].append(wall)
                    runs[mode]["loop"].append(report["timings"]["release_answers"]["seconds"])
                    result.setdefault("certificate", certificate_of(summary))
            med = {m: {k: statistics.median(v) for k, v in runs[m].items()} for m in runs}
            result["batch_sizes"][str(batch)] = {
                "runs": runs, "median": med,
                "loop_queries_per_second": {m: rate(kept, med[m]["loop"]) for m in med},
                "overhead_loop": med["on"]["loop"] / med["off"]["loop"] - 1,
                "overhead_wall": med["on"]["wall"] / med["off"]["wall"] - 1,
                "answered": summary.get("answered"),
            }
    result["aim_overhead"] = 0.10
    return result


# --------------------------------------------------------------------------- driver

RUNNERS: dict[str, Callable[[bool], dict[str, Any]]] = {
    "coordinator": bench_coordinator,
    "end_to_end": bench_end_to_end,
    "training_speedup": bench_training_speedup,
    "driver_memory": bench_driver_memory,
    "agnostic_at_scale": bench_agnostic_at_scale,
    "relabel_stumps": bench_relabel_stumps,
    "sharded_em": bench_sharded_em,
    "sspp_intervals": bench_sspp_intervals,
    "pap_thresholds": bench_pap_thresholds,
    "safety_overhead": bench_safety_overhead,
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
    r = results.get("safety_overhead")
    if r and "error" not in r:
        for batch, v in r["batch_sizes"].items():
            label = f"{r['queries']:,} queries, batches of {int(batch):,}"
            rows.append(("safety_overhead", f"loop q/s on / off, {label}",
                         f"{_fmt(v['loop_queries_per_second']['on'])} / {_fmt(v['loop_queries_per_second']['off'])}", ""))
            rows.append(("safety_overhead", f"overhead in the answer loop, {label}", _fmt(v["overhead_loop"]), "< 0.10"))
            rows.append(("safety_overhead", f"overhead of the whole command, {label}", _fmt(v["overhead_wall"]), ""))
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
    scratch = tempfile.mkdtemp(prefix="pcqr-bench-ledger-")
    os.environ.setdefault("PCQR_LEDGER", os.path.join(scratch, "ledger.sqlite"))  # never the user's ledger
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
