"""Subsample-and-aggregate, training side: split S into k disjoint subsamples, train h_1..h_k.

Algorithm 5, steps 3-5 of papers/001 (BTT18). The split is a uniformly random
assignment of row *positions* to subsamples of (near-)equal size, n // k or
n // k + 1; it never looks at the values. DP needs only that the subsamples
are disjoint and chosen independently of the data (one record then touches one
model); the randomness is for accuracy (i.i.d. subsamples), so the assignment
uses an ordinary numpy generator seeded from the noise source.

How it runs on the cluster, without the driver touching a row:

1. The driver (metadata only) draws, for each part of the dataset, how many of
   its rows go to each subsample (sequential multivariate hypergeometric
   draws: together exactly a uniformly random equal-size assignment).
2. One task per part reads its rows, checks the values, shuffles its
   assignment, and splits its rows into B blocks of consecutive subsamples (B = worker threads).
3. One task per block gathers its pieces from every part and trains the
   models of its subsamples.
"""
from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np
from distributed import Client, Future, as_completed

from pcqr.pipeline.data.datasets import Dataset, Part, feature_matrix, label_vector, read_part
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.models.votes import Ensemble

if TYPE_CHECKING:  # the learners (scikit-learn) are imported by the training tasks, not by the driver
    from pcqr.pipeline.models.learners import LearnerSpec

Piece = tuple[np.ndarray, np.ndarray, np.ndarray]  # features, labels, subsample ids
PART_ROWS = 500_000


def subsample_sizes(rows: int, k: int) -> np.ndarray:
    """Sizes of k subsamples of ``rows`` rows, differing by at most one."""
    sizes = np.full(k, rows // k, dtype=np.int64)
    sizes[: rows % k] += 1
    return sizes


def check_subsamples(rows: int, k: int, min_rows: int = 1) -> None:
    """Refuse a k the data cannot support, before any private row is read."""
    if rows < k * min_rows:
        raise PcqrError(
            f"--subsamples k={k} needs at least {k * min_rows} private rows "
            f"({min_rows} per subsample); the private dataset has {rows}. "
            "Use a smaller --subsamples or more data"
        )


def assignment_counts(part_rows: Sequence[int], k: int, rng: np.random.Generator) -> np.ndarray:
    """counts[p, j] = rows of part p assigned to subsample j, for a uniform equal-size assignment."""
    remaining = subsample_sizes(int(sum(part_rows)), k)
    counts = np.zeros((len(part_rows), k), dtype=np.int64)
    for p, rows in enumerate(part_rows):
        counts[p] = rng.multivariate_hypergeometric(remaining, rows)
        remaining -= counts[p]
    return counts


def load_part(part: Part, features: Sequence[str], label: str, classes: int = 2,
              names: Sequence[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Worker task: read one part of a labelled dataset and check its values (labels 0 .. classes - 1,
    or with ``names`` each label's index among them)."""
    table = read_part(part, [*features, label])
    return feature_matrix(table, features, part.file), label_vector(table, label, part.file, classes, names)


def split_rows(
    rows: tuple[np.ndarray, np.ndarray], counts: np.ndarray, block_edges: np.ndarray, seed: int
) -> list[Piece]:
    """Worker task: assign a source's rows to subsamples (counts[j] to subsample j, shuffled)
    and cut them into one piece per block of consecutive subsamples."""
    X, y = rows
    sub = np.repeat(np.arange(counts.shape[0]), counts)
    np.random.default_rng(seed).shuffle(sub)
    order = np.argsort(sub, kind="stable")
    X, y, sub = X[order], y[order], sub[order]
    cuts = np.searchsorted(sub, block_edges)
    return [(X[a:b], y[a:b], sub[a:b]) for a, b in zip(cuts[:-1], cuts[1:])]


def train_block(lo: int, hi: int, learner: LearnerSpec, *pieces: Piece) -> list[Any]:
    """Worker task: train the models of subsamples lo..hi-1 from their pieces."""
    X = np.concatenate([p[0] for p in pieces])
    y = np.concatenate([p[1] for p in pieces])
    sub = np.concatenate([p[2] for p in pieces])
    order = np.argsort(sub, kind="stable")
    X, y, sub = X[order], y[order], sub[order]
    cuts = np.searchsorted(sub, np.arange(lo, hi + 1))
    from pcqr.pipeline.models.learners import deterministic, fit_subsample

    fixed = deterministic(learner)  # random_state 0 where unset: the same rows give the same model (a seeded
    # session repeats; the models' own randomness is no part of the privacy argument, which holds for any learner)
    return [fit_subsample(fixed, X[a:b], y[a:b]) for a, b in zip(cuts[:-1], cuts[1:])]


def train_models(
    client: Client,
    dataset: Dataset,
    k: int,
    learner: LearnerSpec,
    seed: int,
    on_progress: Callable[[int], None] | None = None,
    classes: int = 2,
    names: Sequence[str] | None = None,
) -> Ensemble:
    """Train the k subsample models of a Parquet dataset on the cluster (private Ensemble), its labels
    0 .. classes - 1 (or ``names``, mapped to their indices on the workers)."""
    assert dataset.label is not None
    check_subsamples(dataset.rows, k, learner.min_rows)
    parts = dataset.parts(PART_ROWS)
    sources = [client.submit(load_part, p, dataset.features, dataset.label, classes, names, pure=False) for p in parts]
    return train_models_on(client, sources, [p.rows for p in parts], k, learner, seed, on_progress, classes)


def train_models_on(
    client: Client,
    sources: Sequence[Future],
    source_rows: Sequence[int],
    k: int,
    learner: LearnerSpec,
    seed: int,
    on_progress: Callable[[int], None] | None = None,
    classes: int = 2,
) -> Ensemble:
    """Train k subsample models from row sources already on the cluster (futures of (X, y)); the
    ensemble counts votes over ``classes`` labels."""
    check_subsamples(int(sum(source_rows)), k, learner.min_rows)
    seeds = np.random.SeedSequence(seed).spawn(len(sources) + 1)
    counts = assignment_counts(source_rows, k, np.random.default_rng(seeds[-1]))
    threads = max(1, sum(client.nthreads().values()))
    blocks = min(k, threads)  # one training task per worker thread: fewest transfers
    block_edges = np.linspace(0, k, blocks + 1).round().astype(np.int64)
    splits = [
        client.submit(split_rows, source, counts[i], block_edges,
                      int(seeds[i].generate_state(1, np.uint64)[0]), pure=False)
        for i, source in enumerate(sources)
    ]
    futures = {}
    for b in range(blocks):
        pieces = [client.submit(operator.getitem, s, b, pure=False) for s in splits]
        lo, hi = int(block_edges[b]), int(block_edges[b + 1])
        futures[client.submit(train_block, lo, hi, learner, *pieces, pure=False)] = b
    models: list[list[Any]] = [[] for _ in range(blocks)]
    for future in as_completed(futures):
        b = futures[future]
        models[b] = future.result()
        if on_progress is not None:
            on_progress(len(models[b]))
    for s in splits:
        s.release()
    return Ensemble([m for block in models for m in block], classes)
