"""POINT_d's proper private learner via A_dist (Beimel-Nissim-Stemmer, papers/002 section 3.1, Lemma 3.2).

POINT over a public integer domain X = [lo, hi] (``--domain lo:hi``, given by the user, never read
from the rows): c_j(x) = 1 iff x = j, on one feature column. The learner:

1. q(S, j) = the number of private rows (x, 1) with x = j, for every j in X (a row whose value is
   not an integer of X, or whose label is 0, counts for no candidate);
2. A_dist (:mod:`pcqr.pipeline.mechanisms.adist`) on q: release j = the best candidate (ties to the
   smallest value; unseen values of X have quality 0) when its distance to instability passes the
   noisy test;
3. on bottom, the all-zero hypothesis (the paper's Remark 3.3: proper for POINT_d plus the all-zero
   concept; the lemma's random c_i needs 2^d >= 1/(alpha beta) and is no better).

Sensitivity: replacing one row changes at most two qualities, each by 1 (the caveat A_dist handles).
Guarantee: (eps, delta)-DP, A_dist's certificate (Prop 2.26 (i) with the gap's sensitivity counted);
the domain and its size are public. The qualities are computed on the workers (each its parts'
counts of positive values) and summed on the driver: an aggregate, never a row.

Utility (Lemma 3.2, our constants): if D(j) > alpha, m rows hold at least alpha m / 2 copies of
(j, 1) with probability 1 - exp(-alpha m / 8), and every other candidate has quality 0 in a
realizable sample; A_dist then releases j with probability 1 - beta/2 once alpha m / 2 >=
2 (stable_distance(beta/2) + 1). :func:`rows_needed` is the m that meets both.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from pcqr.pipeline.hypotheses.point import PointHypothesis
from pcqr.pipeline.mechanisms.adist import AdistParameters, propose_test_release
from pcqr.pipeline.mechanisms.integer_domain import Domain, value_counts
from pcqr.pipeline.privacy.noise import NoiseSource

def positive_counts(rows: tuple[np.ndarray, np.ndarray], domain: Domain) -> tuple[np.ndarray, np.ndarray]:
    """Worker task: (values, counts) of the rows labelled 1 whose feature is an integer of ``domain``
    (``rows`` one part's (X, y), one feature column)."""
    X, y = rows
    return value_counts(np.asarray(X)[np.asarray(y) == 1], domain)


def best_point(values: np.ndarray, counts: np.ndarray, domain: Domain) -> tuple[int, int]:
    """(the best candidate j, q(j) minus the second best's) over the whole domain, from the seen
    values' counts (all >= 1): the values not seen have quality 0; ties go to the smallest value.
    The domain has at least two values (:meth:`Domain.parse`)."""
    if values.shape[0] == 0:
        return domain.lo, 0
    order = np.lexsort((values, -counts))  # the highest count first, then the smallest value
    second = int(counts[order[1]]) if values.shape[0] > 1 else 0  # an unseen value scores 0
    return int(values[order[0]]), int(counts[order[0]]) - second


def learn_point(counts: tuple[np.ndarray, np.ndarray], domain: Domain, params: AdistParameters,
                noise: NoiseSource) -> tuple[PointHypothesis, bool]:
    """(the released hypothesis, whether A_dist released a point) from the summed positive counts."""
    top, gap = best_point(*counts, domain)
    chosen = propose_test_release(top, gap, params, noise)
    return PointHypothesis(0, None if chosen is None else float(chosen)), chosen is not None


def rows_needed(params: AdistParameters, alpha: float, beta: float) -> int | float:
    """m for Lemma 3.2's guarantee with our constants (module docstring): alpha m / 2 >=
    2 (stable_distance(beta/2) + 1) and exp(-alpha m / 8) <= beta/2."""
    copies = 2 * (params.stable_distance(beta / 2) + 1)
    needed = max(2 * copies / alpha, 8 / alpha * (math.log(2) - math.log(beta)))
    return math.ceil(needed) if math.isfinite(needed) else math.inf


def paper_rows(epsilon: float, delta: float, alpha: float, beta: float) -> int | float:
    """Lemma 3.2's m = 8/(alpha eps) ln(4/(beta delta)) as its proof instantiates it (gap sensitivity 1;
    inf beyond a float)."""
    value = 8 / (alpha * epsilon) * (math.log(4) - math.log(beta) - math.log(delta))
    return math.ceil(value) if math.isfinite(value) else math.inf


def point_record(hypothesis: PointHypothesis, released: bool, features: Sequence[str], private_rows: int,
                 domain: Domain, params: AdistParameters, alpha: float, beta: float, private: bool,
                 **provenance: Any) -> dict[str, Any]:
    """The released model file's record (``pcqr predict`` serves it)."""
    from pcqr.pipeline.models.released import model_record
    from pcqr.pipeline.privacy.limits import show_count

    return model_record(hypothesis, list(features), private, **{
        "class": "point", "algorithm": "point",
        "mechanism": "POINT_d learner via A_dist (Beimel-Nissim-Stemmer, Lemma 3.2)",
        "released": "point" if released else "bottom (the all-zero hypothesis)",
        "epsilon": params.epsilon, "delta": params.delta, "domain": domain.describe(), "domain_size": domain.size,
        "private_rows": private_rows, "noise_scale": params.scale, "adist_threshold": params.threshold,
        "alpha": alpha, "beta": beta, "rows_needed": show_count(rows_needed(params, alpha, beta)),
        "paper_rows": show_count(paper_rows(params.epsilon, params.delta, alpha, beta)),
        **params.certificate(), **provenance,
    })
