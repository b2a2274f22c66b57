"""Benchmark ``bns_label_private``: Beimel-Nissim-Stemmer's generic label-private learner (``pcqr learn
--algorithm label-private``, Fig. 13) beside the exponential mechanism over the same candidates
(issue 14, item 8).

``pcqr generate --concept threshold`` (realizable, one feature), 10^6 private rows (10^5 with
--quick), eps = 1: the label-private learner builds its candidates from the first n rows' features
(Fig. 13's n at the defaults) and scores the rest; A_SSPP (``--algorithm sspp``) is the exponential
mechanism over the candidates of the same n points given as a public sample (``--allow-private-overlap``:
they are the private file's first rows), scoring all m rows. Rows per second of each command (cluster
start included) and the error of each released threshold on 10,000 fresh rows.

Run through benchmarks/run.py (``--only bns_label_private``); benchmarks/README.md says what each figure means.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from harness import pcqr, temp_dir, write_cluster_yaml


def _error(work: Path, model: str) -> float:
    import pyarrow.parquet as pq

    from pcqr.pipeline.models.released import load_model

    hypothesis, features, _ = load_model(str(work / model))
    queries, truth = pq.read_table(work / "data" / "queries"), pq.read_table(work / "data" / "truth")
    X = np.column_stack([queries.column(name).to_numpy() for name in features])
    return float(np.mean(np.asarray(hypothesis.predict(X), dtype=np.int8) != truth.column("label").to_numpy()))


def _first_rows_as_public(work: Path, rows: int) -> None:
    """The private data's first ``rows`` feature rows, in dataset order, as a public file."""
    import pyarrow.parquet as pq

    from pcqr.pipeline.data.datasets import open_dataset

    private = open_dataset(str(work / "data" / "private"), "private", label="label")
    taken, tables = 0, []
    for path in private.files:
        table = pq.read_table(path, columns=list(private.features)).slice(0, rows - taken)
        tables.append(table)
        taken += table.num_rows
        if taken == rows:
            break
    (work / "public").mkdir()
    import pyarrow as pa

    pq.write_table(pa.concat_tables(tables), str(work / "public" / "part-0.parquet"))


def bench_bns_label_private(quick: bool) -> dict[str, Any]:
    rows = 10**5 if quick else 10**6
    result: dict[str, Any] = {"how": __doc__.split("\n\n")[1].replace("\n", " "), "epsilon": 1.0, "private_rows": rows}
    with temp_dir("bns-label-private") as work:
        cluster = str(write_cluster_yaml(work))
        pcqr(work, "generate", "generate", "--kind", "realizable", "--concept", "threshold", "--rows", str(rows),
             "--features", "1", "--queries", "10000", "--seed", "3", "--out", "data", "--cluster", cluster)
        seconds, summary = pcqr(work, "label-private", "learn", "--algorithm", "label-private", "--private",
                                "data/private", "--hypothesis", "threshold", "--features-are-public", "--epsilon", "1",
                                "--out", "label-private.json", "--cluster", cluster)
        first = int(summary["first_rows"])
        result["label_private"] = {
            "seconds": round(seconds, 2), "rows_per_second": rows / seconds, "first_rows": first,
            "candidates": summary["candidates"], "proven_delta": summary["proven_delta"],
            "error_on_10000_fresh_rows": _error(work, "label-private.json"),
        }
        _first_rows_as_public(work, first)
        seconds, summary = pcqr(work, "sspp", "learn", "--algorithm", "sspp", "--private", "data/private", "--public",
                                "public", "--hypothesis", "threshold", "--allow-private-overlap", "--epsilon", "1",
                                "--out", "sspp.json", "--cluster", cluster)
        result["sspp_same_points"] = {
            "seconds": round(seconds, 2), "rows_per_second": rows / seconds, "public_points": first,
            "candidates": summary["candidates"], "proven_delta": summary["proven_delta"],
            "error_on_10000_fresh_rows": _error(work, "sspp.json"),
        }
    return result
