"""``pcqr plan``: the private sample sizes the papers' results require, and their parameters.

The formulas live in :mod:`pcqr.pipeline.privacy.planner`, the tables in
:mod:`pcqr.pipeline.privacy.plan_tables`; this module parses the options and prints the plan (a
table, or one JSON object). Every option has a stated range (pcqr.pipeline.privacy.limits), checked
before anything is computed; sizes beyond a float are printed as strings ("1.23e+456").
"""
from __future__ import annotations

import click

from pcqr.jobs.common import emit_summary, json_option
from pcqr.pipeline.mechanisms.sample_bounds import without_public_data_plan
from pcqr.pipeline.privacy.limits import check_delta
from pcqr.pipeline.privacy.plan_tables import HYPOTHESES, plan_output


@click.command("plan")
@click.option("--vc", type=int, default=None, help="VC dimension d of the hypothesis class, in [1, 2^53].")
@click.option("--hypothesis", default=None, metavar="CLASS",
              help=f"A named class instead of --vc: {', '.join(HYPOTHESES)} (threshold = one direction, "
                   "VC 1; stump needs --features).")
@click.option("--features", type=int, default=None, help="P, the number of features (--hypothesis stump), in [1, 2^53].")
@click.option("--alpha", type=float, default=None, help="Excess error alpha, in [1e-300, 1). Required.")
@click.option("--beta", type=float, default=0.05, show_default=True, help="Failure probability beta, in [1e-300, 1).")
@click.option("--epsilon", type=float, default=None, help="Privacy parameter eps, in (0, 700]. Required.")
@click.option("--delta", type=float, default=1e-6, show_default=True, help="Privacy parameter delta, in [1e-300, 0.01) (a delta at or above 1/n of --private-rows is warned of).")
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
@click.option("--classes", type=int, default=2, show_default=True,
              help="c, with --private-rows: the gates over c classes (gnmax and stability; at most 100).")
@json_option
def command(vc: int | None, hypothesis: str | None, features: int | None, alpha: float | None,
            beta: float | None, epsilon: float | None, delta: float | None,
            queries_max: int | None, gamma: float, rows_per_model: int | None, cutoff: int,
            subsamples: int | None, private_rows: int | None, without_public_data: bool, growth: int,
            dimensions: int | None, domain: str | None, classes: int, as_json: bool) -> None:
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
    O~() (constant 1, log factors dropped), with the paper and result it comes from (the mechanisms: docs/privacy.md).
    """
    assert beta is not None and delta is not None
    check_delta(delta)  # 0.01 or more certifies nothing: refused in every plan
    if without_public_data:
        out = without_public_data_plan(vc, hypothesis, alpha, beta, epsilon, delta, queries_max, rows_per_model,
                                       private_rows, growth, dimensions, domain)
    else:
        out = plan_output(vc, hypothesis, features, alpha, beta, epsilon, delta, queries_max, gamma, rows_per_model,
                          cutoff, subsamples, private_rows, dimensions, domain, classes)
    if as_json:
        emit_summary(out.summary, as_json=True)
        return
    if out.warning:
        click.echo(f"warning: {out.warning}", err=True)
    for line in out.lines:
        click.echo(line)
