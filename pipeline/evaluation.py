"""Accuracy against known labels (``--truth``): post-processing of released answers only.

The truth file (query_id + label) is evaluation data the user holds for the
queries; it is read in the driver and never touches the private dataset.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
from pipeline.data import label_vector, open_dataset, read_part
from pipeline.errors import PcqrError


def load_truth(uri: str, label: str = "label", id_column: str = "query_id") -> Callable[[np.ndarray], np.ndarray]:
    """A lookup from query ids to true labels (-1 where the truth has no such id)."""
    dataset = open_dataset(uri, "truth", label=label, id_column=id_column, features=[id_column])
    ids, labels = [], []
    for part in dataset.parts(1 << 20):
        table = read_part(part, [id_column, label])
        column = table.column(id_column)
        if column.null_count:
            raise PcqrError(f"{part.file}: truth column {id_column!r} has missing values")
        ids.append(column.to_numpy(zero_copy_only=False).astype(np.int64))
        labels.append(label_vector(table, label, part.file))
    all_ids, all_labels = np.concatenate(ids), np.concatenate(labels)
    order = np.argsort(all_ids, kind="stable")
    all_ids, all_labels = all_ids[order], all_labels[order]
    if np.any(all_ids[1:] == all_ids[:-1]):
        raise PcqrError(f"--truth {uri}: column {id_column!r} has repeated ids")

    def lookup(query_ids: np.ndarray) -> np.ndarray:
        at = np.clip(np.searchsorted(all_ids, query_ids), 0, max(all_ids.size - 1, 0))
        found = all_ids[at] == query_ids
        return np.where(found, all_labels[at], -1).astype(np.int64)

    return lookup
