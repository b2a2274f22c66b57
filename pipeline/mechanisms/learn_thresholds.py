"""THRESH_d's proper private learner via RecConcave (Beimel-Nissim-Stemmer, papers/002 section 3.4,
Algorithm LearnThresholds, Theorem 3.18).

THRESH over a public integer domain X = [lo, hi] (``--domain lo:hi``, given by the user, never read
from the rows), on one feature: the candidates are pcqr's threshold hypotheses 'x > theta' (up) or
'x <= theta' (down) for the integers theta in [lo - 1, hi]: theta = lo - 1 labels every value of X
as 'above', theta = hi none. The learner:

1. Q(S, theta) = the rows the threshold labels correctly (Example 3.8: quasi-concave on a sample
   some threshold labels correctly, a sensitivity-1 count under replace-one);
2. RecConcave (:mod:`pcqr.pipeline.mechanisms.rec_concave`) on the range [0, hi - lo + 1] (index j
   is theta = lo - 1 + j), promise r = m, approximation alpha/2 (the paper's alpha-hat);
3. the threshold at the returned index; on bottom (both of a level's A_dist tests refused), the
   threshold hi: up, it labels every value of X 0 (the all-zero function), down every value 1.

Privacy: RecConcave's certificate ((eps, delta), Lemma 3.12 with KOV's composition; the depth N is
a public function of the domain's size). The workers count their parts' rows by ceil(x) (clipped
to [lo - 1, hi + 1]: beyond, every candidate labels the row alike) and label; the driver sums the
counts and builds Q as a step function: the mechanism never walks the domain.

Utility (Theorem 3.18's proof with our parameters, :func:`rows_needed`): E1 (every threshold's
empirical error within alpha/2 of its true error) for m >= 200/alpha^2 ln(4/(alpha beta)) (VC = 1,
Theorem 2.14), and E2 (RecConcave's output at least (1 - alpha/2) m correct) for m >= Lemma 3.14's
promise at alpha/2, beta/2.
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Sequence

import numpy as np

from pcqr.pipeline.hypotheses.threshold import ThresholdHypothesis
from pcqr.pipeline.mechanisms.integer_domain import Domain, merge_counts
from pcqr.pipeline.mechanisms.rec_concave import RecConcaveParameters, StepQuality, rec_concave
from pcqr.pipeline.privacy.noise import NoiseSource

Counts = tuple[np.ndarray, np.ndarray]


def threshold_counts(rows: tuple[np.ndarray, np.ndarray], domain: Domain) -> tuple[Counts, Counts]:
    """Worker task: ((values, counts) of the positive rows, of the negative rows) by c = ceil(x)
    clipped to [lo - 1, hi + 1] ('x > theta' iff c > theta for every integer theta)."""
    X, y = rows
    c = np.clip(np.ceil(np.asarray(X, dtype=np.float64)[:, 0]), domain.lo - 1, domain.hi + 1).astype(np.int64)
    labels = np.asarray(y)
    pieces = []
    for label in (1, 0):
        values, counts = np.unique(c[labels == label], return_counts=True)
        pieces.append((values, counts.astype(np.int64)))
    return pieces[0], pieces[1]


def merge_threshold_counts(*pieces: tuple[Counts, Counts]) -> tuple[Counts, Counts]:
    """The parts' counts summed, per label."""
    return merge_counts(*[p[0] for p in pieces]), merge_counts(*[p[1] for p in pieces])


def threshold_quality(positives: Counts, negatives: Counts, domain: Domain, up: bool = True) -> StepQuality:
    """Q over the indices j in [0, hi - lo + 1] (theta = lo - 1 + j): the rows 'x > theta' (up) or
    'x <= theta' (down) labels correctly, as a step function of the counts by ceil(x)."""
    last = domain.hi - domain.lo + 1
    base = domain.lo - 1
    pos_values, pos_counts = positives
    neg_values, neg_counts = negatives
    rows = int(pos_counts.sum()) + int(neg_counts.sum())
    # at theta = lo - 1: a positive is right iff c > lo - 1, a negative iff c <= lo - 1
    start = int(pos_counts[pos_values > base].sum()) + int(neg_counts[neg_values <= base].sum())
    change: dict[int, int] = {}  # at theta = c (c in [lo, hi]) the rows with that c flip to 'not above'
    for seen, copies, sign in ((pos_values, pos_counts, -1), (neg_values, neg_counts, +1)):
        for v, n in zip(seen.tolist(), copies.tolist()):
            if domain.lo <= v <= domain.hi:
                change[v - base] = change.get(v - base, 0) + sign * n
    starts, values = [0], [start]
    for j in sorted(change):
        if change[j]:
            starts.append(j)
            values.append(values[-1] + change[j])
    if not up:
        values = [rows - v for v in values]
    return StepQuality(last, tuple(starts), tuple(values))


def learn_thresholds(counts: tuple[Counts, Counts], domain: Domain, params: RecConcaveParameters, alpha: float,
                     noise: NoiseSource, up: bool = True) -> tuple[ThresholdHypothesis, bool]:
    """(the released threshold, whether RecConcave released one) from the summed counts."""
    quality = threshold_quality(*counts, domain, up)
    index = rec_concave(quality, Fraction(params.rows), Fraction(alpha) / 2, params, noise)
    theta = domain.hi if index is None else domain.lo - 1 + index
    return ThresholdHypothesis(0, float(theta), up), index is not None


def rows_needed(params: RecConcaveParameters, alpha: float, beta: float) -> float:
    """m for Theorem 3.18's guarantee with our parameters: max(200/alpha^2 ln(4/(alpha beta)),
    Lemma 3.14's promise at alpha/2, beta/2)."""
    uniform = 200 / alpha**2 * math.log(4 / (alpha * beta))
    return math.ceil(max(uniform, params.promise_needed(alpha / 2, beta / 2)))


def threshold_record(hypothesis: ThresholdHypothesis, released: bool, features: Sequence[str], domain: Domain,
                     params: RecConcaveParameters, alpha: float, beta: float, private: bool,
                     **provenance: Any) -> dict[str, Any]:
    """The released model file's record (``pcqr predict`` serves it)."""
    from pcqr.pipeline.models.released import model_record
    from pcqr.pipeline.privacy.limits import show_count

    return model_record(hypothesis, list(features), private, **{
        "class": "threshold", "algorithm": "learn-thresholds",
        "mechanism": "LearnThresholds via RecConcave (Beimel-Nissim-Stemmer, Theorem 3.18)",
        "released": "threshold" if released else "bottom (the threshold at the domain's top)",
        "epsilon": params.epsilon, "delta": params.delta, "domain": domain.describe(), "domain_size": domain.size,
        "private_rows": params.rows, "recursion_depth": params.depth, "mechanisms": params.mechanisms,
        "eps0": params.eps0, "alpha": alpha, "beta": beta,
        "rows_needed": show_count(rows_needed(params, alpha, beta)), **params.certificate(), **provenance,
    })
