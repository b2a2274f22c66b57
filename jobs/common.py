"""Options and output shared by every job command."""
from __future__ import annotations

import json
import os
import sys
from typing import Any, Callable, TypeVar

import click

from pcqr.pipeline.errors import PcqrError

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
    """``--ledger PATH``: the ledger database (default $PCQR_LEDGER, else ~/.local/share/pcqr/ledger.sqlite)."""
    return click.option(
        "--ledger", "ledger", type=click.Path(dir_okay=False), default=None,
        help="Privacy-budget ledger (SQLite; default: $PCQR_LEDGER, else ~/.local/share/pcqr/ledger.sqlite).",
    )(func)


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


def _check_folder(folder: str, path: str, option: str) -> None:
    """``folder`` (or its nearest existing ancestor) can hold what ``option path`` will write."""
    while not os.path.exists(folder):
        folder = os.path.dirname(folder)
    if not os.path.isdir(folder):
        raise PcqrError(f"{option} {path}: cannot be created: {folder} is a file, not a directory")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise PcqrError(f"{option} {path}: cannot write to {folder} (read-only or no permission)")


def check_writable_directory(path: str, option: str) -> None:
    """Refuse, before any work, a directory this command will write into that cannot be written:
    under a file, or whose nearest existing folder is read-only (nothing is created here).

    Raises
    ------
    PcqrError
        One line naming the option and the directory.
    """
    _check_folder(os.path.abspath(path), path, option)


def check_writable_file(path: str, option: str) -> None:
    """Refuse, before any work (and before any charge), an output file that cannot be written:
    a directory, under a file, or in a read-only folder (nothing is created here)."""
    if os.path.isdir(path):
        raise PcqrError(f"{option} {path}: is a directory; give a file path")
    _check_folder(os.path.dirname(os.path.abspath(path)), path, option)


def note(message: str) -> None:
    """A progress or status line for the user, on stderr so stdout stays machine-readable."""
    click.echo(message, err=True)


def progress_enabled() -> bool:
    """Progress bars only on a terminal."""
    return sys.stderr.isatty()


def privacy_options(func: F) -> F:
    """The parameters of A_SubSamp (Algorithm 5) and how its noise is drawn."""
    options = [
        click.option("--mode", type=click.Choice(["realizable", "agnostic", "universal"]), default="realizable",
                     show_default=True,
                     help="realizable: A_SubSamp on the data; agnostic: A_AgPrivCl (relabel a subsample with a "
                     "hypothesis chosen privately over the dichotomies of --hypothesis, then A_SubSamp; T is derived); "
                     "universal: A_UnvPrivCl (A_AgPrivCl at eps/2 for the first m_o queries, then a classifier "
                     "released by A_SSPP at eps/2 from their features answers every later query, at no further cost)."),
        click.option("--hypothesis", default=None, help="Agnostic and universal modes: the hypothesis class used to "
                     "relabel and to learn (threshold, interval, point, stump, rectangle, halfspace)."),
        click.option("--alpha", type=float, default=0.1, show_default=True,
                     help="Agnostic and universal modes: target excess error alpha."),
        click.option("--epsilon", type=float, default=1.0, show_default=True, help="Privacy parameter eps of the whole session."),
        click.option("--delta", type=float, default=1e-6, show_default=True, help="Privacy parameter delta, in (0, 1)."),
        click.option("--cutoff", "cutoff", type=int, default=50, show_default=True, help="T: abstentions allowed before the session halts."),
        click.option("--queries-max", type=int, default=10_000, show_default=True, help="m: the most queries the session will answer "
                     "(universal mode: A_AgPrivCl answers min(m_o, m); if m >= m_o there is no limit)."),
        click.option("--beta", type=float, default=0.05, show_default=True, help="Failure probability beta (enters k)."),
        click.option("--profile", type=click.Choice(["paper"]), default="paper", show_default=True, help="How lambda, k and w are computed: 'paper' = Algorithm 5 exactly."),
        click.option("--subsamples", type=int, default=None, help="k, the number of subsample models (accuracy only: more models answer more; "
                     "default: Algorithm 5's k). pcqr warns, with the smallest k that works, when k is too few."),
        click.option("--threshold", type=float, default=None, help="w, the stability threshold: a PRIVACY parameter (it pays for releasing the exact "
                     "majority label, delta_stab = T p1). Default: the smallest w pcqr can certify; a w that "
                     "does not fit --delta is refused with the smallest that does."),
        click.option("--learner", default="stump", show_default=True, help="'threshold', 'stump', or a scikit-learn classifier's import path under an allowed module "
                     "(sklearn., pcqr.pipeline., or a prefix the operator lists in cluster.yaml under pcqr: learners: allow:)."),
        click.option("--learner-param", multiple=True, metavar="KEY=VALUE", help="A parameter of the learner (repeatable)."),
        click.option("--label", default="label", show_default=True, help="Label column (0/1) of the private data."),
        click.option("--features", default=None, help="Comma-separated feature columns (default: every numeric column but the label)."),
        click.option("--seed", type=int, default=None, help="Seed all randomness (tests only: needs --insecure-seed)."),
        click.option("--insecure-seed", is_flag=True, help="Accept that --seed makes the output NOT private."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def split_features(features: str | None) -> list[str] | None:
    """``--features a,b,c`` to a list (None when not given)."""
    if not features:
        return None
    return [f.strip() for f in features.split(",") if f.strip()]


class _NoBar:
    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, steps: int) -> None:
        return None


def progress(length: int, label: str) -> Any:
    """A click progress bar on stderr when it is a terminal; a silent stand-in otherwise."""
    if not progress_enabled():
        return _NoBar()
    return click.progressbar(length=length, label=label, file=sys.stderr)
