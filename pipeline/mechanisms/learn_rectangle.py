"""A proper private learner for axis-aligned boxes in d dimensions over a public integer domain
(Beimel-Nissim-Stemmer, papers/002 section 3.5, Theorem 3.22; the construction is ours: the paper
sketches one through its threshold sanitizer, after Kearns' statistical-query learner. The
construction and its proof are in docs/privacy.md, Mechanism 13).

The class: 'lo_i < x_i <= hi_i for every i' (:class:`pcqr.pipeline.hypotheses.box.BoxHypothesis`),
edges at the integers of the public domain [lo, hi] (``--domain``, never read from the rows; the
same for every feature). The learner, on m labelled rows, with t = floor(alpha m / (4 d)):

* for each feature i, the positive rows' counts by c = ceil(x_i) (clipped to [lo - 1, hi + 1]);
  P_i(theta) = the positives with x_i <= theta, non-decreasing, N_i(theta) = positives - P_i(theta);
* the low edge: RecConcave (:mod:`pcqr.pipeline.mechanisms.rec_concave`) over theta in [lo - 1, hi]
  on Q(theta) = min(P_i(theta), 2t - P_i(theta)), promise t, approximation 1/2: a theta that cuts
  between t/2 and 3t/2 positives off the low side (the t-th smallest positive is a solution of
  quality t); the high edge: the same on min(N_i(theta), 2t - N_i(theta));
* release the box of the 2d edges (an edge RecConcave returns bottom for is set to hi: the low side
  empties the box, the high side is 'no cut').

Why it learns (realizable sample, target box R): an edge of quality > 0 cuts at least one positive,
so it lies strictly inside R's edge on that side: the released box is inside R (no false positive
on any input), and it misses at most 2d * 3t/2 <= 3 alpha m / 4 positives of the sample.

Sensitivity: replacing one row moves each P_i and N_i by at most 1, so each Q by at most 1
(a min of sensitivity-1 functions). Privacy: the 2d runs of RecConcave on one database, their
3N - 2 mechanisms each, certified together by KOV's composition (``RecConcaveParameters.create(...,
runs=2d)``): (eps, delta)-DP.
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Sequence

import numpy as np

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.hypotheses.box import BoxHypothesis
from pcqr.pipeline.mechanisms.integer_domain import Domain, merge_counts
from pcqr.pipeline.mechanisms.rec_concave import RecConcaveParameters, StepQuality, rec_concave
from pcqr.pipeline.privacy.noise import NoiseSource

Counts = tuple[np.ndarray, np.ndarray]


def cut_size(rows: int, dimensions: int, alpha: float) -> int:
    """t = floor(alpha m / (4 d)): the positives each edge aims to cut off; refused below 1."""
    t = math.floor(alpha * rows / (4 * dimensions))
    if t < 1:
        raise PcqrError(f"--alpha {alpha:g}: the rectangle learner on {dimensions} features needs at least "
                        f"{math.ceil(4 * dimensions / alpha):,} rows (alpha m / 4d >= 1); the data has {rows:,}")
    return t


def positive_axis_counts(rows: tuple[np.ndarray, np.ndarray], domain: Domain) -> list[Counts]:
    """Worker task: for each feature, (values, counts) of the positive rows by ceil(x) clipped to
    [lo - 1, hi + 1] ('x <= theta' iff ceil(x) <= theta for every integer theta)."""
    X, y = rows
    positives = np.asarray(X, dtype=np.float64)[np.asarray(y) == 1]
    pieces = []
    for i in range(positives.shape[1]):
        c = np.clip(np.ceil(positives[:, i]), domain.lo - 1, domain.hi + 1).astype(np.int64)
        values, counts = np.unique(c, return_counts=True)
        pieces.append((values, counts.astype(np.int64)))
    return pieces


def merge_axis_counts(*pieces: list[Counts]) -> list[Counts]:
    """The parts' counts summed, per feature."""
    return [merge_counts(*[p[i] for p in pieces]) for i in range(len(pieces[0]))] if pieces else []


def cut_quality(counts: Counts, domain: Domain, target: int, low_edge: bool) -> StepQuality:
    """Over the indices j in [0, hi - lo + 1] (theta = lo - 1 + j): min(C, 2t - C) with C the
    positives at or below theta (low edge) or above it (high edge)."""
    values, copies = counts
    base = domain.lo - 1
    total = int(copies.sum())
    below = int(copies[values <= base].sum())  # P(lo - 1)
    starts, at_or_below = [0], [below]
    for v, n in zip(values.tolist(), copies.tolist()):
        if domain.lo <= v <= domain.hi:
            starts.append(v - base)
            at_or_below.append(at_or_below[-1] + n)
    cut = at_or_below if low_edge else [total - p for p in at_or_below]
    return StepQuality(domain.hi - base, tuple(starts), tuple(min(c, 2 * target - c) for c in cut))


def learn_rectangle(counts: Sequence[Counts], domain: Domain, params: RecConcaveParameters, alpha: float,
                    noise: NoiseSource) -> tuple[BoxHypothesis, int]:
    """(the released box over features 0..d-1, how many of its 2d edges RecConcave released)."""
    dimensions = len(counts)
    target = cut_size(params.rows, dimensions, alpha)
    lows, highs, released = [], [], 0
    for axis in counts:
        edges = []
        for low_edge in (True, False):
            index = rec_concave(cut_quality(axis, domain, target, low_edge), Fraction(target), Fraction(1, 2), params,
                                noise)
            released += index is not None
            edges.append(domain.hi if index is None else domain.lo - 1 + index)
        lows.append(float(edges[0]))
        highs.append(float(edges[1]))
    return BoxHypothesis(tuple(range(dimensions)), tuple(lows), tuple(highs)), released


def rows_needed(params: RecConcaveParameters, dimensions: int, alpha: float, beta: float) -> int:
    """m for the guarantee of docs/privacy.md Mechanism 13: uniform convergence over boxes (VC 2d,
    the paper's Theorem 2.14 at alpha/4, beta/2) and every edge's promise t >= Lemma 3.14's r at
    approximation 1/2 and failure beta/(4d) (Lemma 3.14 fails with 2 beta' N)."""
    uniform = 50 * 2 * dimensions / (alpha / 4) ** 2 * math.log(1 / ((alpha / 4) * (beta / 2)))
    promise = params.promise_needed(0.5, beta / (8 * dimensions * params.depth))
    return math.ceil(max(uniform, 4 * dimensions / alpha * (promise + 1)))


def box_record(hypothesis: BoxHypothesis, released: int, features: Sequence[str], domain: Domain,
               params: RecConcaveParameters, alpha: float, beta: float, private: bool) -> dict[str, Any]:
    """The released model file's record (``pcqr predict`` serves it)."""
    from pcqr.pipeline.models.released import model_record
    from pcqr.pipeline.privacy.limits import show_count

    dimensions = len(features)
    return model_record(hypothesis, list(features), private, **{
        "class": "box", "algorithm": "rectangle",
        "mechanism": "axis-aligned box learner via 2d runs of RecConcave (Beimel-Nissim-Stemmer Theorem 3.22; "
                     "construction: docs/privacy.md Mechanism 13)",
        "released": f"{released} of {2 * dimensions} edges (the others at the domain's top)",
        "epsilon": params.epsilon, "delta": params.delta, "domain": domain.describe(), "domain_size": domain.size,
        "private_rows": params.rows, "dimensions": dimensions, "cut_target": cut_size(params.rows, dimensions, alpha),
        "recursion_depth": params.depth, "mechanisms": params.mechanisms, "eps0": params.eps0, "alpha": alpha,
        "beta": beta, "rows_needed": show_count(rows_needed(params, dimensions, alpha, beta)), **params.certificate(),
    })
