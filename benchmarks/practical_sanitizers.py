"""Benchmark ``practical_sanitizers``: ``pcqr sanitize --algorithm histogram`` (point queries) and
``--algorithm cdf`` (threshold queries) beside Beimel-Nissim-Stemmer's SanPoints and SanThresholds
(issue 31), eps 1, delta 1e-6, at 10^6, 10^7 and 10^8 rows (10^5 and 10^6 with --quick).

Two parts. (1) The mechanisms in process, on the exact counts (no Parquet): for point queries, half
the rows from floor(2 z) + 2^31 (about 20 heavy values), half uniform over [0, 2^32) (a long tail of
values seen once); for threshold queries, half floor(1024 z) + 2^31 and half uniform over multiples of
4096 in [0, 2^32). For each n and algorithm: the largest error over EVERY query of the class (point:
every value seen, and unseen values, which answer 0 exactly; threshold: every integer theta, exact
since both sides are step functions) and the mechanism's own seconds and rows per second (counts
given). SanPoints runs at alpha 0.1 and SanThresholds at alpha 0.5 (the least alpha its composition
certifies beside 0.154; eps 1 needs 4,477,441 rows for it), each refused below its certified size.
(2) The commands end to end (``pcqr generate --concept threshold --integer-scale 1048576``: x0 =
floor(2^20 z), about 10^6 distinct values over [-2^31, 2^31)), on a local cluster of 2 workers:
the whole command's seconds (cluster start included) and rows per second, and the largest error
over every query of the class against the rows read back.

Run through benchmarks/run.py (``--only practical_sanitizers``); benchmarks/README.md says what each figure means.
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np

from bns_sanitize import threshold_error
from harness import pcqr, temp_dir, write_cluster_yaml

EPSILON, DELTA = 1.0, 1e-6
WIDE = "0:4294967295"


def point_error(released: list[tuple[int, float]], values: np.ndarray, counts: np.ndarray) -> float:
    """The largest |released share - true share| over every value (released or seen; an unseen,
    unreleased value is exact)."""
    rows = counts.sum()
    truth = counts / rows
    points = np.array([v for v, _ in released], dtype=np.int64)
    shares = np.array([s for _, s in released], dtype=np.float64)
    at = np.minimum(np.searchsorted(values, points), max(values.size - 1, 0))
    found = values[at] == points if values.size else np.zeros(points.size, bool)
    errors = np.abs(shares - np.where(found, truth[at], 0.0))
    unreleased = np.ones(values.size, bool)
    unreleased[at[found]] = False
    return float(max(errors.max(initial=0.0), truth[unreleased].max(initial=0.0)))


def _points_data(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    heavy = np.floor(2 * rng.standard_normal(n // 2)).astype(np.int64) + 2**31
    tail = rng.integers(0, 2**32, n - n // 2, dtype=np.int64)
    return np.unique(np.concatenate([heavy, tail]), return_counts=True)


def _thresholds_data(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    heavy = np.floor(1024 * rng.standard_normal(n // 2)).astype(np.int64) + 2**31
    tail = rng.integers(0, 2**20, n - n // 2, dtype=np.int64) * 4096
    return np.unique(np.concatenate([heavy, tail]), return_counts=True)


def _timed(run: Any) -> tuple[Any, float]:
    started = time.perf_counter()
    out = run()
    return out, time.perf_counter() - started


def _cell(n: int, run: Any, error: Any) -> dict[str, Any]:
    """One algorithm at n rows: its error and speed, or the refusal."""
    from pcqr.pipeline.errors import PcqrError

    try:
        released, seconds = _timed(run)
    except PcqrError as exc:
        return {"refused": str(exc)[:160]}
    return {"error": error(released), "seconds": round(seconds, 3), "rows_per_second": n / seconds,
            "released_points": len(released)}


def mechanisms(sizes: list[int]) -> list[dict[str, Any]]:
    """Part (1): every algorithm on the same counts at each n."""
    from pcqr.pipeline.mechanisms.hierarchical_cdf import CdfParameters, hierarchical_cdf, local_counter, synthetic_cdf
    from pcqr.pipeline.mechanisms.integer_domain import Domain
    from pcqr.pipeline.mechanisms.san_points import SanPointsParameters, san_points
    from pcqr.pipeline.mechanisms.san_thresholds import SanThresholdsParameters, san_thresholds
    from pcqr.pipeline.mechanisms.stable_histogram import HistogramParameters, release_shards, shard_number, shard_of
    from pcqr.pipeline.privacy.noise import SecureNoise

    noise, rng, domain = SecureNoise(), np.random.default_rng(31), Domain.parse(WIDE)
    noise.discrete_laplace_vector(1.0, 1)  # OpenDP's first import (about 2 s) is not any algorithm's time
    table = []
    for n in sizes:
        values, counts = _points_data(n, rng)

        def histogram() -> list[tuple[int, float]]:
            params = HistogramParameters.create(EPSILON, DELTA, 0.1, 0.05, n)
            shards = shard_number(n)
            where = shard_of(values, shards)
            return release_shards(((values[where == s], counts[where == s]) for s in range(shards)), params, noise)

        row: dict[str, Any] = {"rows": n, "point_values_seen": int(values.size)}
        row["histogram"] = _cell(n, histogram, lambda r: point_error(r, values, counts))
        row["san_points"] = _cell(n, lambda: san_points(values, counts, SanPointsParameters.create(
            EPSILON, DELTA, 0.1, 0.05, n), noise), lambda r: point_error(r, values, counts))
        values, counts = _thresholds_data(n, rng)

        def cdf() -> list[tuple[int, float]]:
            params = CdfParameters.create(EPSILON, n, domain)
            return synthetic_cdf(hierarchical_cdf(local_counter(values - domain.lo, counts, params), params, noise))

        row["threshold_values_seen"] = int(values.size)
        row["cdf"] = _cell(n, cdf, lambda r: threshold_error(r, values, counts))
        row["san_thresholds"] = _cell(n, lambda: san_thresholds(values, counts, SanThresholdsParameters.create(
            EPSILON, DELTA, 0.5, 0.05, n, domain), noise), lambda r: threshold_error(r, values, counts))
        table.append(row)
        print(row, flush=True)
    return table


def end_to_end(sizes: list[int]) -> list[dict[str, Any]]:
    """Part (2): the commands on Parquet data on a local cluster."""
    import pyarrow.parquet as pq

    from pcqr.pipeline.models.synthetic import read_synthetic

    table = []
    for n in sizes:
        with temp_dir("practical-sanitizers") as work:
            cluster = str(write_cluster_yaml(work))
            generated, _ = pcqr(work, "generate", "generate", "--concept", "threshold", "--integer-scale", "1048576",
                                "--rows", str(n), "--features", "1", "--queries", "0", "--seed", "3", "--out", "data",
                                "--cluster", cluster)
            x = pq.read_table(work / "data" / "private", columns=["x0"]).column("x0").to_numpy()
            row: dict[str, Any] = {"rows": n, "generate_seconds": round(generated, 1)}
            for algorithm, error in (("histogram", point_error), ("cdf", threshold_error)):
                seconds, summary = pcqr(work, algorithm, "sanitize", "--algorithm", algorithm, "--private",
                                        "data/private", "--features", "x0", "--domain", "-2147483648:2147483647",
                                        "--epsilon", str(EPSILON), "--delta", str(DELTA), "--out",
                                        f"{algorithm}.parquet", "--cluster", cluster)
                taken = np.clip(np.ceil(x), -2**31, 2**31 - 1) if algorithm == "cdf" else x
                values, counts = np.unique(taken.astype(np.int64), return_counts=True)
                points, weights, _ = read_synthetic(str(work / f"{algorithm}.parquet"))
                row[algorithm] = {"seconds": round(seconds, 2), "rows_per_second": n / seconds,
                                  "error": error(list(zip(points.tolist(), weights.tolist())), values, counts),
                                  "released_points": summary["released_points"], "proven_delta": summary["proven_delta"],
                                  "values_seen": int(values.size)}
            table.append(row)
            print(row, flush=True)
    return table


def bench_practical_sanitizers(quick: bool) -> dict[str, Any]:
    sizes = [10**5, 10**6] if quick else [10**6, 10**7, 10**8]
    result: dict[str, Any] = {"how": __doc__.split("\n\n")[1].replace("\n", " "), "epsilon": EPSILON, "delta": DELTA}
    started = time.perf_counter()
    result["mechanisms"] = mechanisms(sizes)
    result["end_to_end"] = end_to_end(sizes)
    result["seconds"] = round(time.perf_counter() - started, 1)
    return result
