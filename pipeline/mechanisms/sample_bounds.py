"""The sample sizes of Beimel-Nissim-Stemmer's mechanisms, which need no public data, for ``pcqr plan
--without-public-data`` (papers/002; the figures in the format of :mod:`pcqr.pipeline.privacy.planner`)."""
from __future__ import annotations

from typing import Any

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.mechanisms.adist import AdistParameters
from pcqr.pipeline.mechanisms.choosing import ChoosingParameters
from pcqr.pipeline.mechanisms.integer_domain import Domain
from pcqr.pipeline.mechanisms.learn_point import paper_rows
from pcqr.pipeline.mechanisms.learn_rectangle import rows_needed as box_rows
from pcqr.pipeline.mechanisms.learn_thresholds import rows_needed as thresholds_rows
from pcqr.pipeline.mechanisms.rec_concave import RecConcaveParameters
from pcqr.pipeline.mechanisms.learn_point import rows_needed as point_rows
from pcqr.pipeline.mechanisms.san_points import SanPointsParameters
from pcqr.pipeline.mechanisms.san_points import paper_rows as san_points_paper_rows
from pcqr.pipeline.mechanisms.san_thresholds import SanThresholdsParameters
from pcqr.pipeline.mechanisms.san_thresholds import paper_rows as san_thresholds_paper_rows
from pcqr.pipeline.privacy.limits import MAX_COUNT, count_range, show_count
from pcqr.pipeline.privacy.plan_tables import PlanOutput, blocks_lines, show
from pcqr.pipeline.privacy.planner import fig
from pcqr.pipeline.privacy.subsamp import check_epsilon_delta, check_fraction

#: How the plan cites Beimel, Nissim, Stemmer, "Private Learning and Sanitization: Pure vs. Approximate
#: Differential Privacy" (its lemma and figure numbers).
BNS13 = "Beimel-Nissim-Stemmer 2013"


def without_public_data(epsilon: float, delta: float, alpha: float, beta: float, growth: int,
                        domain: str = "0:4294967295", dimensions: int = 2) -> dict[str, Any]:
    """The sample sizes of Beimel-Nissim-Stemmer's mechanisms (no public data) at these parameters:
    the POINT_d learner (A_dist: its threshold, certified delta, Lemma 3.2's m with our constants and as
    the lemma states it) and the choosing mechanism for a ``growth``-bounded quality (the smallest m
    Lemma 4.4 certifies, Lemma 4.5's m for an alpha-good choice) and SanPoints (the least m it
    certifies, eps0, the m of Theorem 4.6's proof with our noise and as stated), SanThresholds over
    ``domain`` (c, the mechanisms, eps0, the least m it certifies, Claims 4.10-4.11's m as stated) and
    LearnThresholds over it (RecConcave's depth, mechanisms and eps0; Theorem 3.18's m with our parameters),
    and the rectangle learner in ``dimensions`` dimensions over it (docs/privacy.md Mechanism 13)."""
    check_epsilon_delta(epsilon, delta)
    check_fraction(alpha, "--alpha")
    check_fraction(beta, "--beta")
    count_range("--growth (k)", growth, 1, MAX_COUNT, "an exact float")
    count_range("--dimensions (d)", dimensions, 1, 10**6, "a count")
    thresholds_domain = Domain.parse(domain)
    adist = AdistParameters.create(epsilon, delta)
    src_point = f"{BNS13}, Lemma 3.2 (pcqr learn --algorithm point)"
    src_choosing = f"{BNS13}, Fig. 8, Lemmas 4.4-4.5"
    try:
        certified = ChoosingParameters.least_rows(epsilon, delta, alpha, beta, growth)
        choosing = ChoosingParameters.create(epsilon, delta, alpha, beta, growth, certified)
        choosing_figures = {
            "rows_certified": fig(certified, "exact", src_choosing + ": the least m Lemma 4.4's proof certifies"),
            "proven_delta": fig(choosing.certificate()["proven_delta"], "exact", "at that m"),
            "rows_for_utility": fig(show_count(choosing.utility_rows()), "exact", f"{BNS13}, Lemma 4.5"),
        }
    except (PcqrError, OverflowError) as exc:
        choosing_figures = {"rows_certified": fig(f"none ({exc})", "exact", src_choosing)}
    src_san = f"{BNS13}, Fig. 9, Theorem 4.6 (pcqr sanitize --algorithm san-points)"
    try:
        least = SanPointsParameters.least_rows(epsilon, delta, alpha, beta)
        san = SanPointsParameters.create(epsilon, delta, alpha, beta, least)
        san_figures = {
            "rows_certified": fig(least, "exact", src_san + ": the least m whose choosing rounds are certified"),
            "eps0": fig(san.eps0, "exact", "each of the 2r mechanisms, by KOV's optimal composition"),
            "proven_delta": fig(san.certificate()["proven_delta"], "exact", "at that m"),
            "rows_for_utility": fig(show_count(san.utility_rows()), "exact", src_san + "'s proof, our noise"),
            "paper_rows": fig(show_count(san_points_paper_rows(epsilon, delta, alpha, beta)), "exact",
                              src_san + "'s proof, as stated"),
        }
    except (PcqrError, OverflowError, ValueError) as exc:
        san_figures = {"rows_certified": fig(f"none ({exc})", "exact", src_san)}
    san_thr_figures = san_thresholds_figures(epsilon, delta, alpha, beta, thresholds_domain)
    histogram_figures, cdf_figures = practical_figures(epsilon, delta, alpha, beta, thresholds_domain)
    src_thr = f"{BNS13}, Thm 3.18, Fig. 5 (pcqr learn --algorithm learn-thresholds)"
    try:
        rec = RecConcaveParameters.create(epsilon, delta, thresholds_domain.size, 1)
        thr_figures = {
            "recursion_depth": fig(rec.depth, "exact", f"{BNS13}, Observation 3.10: at most log* T"),
            "mechanisms": fig(rec.mechanisms, "exact",
                              f"{BNS13}, Lemma 3.12: 3N - 2 (an EM per level, two A_dist's but the last)"),
            "eps0": fig(rec.eps0, "exact", "each mechanism, by KOV's optimal composition"),
            "proven_delta": fig(rec.certificate()["proven_delta"], "exact", "RecConcave's certificate"),
            "rows_needed": fig(show_count(thresholds_rows(rec, alpha, beta)), "exact", src_thr + "'s proof, our parameters"),
        }
    except (PcqrError, OverflowError, ValueError) as exc:
        thr_figures = {"recursion_depth": fig(f"none ({exc})", "exact", src_thr)}
    src_box = f"{BNS13}, Thm 3.22; our construction, docs/privacy.md Mechanism 13 (pcqr learn --algorithm rectangle)"
    try:
        box = RecConcaveParameters.create(epsilon, delta, thresholds_domain.size, 1, runs=2 * dimensions)
        box_figures = {
            "mechanisms": fig(box.mechanisms, "exact", "2d runs of RecConcave, 3N - 2 mechanisms each"),
            "eps0": fig(box.eps0, "exact", "each mechanism, by KOV's optimal composition"),
            "proven_delta": fig(box.certificate()["proven_delta"], "exact", "the 2d runs' certificate"),
            "rows_needed": fig(show_count(box_rows(box, dimensions, alpha, beta)), "exact", src_box),
        }
    except (PcqrError, OverflowError, ValueError) as exc:
        box_figures = {"mechanisms": fig(f"none ({exc})", "exact", src_box)}
    return {
        "inputs": {"epsilon": epsilon, "delta": delta, "alpha": alpha, "beta": beta, "growth": growth,
                   "domain": thresholds_domain.describe(), "dimensions": dimensions},
        "algorithms": {
            "point": {
                "adist_threshold": fig(adist.threshold, "exact", f"{BNS13}, Prop 2.26, gap sensitivity 2 counted"),
                "proven_delta": fig(adist.certificate()["proven_delta"], "exact", "A_dist's tail P(Z >= t + 1)"),
                "rows_needed": fig(show_count(point_rows(adist, alpha, beta)), "exact", src_point + ", our constants"),
                "paper_rows": fig(show_count(paper_rows(epsilon, delta, alpha, beta)), "exact", src_point + ", as stated"),
            },
            "choosing": choosing_figures,
            "histogram": histogram_figures,
            "cdf": cdf_figures,
            "san_points": san_figures,
            "san_thresholds": san_thr_figures,
            "learn_thresholds": thr_figures,
            "rectangle": box_figures,
        },
    }


def practical_figures(epsilon: float, delta: float, alpha: float, beta: float,
                       domain: Domain) -> tuple[dict[str, Any], dict[str, Any]]:
    """The practitioner's sanitizers (issue 31): the stable histogram's threshold, delta and the least
    m whose every point query is within alpha (with probability 1 - beta); the hierarchical CDF's
    levels, noise and the noise's sd at one threshold (its error is measured, not certified)."""
    from pcqr.pipeline.mechanisms.hierarchical_cdf import CdfParameters
    from pcqr.pipeline.mechanisms.stable_histogram import HistogramParameters

    src_h = "pcqr sanitize --algorithm histogram (docs/privacy.md, the stable histogram)"
    try:
        least = HistogramParameters.calibrated(epsilon, delta, alpha, beta, 1).least_rows()
        histogram = HistogramParameters.create(epsilon, delta, alpha, beta, least)
        histogram_figures = {
            "threshold": fig(histogram.threshold, "exact", "the least tau with P(Z >= tau - 1) <= delta, Z ~ DLap(2/eps)"),
            "proven_delta": fig(histogram.certificate()["proven_delta"], "exact", "P(Z >= tau - 1) + the tail sampler's"),
            "rows_certified": fig(least, "exact", src_h + ": the least m with (tau + t)/m <= alpha, m P(|Z| >= t) <= beta"),
        }
    except (PcqrError, OverflowError, ValueError) as exc:
        histogram_figures = {"rows_certified": fig(f"none ({exc})", "exact", src_h)}
    src_c = "pcqr sanitize --algorithm cdf (docs/privacy.md, the hierarchical CDF)"
    try:
        cdf = CdfParameters.create(epsilon, 1, domain)
    except PcqrError as exc:
        return histogram_figures, {"levels": fig(f"none ({exc})", "exact", src_c)}
    return histogram_figures, {
        "levels": fig(cdf.levels, "exact", "ceil(bits of the domain / 4): a 16-ary tree"),
        "noise_scale": fig(cdf.scale, "exact", "2L/eps a node: pure eps-DP, proven_delta 0"),
        "threshold_noise_sd": fig(round(cdf.noise_sd(), 1), "exact", src_c + ": rows, one threshold's noise; the "
                                  "largest error over all thresholds measured about 5 of these (benchmarks)"),
    }


def san_thresholds_figures(epsilon: float, delta: float, alpha: float, beta: float, domain: Domain) -> dict[str, Any]:
    """SanThresholds' figures over ``domain``: c, the mechanisms M = c (3N + 1), eps0, the least m
    certified, Claims 4.10-4.11's m as stated; "none (the reason)" when alpha is beyond the exact
    composition (the reason names the smallest alpha that fits)."""
    src = f"{BNS13}, Fig. 11, Lemma 4.8 (pcqr sanitize --algorithm san-thresholds)"
    try:
        least = SanThresholdsParameters.least_rows(epsilon, delta, alpha, beta, domain)
        params = SanThresholdsParameters.create(epsilon, delta, alpha, beta, least, domain)
    except (PcqrError, OverflowError, ValueError) as exc:
        return {"rows_certified": fig(f"none ({exc})", "exact", src)}
    return {
        "calls": fig(params.calls, "exact", f"{BNS13}, Fig. 11: calls initialised to ceil(77/alpha) (Claim 4.11)"),
        "mechanisms": fig(params.mechanisms, "exact", "c (2 counts + a choosing mechanism + RecConcave's 3N - 2)"),
        "eps0": fig(params.eps0, "exact", "each mechanism, by KOV's optimal composition"),
        "rows_certified": fig(least, "exact", src + ": the least m whose choosing mechanisms are certified"),
        "proven_delta": fig(params.certificate()["proven_delta"], "exact", "at that m"),
        "paper_rows": fig(show_count(san_thresholds_paper_rows(epsilon, delta, alpha, beta, domain)), "exact",
                          f"{BNS13}, Claims 4.10-4.11, as stated (log* d of the domain's bits, log base 2)"),
    }


def without_public_data_plan(vc: int | None, hypothesis: str | None, alpha: float | None, beta: float,
                         epsilon: float | None, delta: float, queries_max: int | None, rows_per_model: int | None,
                         private_rows: int | None, growth: int, dimensions: int | None,
                         domain: str | None) -> PlanOutput:
    """``plan --without-public-data``: the POINT_d learner, the choosing mechanism, the stable histogram,
    the hierarchical CDF, SanPoints, SanThresholds and LearnThresholds (pcqr.pipeline.mechanisms.sample_bounds)."""
    if epsilon is None or alpha is None:
        raise PcqrError(f"{'--epsilon' if epsilon is None else '--alpha'} is required with --without-public-data")
    others: tuple[tuple[str, Any], ...] = (("--private-rows", private_rows), ("--rows-per-model", rows_per_model),
                                           ("--vc", vc), ("--hypothesis", hypothesis), ("--queries-max", queries_max))
    for other, set_to in others:
        if set_to is not None:
            raise PcqrError(f"{other} does not apply to --without-public-data")
    summary = without_public_data(epsilon, delta, alpha, beta, growth, domain or "0:4294967295",
                             2 if dimensions is None else dimensions)
    return PlanOutput(summary, blocks_lines(summary, f"pcqr plan, no public data: alpha={show(alpha)} beta={show(beta)} "
                                                     f"epsilon={show(epsilon)} delta={show(delta)} k={growth}"))
