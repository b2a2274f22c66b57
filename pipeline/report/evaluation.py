"""Accuracy against known labels (``--truth``): post-processing of released answers only.

The truth file (query_id + label) is evaluation data the user holds for the
queries; it is read in the driver and never touches the private dataset.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import pyarrow as pa

from pcqr.pipeline.data.arrow_types import as_float64, label_refusal
from pcqr.pipeline.data.datasets import QUERY_ID, check_id_type, id_values, label_vector, read_part, scan_dataset
from pcqr.pipeline.errors import PcqrError


def load_truth(uri: str, label: str = "label", id_column: str = "query_id", classes: int = 2,
               names: Sequence[str] | None = None) -> Callable[[np.ndarray], np.ndarray]:
    """A lookup from query ids to true labels (-1 where the truth has no such id); the labels 0 .. classes - 1,
    or with ``names`` (a session trained with --classes low,mid,high) each name's class index."""
    dataset = scan_dataset(uri, "truth")
    for column in (id_column, label):
        if column not in dataset.schema.names:
            raise PcqrError(f"{dataset.files[0]}: --truth has no column {column!r} (it needs {id_column!r} and "
                            f"{label!r}); columns: {', '.join(dataset.schema.names)}")
    check_id_type(dataset.schema, dataset.files[0], id_column, "--truth id")
    kind = dataset.schema.field(label).type
    if names is not None and not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_integer(kind)):
        raise PcqrError(f"{dataset.files[0]}: --truth label column {label!r} is {kind}; the session's classes are "
                        "names: it must hold them as text or whole numbers")
    if names is None and (refused := label_refusal(kind)):
        raise PcqrError(f"{dataset.files[0]}: --truth label column {label!r} {refused}")
    ids, labels = [], []
    for part in dataset.parts(1 << 20):
        table = read_part(part, [id_column, label])
        ids.append(id_values(table, id_column, part.file, "--truth id").to_numpy())
        labels.append(label_vector(table, label, part.file, classes, names))
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


def check_one_query_per_id(log_dir: str, provenance: dict[str, Any] | None) -> None:
    """``--truth`` joins a log's answers to true labels by query id: refuse a log in which one id
    names two different queries (their feature vectors differ; a log written before ``pcqr answer``
    refused repeated ids), where the join would score answers against another query's label. The
    same query asked again (same id, same features) joins correctly and is kept."""
    from pcqr.pipeline.public_log.answered import column_keys
    from pcqr.pipeline.public_log.replay import read_queries

    features = (provenance or {}).get("features")
    if not isinstance(features, list) or not features:
        raise PcqrError(f"--log {log_dir}: its provenance lists no features; --truth cannot tell its queries apart")
    ids, keys = [], []
    for table in read_queries(log_dir, [str(f) for f in features]):
        ids.append(table.column(QUERY_ID).to_numpy())
        keys.append(column_keys([as_float64(table.column(str(f))) for f in features], table.num_rows, 0))
    if not ids:
        return
    all_ids, all_keys = np.concatenate(ids), np.concatenate(keys)
    order = np.lexsort((all_keys, all_ids))
    all_ids, all_keys = all_ids[order], all_keys[order]
    clash = np.flatnonzero((all_ids[1:] == all_ids[:-1]) & (all_keys[1:] != all_keys[:-1]))
    if clash.size:
        raise PcqrError(f"--log {log_dir}: query id {int(all_ids[clash[0]])} names two different queries; --truth "
                        "joins answers by id, so it cannot score this log (give each query its own id)")


def score(expected: np.ndarray, answers: np.ndarray) -> tuple[int, int, int]:
    """Compare answers with the truth's labels (``expected``: -1 where the truth has no such id).

    Returns ``(correct, covered, missing)``: accuracy is ``correct / covered``, over the answers
    the truth covers; ``missing`` answers have no truth and are not counted either way.
    """
    covered = expected >= 0
    correct = int(np.count_nonzero(expected[covered] == answers[covered]))
    return correct, int(np.count_nonzero(covered)), int(np.count_nonzero(~covered))


def max_threshold_error(answer_of: Callable[[np.ndarray], float], public: np.ndarray, data: np.ndarray) -> float:
    """The exact worst error of a threshold-query release over EVERY threshold t, both directions.

    ``answer_of(labels)`` is the released answer for the query labelling the sorted distinct
    public values ``labels`` (0/1), i.e. the projection G(h_t); ``data`` the values the true
    fractions are taken on (evaluation only: the benchmark's or test's own copy of the private
    column). Between consecutive public values G is constant and the true fraction of rows
    above t is monotone, so the supremum over each public cell is reached at its two ends.
    """
    v, x = np.unique(public), np.sort(data)
    u, n = v.shape[0], x.shape[0]
    worst = 0.0
    for c in range(u + 1):
        up = np.r_[np.zeros(c, dtype=np.uint8), np.ones(u - c, dtype=np.uint8)]
        left = 1.0 if c == 0 else (n - np.searchsorted(x, v[c - 1], "right")) / n
        right = 0.0 if c == u else (n - np.searchsorted(x, v[c], "left")) / n
        for labels, ends in ((up, (left, right)), (1 - up, (1 - left, 1 - right))):
            g = answer_of(labels)
            worst = max(worst, *(abs(g - f) for f in ends))
    return worst


def answered_accuracy(answers: pa.Table, truth_uri: str, classes: int = 2,
                      names: Sequence[str] | None = None) -> tuple[float | None, int, int]:
    """Accuracy of the answered queries of a logged answers table (query_id, answer, status) against a
    truth file, as ``pcqr answer --truth`` counts it: over the answered queries the truth covers.
    Returns (accuracy, evaluated, missing)."""
    lookup = load_truth(truth_uri, classes=classes, names=names)
    answered = answers.column("status").to_numpy(zero_copy_only=False) == "answered"
    ids = answers.column("query_id").to_numpy()[answered]
    labels = answers.column("answer").to_numpy(zero_copy_only=False)[answered]
    correct, evaluated, missing = score(lookup(ids), labels)
    return (correct / evaluated if evaluated else None), evaluated, missing
