"""``pcqr plan``'s output: the named classes' VC dimensions, and the plan's tables as text lines.

The figures come from :mod:`pcqr.pipeline.privacy.planner`; the command (pcqr.jobs.plan) prints
these lines, or the summary as one JSON object. Sizes beyond a float are strings ("1.23e+456").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.privacy.limits import check_overrides, delta_note
from pcqr.pipeline.privacy.planner import TABLE_EPSILONS, check_inputs, gate_table, plan, rows_needed, stump_vc
from pcqr.pipeline.privacy.subsamp import SubSampParameters

# VC dimensions of the named classes. threshold: x > t, one direction (VC 1); pcqr's own
# ``--learner threshold`` fits both directions, VC 2: plan it with --vc 2. halfspace: in R^2.
HYPOTHESIS_VC: dict[str, int] = {"threshold": 1, "point": 1, "interval": 2, "halfspace": 3, "rectangle": 4}
HYPOTHESES = (*HYPOTHESIS_VC, "stump")

TITLES = {
    "subsamp_realizable": "A_SubSamp, realizable (BTT18; Algorithm 5; docs/privacy.md Mechanism 1)",
    "subsamp_agnostic": "A_SubSamp, agnostic (BTT18; Algorithm 5; docs/privacy.md Mechanism 1)",
    "agprivcl": "A_AgPrivCl (Algorithm 3), Nandi-Bassily 2020; docs/privacy.md Mechanism 3",
    "unvprivcl": "A_UnvPrivCl (Algorithm 4: any number of queries), Nandi-Bassily 2020; docs/privacy.md Mechanism 5",
    "sspp": "A_SSPP (ABM19 semi-private learner; public n_pub, private n; docs/privacy.md Mechanism 4)",
    "pap": "A_PAP (BCMNUW20 query release with public data: every counting query of the class; docs/privacy.md Mechanism 7)",
    "point": "POINT_d learner via A_dist (BNS13 Lemma 3.2; no public data; docs/privacy.md Mechanism 8)",
    "choosing": "the choosing mechanism (BNS13 Fig. 8; docs/privacy.md Mechanism 9), a k-bounded-growth quality",
    "histogram": "the stability-based histogram (pcqr sanitize --algorithm histogram; docs/privacy.md Mechanism 16): every point query",
    "cdf": "the hierarchical CDF (pcqr sanitize --algorithm cdf; docs/privacy.md Mechanism 17): every threshold query over --domain",
    "san_points": "SanPoints (BNS13 Fig. 9; docs/privacy.md Mechanism 10): a synthetic database for every point query",
    "san_thresholds": "SanThresholds (BNS13 Fig. 11; docs/privacy.md Mechanism 14): a synthetic database for every threshold query over --domain",
    "learn_thresholds": "LearnThresholds via RecConcave (BNS13 Thm 3.18, Fig. 5; docs/privacy.md Mechanisms 11-12) over --domain",
    "rectangle": "the rectangle learner (BNS13 Thm 3.22; docs/privacy.md Mechanism 13), --dimensions over --domain",
}
KINDS = ("exact = an explicit formula of the paper; O() = a big-O bound with constant 1 (its logs "
         "kept); O~() = constant 1 and the hidden log factors dropped")


def vc_dimension(vc: int | None, hypothesis: str | None, features: int | None) -> int:
    """--vc D, or the VC dimension of --hypothesis CLASS (stump: an upper bound, needs --features)."""
    if (vc is None) == (hypothesis is None):
        raise PcqrError("give exactly one of --vc D and --hypothesis CLASS")
    if vc is not None:
        if features is not None:
            raise PcqrError("--features applies only to --hypothesis stump")
        return vc
    if hypothesis == "stump":
        if features is None:
            raise PcqrError("--hypothesis stump needs --features P (the number of features), or use --vc")
        return stump_vc(features)
    if hypothesis not in HYPOTHESIS_VC:
        raise PcqrError(f"--hypothesis must be one of {', '.join(HYPOTHESES)}, got {hypothesis!r}")
    if features is not None:
        raise PcqrError(f"--features applies only to --hypothesis stump, not {hypothesis}")
    return HYPOTHESIS_VC[str(hypothesis)]


def show(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def table_lines(summary: dict[str, Any]) -> list[str]:
    """The plan as a readable table: one block per algorithm, one row per figure."""
    out: list[str] = []
    inputs = summary["inputs"]
    named = f" ({inputs['hypothesis']})" if inputs["hypothesis"] else ""
    out.append(f"pcqr plan: d={inputs['vc']}{named} alpha={show(inputs['alpha'])} "
               f"beta={show(inputs['beta'])} epsilon={show(inputs['epsilon'])} "
               f"delta={show(inputs['delta'])} m={inputs['queries_max']} gamma={show(inputs['gamma'])}")
    out += blocks_lines(summary, f"kinds: {KINDS}")
    out.append("")
    out.append(f"ratio BTT18 agnostic n / A_AgPrivCl n (both O~()): "
               f"{show(summary['ratio_btt_agnostic_to_agprivcl'])}; Nandi-Bassily 2020's Related work says "
               f"~max(1, min(sqrt(m alpha), 1/alpha)) = {show(summary['ratio_related_work'])}")
    return out


def blocks_lines(summary: dict[str, Any], title: str) -> list[str]:
    """A plan's algorithms, one block each, one row per figure."""
    out: list[str] = []
    out.append(title)
    for key, figures in summary["algorithms"].items():
        out.append("")
        out.append(TITLES[key])
        for name, f in figures.items():
            out.append(f"  {name:<20} {show(f['value']):>14}  {f['kind']:<6} {f['ref']}")
    return out


def rows_table_lines(table: list[dict[str, Any]], inputs: dict[str, Any]) -> list[str]:
    """Private rows needed per eps, one row per eps."""
    out: list[str] = []
    out.append(f"A_SubSamp: private rows needed at {inputs['rows_per_model']} rows per model "
               f"(delta={show(inputs['delta'])} T={inputs['cutoff']} m={inputs['queries_max']}; "
               "k = the smallest at which a unanimous query abstains w.p. <= min(1/2, T/m))")
    out.append(f"  {'epsilon':>8} {'lambda':>10} {'w':>10} {'k':>10} {'private_rows':>14} {'delta_stability':>16}")
    for row in table:
        if "refused" in row:
            out.append(f"  {show(row['epsilon']):>8} refused: {row['refused']}")
            continue
        out.append(f"  {show(row['epsilon']):>8} {show(row['lambda']):>10} {show(row['w']):>10} "
                   f"{row['k']:>10} {row['private_rows']:>14} {show(row['delta_stability']):>16}")
    return out


def gate_table_lines(summary: dict[str, Any]) -> list[str]:
    """Each gate's noise, k and the margin a query needs, and the recommended gate."""
    out: list[str] = []
    i = summary["inputs"]
    out.append(f"gates for n={i['private_rows']:,} private rows, m={i['queries_max']:,} queries, "
               f"epsilon={show(i['epsilon'])} delta={show(i['delta'])} T={i['cutoff']}"
               + (f" k={i['subsamples']:,}" if i["subsamples"] is not None else " (k: each gate's default)"))
    out.append(f"  {'gate':<10} {'noise':>16} {'k':>8} {'rows/model':>11} {'margin 95%':>11} {'of k':>6}  answers")
    for g in summary["gates"]:
        if "refused" in g:
            out.append(f"  {g['gate']:<10} refused: {g['refused']}")
            continue
        margin = "> k" if g["margin_for_95"] is None else f"{g['margin_for_95']:,}"
        share = "" if g["margin_share"] is None else f"{g['margin_share']:.0%}"
        out.append(f"  {g['gate']:<10} {g['noise'] + ' ' + show(g['scale']):>16} {g['subsamples']:>8,} "
                   f"{g['rows_per_model']:>11,} {margin:>11} {share:>6}  {g['answers']}")
    out.append("margin 95%: the lead ct(majority) - ct(minority) of the k votes at which a query gets the "
               "majority's label 95% of the time")
    out.append(f"recommended: --gate {summary['recommended_gate']} ({summary['why']})")
    out.append(f"labels: --labels {summary['labels_recommended']:,} --gate {summary['labels_gate']} "
               f"(k = {summary['labels_subsamples']:,}; {summary['labels_why']})")
    default = summary["defaults"]
    out.append(f"defaults (pcqr train without --gate or --labels): --gate {default['gate']}"
               + (f" --labels {default['labels']:,}" if default["labels"] is not None else "")
               + f", k = {default['subsamples']:,} ({default['why']})")
    return out


@dataclass(frozen=True)
class PlanOutput:
    """What ``pcqr plan`` prints: the summary (``--json``), its table as lines, and a warning."""

    summary: dict[str, Any]
    lines: list[str]
    warning: str | None = None


def plan_output(vc: int | None, hypothesis: str | None, features: int | None, alpha: float | None, beta: float,
                epsilon: float | None, delta: float, queries_max: int | None, gamma: float,
                rows_per_model: int | None, cutoff: int, subsamples: int | None, private_rows: int | None,
                dimensions: int | None, domain: str | None, classes: int = 2) -> PlanOutput:
    """``pcqr plan``'s options (as the command names them) checked, and its output: the papers' sample
    sizes, or with ``rows_per_model`` the rows A_SubSamp needs per eps, with ``private_rows`` each
    gate's noise, k and margin (``--without-public-data``: pcqr.pipeline.mechanisms.sample_bounds)."""
    for option, set_value in (("--domain", domain), ("--dimensions", dimensions)):
        if set_value is not None:
            raise PcqrError(f"{option} applies to --without-public-data only")
    if classes != 2 and private_rows is None:
        raise PcqrError(f"--classes {classes} applies to --private-rows only (the papers' sample sizes are for two labels)")
    if private_rows is not None:
        if rows_per_model is not None:
            raise PcqrError("give at most one of --private-rows and --rows-per-model")
        for option, value in (("--epsilon", epsilon), ("--queries-max", queries_max)):
            if value is None:
                raise PcqrError(f"{option} is required with --private-rows")
        assert epsilon is not None and queries_max is not None
        check_overrides(subsamples, None)
        gates = gate_table(private_rows, epsilon, delta, cutoff, queries_max, beta, subsamples, classes)
        warning = delta_note(delta, private_rows)  # n is known: a delta at or above 1/n is said
        return PlanOutput({**gates, **({"warning": warning} if warning else {})}, gate_table_lines(gates), warning)
    if rows_per_model is not None:
        return _rows_table(rows_per_model, epsilon, delta, cutoff, queries_max, beta, subsamples)
    given = {"--alpha": alpha, "--beta": beta, "--epsilon": epsilon, "--delta": delta, "--queries-max": queries_max}
    for option, value in given.items():
        if value is None:
            raise PcqrError(f"{option} is required")
    assert alpha is not None and epsilon is not None and queries_max is not None
    d = vc_dimension(vc, hypothesis, features)
    check_inputs(d, alpha, beta, epsilon, delta, queries_max, gamma)
    result = plan(d, alpha, beta, epsilon, delta, queries_max, gamma)
    inputs = {"vc": d, "hypothesis": hypothesis, "features": features, "alpha": alpha, "beta": beta,
              "epsilon": epsilon, "delta": delta, "queries_max": queries_max, "gamma": gamma}
    summary = {"inputs": inputs, **result}
    return PlanOutput(summary, table_lines(summary))


def _rows_table(rows_per_model: int, epsilon: float | None, delta: float, cutoff: int, queries_max: int | None,
                beta: float, subsamples: int | None) -> PlanOutput:
    """``plan --rows-per-model R``: the private rows A_SubSamp needs per eps."""
    m = 10_000 if queries_max is None else queries_max
    check_overrides(subsamples, None)  # up front, like every other option (pcqr.pipeline.privacy.limits)
    epsilons = sorted({*TABLE_EPSILONS, *([epsilon] if epsilon is not None else [])})
    table = rows_needed(epsilons, delta, cutoff, m, beta, rows_per_model)
    inputs = {"rows_per_model": rows_per_model, "delta": delta, "cutoff": cutoff, "queries_max": m, "beta": beta}
    summary: dict[str, Any] = {"inputs": inputs, "rows_needed": table}
    warning = None
    if subsamples is not None and epsilon is not None:
        warning = SubSampParameters.paper(epsilon, delta, cutoff, m, beta, subsamples=subsamples).usefulness_warning()
        summary["warning"] = warning
    return PlanOutput(summary, rows_table_lines(table, inputs), warning)

