"""Options and output shared by every job command."""
from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any, Callable, ContextManager, TypeVar

import click

from pcqr.pipeline.data.atomic import check_writable_directory, check_writable_file  # noqa: F401 (used by jobs)
from pcqr.pipeline.data.datasets import split_features  # noqa: F401 (used by jobs)
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.options import AnswerOptions, TrainingOptions
from pcqr.pipeline.session.progress import NoBar, Reporter

if TYPE_CHECKING:
    from pcqr.pipeline.data.cluster import Connect

F = TypeVar("F", bound=Callable[..., Any])


def cluster_option(func: F) -> F:
    """``--cluster PATH``: the cluster.yaml to use (default ./cluster.yaml, else built-in local)."""
    return click.option(
        "--cluster",
        "cluster",
        type=click.Path(dir_okay=False),
        default=None,
        help="cluster.yaml choosing the Dask backend (default: ./cluster.yaml if present, "
        "else a local cluster on 127.0.0.1).",
    )(func)


def json_option(func: F) -> F:
    """``--json``: print the summary as one JSON object on the last line."""
    return click.option(
        "--json", "as_json", is_flag=True, help="Print the summary as one JSON object (last line)."
    )(func)


def ledger_option(func: F) -> F:
    """``--ledger PATH``: the ledger database (default $PCQR_LEDGER, else ~/.local/share/pcqr/ledger.sqlite);
    an empty one, or an empty $PCQR_LEDGER, is refused while the options are parsed (before anything is read)."""
    return click.option(
        "--ledger", "ledger", type=click.Path(dir_okay=False), default=None, callback=_checked_ledger,
        help="Privacy-budget ledger (SQLite; private: the operator's record of every charge; default: $PCQR_LEDGER, "
        "else ~/.local/share/pcqr/ledger.sqlite; an empty $PCQR_LEDGER is an error).",
    )(func)


def _checked_ledger(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    from pcqr.pipeline.budget.ledger import ledger_setting

    if not ctx.resilient_parsing:  # not while completing or listing help
        ledger_setting(value)
    return value


#: ``--truth`` of answer, replay and report: the user's labels of the queries.
TRUTH_HELP = ("Public input: your true labels of the queries (Parquet of query_id + label), checked like --queries "
              "for private rows and used only to score the answers: {what}. Never copied into the log.")


def allow_overlap_option(func: F) -> F:
    """``--allow-private-overlap``: run although a public input holds rows of a private dataset."""
    return click.option(
        "--allow-private-overlap", "allow_private_overlap", is_flag=True,
        help="Run although a public input (--public, --queries, --truth) holds rows of a registered private "
        "dataset (refused otherwise: that would publish them); recorded in the output's provenance.",
    )(func)


def wait_option(func: F) -> F:
    """``--wait``: wait for another pcqr process using the state directory instead of refusing."""
    return click.option(
        "--wait", "wait", is_flag=True,
        help="If another pcqr process is using the state directory, wait for it to finish "
        "(default: refuse at once).",
    )(func)


def emit_summary(summary: dict[str, Any], as_json: bool) -> None:
    """Print a job summary: human-readable lines, or one JSON object as the last line."""
    if as_json:
        click.echo(json.dumps(summary, sort_keys=True, default=str))
        return
    width = max((len(k) for k in summary), default=0)
    for key, value in summary.items():
        if isinstance(value, float):
            value = f"{value:.6g}"
        elif isinstance(value, dict):
            value = " ".join(f"{k}={v}" for k, v in value.items())
        click.echo(f"{key:<{width}}  {value}")


def note(message: str) -> None:
    """A progress or status line for the user, on stderr so stdout stays machine-readable."""
    click.echo(message, err=True)


def progress_enabled() -> bool:
    """Progress bars only on a terminal."""
    return sys.stderr.isatty()


def privacy_options(func: F) -> F:
    """The parameters of A_SubSamp (Algorithm 5) and how its noise is drawn."""
    options = [
        click.option("--mode", type=click.Choice(["realizable", "agnostic", "universal"]), default=TrainingOptions.mode,
                     show_default=True,
                     help="realizable: A_SubSamp on the data; agnostic: A_AgPrivCl (relabel a subsample with a "
                     "hypothesis chosen privately over the dichotomies of --hypothesis, then A_SubSamp; T is derived); "
                     "universal: A_UnvPrivCl (A_AgPrivCl at eps/2 for the first m_o queries, then a classifier "
                     "released by A_SSPP at eps/2 from their features answers every later query, at no further cost)."),
        click.option("--hypothesis", default=None, help="Agnostic and universal modes: the hypothesis class used to "
                     "relabel and to learn (threshold, interval, point, stump, rectangle, halfspace)."),
        click.option("--alpha", type=float, default=TrainingOptions.alpha, show_default=True,
                     help="Agnostic and universal modes: target excess error alpha."),
        click.option("--epsilon", type=float, default=TrainingOptions.epsilon, show_default=True, help="Privacy parameter eps of the whole session."),
        click.option("--delta", type=float, default=TrainingOptions.delta, show_default=True, help="Privacy parameter delta, in (0, 1)."),
        click.option("--cutoff", "cutoff", type=int, default=TrainingOptions.cutoff, show_default=True, help="T: abstentions (--gate guess: flipped answers) allowed before the session halts; --gate gnmax halts after --queries-max answers instead."),
        click.option("--queries-max", type=int, default=TrainingOptions.queries_max, show_default=True, help="m: the most queries the session will answer "
                     "(universal mode: A_AgPrivCl answers min(m_o, m); if m >= m_o there is no limit)."),
        click.option("--beta", type=float, default=TrainingOptions.beta, show_default=True, help="Failure probability beta (enters k)."),
        click.option("--profile", type=click.Choice(["tight", "paper"]), default=None,
                     help="How lambda, k and w are computed and the composition certified: 'tight' (the default in "
                     "realizable mode) = the exact optimal composition of the T sparse-vector instances "
                     "(Kairouz-Oh-Viswanath), about 2.5x less noise for the same (eps, delta); 'paper' = Algorithm 5 "
                     "exactly (the default, and the only profile, in agnostic and universal modes)."),
        click.option("--gate", type=click.Choice(["stability", "guess", "gnmax"]), default=None,
                     help="How the k votes are released (realizable mode). Not given: chosen from public parameters by the rule 'pcqr plan --private-rows N' prints (gnmax when its k leaves >= 100 rows per model and a 3/4 majority survives its noise, else guess; stability under --profile paper), and said on stderr. 'stability': Algorithm 5's "
                     "sparse vector on the distance to instability, releasing the majority label (w pays for it: delta_stab). 'guess': "
                     "the sparse vector on the votes' margin toward a PUBLIC guess g(x) (--guess); g(x) is released free, and when the "
                     "models disagree one of the T instances is spent and 1 - g(x) released: no stability term, "
                     "every query answered until T disagreements. 'gnmax': PATE's Gaussian noisy argmax: every one of "
                     "the first --queries-max queries gets the noisy majority (Renyi DP, no --cutoff, no --threshold), "
                     "then the session halts; best with many models and a bounded stream."),
        click.option("--guess", default=None, metavar="prior|student|MODEL.json",
                     help="The guess gate's g(x): 'student' (the default) = the --learner refitted on the answers "
                     "already released (post-processing of the public log); 'prior' = the more frequent released "
                     "label; or a released model file (pcqr learn's), which must not have seen the private data "
                     "outside a charged mechanism."),
        click.option("--subsamples", type=int, default=None, help="k, the number of subsample models (accuracy only: more models answer more; "
                     "default: Algorithm 5's k). pcqr warns, with the smallest k that works, when k is too few."),
        click.option("--threshold", type=float, default=None, help="w, the stability threshold: a PRIVACY parameter (it pays for releasing the exact "
                     "majority label, delta_stab = T p1). Default: the smallest w pcqr can certify; a w that "
                     "does not fit --delta is refused with the smallest that does. Under --profile tight w also moves lambda: a larger w "
                     "leaves more of delta to composition, so less noise (the summary's delta_composition shows the split). "
                     "Under --gate guess w is not a privacy parameter "
                     "(default 0: release the noisy majority; negative: charge only clear disagreements with the guess)."),
        click.option("--learner", default=TrainingOptions.learner, show_default=True, help="'threshold', 'stump', or a scikit-learn classifier's import path under an allowed module "
                     "(sklearn., pcqr.pipeline., or a prefix the operator lists in cluster.yaml under pcqr: learners: allow:)."),
        click.option("--learner-param", multiple=True, metavar="KEY=VALUE", help="A parameter of the learner (repeatable)."),
        click.option("--label", default=TrainingOptions.label, show_default=True, help="Label column (0/1) of the private data."),
        click.option("--features", default=None, help="Comma-separated feature columns (default: every column but the label; a column of a type pcqr cannot read as a number is refused by name)."),
        click.option("--seed", type=int, default=None, help="Seed all randomness (tests only: needs --insecure-seed)."),
        click.option("--insecure-seed", is_flag=True, help="Accept that --seed makes the output NOT private."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def progress(length: int, label: str) -> Any:
    """A click progress bar on stderr when it is a terminal; a silent stand-in otherwise."""
    if not progress_enabled():
        return NoBar()
    return click.progressbar(length=length, label=label, file=sys.stderr)


CLI_REPORTER = Reporter(note=note, progress=progress)
"""The command line's reporter: notes on stderr, progress bars on a terminal."""


def connect_to(cluster: str | None) -> Connect:
    """The command's cluster: ``--cluster`` (or ./cluster.yaml, or the built-in local cluster),
    validated and started when the library first needs it, closed when its block ends."""
    from pcqr.pipeline.data.cluster import load_cluster_config, open_client

    def connect(array_work: bool = False) -> ContextManager[Any]:
        load_cluster_config(cluster)
        return open_client(cluster, echo=note, array_work=array_work)
    return connect
