"""A released classifier's predictions on public queries (``pcqr predict``): post-processing of a
released model (:mod:`pcqr.pipeline.models.released`), no privacy cost.

The workers read the query parts and apply the model; the driver writes one Parquet file a part
(``query_id``, ``prediction``) into an empty output folder. Queries holding rows of a registered
private dataset are refused by the misuse guard (the predictions would publish a function of each of
those rows, by id) unless the caller allows the overlap.
"""
from __future__ import annotations

import re
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pcqr.pipeline.data import locations
from pcqr.pipeline.data.atomic import write_atomic
from pcqr.pipeline.data.cluster import load_cluster_config, open_client
from pcqr.pipeline.data.datasets import Part, feature_matrix, id_values, open_matching, read_part
from pcqr.pipeline.data.outputs import Output, check_outputs
from pcqr.pipeline.hypotheses.base import Hypothesis
from pcqr.pipeline.models.released import load_model
from pcqr.pipeline.models.subsample import PART_ROWS


def predict_part(part: Part, features: list[str], id_column: str | None, hypothesis: Hypothesis) -> pa.Table:
    """Worker: predictions for one part of the query dataset."""
    columns = [*features] + ([id_column] if id_column else [])
    table = read_part(part, columns)
    X = feature_matrix(table, features, part.file)
    ids = (id_values(table, id_column, part.file) if id_column
           else pa.array(np.arange(part.start, part.start + table.num_rows)))
    return pa.table({"query_id": ids, "prediction": pa.array(hypothesis.predict(X), type=pa.int8())})


def predict_queries(model_path: str, queries: str, out: str, *, id_column: str | None = None, overwrite: bool = False,
                    allow_private_overlap: bool = False, ledger: str | None = None, cluster: str | None = None,
                    note: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Apply the released model at ``model_path`` to ``queries`` (Parquet, public; its feature
    columns) and write the predictions under ``out`` (an empty or new folder; with ``overwrite``, a
    folder whose ``part-*.parquet`` files this run replaces, an earlier run's extra parts removed).
    ``id_column``: the query ids (default: ``query_id`` if present, else row positions). Returns the summary."""
    from pcqr.pipeline.budget.overlap import guard_public_inputs

    check_outputs([Output("--out", out, folder=True)], [("the model", model_path), ("the queries", queries),
                                                        ("--ledger", ledger), ("--cluster", cluster)], overwrite)
    hypothesis, features, record = load_model(model_path)
    dataset = open_matching(queries, "queries", features, "the model's features", id_column)
    load_cluster_config(cluster)
    with open_client(cluster, echo=note, array_work=True) as client:  # a released hypothesis: numpy only
        guard_public_inputs([("QUERIES", dataset)], allow_private_overlap, ledger, client=client, echo=note)
        futures = client.map(predict_part, dataset.parts(PART_ROWS), features=features, id_column=dataset.id_column,
                             hypothesis=hypothesis, pure=False)
        total = 0
        for i, future in enumerate(futures):
            table = future.result()
            sink = pa.BufferOutputStream()
            pq.write_table(table, sink, write_page_checksum=True)
            write_atomic(locations.join(out, f"part-{i:05d}.parquet"), sink.getvalue().to_pybytes())
            total += table.num_rows
    _remove_stale(out, len(futures))
    return {"out": out, "predictions": total, "model": model_path,
            **({"classes": record["classes"]} if "classes" in record else {}),
            **({"class_names": ",".join(record["class_names"])} if "class_names" in record else {}),  # as --classes
            **({"allow_private_overlap": True} if allow_private_overlap else {})}


def _remove_stale(out: str, written: int) -> None:
    """An earlier run's prediction parts beyond the ``written`` ones of this run (``--overwrite``):
    left, they would be read as predictions of this run's queries. Nothing else is touched."""
    for name in locations.names_in(out):
        match = re.fullmatch(r"part-(\d{5,})\.parquet", name)
        if match and int(match.group(1)) >= written:
            locations.remove(locations.join(out, name))
