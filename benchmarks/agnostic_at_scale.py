"""Benchmark ``agnostic_at_scale``: ``pcqr answer --mode agnostic`` (A_AgPrivCl, Algorithm 3's parameters) on 5x10^7 rows.

Run through benchmarks/run.py (``--only agnostic_at_scale``); benchmarks/README.md says what each figure means."""
from __future__ import annotations

import json
from typing import Any

from harness import certificate_of, dir_bytes, log, pcqr, pcqr_instrumented, read_log, temp_dir


# --------------------------------------------------------------------------- 5. agnostic at scale

AGNOSTIC_CLUSTER_YAML = (
    "pcqr: {cluster: {backend: local, n-workers: 2, threads-per-worker: 1, memory-limit: 8GiB}}\n"
)


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
        logged = read_log(work / "log")
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
