"""``pcqr release`` (A_PAP: answer every counting query of a class privately, with public data's
help) and ``pcqr release-answer`` (answer any query of the class from the released table:
post-processing, no privacy cost).

The job is pcqr.pipeline.mechanisms.with_public_data.release_with_public_data; the released table
(one Parquet file, a row per member of the cover with its answer, the provenance in the schema
metadata ``pcqr.release``) is pipeline/models/answer_table.py's format; release-answer's projection of
a query onto the cover, or onto a synthetic database, is pipeline/mechanisms/counting_queries.py.
"""
from __future__ import annotations

import json
from typing import Any

import click

from pcqr.jobs.common import (
    allow_overlap_option, cluster_option, emit_summary, json_option, ledger_option, note, overwrite_option, progress,
)
from pcqr.pipeline.data.outputs import Output, check_outputs


@click.command("release")
@click.option("--private", required=True, help="Private: the dataset (Parquet); read by the workers only, charged to the "
              "ledger; labels are not used.")
@click.option("--public", "public_uri", required=True, help="Public: a dataset (Parquet) with the same feature columns.")
@click.option("--hypothesis", required=True, help="Query class: threshold, interval, point (one feature) or stump (several).")
@click.option("--features", default=None, help="Comma-separated feature columns (default: every column of the public data; one of a type pcqr cannot read as a number is refused by name).")
@click.option("--epsilon", type=float, default=1.0, show_default=True, help="Privacy parameter eps.")
@click.option("--delta", type=float, default=1e-6, show_default=True, help="Privacy parameter delta, below 0.01 (refused otherwise) and, to mean something, below 1/n of the private rows (warned of otherwise).")
@click.option("--alpha", type=float, default=0.1, show_default=True, help="Target error alpha (PMW runs with alpha/2).")
@click.option("--beta", type=float, default=0.05, show_default=True, help="Failure probability beta (PMW runs with beta/2).")
@click.option("--pmw-constants", type=click.Choice(["dwork-roth", "calibrated"]), default="dwork-roth", show_default=True,
              help="dwork-roth: PMW's noise and threshold exactly as Dwork-Roth 4.2 (certifies about 0.35 eps under "
              "pcqr's accountant); calibrated: all scaled down by one factor until the accountant certifies exactly eps.")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Public: the released table (one Parquet file).")
@click.option("--seed", type=int, default=None, help="Seed all randomness (tests only: needs --insecure-seed).")
@click.option("--insecure-seed", is_flag=True, help="Accept that --seed makes the output NOT private.")
@allow_overlap_option
@overwrite_option
@ledger_option
@cluster_option
@json_option
def release_command(**o: Any) -> None:
    """Release answers to every counting query of a class (A_PAP of Bassily et al. 2020): the cover
    and the representative domain from the public data, then private multiplicative weights
    (Dwork-Roth 4.2) on the private rows mapped to representatives. (eps, delta)-DP."""
    from pcqr.pipeline.mechanisms.with_public_data import release_with_public_data

    check_outputs([Output("--out", o["out"])], [("--private", o["private"]), ("--public", o["public_uri"]),
                                                ("--ledger", o["ledger"]), ("--cluster", o["cluster"])], o["overwrite"])
    summary = release_with_public_data(
        o["private"], o["public_uri"], o["out"], hypothesis=o["hypothesis"], features=o["features"],
        epsilon=o["epsilon"], delta=o["delta"], alpha=o["alpha"], beta=o["beta"], pmw_constants=o["pmw_constants"],
        allow_private_overlap=o["allow_private_overlap"], cluster=o["cluster"], ledger=o["ledger"], seed=o["seed"],
        insecure_seed=o["insecure_seed"], note=note, progress=progress)
    emit_summary(summary, o["as_json"])


@click.command("release-answer")
@click.argument("table_path", metavar="TABLE")
@click.option("--query", "queries", multiple=True, required=True,
              help="A query of the table's class: key=value pairs (feature=x0,threshold=0.3,direction=up; "
              "interval: low=,high=; point: value=) or JSON. Repeatable.")
@click.option("--public", "public_uri", default=None, help="Public: the dataset the table was built from (default: the path recorded in the table).")
@json_option
def release_answer_command(table_path: str, queries: tuple[str, ...], public_uri: str | None, as_json: bool) -> None:
    """Answer queries of the class from a released table: each query is projected onto the cover
    (the member labelling the public points alike) and gets that member's answer; from a synthetic
    database (pcqr sanitize), the weights of the rows the query labels 1. Post-processing: no
    private data, no privacy cost.

    TABLE: a released table (public; pcqr release's or pcqr sanitize's)."""
    from pcqr.pipeline.mechanisms.counting_queries import answer_counting_queries

    _emit(table_path, answer_counting_queries(table_path, queries, public_uri), as_json)


def _emit(table_path: str, out: list[dict[str, Any]], as_json: bool) -> None:
    """The answers: one JSON object, or a line each (with the cover member when there is one)."""
    if as_json:
        click.echo(json.dumps({"table": table_path, "answers": out}))
        return
    for row in out:
        member = f"  (member {row['member']})" if "member" in row else ""
        click.echo(f"{row['answer']:.6f}  {row['query']}{member}")


command = release_command
