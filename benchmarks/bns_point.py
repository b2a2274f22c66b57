"""Benchmark ``bns_point``: Beimel-Nissim-Stemmer's POINT_d learner (``pcqr learn --algorithm point``,
A_dist) beside the exponential mechanism over the same class (issue 14, item 8).

Two parts. (1) The command end to end on 10^6 rows (10^5 with --quick) of ``pcqr generate --concept
point``: rows per second and the error of the released point on fresh rows. (2) Sample complexity,
in process, with the real mechanisms (:func:`pcqr.pipeline.mechanisms.learn_point.learn_point` and
pcqr's exact exponential-mechanism sampler, :func:`pcqr.pipeline.mechanisms.exponential.choose`):
a realizable distribution with D(j*) = 0.05 at the target j* labelled 1 and the rest of the mass
spread over the domain labelled 0, eps = 1, delta = 1e-6; for n private rows, the share of runs
that release j* (the only hypothesis with error below 0.05). The exponential mechanism's candidates
are every point of the domain plus the all-zero function, scored by their mistakes (the unseen
values as one level of 2^bits - seen candidates): it needs about 2 ln|X| / eps positives, A_dist
about 2 (ln(1/delta) + ln(1/beta)) / eps whatever the domain, so A_dist wins only when the domain is
larger than about 1/delta.

Run through benchmarks/run.py (``--only bns_point``); benchmarks/README.md says what each figure means.
"""
from __future__ import annotations

import json
import time
from typing import Any

import numpy as np

from harness import pcqr, temp_dir, write_cluster_yaml

MASS = 0.05  # D(j*)
TARGET = 42


def _em_releases_target(positives: int, negatives_seen: dict[int, int], bits: int, noise: Any) -> bool:
    """One run of the exponential mechanism (eps = 1, score = -mistakes, sensitivity 1) over POINT on
    [0, 2^bits) plus the all-zero function, on a realizable sample: c_j* makes 0 mistakes, the all-zero
    function and every unseen point ``positives``, a seen negative value j ``positives`` + its count."""
    from pcqr.pipeline.mechanisms.exponential import choose

    levels: dict[int, int] = {0: 1}  # c_j*, the first candidate of its level
    levels[positives] = levels.get(positives, 0) + (2**bits - 1 - len(negatives_seen)) + 1  # unseen, all-zero
    for count in negatives_seen.values():
        levels[positives + count] = levels.get(positives + count, 0) + 1
    choice = choose([levels], 1.0, noise)
    return choice.mistakes == 0 and choice.rank == 0


def _sample(n: int, bits: int, rng: np.random.Generator) -> tuple[int, dict[int, int]]:
    """(rows labelled 1 -- all at j* --, counts of the other values seen) for n rows."""
    positives = int(rng.binomial(n, MASS))
    others = rng.integers(0, 2**min(bits, 62), n - positives, dtype=np.int64)
    others = others[others != TARGET]
    values, counts = np.unique(others, return_counts=True)
    return positives, dict(zip(values.tolist(), counts.tolist()))


def bench_bns_point(quick: bool) -> dict[str, Any]:
    from pcqr.pipeline.mechanisms.adist import AdistParameters
    from pcqr.pipeline.mechanisms.integer_domain import Domain
    from pcqr.pipeline.mechanisms.learn_point import learn_point, rows_needed
    from pcqr.pipeline.privacy.noise import SecureNoise

    rows = 10**5 if quick else 10**6
    runs = 100 if quick else 400
    result: dict[str, Any] = {"how": __doc__.split("\n\n")[1].replace("\n", " "), "epsilon": 1.0, "delta": 1e-6}
    with temp_dir("bns-point") as work:
        cluster = str(write_cluster_yaml(work))
        pcqr(work, "generate", "generate", "--kind", "realizable", "--concept", "point", "--rows", str(rows),
             "--features", "2", "--queries", "10000", "--seed", "3", "--out", "data", "--cluster", cluster)
        seconds, summary = pcqr(work, "learn", "learn", "--algorithm", "point", "--private", "data/private",
                                "--features", "x0", "--domain", "-4294967296:4294967295", "--epsilon", "1",
                                "--delta", "1e-6", "--out", "point.json", "--cluster", cluster)
        model = json.loads((work / "point.json").read_text())
        import pyarrow.parquet as pq

        queries, truth = pq.read_table(work / "data" / "queries"), pq.read_table(work / "data" / "truth")
        value = model["hypothesis"]["value"]
        predicted = (queries.column("x0").to_numpy() == value) if value is not None else np.zeros(queries.num_rows, bool)
        result["end_to_end"] = {
            "private_rows": rows, "seconds": round(seconds, 2), "rows_per_second": rows / seconds,
            "released": summary["released"], "error_on_10000_fresh_rows": float(np.mean(
                predicted.astype(np.int8) != truth.column("label").to_numpy())),
            "proven_delta": summary["proven_delta"],
        }
    params = AdistParameters.create(1.0, 1e-6)
    noise = SecureNoise()
    rng = np.random.default_rng(11)
    sizes = [100, 200, 400, 600, 800, 1000, 1500, 2000, 3000]
    table = []
    started = time.perf_counter()
    domain = Domain(0, 2**53)  # A_dist never looks at the domain's size; the EM's candidates do
    for bits in (32, 64):
        for n in sizes:
            adist = em = 0
            for _ in range(runs):
                positives, negatives = _sample(n, bits, rng)
                counts = (np.array([TARGET]), np.array([positives])) if positives else (np.zeros(0, np.int64),) * 2
                hypothesis, _ = learn_point(counts, domain, params, noise)
                adist += hypothesis.value == TARGET
                em += _em_releases_target(positives, negatives, bits, noise)
            table.append({"domain_bits": bits, "rows": n, "adist_success": adist / runs, "em_success": em / runs})
    result["sample_complexity"] = {"runs_per_cell": runs, "mass_at_target": MASS, "table": table,
                                   "adist_rows_needed_alpha_0.05_beta_0.05": rows_needed(params, MASS, 0.05),
                                   "seconds": round(time.perf_counter() - started, 1)}
    return result
