"""``pcqr plan``: the private sample sizes the papers' results require, and their parameters.

The formulas live in :mod:`pcqr.pipeline.privacy.planner`; this module maps class names to VC
dimensions, checks the options and prints the plan (a table, or one JSON object). Every option
has a stated range (pcqr.pipeline.privacy.limits), checked before anything is computed; sizes beyond a float
are printed as strings ("1.23e+456").
"""
from __future__ import annotations

from typing import Any

import click

from pcqr.jobs.common import emit_summary, json_option
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.privacy.limits import check_overrides
from pcqr.pipeline.privacy.planner import TABLE_EPSILONS, check_inputs, gate_table, plan, rows_needed, stump_vc
from pcqr.pipeline.privacy.subsamp import SubSampParameters

# VC dimensions of the named classes. threshold: x > t, one direction (VC 1); pcqr's own
# ``--learner threshold`` fits both directions, VC 2: plan it with --vc 2. halfspace: in R^2.
HYPOTHESIS_VC: dict[str, int] = {"threshold": 1, "point": 1, "interval": 2, "halfspace": 3, "rectangle": 4}
HYPOTHESES = (*HYPOTHESIS_VC, "stump")

TITLES = {
    "subsamp_realizable": "A_SubSamp, realizable (BTT18; Algorithm 5)",
    "subsamp_agnostic": "A_SubSamp, agnostic (BTT18; Algorithm 5)",
    "agprivcl": "A_AgPrivCl (Algorithm 3)",
    "unvprivcl": "A_UnvPrivCl (Algorithm 4: any number of queries)",
    "sspp": "A_SSPP (ABM19 semi-private learner; public n_pub, private n)",
    "pap": "A_PAP (BCMNUW20 query release with public data: every counting query of the class)",
    "point": "POINT_d learner via A_dist (BNS13 Lemma 3.2; no public data)",
    "choosing": "the choosing mechanism (BNS13 Fig. 8), a k-bounded-growth quality",
    "san_points": "SanPoints (BNS13 Fig. 9): a synthetic database for every point query",
    "san_thresholds": "SanThresholds (BNS13 Fig. 11): a synthetic database for every threshold query over --domain",
    "learn_thresholds": "LearnThresholds via RecConcave (BNS13 Thm 3.18, Fig. 5) over --domain",
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


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def print_table(summary: dict[str, Any]) -> None:
    """The plan as a readable table: one block per algorithm, one row per figure."""
    inputs = summary["inputs"]
    named = f" ({inputs['hypothesis']})" if inputs["hypothesis"] else ""
    click.echo(f"pcqr plan: d={inputs['vc']}{named} alpha={_show(inputs['alpha'])} "
               f"beta={_show(inputs['beta'])} epsilon={_show(inputs['epsilon'])} "
               f"delta={_show(inputs['delta'])} m={inputs['queries_max']} gamma={_show(inputs['gamma'])}")
    print_blocks(summary, f"kinds: {KINDS}")
    click.echo("")
    click.echo(f"ratio BTT18 agnostic n / A_AgPrivCl n (both O~()): "
               f"{_show(summary['ratio_btt_agnostic_to_agprivcl'])}; 001 Related work (L44) says "
               f"~max(1, min(sqrt(m alpha), 1/alpha)) = {_show(summary['ratio_related_work'])}")


def print_blocks(summary: dict[str, Any], title: str) -> None:
    """A plan's algorithms, one block each, one row per figure."""
    click.echo(title)
    for key, figures in summary["algorithms"].items():
        click.echo("")
        click.echo(TITLES[key])
        for name, f in figures.items():
            click.echo(f"  {name:<20} {_show(f['value']):>14}  {f['kind']:<6} {f['ref']}")


def print_rows_table(table: list[dict[str, Any]], inputs: dict[str, Any]) -> None:
    """Private rows needed per eps, one row per eps."""
    click.echo(f"A_SubSamp: private rows needed at {inputs['rows_per_model']} rows per model "
               f"(delta={_show(inputs['delta'])} T={inputs['cutoff']} m={inputs['queries_max']}; "
               "k = the smallest at which a unanimous query abstains w.p. <= min(1/2, T/m))")
    click.echo(f"  {'epsilon':>8} {'lambda':>10} {'w':>10} {'k':>10} {'private_rows':>14} {'delta_stability':>16}")
    for row in table:
        if "refused" in row:
            click.echo(f"  {_show(row['epsilon']):>8} refused: {row['refused']}")
            continue
        click.echo(f"  {_show(row['epsilon']):>8} {_show(row['lambda']):>10} {_show(row['w']):>10} "
                   f"{row['k']:>10} {row['private_rows']:>14} {_show(row['delta_stability']):>16}")


def rows_table_command(rows_per_model: int, epsilon: float | None, delta: float, cutoff: int,
                       queries_max: int | None, beta: float, subsamples: int | None, as_json: bool) -> None:
    """``plan --rows-per-model R``: the private rows A_SubSamp needs per eps."""
    m = 10_000 if queries_max is None else queries_max
    check_overrides(subsamples, None)  # up front, like every other option (pcqr.pipeline.privacy.limits)
    epsilons = sorted({*TABLE_EPSILONS, *([epsilon] if epsilon is not None else [])})
    table = rows_needed(epsilons, delta, cutoff, m, beta, rows_per_model)
    inputs = {"rows_per_model": rows_per_model, "delta": delta, "cutoff": cutoff, "queries_max": m, "beta": beta}
    summary: dict[str, Any] = {"inputs": inputs, "rows_needed": table}
    if subsamples is not None and epsilon is not None:
        warning = SubSampParameters.paper(epsilon, delta, cutoff, m, beta, subsamples=subsamples).usefulness_warning()
        summary["warning"] = warning
        if warning and not as_json:
            click.echo(f"warning: {warning}", err=True)
    if as_json:
        emit_summary(summary, as_json=True)
    else:
        print_rows_table(table, inputs)


def print_gate_table(summary: dict[str, Any]) -> None:
    """Each gate's noise, k and the margin a query needs, and the recommended gate."""
    i = summary["inputs"]
    click.echo(f"gates for n={i['private_rows']:,} private rows, m={i['queries_max']:,} queries, "
               f"epsilon={_show(i['epsilon'])} delta={_show(i['delta'])} T={i['cutoff']}"
               + (f" k={i['subsamples']:,}" if i["subsamples"] is not None else " (k: each gate's default)"))
    click.echo(f"  {'gate':<10} {'noise':>16} {'k':>8} {'rows/model':>11} {'margin 95%':>11} {'of k':>6}  answers")
    for g in summary["gates"]:
        if "refused" in g:
            click.echo(f"  {g['gate']:<10} refused: {g['refused']}")
            continue
        margin = "> k" if g["margin_for_95"] is None else f"{g['margin_for_95']:,}"
        share = "" if g["margin_share"] is None else f"{g['margin_share']:.0%}"
        click.echo(f"  {g['gate']:<10} {g['noise'] + ' ' + _show(g['scale']):>16} {g['subsamples']:>8,} "
                   f"{g['rows_per_model']:>11,} {margin:>11} {share:>6}  {g['answers']}")
    click.echo("margin 95%: the lead ct(majority) - ct(minority) of the k votes at which a query gets the "
               "majority's label 95% of the time")
    click.echo(f"recommended: --gate {summary['recommended_gate']} ({summary['why']})")


@click.command("plan")
@click.option("--vc", type=int, default=None, help="VC dimension d of the hypothesis class, in [1, 2^53].")
@click.option("--hypothesis", default=None, metavar="CLASS",
              help=f"A named class instead of --vc: {', '.join(HYPOTHESES)} (threshold = one direction, "
                   "VC 1; stump needs --features).")
@click.option("--features", type=int, default=None, help="P, the number of features (--hypothesis stump), in [1, 2^53].")
@click.option("--alpha", type=float, default=None, help="Excess error alpha, in [1e-300, 1). Required.")
@click.option("--beta", type=float, default=0.05, show_default=True, help="Failure probability beta, in [1e-300, 1).")
@click.option("--epsilon", type=float, default=None, help="Privacy parameter eps, in (0, 700]. Required.")
@click.option("--delta", type=float, default=1e-6, show_default=True, help="Privacy parameter delta, in [1e-300, 1).")
@click.option("--queries-max", type=int, default=None, help="m, the most queries to answer, in [1, 2^53]. Required.")
@click.option("--gamma", type=float, default=0.0, show_default=True,
              help="Best error in the class (agnostic A_SubSamp's T and error alpha + 3 gamma).")
@click.option("--rows-per-model", type=int, default=None,
              help="Rows your learner needs per model: print instead a table of the private rows A_SubSamp "
                   "needs per eps (k x rows, k the smallest useful at the smallest certifiable w).")
@click.option("--cutoff", type=int, default=50, show_default=True, help="T, for --rows-per-model and --private-rows, in [1, 10^6].")
@click.option("--subsamples", type=int, default=None,
              help="With --rows-per-model and --epsilon: say whether this k is enough (k in [1, 10^6]); "
                   "with --private-rows: the k every gate is shown at (default: each gate's own).")
@click.option("--private-rows", type=int, default=None,
              help="n, the private rows: print instead each gate's noise, k and the vote margin a query needs "
                   "to be answered correctly 95% of the time, and the gate pcqr train picks when --gate is not "
                   "given (needs --epsilon and --queries-max; uses --delta, --cutoff, --beta, --subsamples).")
@click.option("--without-public-data", is_flag=True,
              help="Print instead the sample sizes of the mechanisms that need no public data (Beimel-Nissim-"
                   "Stemmer): the POINT_d learner (pcqr learn --algorithm point) and the choosing mechanism "
                   "(needs --epsilon and --alpha; uses --delta, --beta, --growth).")
@click.option("--growth", type=int, default=1, show_default=True,
              help="--without-public-data: k, the choosing mechanism's growth bound (1 for point counts).")
@click.option("--dimensions", type=int, default=None,
              help="--without-public-data: d, the rectangle learner's features (default 2).")
@click.option("--domain", default=None,
              help="--without-public-data: the feature's integer domain LO:HI (LearnThresholds' and SanThresholds' "
                   "range; default 0:4294967295).")
@json_option
def command(vc: int | None, hypothesis: str | None, features: int | None, alpha: float | None,
            beta: float | None, epsilon: float | None, delta: float | None,
            queries_max: int | None, gamma: float, rows_per_model: int | None, cutoff: int,
            subsamples: int | None, private_rows: int | None, without_public_data: bool, growth: int,
            dimensions: int | None, domain: str | None, as_json: bool) -> None:
    """Print the private sample size each algorithm's result requires, with its parameters.

    \b
    With --rows-per-model R: a table of the private rows A_SubSamp needs per eps instead.
    With --private-rows N: each gate (stability, guess, gnmax) at (N, k, m, eps, delta, T): its noise,
    k, rows per model, the vote margin for 95% correct answers, and the recommended gate.
    With --without-public-data: Beimel-Nissim-Stemmer's POINT_d learner, choosing mechanism, SanPoints,
    SanThresholds and LearnThresholds (the last two over --domain).

    \b
    For A_SubSamp (realizable, agnostic: BTT18), A_AgPrivCl, A_UnvPrivCl (Nandi-Bassily)
    and A_SSPP (Alon-Bassily-Moran): n, the public n_pub, T, lambda, k, w, eps_hat, ...
    Every figure is marked exact (an explicit formula), O() (constant 1 assumed) or
    O~() (constant 1, log factors dropped), with the paper and line it comes from.
    """
    if without_public_data:
        from pcqr.pipeline.mechanisms.sample_bounds import without_public_data as no_public_plan

        if epsilon is None or alpha is None:
            raise PcqrError(f"{'--epsilon' if epsilon is None else '--alpha'} is required with --without-public-data")
        others: tuple[tuple[str, Any], ...] = (("--private-rows", private_rows), ("--rows-per-model", rows_per_model),
                                               ("--vc", vc), ("--hypothesis", hypothesis), ("--queries-max", queries_max))
        for other, set_to in others:
            if set_to is not None:
                raise PcqrError(f"{other} does not apply to --without-public-data")
        assert epsilon is not None and alpha is not None and beta is not None and delta is not None
        summary = no_public_plan(epsilon, delta, alpha, beta, growth, domain or "0:4294967295",
                                 2 if dimensions is None else dimensions)
        if as_json:
            emit_summary(summary, as_json=True)
        else:
            print_blocks(summary, f"pcqr plan, no public data: alpha={_show(alpha)} beta={_show(beta)} "
                                  f"epsilon={_show(epsilon)} delta={_show(delta)} k={growth}")
        return
    for option, set_value in (("--domain", domain), ("--dimensions", dimensions)):
        if set_value is not None:
            raise PcqrError(f"{option} applies to --without-public-data only")
    if private_rows is not None:
        if rows_per_model is not None:
            raise PcqrError("give at most one of --private-rows and --rows-per-model")
        for option, value in (("--epsilon", epsilon), ("--queries-max", queries_max)):
            if value is None:
                raise PcqrError(f"{option} is required with --private-rows")
        assert epsilon is not None and queries_max is not None and beta is not None and delta is not None
        check_overrides(subsamples, None)
        gates = gate_table(private_rows, epsilon, delta, cutoff, queries_max, beta, subsamples)
        if as_json:
            emit_summary(gates, as_json=True)
        else:
            print_gate_table(gates)
        return
    if rows_per_model is not None:
        assert beta is not None and delta is not None
        rows_table_command(rows_per_model, epsilon, delta, cutoff, queries_max, beta, subsamples, as_json)
        return
    given = {"--alpha": alpha, "--beta": beta, "--epsilon": epsilon, "--delta": delta,
             "--queries-max": queries_max}
    for option, value in given.items():
        if value is None:
            raise PcqrError(f"{option} is required")
    assert alpha is not None and beta is not None and epsilon is not None
    assert delta is not None and queries_max is not None
    d = vc_dimension(vc, hypothesis, features)
    check_inputs(d, alpha, beta, epsilon, delta, queries_max, gamma)
    result = plan(d, alpha, beta, epsilon, delta, queries_max, gamma)
    inputs = {"vc": d, "hypothesis": hypothesis, "features": features, "alpha": alpha, "beta": beta,
              "epsilon": epsilon, "delta": delta, "queries_max": queries_max, "gamma": gamma}
    summary = {"inputs": inputs, **result}
    if as_json:
        emit_summary(summary, as_json=True)
    else:
        print_table(summary)
