"""A_PAP: private query release assisted by public data (Bassily, Cheu, Moran, Nikolov, Ullman,
Wu 2020 = papers/003, Algorithm 3, Theorem 10; ALGORITHMS.md section 7).

1. H_tilde = one member of the class per dichotomy on the distinct PUBLIC points (the
   enumeration of :mod:`pcqr.pipeline.hypotheses`, the same cover as A_SSPP).
2. X_tilde = the representative domain of H_tilde, from the public points only
   (:mod:`pcqr.pipeline.hypotheses.representatives`).
3. Each private row is mapped to its representative; workers build the histogram x over
   X_tilde and keep it. PMW (:mod:`pcqr.pipeline.mechanisms.pmw`) with (alpha/2, beta/2, eps, delta)
   answers every member of H_tilde, in index order.
4. G(h) = the answer of the member of H_tilde that labels the public points as h does
   (:func:`public_key`; ``pcqr release-answer``).

Privacy: (eps, delta)-DP w.r.t. the private rows for every public dataset (Theorem 10's
proof): steps 1-2 read only public data; neighbouring private datasets map to histograms that
differ in one row; PMW is (eps, delta)-DP (certified per run); step 4 is post-processing.

On the cluster: the query matrix (H_tilde x X_tilde, 0/1) is built in shards by tasks and
stays on the workers, as does x; the driver sends the synthetic distribution A^t (public) and
gets back, per stretch of queries, their values on A^t and their private counts, which only
the PMW loop sees.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from pcqr.pipeline.data.cluster import hold
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.hypotheses.representatives import RepresentativeDomain, representative_domain
from pcqr.pipeline.mechanisms.exponential import enumeration_shards, sum_arrays
from pcqr.pipeline.mechanisms.pmw import PMWParameters, PMWResult, private_multiplicative_weights
from pcqr.pipeline.mechanisms.sspp import enumerate_public, enumeration_size
from pcqr.pipeline.privacy.noise import NoiseSource

#: Largest query matrix (members x representatives) we build, over all workers.
MAX_MATRIX = 1 << 32
_SHARD_CELLS = 1 << 26  # entries of one shard's matrix (64 MB of uint8)
_CHUNK_ROWS = 1024


def public_cells(domain: RepresentativeDomain, public: np.ndarray) -> np.ndarray:
    """The classes of X_tilde holding a public point, sorted (each public point is its class's
    representative)."""
    cells = np.sort(domain.index(public))  # then the first of each run: numpy 2.4's np.unique hashes
    first = np.ones(cells.size, dtype=bool)  # integers, 13x slower at 10^6 cells
    first[1:] = cells[1:] != cells[:-1]
    return cells[first]


def public_key(labels: np.ndarray) -> str:
    """The key of a labelling of the public points (in :func:`public_cells` order)."""
    return hashlib.sha256(np.packbits(np.asarray(labels, dtype=np.uint8)).tobytes()).hexdigest()


def query_matrix(enumeration: Any, shard: Any, points: np.ndarray) -> np.ndarray:
    """Worker: the members ``shard`` of H_tilde evaluated on every representative (uint8)."""
    rows = [enumeration.hypothesis(i).predict(points) for i in range(shard.start, shard.stop)]
    return np.asarray(rows, dtype=np.uint8).reshape(shard.stop - shard.start, points.shape[0])


def describe(enumeration: Any, shard: Any, matrix: np.ndarray, cells: np.ndarray) -> tuple[list[dict[str, Any]], list[str]]:
    """Worker: the members' parameters and the keys of their public labellings (all public)."""
    params = [enumeration.hypothesis(i).to_dict() for i in range(shard.start, shard.stop)]
    return params, [public_key(row[cells]) for row in matrix]


def private_histogram(X: np.ndarray, domain: RepresentativeDomain) -> np.ndarray:
    """Worker: how many private rows fall in each class of X_tilde."""
    return np.bincount(domain.index(X), minlength=domain.size()).astype(np.int64)




def _values(matrix: np.ndarray, weights: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Worker: matrix[lo:hi] @ weights, in row chunks (no full float copy of the matrix)."""
    out = [matrix[a : min(hi, a + _CHUNK_ROWS)].astype(np.float64) @ weights for a in range(lo, hi, _CHUNK_ROWS)]
    return np.concatenate(out) if out else np.zeros(0)


def _counts(matrix: np.ndarray, histogram: np.ndarray, lo: int, hi: int) -> np.ndarray:
    out = [matrix[a : min(hi, a + _CHUNK_ROWS)].astype(np.int64) @ histogram for a in range(lo, hi, _CHUNK_ROWS)]
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def _row(matrix: np.ndarray, i: int) -> np.ndarray:
    return matrix[i]


class ShardedQueries:
    """A :class:`pcqr.pipeline.mechanisms.pmw.QueryMatrix` whose shards live on the workers."""

    def __init__(self, client: Any, starts: list[int], matrices: list[Any], histogram: Any) -> None:
        self.client, self.starts, self.matrices, self.histogram = client, starts, matrices, histogram

    def _pieces(self, lo: int, hi: int) -> list[tuple[Any, int, int]]:
        pieces, bounds = [], [*self.starts[1:], None]
        for matrix, start, stop in zip(self.matrices, self.starts, bounds):
            end = hi if stop is None else min(hi, stop)
            if end > max(lo, start):
                pieces.append((matrix, max(lo, start) - start, end - start))
        return pieces

    def values(self, weights: np.ndarray, lo: int, hi: int) -> np.ndarray:
        pieces = self._pieces(lo, hi)
        shared = hold(self.client, weights) if len(pieces) > 1 else weights
        futures = [self.client.submit(_values, m, shared, a, b, pure=False) for m, a, b in pieces]
        return np.concatenate(self.client.gather(futures)) if futures else np.zeros(0)

    def counts(self, lo: int, hi: int) -> np.ndarray:
        futures = [self.client.submit(_counts, m, self.histogram, a, b, pure=False) for m, a, b in self._pieces(lo, hi)]
        return np.concatenate(self.client.gather(futures)) if futures else np.zeros(0, dtype=np.int64)

    def row(self, i: int) -> np.ndarray:
        ((matrix, a, _),) = self._pieces(i, i + 1)
        return np.asarray(self.client.submit(_row, matrix, a, pure=False).result())


@dataclass
class Release:
    """The outcome of one A_PAP run (all public)."""

    params: list[dict[str, Any]]  # each member of H_tilde, in PMW order
    keys: list[str]  # their public-labelling keys
    result: PMWResult
    pmw: PMWParameters
    domain: RepresentativeDomain
    public_points: int  # distinct public points


def release_queries(
    client: Any,
    hypothesis_class: Any,
    public: np.ndarray,
    private_parts: Sequence[Any],
    rows: int,
    epsilon: float,
    delta: float,
    alpha: float,
    beta: float,
    noise: NoiseSource,
    on_progress: Callable[[int], None] | None = None,
    on_plan: Callable[[PMWParameters], None] | None = None,
    constants: str = "dwork-roth",
) -> Release:
    """Run A_PAP on the cluster. ``public`` is the public feature matrix (the driver may hold
    it); ``private_parts`` futures of the private feature matrices; ``rows`` their total (public);
    ``constants`` "dwork-roth" or "calibrated" (:meth:`PMWParameters.calibrated`)."""
    domain = representative_domain(hypothesis_class, public)
    cells = public_cells(domain, public)
    enumeration = client.submit(enumerate_public, hypothesis_class, public, pure=False)
    size = int(client.submit(enumeration_size, enumeration, pure=False).result())
    if size * domain.size() > MAX_MATRIX:
        raise PcqrError(
            f"--hypothesis {hypothesis_class.name}: the cover has {size} members and the representative "
            f"domain {domain.size()} points; their query matrix ({size * domain.size()} entries) is above "
            f"the {MAX_MATRIX} supported: use fewer public points"
        )
    params = PMWParameters.dwork_roth(epsilon, delta, alpha / 2, beta / 2, rows, domain.size(), size)
    if constants == "calibrated":
        params = params.calibrated()
    if on_plan:
        on_plan(params)
    points = hold(client, domain.points())  # recomputable if its worker dies
    shards = client.submit(enumeration_shards, enumeration, max(1, _SHARD_CELLS // domain.size()), pure=False).result()
    matrices = [client.submit(query_matrix, enumeration, s, points, pure=False) for s in shards]
    described = [client.submit(describe, enumeration, s, m, cells, pure=False) for s, m in zip(shards, matrices)]
    pieces = [client.submit(private_histogram, part, domain, pure=False) for part in private_parts]
    histogram = pieces[0] if len(pieces) == 1 else client.submit(sum_arrays, *pieces, pure=False)
    queries = ShardedQueries(client, [s.start for s in shards], matrices, histogram)
    result = private_multiplicative_weights(queries, params, noise, on_progress)
    members: list[dict[str, Any]] = []
    keys: list[str] = []
    for chunk_params, chunk_keys in client.gather(described):
        members.extend(chunk_params)
        keys.extend(chunk_keys)
    return Release(members, keys, result, params, domain, int(cells.shape[0]))
