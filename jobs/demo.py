"""``pcqr demo``: the whole product on the embedded default, in one command.

Generates synthetic data (a threshold on one of 5 features), trains k
subsample models on a local Dask cluster, answers the queries through the
sparse-vector coordinator into a public log, and prints the summary with the
accuracy against the generated truth.
"""
from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from typing import Any

import click

from jobs import answer, generate
from jobs.common import cluster_option, json_option, note


@click.command("demo")
@click.option("--out", default=None, type=click.Path(file_okay=False), help="Working directory (default: a new temporary one).")
@click.option("--rows", type=int, default=3_000_000, show_default=True, help="Private rows to generate.")
@click.option("--queries", type=int, default=10_000, show_default=True, help="Queries to generate and answer.")
@click.option("--noise", type=float, default=0.0, show_default=True, help="Label noise (0 = realizable).")
@click.option("--epsilon", type=float, default=4.0, show_default=True, help="Privacy parameter eps.")
@click.option("--subsamples", type=int, default=2500, show_default=True, help="k, the number of subsample models.")
@click.option("--cutoff", type=int, default=20, show_default=True, help="T, abstentions allowed before the session halts.")
@click.option("--threshold", type=float, default=None,
              help="w, the stability threshold (a privacy parameter; default: the smallest certifiable).")
@cluster_option
@json_option
def command(out: str | None, rows: int, queries: int, noise: float, epsilon: float,
            subsamples: int, cutoff: int, threshold: float | None, cluster: str | None, as_json: bool) -> None:
    """Generate data, train, answer and summarise, on a local cluster by default."""
    work = out or tempfile.mkdtemp(prefix="pcqr-demo-")
    data = os.path.join(work, "data")
    note(f"demo: working in {work}")
    kind = "agnostic" if noise > 0 else "realizable"
    common = ["--cluster", cluster] if cluster else []
    with contextlib.redirect_stdout(sys.stderr):  # stdout keeps only the answer summary
        generate.command.main(
            args=["--kind", kind, "--rows", str(rows), "--features", "5", "--queries", str(queries),
                  "--noise", str(noise), "--seed", "0", "--out", data, "--overwrite", "--json", *common],
            prog_name="pcqr generate", standalone_mode=False,
        )
    args: list[Any] = [
        "--private", os.path.join(data, "private"), "--queries", os.path.join(data, "queries"),
        "--truth", os.path.join(data, "truth"), "--state", os.path.join(work, "state"),
        "--log", os.path.join(work, "log"), "--epsilon", str(epsilon), "--delta", "1e-6",
        "--cutoff", str(cutoff), "--queries-max", str(queries), "--subsamples", str(subsamples),
        "--learner", "stump", *common, *(["--threshold", str(threshold)] if threshold is not None else []),
    ]
    if as_json:
        args.append("--json")
    answer.command.main(args=args, prog_name="pcqr answer", standalone_mode=False)
