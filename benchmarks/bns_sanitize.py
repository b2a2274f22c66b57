"""Benchmark ``bns_sanitize``: Beimel-Nissim-Stemmer's SanPoints (``pcqr sanitize --algorithm
san-points``) on point queries (issue 14, item 8).

Two parts. (1) The command end to end on 10^6 rows (10^5 with --quick) of ``pcqr generate --concept
point --integer-scale 2`` (x0 = floor(2 z): 20 values, the largest 19% of the rows), eps = 1, delta =
1e-6, alpha = 0.1 (0.2 with --quick: 10^5 rows are below alpha 0.1's 148,161): rows per second
(the whole command, cluster start included) and the largest error over every point query of the
domain (the released weight against the data's true share; unseen values answer 0 and are exact).
(2) In process, with the real mechanism (:func:`pcqr.pipeline.mechanisms.san_points.san_points`):
half the rows from floor(2 z), half uniform over [0, 2^32) (heavy hitters and a long tail), eps 1,
delta 1e-6, for each n the largest error over all point queries, SanPoints (alpha 0.1, or refused
below its certified size) beside the stability-based histogram, the practical (eps, delta) baseline
for the same class (noisy counts DLap(2/eps) of the seen values, kept above a threshold tau with
P(Z >= tau - 1) <= delta; since issue 31 pcqr's own ``--algorithm histogram``, see
benchmarks/practical_sanitizers.py). The exponential mechanism over the class of synthetic databases (BLR's SmallDB) chooses
among |X|^(log|Q| / alpha^2) databases: not computable at a 2^32 domain, so it has no column here.

(3) SanThresholds (``--algorithm san-thresholds``, :func:`bench_thresholds`): the command end to end
on 10^6 rows (10^5 with --quick) of ``pcqr generate --concept threshold --integer-scale 1048576``
(x0 = floor(2^20 z): about 10^6 distinct values) over the domain [-2^31, 2^31), eps = 8, alpha =
0.5 (eps 1 certifies no alpha on 10^6 rows: 4,477,441 rows at alpha 0.5; quick: eps 50, alpha 0.9),
rows per second and the largest error over every threshold query 'x <= theta' (exact: both sides
are step functions). Then in process at eps 1, for each n, half the rows from floor(2^10 z) + 2^31
and half uniform over multiples of 4096 in [0, 2^32): SanThresholds' largest error over every
threshold (alpha 0.5, refused below its certified size) beside the practitioner's baseline, noisy
counts on the binary tree of the domain's 32 bits (every dyadic block of sizes 2^0 .. 2^31 gets
DLap(64/eps): one replaced row moves two blocks a level, sensitivity 64; pure eps-DP; a prefix is
at most 32 blocks; a benchmark-only implementation, not a pcqr command), whose largest error is
measured over 20,000 cut points (half at data values, half uniform), not all 2^32.

Run through benchmarks/run.py (``--only bns_sanitize``); benchmarks/README.md says what each figure means.
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np

from harness import pcqr, temp_dir, write_cluster_yaml

EPSILON, DELTA = 1.0, 1e-6


def _stable_histogram(values: np.ndarray, counts: np.ndarray, rows: int, noise: Any) -> dict[int, float]:
    """The stability-based histogram at (EPSILON, DELTA): pcqr's own since issue 31 (``pcqr sanitize
    --algorithm histogram``; the benchmark's copy before it): {value: share}."""
    from pcqr.pipeline.mechanisms.stable_histogram import HistogramParameters, release_shards

    params = HistogramParameters.calibrated(EPSILON, DELTA, 0.1, 0.05, rows)
    return dict(release_shards([(values, counts)], params, noise))


def _largest_error(estimates: dict[int, float], values: np.ndarray, counts: np.ndarray, rows: int) -> float:
    truth = dict(zip(values.tolist(), (counts / rows).tolist()))
    return max(abs(estimates.get(v, 0.0) - f) for v, f in {**dict.fromkeys(estimates, 0.0), **truth}.items())


def _mixture(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    heavy = np.floor(2 * rng.standard_normal(n // 2)).astype(np.int64) + 2**31  # around the middle of the domain
    tail = rng.integers(0, 2**32, n - n // 2, dtype=np.int64)
    return np.unique(np.concatenate([heavy, tail]), return_counts=True)


def bench_bns_sanitize(quick: bool) -> dict[str, Any]:
    from pcqr.pipeline.mechanisms.san_points import SanPointsParameters, san_points
    from pcqr.pipeline.models.synthetic import read_synthetic
    from pcqr.pipeline.privacy.noise import SecureNoise

    rows = 10**5 if quick else 10**6
    alpha = 0.2 if quick else 0.1
    result: dict[str, Any] = {"how": __doc__.split("\n\n")[1].replace("\n", " "), "epsilon": EPSILON, "delta": DELTA}
    with temp_dir("bns-sanitize") as work:
        cluster = str(write_cluster_yaml(work))
        pcqr(work, "generate", "generate", "--concept", "point", "--integer-scale", "2", "--rows", str(rows),
             "--features", "1", "--queries", "0", "--seed", "3", "--out", "data", "--cluster", cluster)
        seconds, summary = pcqr(work, "sanitize", "sanitize", "--private", "data/private", "--features", "x0",
                                "--domain", "-4294967296:4294967295", "--epsilon", str(EPSILON), "--delta", str(DELTA),
                                "--alpha", str(alpha), "--out", "points.parquet", "--cluster", cluster)
        import pyarrow.parquet as pq

        x = pq.read_table(work / "data" / "private", columns=["x0"]).column("x0").to_numpy().astype(np.int64)
        values, counts = np.unique(x, return_counts=True)
        released, weights, _ = read_synthetic(str(work / "points.parquet"))
        estimates: dict[int, float] = {}
        for v, w in zip(released.tolist(), weights.tolist()):
            estimates[v] = estimates.get(v, 0.0) + w
        result["end_to_end"] = {
            "private_rows": rows, "alpha": alpha, "seconds": round(seconds, 2), "rows_per_second": rows / seconds,
            "released_points": summary["released_points"], "largest_error": _largest_error(estimates, values, counts,
                                                                                            rows),
            "proven_delta": summary["proven_delta"], "largest_true_share": float(counts.max() / rows),
        }
    noise = SecureNoise()
    rng = np.random.default_rng(5)
    table = []
    started = time.perf_counter()
    for n in ([10**3, 10**4, 10**5] if quick else [10**3, 10**4, 10**5, 148_161, 10**6]):
        values, counts = _mixture(n, rng)
        row: dict[str, Any] = {"rows": n, "distinct_values": int(values.size)}
        row["stable_histogram_error"] = _largest_error(_stable_histogram(values, counts, n, noise), values, counts, n)
        try:
            params = SanPointsParameters.create(EPSILON, DELTA, 0.1, 0.05, n)
            row["san_points_error"] = _largest_error(dict(san_points(values, counts, params, noise)), values, counts, n)
        except Exception as exc:  # refused below its certified size: reported, not an error
            row["san_points_error"] = f"refused ({str(exc).split(' rows')[0].split('needs ')[-1]} rows needed)"
        table.append(row)
    result["errors"] = {"alpha": 0.1, "table": table, "seconds": round(time.perf_counter() - started, 1)}
    result["thresholds"] = bench_thresholds(quick)
    return result


def threshold_error(released: list[tuple[int, float]], values: np.ndarray, counts: np.ndarray) -> float:
    """The largest |share of rows <= theta - weights of the points <= theta| over every integer theta:
    both are step functions changing only at the values and the points, so those thetas suffice."""
    points = np.array(sorted(b for b, _ in released), dtype=np.int64)
    weights = np.array([w for _, w in sorted(released)])
    thetas = np.unique(np.concatenate([values, values - 1, points, points - 1]))
    truth = np.concatenate([[0], np.cumsum(counts)])[np.searchsorted(values, thetas, "right")] / counts.sum()
    answer = np.concatenate([[0.0], np.cumsum(weights)])[np.searchsorted(points, thetas, "right")]
    return float(np.abs(truth - answer).max())


def _binary_tree_error(values: np.ndarray, rows: int, noise: Any, rng: np.random.Generator,
                       cuts: int = 20_000) -> float:
    """The binary-tree baseline over [0, 2^32) at EPSILON: the largest |noisy - true| share of rows
    below j over ``cuts`` cut points j (half at data values, half uniform); each block's noise drawn
    once (the blocks the cuts need, as a real release would draw them all)."""
    from pcqr.pipeline.mechanisms.adist import noise_scale

    scale = noise_scale(EPSILON, 64.0)
    j = np.concatenate([rng.choice(values, cuts // 2), rng.integers(0, 2**32, cuts - cuts // 2)]).astype(np.int64)
    blocks = [(bit, (j >> (bit + 1)) << 1) for bit in range(32)]  # [0, j) holds block (bit, index) iff j's bit is set
    present = np.stack([(j >> bit) & 1 for bit in range(32)]).astype(bool)
    keys = np.stack([index * 64 + bit for bit, index in blocks])  # (bit, block index) packed, unique per block
    needed, inverse = np.unique(keys[present], return_inverse=True)
    drawn = np.zeros(keys.shape, dtype=np.float64)
    drawn[present] = noise.discrete_laplace_vector(scale, needed.size)[inverse]
    return float(np.abs(drawn.sum(axis=0)).max() / rows)  # the true blocks sum to the true count exactly


def _threshold_mixture(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    heavy = np.floor(1024 * rng.standard_normal(n // 2)).astype(np.int64) + 2**31
    tail = rng.integers(0, 2**20, n - n // 2, dtype=np.int64) * 4096
    return np.unique(np.concatenate([heavy, tail]), return_counts=True)


def bench_thresholds(quick: bool) -> dict[str, Any]:
    """Part (3) of the module docstring."""
    from pcqr.pipeline.mechanisms.integer_domain import Domain
    from pcqr.pipeline.mechanisms.san_thresholds import SanThresholdsParameters, san_thresholds
    from pcqr.pipeline.models.synthetic import read_synthetic
    from pcqr.pipeline.privacy.noise import SecureNoise

    rows, epsilon, alpha = (10**5, 50.0, 0.9) if quick else (10**6, 8.0, 0.5)
    domain = "-2147483648:2147483647"
    result: dict[str, Any] = {}
    with temp_dir("bns-sanitize-thresholds") as work:
        cluster = str(write_cluster_yaml(work))
        pcqr(work, "generate", "generate", "--concept", "threshold", "--integer-scale", "1048576", "--rows", str(rows),
             "--features", "1", "--queries", "0", "--seed", "3", "--out", "data", "--cluster", cluster)
        seconds, summary = pcqr(work, "sanitize", "sanitize", "--algorithm", "san-thresholds", "--private",
                                "data/private", "--features", "x0", "--domain", domain, "--epsilon", str(epsilon),
                                "--delta", str(DELTA), "--alpha", str(alpha), "--out", "cdf.parquet", "--cluster", cluster)
        import pyarrow.parquet as pq

        x = pq.read_table(work / "data" / "private", columns=["x0"]).column("x0").to_numpy()
        values, counts = np.unique(np.clip(np.ceil(x), -2**31, 2**31 - 1).astype(np.int64), return_counts=True)
        released, weights, _ = read_synthetic(str(work / "cdf.parquet"))
        result["end_to_end"] = {
            "private_rows": rows, "distinct_values": int(values.size), "epsilon": epsilon, "alpha": alpha,
            "seconds": round(seconds, 2), "rows_per_second": rows / seconds, "calls": summary["calls"],
            "released_points": summary["released_points"], "rows_certified": summary["rows_certified"],
            "largest_error": threshold_error(list(zip(released.tolist(), weights.tolist())), values, counts),
            "proven_delta": summary["proven_delta"],
        }
    noise = SecureNoise()
    rng = np.random.default_rng(6)
    table = []
    started = time.perf_counter()
    wide = Domain(0, 2**32 - 1)
    for n in ([10**5, 10**6] if quick else [10**6, 5 * 10**6, 2 * 10**7]):
        values, counts = _threshold_mixture(n, rng)
        row: dict[str, Any] = {"rows": n, "distinct_values": int(values.size)}
        row["binary_tree_error"] = _binary_tree_error(values, n, noise, rng)
        try:
            params = SanThresholdsParameters.create(EPSILON, DELTA, 0.5, 0.05, n, wide)
            clock = time.perf_counter()
            row["san_thresholds_error"] = threshold_error(san_thresholds(values, counts, params, noise), values, counts)
            row["san_thresholds_seconds"] = round(time.perf_counter() - clock, 2)
        except Exception as exc:  # refused below its certified size: reported, not an error
            row["san_thresholds_error"] = f"refused ({str(exc).split(' rows')[0].split('needs ')[-1]} rows needed)"
        table.append(row)
    result["errors"] = {"epsilon": EPSILON, "alpha": 0.5, "table": table,
                        "seconds": round(time.perf_counter() - started, 1)}
    return result
