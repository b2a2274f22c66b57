"""The options of a private session, shared by ``pcqr train`` and ``pcqr answer``: the parameters of
A_SubSamp (Algorithm 5), its gate and mode, the learner and how the noise is drawn. Their defaults
are :class:`pcqr.pipeline.options.TrainingOptions`'s."""
from __future__ import annotations

from typing import Any, Callable, TypeVar

import click
from click.core import ParameterSource

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.options import TrainingOptions

F = TypeVar("F", bound=Callable[..., Any])


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
        click.option("--delta", type=float, default=TrainingOptions.delta, show_default=True, help="Privacy parameter delta, below 0.01 (refused otherwise) and, to mean something, below 1/n of the private rows (warned of otherwise)."),
        click.option("--cutoff", "cutoff", type=int, default=TrainingOptions.cutoff, show_default=True, help="T: abstentions (--gate guess: flipped answers) allowed before the session halts; --gate gnmax halts after --queries-max answers instead."),
        click.option("--queries-max", type=int, default=TrainingOptions.queries_max, show_default=True, help="m: the most queries the session will answer "
                     "(universal mode: A_AgPrivCl answers min(m_o, m); if m >= m_o there is no limit)."),
        click.option("--labels", type=int, default=None, metavar="M",
                     help="Spend the budget on the first M answers: the session (k, sigma or lambda, the gate, the "
                     "certificate) is planned for M answers instead of --queries-max, the k models answer the first "
                     "M queries, and the student distilled from those answers answers every later one (log source "
                     "'student'; post-processing, no budget). Replaces --queries-max (give one); not with "
                     "--after-halt refuse or --mode universal. 'pcqr plan --private-rows N' recommends an M."),
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
        click.option("--learner", default=TrainingOptions.learner, show_default=True, help="'threshold', 'stump', 'auto' (a decision tree as deep as n / k rows a model support, "
                     "from public parameters: depth round(log2(n/k)) - 1, 3 to 6), or a scikit-learn classifier's "
                     "import path under an allowed module (sklearn., pcqr.pipeline., or a prefix the operator lists "
                     "in cluster.yaml under pcqr: learners: allow:)."),
        click.option("--learner-param", multiple=True, metavar="KEY=VALUE", help="A parameter of the learner (repeatable)."),
        click.option("--label", default=TrainingOptions.label, show_default=True, help="Label column of the private data: 0/1, or the class indices 0 .. c - 1 with --classes c."),
        click.option("--classes", default=str(TrainingOptions.classes), show_default=True,
                     help="The classes the labels and answers range over (public, given: never read from the private "
                          "rows): a count c (the labels 0 .. c - 1), or the labels' names in class order, comma-"
                          "separated (low,mid,high: the label column holds those names; the log's answer holds the "
                          "class index, its provenance the names). More than two (at most 100) are answered by "
                          "--gate gnmax (the default) or stability, in realizable mode."),
        click.option("--features", default=None, help="Comma-separated feature columns (default: every column but the label; a column of a type pcqr cannot read as a number is refused by name)."),
        click.option("--seed", type=int, default=None, help="Seed all randomness (tests only: needs --insecure-seed)."),
        click.option("--insecure-seed", is_flag=True, help="Accept that --seed makes the output NOT private."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def check_labels_alone(ctx: click.Context) -> None:
    """``--labels M`` replaces ``--queries-max``: both given (even at its default value) is refused in one line."""
    given = ctx.get_parameter_source("queries_max") not in (None, ParameterSource.DEFAULT)
    if ctx.params.get("labels") is not None and given:
        raise PcqrError("--labels M replaces --queries-max: give one")


def class_values(values: dict[str, Any]) -> dict[str, Any]:
    """The command's options with ``--classes`` read (pcqr.pipeline.privacy.limits.parse_classes): the
    count as ``classes``, the names (if given) as ``class_names``."""
    from pcqr.pipeline.privacy.limits import parse_classes

    count, names = parse_classes(str(values.get("classes", TrainingOptions.classes)))
    return {**values, "classes": count, "class_names": names}
