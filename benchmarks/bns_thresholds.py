"""Benchmark ``bns_thresholds``: Beimel-Nissim-Stemmer's LearnThresholds via RecConcave (``pcqr learn
--algorithm learn-thresholds``) beside the exponential mechanism over the same class (issue 14, item 8).

Two parts. (1) The command end to end on 10^6 rows (10^5 with --quick) of ``pcqr generate --concept
threshold --integer-scale 1000000`` (x0 = floor(10^6 z), labelled 'x0 > t'), domain [-2^32, 2^32 - 1]
(three levels), eps = 1, delta = 1e-6: rows per second (the whole command, cluster start included)
and the released threshold's error on the 10,000 generated queries. (2) In process, with the real
mechanisms: x uniform over [0, 2^32) labelled 'x > 2^31 + 12345', eps = 1, delta = 1e-6; for each n
the mean (over runs) of the released threshold's true error (|theta - t| / 2^32, exact for the uniform
distribution), by :func:`pcqr.pipeline.mechanisms.learn_thresholds.learn_thresholds` (RecConcave,
alpha 0.1; two levels: 4 mechanisms at eps0 = 0.25) and by pcqr's exact exponential-mechanism
sampler over all 2^32 + 1 thresholds with eps = 1, scored by mistakes
(:func:`pcqr.pipeline.mechanisms.rec_concave.exponential_choice` on the same step quality: pure
eps-DP, its error about ln(2^32)/(eps n)).

(3) The rectangle learner end to end (``pcqr learn --algorithm rectangle``, 2d runs of RecConcave):
10^6 rows [10^5] of 3 integer features uniform over [0, 1000), labelled by the box (200, 700] x
(100, 900] x (300, 600], domain 0:999, eps 1, delta 1e-6, alpha 0.1: rows per second, the released
box's error on 10^5 fresh rows, and whether it lies inside the target. The exponential mechanism
over boxes is not computed: 1001^6 ~ 10^18 candidates, each needing its own mistake count (pcqr's
2-D rectangle enumeration is O(u^4) in the distinct values).

Run through benchmarks/run.py (``--only bns_thresholds``); benchmarks/README.md says what each figure means.
"""
from __future__ import annotations

import json
import time
from typing import Any

import numpy as np

from harness import pcqr, temp_dir, write_cluster_yaml

CUT = 2**31 + 12_345


def bench_bns_thresholds(quick: bool) -> dict[str, Any]:
    from pcqr.pipeline.mechanisms.integer_domain import Domain
    from pcqr.pipeline.mechanisms.learn_thresholds import (
        learn_thresholds, merge_threshold_counts, threshold_counts, threshold_quality,
    )
    from pcqr.pipeline.mechanisms.rec_concave import RecConcaveParameters, exponential_choice
    from pcqr.pipeline.privacy.noise import SecureNoise

    rows = 10**5 if quick else 10**6
    runs = 20 if quick else 100
    result: dict[str, Any] = {"how": __doc__.split("\n\n")[1].replace("\n", " "), "epsilon": 1.0, "delta": 1e-6}
    with temp_dir("bns-thresholds") as work:
        cluster = str(write_cluster_yaml(work))
        pcqr(work, "generate", "generate", "--concept", "threshold", "--integer-scale", "1000000", "--rows",
             str(rows), "--features", "1", "--queries", "10000", "--seed", "5", "--out", "data", "--cluster", cluster)
        seconds, summary = pcqr(work, "learn", "learn", "--algorithm", "learn-thresholds", "--private", "data/private",
                                "--features", "x0", "--domain", "-4294967296:4294967295", "--epsilon", "1",
                                "--delta", "1e-6", "--out", "thresholds.json", "--cluster", cluster)
        model = json.loads((work / "thresholds.json").read_text())
        import pyarrow.parquet as pq

        queries, truth = pq.read_table(work / "data" / "queries"), pq.read_table(work / "data" / "truth")
        predicted = queries.column("x0").to_numpy() > model["hypothesis"]["threshold"]
        result["end_to_end"] = {
            "private_rows": rows, "seconds": round(seconds, 2), "rows_per_second": rows / seconds,
            "released": summary["released"], "recursion_depth": summary["recursion_depth"],
            "error_on_10000_queries": float(np.mean(predicted.astype(np.int8) != truth.column("label").to_numpy())),
            "proven_delta": summary["proven_delta"],
        }
    result["rectangle"] = _rectangle(rows)
    noise = SecureNoise()
    rng = np.random.default_rng(7)
    domain = Domain(0, 2**32 - 1)
    table = []
    started = time.perf_counter()
    for n in ([100, 1_000, 10_000] if quick else [100, 300, 1_000, 3_000, 10_000, 100_000]):
        params = RecConcaveParameters.create(1.0, 1e-6, domain.size, n)
        rec_errors, em_errors = [], []
        for _ in range(runs):
            x = rng.integers(0, 2**32, n).astype(float)
            counts = merge_threshold_counts(threshold_counts((x[:, None], (x > CUT).astype(np.int8)), domain))
            hypothesis, _ = learn_thresholds(counts, domain, params, 0.1, noise)
            rec_errors.append(abs(hypothesis.threshold - CUT) / 2**32)
            quality = threshold_quality(*counts, domain)
            theta = domain.lo - 1 + exponential_choice(quality, [(0, quality.last)], 1.0, noise)
            em_errors.append(abs(theta - CUT) / 2**32)
        table.append({"rows": n, "rec_concave_mean_error": float(np.mean(rec_errors)),
                      "em_mean_error": float(np.mean(em_errors)),
                      "rec_concave_worst": float(np.max(rec_errors)), "em_worst": float(np.max(em_errors))})
    result["sample_complexity"] = {"runs_per_cell": runs, "table": table, "seconds": round(time.perf_counter() - started, 1)}
    return result


BOX = ((200, 700), (100, 900), (300, 600))


def _box_rows(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    X = rng.integers(0, 1000, (n, 3)).astype(float)
    inside = np.ones(n, dtype=bool)
    for i, (low, high) in enumerate(BOX):
        inside &= (X[:, i] > low) & (X[:, i] <= high)
    return X, inside.astype(np.int8)


def _rectangle(rows: int) -> dict[str, Any]:
    """Part (3): pcqr learn --algorithm rectangle on ``rows`` rows, the box's error on fresh rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pcqr.pipeline.models.released import load_model

    rng = np.random.default_rng(13)
    with temp_dir("bns-rectangle") as work:
        cluster = str(write_cluster_yaml(work))
        (work / "box").mkdir()
        per_file = 250_000
        for i, start in enumerate(range(0, rows, per_file)):
            X, y = _box_rows(min(per_file, rows - start), rng)
            pq.write_table(pa.table({"a": X[:, 0], "b": X[:, 1], "c": X[:, 2], "label": y}),
                           work / "box" / f"part-{i:05d}.parquet")
        seconds, summary = pcqr(work, "rectangle", "learn", "--algorithm", "rectangle", "--private", "box",
                                "--domain", "0:999", "--epsilon", "1", "--delta", "1e-6", "--alpha", "0.1",
                                "--out", "box.json", "--cluster", cluster)
        box, _, _ = load_model(str(work / "box.json"))
    X, y = _box_rows(100_000, rng)
    return {
        "private_rows": rows, "seconds": round(seconds, 2), "rows_per_second": rows / seconds,
        "released": summary["released"], "mechanisms": summary["mechanisms"], "eps0": summary["eps0"],
        "error_on_100000_fresh_rows": float(np.mean(box.predict(X) != y)),
        "inside_target": all(lo >= t[0] and hi <= t[1] for lo, hi, t in zip(box.lows, box.highs, BOX)),
        "box": {"lows": list(box.lows), "highs": list(box.highs)},
        "proven_delta": summary["proven_delta"],
    }

