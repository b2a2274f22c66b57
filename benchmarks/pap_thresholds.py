"""Benchmark ``pap_thresholds``: ``pcqr release --hypothesis threshold`` (A_PAP) end to end, and the exact worst error over every threshold.

Run through benchmarks/run.py (``--only pap_thresholds``); benchmarks/README.md says what each figure means."""
from __future__ import annotations

from typing import Any

from harness import pcqr, temp_dir, write_cluster_yaml


def bench_pap_thresholds(quick: bool) -> dict[str, Any]:
    """``pcqr release --hypothesis threshold`` end to end (a subprocess) and the exact worst error
    of its answers over every threshold, against the private data's own fractions."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pcqr.pipeline.report.evaluation import max_threshold_error
    from pcqr.pipeline.mechanisms.pap import public_key

    n_pub, n = (1000, 10**5) if quick else (4000, 10**6)
    result: dict[str, Any] = {
        "public_points": n_pub, "private_rows": n,
        "how": "public x ~ N(0,1); private x ~ N(shift, 1); pcqr release --hypothesis threshold --epsilon 1 "
        "--delta 1e-6 --alpha A --beta 0.05 on the local 2-worker cluster; max_error = sup over all "
        "thresholds t and both directions of |answer(projection of h_t) - fraction of private rows h_t "
        "labels 1| (exact, pcqr.pipeline.report.evaluation.max_threshold_error); public_only_error = the same for the "
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
