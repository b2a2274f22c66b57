"""``pcqr sanitize``: release a synthetic database that answers every counting query of a simple
class, from private data alone (no public data). ``pcqr release-answer`` answers queries from it at
no cost.

--algorithm histogram (point queries) and cdf (threshold queries): the practitioner's sanitizers
(issue 31; pipeline/mechanisms/stable_histogram.py, hierarchical_cdf.py). --algorithm san-points and
san-thresholds: Beimel-Nissim-Stemmer's (papers/002 section 4: Fig. 9, Theorem 4.6; Fig. 11, Lemma
4.8; pipeline/mechanisms/san_points.py, san_thresholds.py). The job is
pcqr.pipeline.mechanisms.without_public_data.sanitize (also ``pcqr.sanitize``); the table is written
by pipeline/models/synthetic.py.
"""
from __future__ import annotations

from typing import Any

import click

from pcqr.jobs.common import cluster_option, emit_summary, json_option, ledger_option, note, overwrite_option
from pcqr.pipeline.data.outputs import Output, check_outputs
from pcqr.pipeline.mechanisms.without_public_data import SANITIZERS

#: ``pcqr sanitize --algorithm``: the practitioner's (issue 31) and Beimel-Nissim-Stemmer's (issue 14).
ALGORITHMS = SANITIZERS


@click.command("sanitize")
@click.option("--private", required=True, help="Private: the dataset (Parquet); read by the workers only, charged to the "
              "ledger; labels are not used.")
@click.option("--algorithm", type=click.Choice(ALGORITHMS), default="histogram", show_default=True,
              help="Point queries ('what share of rows equal v'): 'histogram', the stability-based histogram of "
              "the values seen (noisy counts kept above a threshold; error about 6e-5 at 10^6 rows, eps 1): the "
              "one to use; 'san-points', SanPoints (Beimel-Nissim-Stemmer Fig. 9; needs about 150,000 rows at "
              "alpha 0.1). Threshold queries ('what share of rows are <= j'): 'cdf', noisy counts on a 16-ary "
              "tree over the domain (pure eps-DP; error about 3e-4 at 10^6 rows, eps 1): the one to use; "
              "'san-thresholds', SanThresholds (Fig. 11; ceil(77/alpha) calls, millions of rows).")
@click.option("--features", default=None, help="The ONE integer feature column to sanitize (default: the data's only "
              "column).")
@click.option("--domain", required=True, help="The feature's public integer domain LO:HI (e.g. 0:4294967295), given "
              "by you, never read from the rows; a row outside it counts in the size and for no point (cdf, san-thresholds: "
              "rows are taken at ceil(x) clipped to LO:HI).")
@click.option("--epsilon", type=float, default=1.0, show_default=True, help="Privacy parameter eps.")
@click.option("--delta", type=float, default=1e-6, show_default=True, help="Privacy parameter delta, below 0.01 (refused "
              "otherwise) and, to mean something, below 1/n of the private rows (warned of otherwise); cdf is pure "
              "eps-DP: it proves delta 0.")
@click.option("--alpha", type=float, default=None, help="Target error alpha of every query's answer (a share of "
              "the rows; default 0.1); fewer rows are refused with the least number that is certified. Not for "
              "cdf, whose summary reports its noise instead (threshold_noise_sd_share).")
@click.option("--beta", type=float, default=None, help="Failure probability beta of the alpha guarantee (default "
              "0.05; not for cdf).")
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False), help="Public: where to write the synthetic "
              "database (one Parquet file: the feature column and 'weight').")
@click.option("--seed", type=int, default=None, help="Seed all randomness (tests only: needs --insecure-seed).")
@click.option("--insecure-seed", is_flag=True, help="Accept that --seed makes the output NOT private.")
@overwrite_option
@ledger_option
@cluster_option
@json_option
def sanitize_command(**o: Any) -> None:
    """Release a synthetic database from private data alone: a weighted table of feature values
    whose weights answer every point query (the share of rows equal to a value; histogram,
    san-points) or every threshold query (the share of rows below a value; cdf, san-thresholds),
    under (eps, delta)-DP. Charged to the ledger before any row is read.

    \b
    Example (runs as written, in order, in an empty folder):
      pcqr generate --integer-scale 100 --queries 0 --out counts   # x0 = floor(100 z), an integer
      pcqr sanitize --algorithm histogram --private counts/private --features x0 --domain -1000:1000 \\
        --epsilon 1 --out points.parquet
      pcqr release-answer points.parquet --query value=42
      pcqr sanitize --algorithm cdf --private counts/private --features x0 --domain -1000:1000 \\
        --epsilon 1 --out cdf.parquet
      pcqr release-answer cdf.parquet --query threshold=41,direction=down   # the share of rows x <= 41"""
    from pcqr.pipeline.mechanisms.without_public_data import sanitize

    check_outputs([Output("--out", o["out"])], [("--private", o["private"]), ("--ledger", o["ledger"]),
                                                ("--cluster", o["cluster"])], o["overwrite"])
    summary = sanitize(o["private"], o["out"], domain=o["domain"], algorithm=o["algorithm"], features=o["features"],
                       epsilon=o["epsilon"], delta=o["delta"], alpha=o["alpha"], beta=o["beta"], cluster=o["cluster"],
                       ledger=o["ledger"], seed=o["seed"], insecure_seed=o["insecure_seed"], note=note)
    emit_summary(summary, o["as_json"])


command = sanitize_command
