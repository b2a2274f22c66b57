"""A private CDF from noisy counts on a pruned b-ary tree over the domain: every threshold query of an
integer feature answered from a synthetic weighted table (``pcqr sanitize --algorithm cdf``; issue 31).
The practitioner's sanitizer for threshold queries, beside Beimel-Nissim-Stemmer's SanThresholds
(:mod:`.san_thresholds`), which needs millions of rows for an error near 0.1.

The tree. The public domain X = [lo, hi] of N values, offsets x - lo in [0, N), is cut into a b-ary
tree (b = 2^BRANCH_BITS = 16) of L = ceil(log_b N) levels: a node of level l (1..L) is the block of
offsets sharing their top l digits in base b; level L holds single values. Rows are taken at ceil(x)
clipped to X (as SanThresholds takes them: 'x <= theta' is then exact for every integer theta of
[lo, hi - 1]), so every row is in exactly one node of each level and the root's count is m.

The release, level by level (Hay, Rastogi, Miklau and Suciu 2010's hierarchical histogram, measured
top-down instead of densely, because a dense tree over 2^32 values has 2^33 nodes):

1. the root is expanded (its count, m, is public);
2. at level l, every child of an expanded node of level l - 1 is measured: its count plus
   Z ~ DLap(s), exact (OpenDP's ``make_laplace`` on the vector of the level's counts, through
   :class:`pcqr.pipeline.privacy.noise.SecureNoise`); children wholly outside X are public zeros
   and are not measured;
3. a measured node of level l < L is expanded when its noisy count is at least ``expand_at`` (4 s),
   at most ``max_expanded`` (2^16) of them, the largest first: a function of released values only.

Privacy (replace-one neighbours, m public). One replaced row leaves one node of each level and enters
one: a level's count vector moves by at most 2 in L1, whatever set of nodes is measured. The set
measured at level l is a function of the released counts of level l - 1, so level l is the Laplace
mechanism on a count vector of L1 sensitivity 2 chosen adaptively: (2/s)-DP (Dwork-Roth Thm 3.6 for
discrete Laplace, Canonne-Kamath-Steinke 2020; OpenDP's ``make_laplace`` map gives the same 2/s), and
the L levels compose adaptively to (2L/s)-DP (basic composition, Dwork-Roth Thm 3.16: tight for pure
eps). s = 2L/eps, rounded up so that 2L/s <= eps exactly. Pure eps-DP: delta = 0, with no
stability threshold: the nodes measured are public once their parents' noisy counts are, so a node
with no row is measured like any other, and nothing is released only because it was seen.

The table (post-processing of the noisy counts, :func:`synthetic_cdf`): top-down consistency (each
expanded node's children are shifted equally so they sum to the parent's estimate; Hay et al.'s
second pass), the unexpanded measured nodes (the tree's leaves) in order, the running sums made
monotone (a running maximum, clipped to [0, m]: it never moves the estimate at a leaf's end further
from the true CDF, which is monotone), and each leaf's mass placed at its middle value.

Error of a threshold query 'x <= theta': the noise of at most (b - 1) nodes a level (after
consistency: :meth:`CdfParameters.noise_sd`), plus, when theta falls inside a leaf wider than one
value, part of that leaf's mass (below ``expand_at`` plus its noise, unless the cap stopped it).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.mechanisms.adist import noise_scale
from pcqr.pipeline.mechanisms.integer_domain import Domain, ceiling_counts, merge_counts
from pcqr.pipeline.privacy.noise import NoiseSource
from pcqr.pipeline.privacy.opendp_constructors import dp_names
from pcqr.pipeline.privacy.subsamp import check_epsilon, delta_certificate

#: log2 of the branching factor b (Qardaji, Yang and Li 2013: b near 16 minimises range-query error).
BRANCH_BITS = 4
#: A measured node is expanded when its noisy count is at least this many noise scales.
EXPAND_SCALES = 4
#: At most this many nodes are expanded at one level (the largest noisy counts): 2^20 measured a level.
MAX_EXPANDED = 1 << 16
#: The largest noise scale (2^52): the consistency step computes in float64, exact for integers to 2^53.
MAX_SCALE = float(2**52)
#: Replace-one moves one row out of one node and into another, at every level.
LEVEL_SENSITIVITY = 2

#: count_level(level, expanded parents' ids) -> (ids, counts) of the level's nonzero children of them.
LevelCounter = Callable[[int, np.ndarray], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class CdfParameters:
    """The request eps, m (public), the domain, the tree's shape and the noise scale per node."""

    epsilon: float
    rows: int
    domain: Domain
    branch_bits: int
    levels: int
    scale: float
    expand_at: float
    max_expanded: int

    @classmethod
    def create(cls, epsilon: float, rows: int, domain: Domain, branch_bits: int = BRANCH_BITS,
               expand_at: float | None = None, max_expanded: int = MAX_EXPANDED) -> CdfParameters:
        """L = ceil(bits(N - 1) / branch_bits) levels and s = 2L/eps; ``expand_at`` (default 4 s) and
        ``max_expanded`` shape the tree only (utility and work, not privacy)."""
        check_epsilon(epsilon)
        levels = max(1, math.ceil((domain.size - 1).bit_length() / branch_bits))
        if LEVEL_SENSITIVITY * levels / epsilon > MAX_SCALE:
            least = LEVEL_SENSITIVITY * levels / MAX_SCALE
            raise PcqrError(f"--epsilon {epsilon:g}: the tree's noise scale 2L/eps would pass 2^52 rows, where a count "
                            f"and its noise are no longer exact as floats; --epsilon must be at least {least * 1.001:.3g}")
        if rows < 1:
            raise PcqrError("--algorithm cdf needs at least one private row")
        levels = max(1, math.ceil((domain.size - 1).bit_length() / branch_bits))
        scale = noise_scale(epsilon, LEVEL_SENSITIVITY * levels)
        return cls(epsilon, rows, domain, branch_bits, levels, scale,
                   EXPAND_SCALES * scale if expand_at is None else float(expand_at), max_expanded)

    @property
    def branching(self) -> int:
        return 1 << self.branch_bits

    def shift(self, level: int) -> int:
        """Bits below a node of ``level``: its id is offset >> shift."""
        return self.branch_bits * (self.levels - level)

    def certificate(self) -> dict[str, float]:
        """Pure eps-DP: proven_epsilon = 2L/s <= eps, no delta term."""
        return delta_certificate(self.epsilon, {})

    def opendp_epsilon(self) -> float:
        """OpenDP 0.16's map of ``make_laplace`` at scale s for an L1 move of 2, times L levels."""
        dp = dp_names()
        measurement = dp.m.make_laplace(dp.vector_domain(dp.atom_domain(T="i64")), dp.l1_distance(T="i64"),
                                        scale=self.scale)
        return float(measurement.map(LEVEL_SENSITIVITY)) * self.levels

    def noise_sd(self) -> float:
        """The standard deviation, in rows, of the noise in the estimate of a threshold at a leaf's
        end along a path expanded to level L, worst over the children taken at each level: top-down
        consistency gives a level's j left children of an estimate with error e the error
        (j/b) e + sum_{i<j} Z_i - (j/b) sum_i Z_i, of variance (j/b)^2 V + Var(Z) j (b - j) / b
        (the root, m, is exact: V starts at 0)."""
        q, gap = math.exp(-1 / self.scale), -math.expm1(-1 / self.scale)  # gap = 1 - q, exact for a large s
        b, var_z = self.branching, 2 * q / gap**2  # Var DLap(s)
        variance = 0.0
        for _ in range(self.levels):
            variance = max((j / b) ** 2 * variance + var_z * j * (b - j) / b for j in range(1, b + 1))
        return math.sqrt(variance)

    def to_dict(self) -> dict[str, Any]:
        return {"branching": self.branching, "levels": self.levels, "noise_scale": self.scale,
                "expand_at": self.expand_at, "max_expanded_per_level": self.max_expanded,
                "threshold_noise_sd": self.noise_sd(), "epsilon_opendp_map": self.opendp_epsilon()}


@dataclass
class TreeRelease:
    """What the mechanism released: per level, the measured node ids (sorted) and their noisy counts.
    Everything after it (:func:`synthetic_cdf`) is post-processing of this alone."""

    params: CdfParameters
    ids: list[np.ndarray] = field(default_factory=list)
    noisy: list[np.ndarray] = field(default_factory=list)


def children(params: CdfParameters, level: int, parents: np.ndarray) -> np.ndarray:
    """The ids (sorted) of the children at ``level`` of the given parents (sorted) that meet the domain:
    a child starting at an offset >= N holds no value of X (a public zero) and is left out. (Offsets
    are below 2^54, :class:`Domain`'s limit, so a start fits uint64.)"""
    b = params.branching
    ids = (parents.astype(np.uint64)[:, None] * np.uint64(b) + np.arange(b, dtype=np.uint64)[None, :]).ravel()
    return ids[(ids << np.uint64(params.shift(level))) < np.uint64(params.domain.size)]


def expanded(params: CdfParameters, ids: np.ndarray, noisy: np.ndarray) -> np.ndarray:
    """The measured nodes expanded: noisy count >= expand_at, the max_expanded largest (ties: the
    lower id), sorted by id. A function of released values only."""
    eligible = np.flatnonzero(noisy >= params.expand_at)
    if eligible.size > params.max_expanded:
        order = np.lexsort((ids[eligible], -noisy[eligible]))
        eligible = np.sort(eligible[order[: params.max_expanded]])
    return ids[eligible]


def hierarchical_cdf(count_level: LevelCounter, params: CdfParameters, noise: NoiseSource) -> TreeRelease:
    """The mechanism: level by level, the exact counts of the expanded nodes' children (from the
    workers, ``count_level``), their noisy counts released, the next expansion chosen from them."""
    release = TreeRelease(params)
    parents = np.zeros(1, dtype=np.uint64)  # the root, expanded: its count m is public
    for level in range(1, params.levels + 1):
        if not parents.size:
            break
        measured = children(params, level, parents)
        seen_ids, seen_counts = count_level(level, parents)
        exact = np.zeros(measured.size, dtype=np.int64)
        if seen_ids.size:
            at = np.searchsorted(measured, seen_ids)
            if (at >= measured.size).any() or (measured[np.minimum(at, measured.size - 1)] != seen_ids).any():
                raise ValueError(f"level {level}: counted nodes that are not children of the expanded ones")
            exact[at] = seen_counts
        noisy = noise.laplace_mechanism(exact, params.scale)
        release.ids.append(measured)
        release.noisy.append(noisy)
        parents = expanded(params, measured, noisy) if level < params.levels else np.zeros(0, np.uint64)
    return release


def synthetic_cdf(release: TreeRelease) -> list[tuple[int, float]]:
    """The synthetic table from the released counts alone (module docstring): (value, share) pairs,
    sorted, shares summing to 1, each leaf's mass at its middle value; zero masses left out."""
    params = release.params
    bits = np.uint64(params.branch_bits)
    parent_ids, parent_estimates = np.zeros(1, np.uint64), np.array([float(params.rows)])  # the root: m, public
    firsts, lasts, values = [], [], []
    for level, (ids, noisy) in enumerate(zip(release.ids, release.noisy), start=1):
        parent = np.searchsorted(parent_ids, ids >> bits)  # every measured node's parent was expanded
        sums = np.bincount(parent, weights=noisy.astype(np.float64), minlength=parent_ids.size)
        sizes = np.maximum(np.bincount(parent, minlength=parent_ids.size), 1)
        adjusted = noisy + ((parent_estimates - sums) / sizes)[parent]  # children shifted to sum to the parent
        later = release.ids[level] >> bits if level < len(release.ids) else np.zeros(0, np.uint64)
        grown = np.isin(ids, later)
        shift = np.uint64(params.shift(level))
        leaf_ids = ids[~grown]
        firsts.append(leaf_ids << shift)
        lasts.append(np.minimum(((leaf_ids + np.uint64(1)) << shift) - np.uint64(1), np.uint64(params.domain.size - 1)))
        values.append(adjusted[~grown])
        parent_ids, parent_estimates = ids[grown], adjusted[grown]
    first, last, value = np.concatenate(firsts), np.concatenate(lasts), np.concatenate(values)
    order = np.argsort(first, kind="stable")
    running = np.clip(np.maximum.accumulate(np.cumsum(value[order])), 0.0, float(params.rows))
    running[-1] = float(params.rows)  # every row is in the domain (clipped): the CDF ends at m, public
    masses = np.diff(np.concatenate([[0.0], running])) / params.rows
    middle = (first[order] + (last[order] - first[order]) // np.uint64(2)).astype(np.int64) + params.domain.lo
    kept = masses > 0
    return list(zip(middle[kept].tolist(), masses[kept].tolist()))


def offset_counts(X: np.ndarray, domain: Domain) -> tuple[np.ndarray, np.ndarray]:
    """Worker task: the part's (offsets ceil(x) - lo, clipped to the domain, as uint64; counts), sorted."""
    values, counts = ceiling_counts(X, domain)
    return (values - domain.lo).astype(np.uint64), counts


def level_counts(part: tuple[np.ndarray, np.ndarray], parents: np.ndarray, shift: int,
                 branch_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Worker task: the part's nonzero counts (ids sorted) of the nodes below ``shift`` bits whose parent
    is one of ``parents`` (sorted)."""
    offsets, counts = part
    ids = offsets >> np.uint64(shift)
    if not parents.size or not ids.size:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64)
    up = ids >> np.uint64(branch_bits)
    at = np.minimum(np.searchsorted(parents, up), parents.size - 1)
    keep = parents[at] == up
    ids, counts = ids[keep], counts[keep]
    if not ids.size:
        return ids, counts
    starts = np.flatnonzero(np.concatenate([[True], ids[1:] != ids[:-1]]))
    return ids[starts], np.add.reduceat(counts, starts)


def local_counter(offsets: np.ndarray, counts: np.ndarray, params: CdfParameters) -> LevelCounter:
    """A :data:`LevelCounter` over counts held in this process (tests, benchmarks)."""
    part = (np.asarray(offsets, dtype=np.uint64), np.asarray(counts, dtype=np.int64))
    return lambda level, parents: level_counts(part, parents, params.shift(level), params.branch_bits)


def cluster_counter(client: Any, part_counts: list[Any], params: CdfParameters) -> LevelCounter:
    """A :data:`LevelCounter` whose counting runs on the workers that hold the parts' offset counts."""
    def count_level(level: int, parents: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        [shared] = client.scatter([parents], broadcast=True)
        pieces = [client.submit(level_counts, part, shared, params.shift(level), params.branch_bits, pure=False)
                  for part in part_counts]
        return client.submit(merge_counts, *pieces, pure=False).result()

    return count_level
