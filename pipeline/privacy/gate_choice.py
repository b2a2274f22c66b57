"""The public rules that choose a new session's gate and its ``--labels M`` when the user gives neither
(issues 13 and 29): from public parameters only (n, eps, delta, T, m, beta, k if given), never a row.
:mod:`pcqr.pipeline.privacy.session_plan` applies them to plan a session, and ``pcqr plan``
(:mod:`pcqr.pipeline.privacy.planner`) prints them beside every gate's table, so neither imports the
other for them (issue 48: the two modules imported each other).
"""
from __future__ import annotations

import math
from typing import Any

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.privacy.subsamp import GNMAX_AGREEMENT, SubSampParameters


# --- Which gate (issue 13): each gate's noise and the vote margin a query needs -------------------

#: The share of correct answers the margin column asks for.
CORRECT = 0.95
#: The gnmax gate is recommended when its k leaves at least this many private rows per model (and
#: that k keeps a 3/4 majority's label CORRECT of the time); otherwise the guess gate, whose k is
#: smaller, with the student after the halt. Public: n, k, m, eps, delta, T only.
MIN_ROWS_PER_MODEL = 100


def _smallest_margin(correct: Any, highest: int) -> int | None:
    """The smallest vote margin g in [0, highest] with correct(g) >= CORRECT (correct rises with g),
    or None when even ``highest`` is not enough."""
    if correct(highest) < CORRECT:
        return None
    lo, hi = -1, highest
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if correct(mid) >= CORRECT else (mid, hi)
    return hi


def correct_margin(p: SubSampParameters) -> int | None:
    """The margin ct(majority) - ct(minority) at which a query gets the majority's label with
    probability >= CORRECT by a fresh instance (stability: answered; guess: g released when g agrees,
    1 - g when it disagrees, the worse of the two; gnmax: the noisy majority); None if above k."""
    from pcqr.pipeline.privacy.stability import answer_probability

    k = p.subsamples
    if p.gate == "gnmax":
        return _smallest_margin(lambda g: p.majority_kept(min(k, (k + g + 1) // 2)), k)
    scales = (p.query_noise_scale, p.threshold_noise_scale)
    if p.gate == "guess":
        return _smallest_margin(lambda g: min(answer_probability(g, p.threshold, *scales),
                                              1.0 - answer_probability(-g, p.threshold, *scales)), k)
    return _smallest_margin(lambda g: answer_probability(g, p.threshold, *scales), k)


def gate_parameters(gate: str, epsilon: float, delta: float, cutoff: int, m: int, beta: float,
                    subsamples: int | None, classes: int = 2) -> SubSampParameters:
    """A gate's certified parameters at the CLI's default profile (tight), over ``classes`` labels."""
    return SubSampParameters.create("tight", epsilon, delta, cutoff, m, beta, subsamples, None, gate, classes)


def recommend_gate(rows: int, epsilon: float, delta: float, cutoff: int, m: int, beta: float,
                   subsamples: int | None = None) -> tuple[str, str]:
    """The gate for a new realizable session, from public parameters only, and why (one clause).

    gnmax answers every one of the m queries with no halt before m, but its noise grows with sqrt(m)
    and it needs many models; so it is chosen when its k (the given one, or its default) leaves at
    least MIN_ROWS_PER_MODEL private rows per model and keeps a 3/4 majority's label CORRECT of the
    time. Otherwise the guess gate (fewer models; the student answers after its T flips). The
    stability gate is never chosen: at the same (eps, delta, T) the guess gate certifies without a
    stability term and answers every query until T disagreements.
    """
    gnmax = gate_parameters("gnmax", epsilon, delta, cutoff, m, beta, subsamples)
    k = gnmax.subsamples  # the given k, or the smallest useful one: the rule's floor
    kept = gnmax.majority_kept(math.ceil(GNMAX_AGREEMENT * k))
    if rows // k >= MIN_ROWS_PER_MODEL and kept >= CORRECT:
        used = gnmax.for_rows(rows).subsamples
        more = "" if used == k else f"; k = {used:,} used ({rows // used:,} rows each: more votes above the same noise)"
        return "gnmax", (f"k = {k:,} models leave {rows // k:,} rows each and keep a 3/4 majority's label "
                         f"{kept:.0%} of the time at sigma = {gnmax.lam:.4g}{more}: every one of m = {m:,} "
                         "queries answered")
    why = (f"only {rows // k:,} rows per model" if rows // k < MIN_ROWS_PER_MODEL
           else f"a 3/4 majority keeps its label only {kept:.0%} of the time")
    return "guess", (f"gnmax would need k = {k:,} models ({why}; it asks >= {MIN_ROWS_PER_MODEL} and "
                     f"{CORRECT:.0%}): the guess gate needs fewer, and its student answers after T flips")


# --- How many labels (issue 29, item 3): the teacher's M answers, then the student ------------------

#: ``--labels M`` candidates: a 1-2-5 ladder from LABELS_FLOOR (and m itself).
LABEL_LADDER = tuple(b * 10**e for e in range(2, 16) for b in (1, 2, 5) if b * 10**e >= 200)
#: The fewest teacher answers recommended (a stream shorter than this is answered by the teacher in
#: full): measured at eps 1 (benchmarks/labels.py), students of 50 and 100 answers were unreliable
#: (XOR: 0.50-0.86 on held-out rows; corner: 0.92 for gradient boosting at 50); of 200, within 1-3
#: points of the teachers' noise-free majority on Adult and under 1 on the corner task. Small data is
#: the exception (SMALL_DATA_LABELS): where 200 answers' k would leave too few rows a model.
LABELS_FLOOR = 200
#: A session given neither --gate nor --labels is planned for the recommended M labels only where
#: gnmax's k at M leaves at least this many rows a model (pcqr.pipeline.privacy.session_plan.choose_labels).
#: Measured (benchmarks/labels.py's cells, eps 1, Adult subsampled, 3 seeds, all 2,000 queries): at
#: 12 rows a model (n 5,000) M = 200 gave 0.759-0.786 against the guess gate's 0.758-0.763 (the
#: majority class: 0.76); at 25 (n 10^4) 0.783-0.801 against 0.765-0.774; at 82 (n 32,561)
#: 0.816-0.828 against 0.787-0.811. Below 10, unmeasured: the guess gate's fewer models keep it.
LABELS_ROWS_PER_MODEL = 10
#: recommend_labels takes the largest M whose gnmax k leaves at least subsamp.GNMAX_ROWS_PER_MODEL
#: (250) rows a model, or, for an M of at most LABELS_NEAR_FLOOR, at least LABELS_MIN_ROWS_PER_MODEL
#: (issue 48). Measured offline (benchmarks/teacher_rules.py --part labels: pcqr's k at each M, depth by
#: learners.auto_learner, 2 seeds, accuracy over a
#: stream of 2,000 queries: gnmax's noise, then the cross-validated student; benchmarks/accuracy.py
#: re-measures the defaults end to end): on a generated 140,000-row task (20 features, 12.7% positive)
#: at eps 1, M = 500 leaves 225 rows a model and scored 0.918-0.9265 against 0.8755-0.916 at M = 200
#: (250 rows) and 0.9125 at M = 1,000 (158 rows). Beyond 500 the old bar stays: at eps 2, XOR at
#: n = 10^5 scored 0.8555-0.878 at M = 500 (250 rows) but 0.82-0.8665 at M = 1,000 (215 rows), and the
#: 140,000-row task 0.9305-0.9345 with the teacher over all 2,000 (213 rows) against 0.9395-0.9415 at
#: M = 1,000 (250 rows). At 161 rows (M = 500, n = 10^5, eps 1) the corner task lost 0.4 points (kept at
#: 200); at 52 (Adult) and 6 (a 4,300-row task) M = 500 was level or 5-9 points worse.
LABELS_MIN_ROWS_PER_MODEL = 200
LABELS_NEAR_FLOOR = 500
#: Small data (issue 48, item 2): where gnmax's k at LABELS_FLOOR answers would leave fewer than
#: SMALL_DATA_ROWS_PER_MODEL rows a model, the largest of these M whose k leaves LABELS_ROWS_PER_MODEL --
#: fewer answers, less noise, so fewer models, each fed more rows, and a vote that each weak model's
#: error splits less often against the noise. Measured on a 4,300-row two-feature task
#: (benchmarks/accuracy.py, 5 runs, secure noise, all 2,000 queries): at eps 1 (10 rows a model at
#: M = 200) M = 100 (k = 277, 15 rows each) scored 0.7325-0.775 against 0.697-0.744 at M = 200; at
#: eps 0.5, where the plan fell back to the guess gate with k = 1,880 (2 rows a model; 0.509-0.564),
#: M = 50 (k = 377, 11 rows each) scored 0.682-0.765. Offline (4 seeds, pcqr's sigma; benchmarks/teacher_rules.py
#: --part small measures the same grid) at 10 rows a
#: model: eps 0.5, M = 50 0.698, 100 0.662, 200 0.643 (means); eps 1, M = 100 0.743, 200 0.714.
SMALL_DATA_ROWS_PER_MODEL = 20
SMALL_DATA_LABELS = (100, 50)


def recommend_labels(rows: int, epsilon: float, delta: float, cutoff: int, m: int, beta: float,
                     subsamples: int | None = None, classes: int = 2) -> tuple[int, str, int, str]:
    """``--labels M`` for a stream of m queries, from public parameters only (n, eps, delta, m): M,
    the gate, its k and why (one clause).

    gnmax's noise sigma grows with sqrt(M), and the k at which a 3/4 majority keeps its label
    CORRECT of the time grows with sigma; n / k rows a model bound the teachers' own accuracy. The
    rule: the largest M of LABEL_LADDER (or m) whose gnmax k still leaves GNMAX_ROWS_PER_MODEL rows a
    model, LABELS_MIN_ROWS_PER_MODEL for an M up to LABELS_NEAR_FLOOR (below that more answers cost the
    teachers more than they teach the student, the noise more than it teaches), at least
    LABELS_FLOOR and at most m; the student answers the queries after the first M.

    Measured basis (benchmarks/labels.py; eps 1, delta 1e-6, --gate gnmax, --learner auto, 3 seeds,
    students scored on held-out rows, M = 50 ... 2,000): on Adult (35 columns, n 32,561), XOR and the
    corner task (n 10^5) M = 200 was best or level with the best over the whole stream of 2,000
    (Adult 0.805-0.828 against 0.785-0.810 at M 2,000; XOR 0.827-0.849 with a gradient-boosting
    student against 0.691-0.696, its released answers 0.82 against 0.69; corner 0.996 against
    0.987-0.991); the rule gives 200 for all three, and m = 2,000 for XOR at n 10^6, where k is the
    data's (250 rows a model) at every M and the teacher over all 2,000 queries (0.885-0.887) was as
    good as any student of fewer answers.
    """
    from pcqr.pipeline.privacy.subsamp import GNMAX_ROWS_PER_MODEL

    def k_at(labels: int) -> int:
        return gate_parameters("gnmax", epsilon, delta, cutoff, labels, beta, subsamples, classes).subsamples

    def rows_at(labels: int) -> int:  # rows a model at M answers; -1 where gnmax cannot certify M (ε 700, M 1,000)
        try:
            return rows // k_at(labels)
        except PcqrError:
            return -1

    def bar(labels: int) -> int:  # rows a model M answers need (non-decreasing in M: the fits stay a prefix)
        return LABELS_MIN_ROWS_PER_MODEL if labels <= LABELS_NEAR_FLOOR else GNMAX_ROWS_PER_MODEL

    # k grows with M (sigma does), so the M that fit are a prefix of the ladder: m itself (whose k the
    # session's plan needs anyway), else the ladder up to the first that does not fit
    fits = [m] if m >= LABELS_FLOOR and rows_at(m) >= bar(m) else []
    for candidate in [] if fits else [c for c in LABEL_LADDER if LABELS_FLOOR <= c < m]:
        if rows_at(candidate) < bar(candidate):
            break
        fits.append(candidate)
    labels = fits[-1] if fits else min(m, LABELS_FLOOR)
    few = None  # small data: the k of LABELS_FLOOR answers would leave too few rows a model
    if not fits and labels == LABELS_FLOOR and 0 <= rows_at(labels) < SMALL_DATA_ROWS_PER_MODEL:
        few = next((c for c in SMALL_DATA_LABELS if c < m and rows_at(c) >= LABELS_ROWS_PER_MODEL), None)
    if few is not None:
        over = k_at(labels)
        labels = few
    k = gate_parameters("gnmax", epsilon, delta, cutoff, labels, beta, subsamples,
                        classes).for_rows(rows).subsamples
    if few is not None:
        why = (f"small data: at M = {LABELS_FLOOR} gnmax's k = {over:,} would leave {rows // over:,} rows a model "
               f"(fewer than {SMALL_DATA_ROWS_PER_MODEL}); "
               f"M = {labels:,} answers need less noise, so k = {k:,} models of {rows // k:,} rows each "
               f"(at least {LABELS_ROWS_PER_MODEL}); the student answers the other {m - labels:,} queries")
    elif labels == m:
        why = (f"gnmax's k = {k:,} leaves {rows // k:,} rows a model over all m = {m:,} queries: the teacher "
               "answers every one" if fits else f"m = {m:,} is at most the floor of {LABELS_FLOOR} labels: the "
               "teacher answers every one")
    elif fits:
        why = (f"the largest M whose gnmax k = {k:,} leaves >= {bar(labels)} rows a model "
               f"({rows // k:,}); the student answers the other {m - labels:,} queries")
    else:
        why = (f"no M leaves {bar(LABELS_FLOOR)} rows a model (k = {k:,} at M = {labels:,}: {rows // k:,} "
               f"rows each); {LABELS_FLOOR} answers is the fewest a student was measured to learn from")
    return labels, "gnmax", k, why
