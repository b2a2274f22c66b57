"""``pcqr sanitize``: release a synthetic database that answers every counting query of a simple
class within alpha, from private data alone (Beimel-Nissim-Stemmer, papers/002 section 4; no public
data). ``pcqr release-answer`` answers queries from it at no cost.

--algorithm san-points: SanPoints (Fig. 9, Theorem 4.6) for point queries on one integer feature
over the public --domain (pipeline/mechanisms/san_points.py). The table is written by
pipeline/models/synthetic.py.
"""
from __future__ import annotations

from typing import Any

import click

from pcqr.jobs.common import (
    check_writable_file, cluster_option, emit_summary, json_option, ledger_option, note, split_features,
)
from pcqr.pipeline.budget.ledger import charge_note, provisional_charge
from pcqr.pipeline.data.cluster import load_cluster_config, open_client
from pcqr.pipeline.data.datasets import load_features, open_dataset
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.models.subsample import PART_ROWS

#: ``pcqr sanitize --algorithm``: Beimel-Nissim-Stemmer's sanitizers built so far (issue 14).
ALGORITHMS = ("san-points",)


@click.command("sanitize")
@click.option("--private", required=True, help="Private dataset (Parquet): read by the workers only; labels are not used.")
@click.option("--algorithm", type=click.Choice(ALGORITHMS), default="san-points", show_default=True,
              help="'san-points': SanPoints (Beimel-Nissim-Stemmer Fig. 9): every point query 'what share of rows "
              "equal v' within alpha ((eps, delta)-DP, Theorem 4.6).")
@click.option("--features", default=None, help="The ONE integer feature column to sanitize (default: the data's only "
              "numeric column).")
@click.option("--domain", required=True, help="The feature's public integer domain LO:HI (e.g. 0:4294967295), given "
              "by you, never read from the rows; a row outside it counts in the size and for no point.")
@click.option("--epsilon", type=float, default=1.0, show_default=True, help="Privacy parameter eps.")
@click.option("--delta", type=float, default=1e-6, show_default=True, help="Privacy parameter delta, in (0, 1).")
@click.option("--alpha", type=float, default=0.1, show_default=True, help="Target error alpha of every query's answer "
              "(a share of the rows); fewer rows are refused with the least number that is certified.")
@click.option("--beta", type=float, default=0.05, show_default=True, help="Failure probability beta of the alpha "
              "guarantee.")
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False), help="Where to write the synthetic "
              "database (one Parquet file: the feature column and 'weight').")
@click.option("--seed", type=int, default=None, help="Seed all randomness (tests only: needs --insecure-seed).")
@click.option("--insecure-seed", is_flag=True, help="Accept that --seed makes the output NOT private.")
@ledger_option
@cluster_option
@json_option
def sanitize_command(**o: Any) -> None:
    """Release a synthetic database from private data alone: a weighted table of feature values
    whose weights answer every point query (the share of rows equal to a value) within --alpha,
    with probability 1 - --beta, under (eps, delta)-DP. Charged to the ledger before any row is read.

    \b
    Example:
      pcqr sanitize --private data/private --features x0 --domain 0:4294967295 --epsilon 1 --out points.parquet
      pcqr release-answer points.parquet --query value=42"""
    from pcqr.pipeline.mechanisms.integer_domain import Domain, merge_counts, value_counts
    from pcqr.pipeline.mechanisms.san_points import SanPointsParameters, san_points
    from pcqr.pipeline.models.synthetic import WEIGHT_COLUMN, write_synthetic
    from pcqr.pipeline.privacy.noise import noise_source

    domain = Domain.parse(o["domain"])
    check_writable_file(o["out"], "--out")
    noise = noise_source(o["seed"], o["insecure_seed"])
    private = open_dataset(o["private"], "private", features=split_features(o["features"]))
    if len(private.features) != 1:
        raise PcqrError(f"--private {private.uri}: --algorithm {o['algorithm']} sanitizes ONE feature column, found "
                        f"{len(private.features)} ({', '.join(private.features[:4])}...); pass --features COLUMN")
    feature = private.features[0]
    if feature == WEIGHT_COLUMN:
        raise PcqrError(f"--features {feature}: the synthetic database's own column is called {WEIGHT_COLUMN!r}; "
                        "rename the feature")
    params = SanPointsParameters.create(o["epsilon"], o["delta"], o["alpha"], o["beta"], private.rows)
    proven = params.certificate()
    load_cluster_config(o["cluster"])
    with open_client(o["cluster"], echo=note, array_work=True) as client:  # reading and counting: numpy only
        with provisional_charge(private.files, private.uri, "sanitize", o["epsilon"], proven["proven_delta"],
                                {"algorithm": o["algorithm"], "epsilon": o["epsilon"], "delta": o["delta"],
                                 "alpha": o["alpha"], "beta": o["beta"], "domain": domain.describe(), "out": o["out"]},
                                o["ledger"], client, private.features) as charged:
            parts = [client.submit(load_features, p, [feature], pure=False) for p in private.parts(PART_ROWS)]
            counts = client.submit(merge_counts, *[client.submit(value_counts, part, domain, pure=False)
                                                   for part in parts], pure=False).result()
            released = san_points(*counts, params, noise)
    values = [v for v, _ in released]
    weights = [w for _, w in released]
    summary: dict[str, Any] = {
        "out": o["out"], "algorithm": o["algorithm"], "class": "point", "feature": feature,
        "mechanism": "SanPoints (Beimel-Nissim-Stemmer, Fig. 9, Theorem 4.6) with KOV's composition",
        "domain": domain.describe(), "domain_size": domain.size, "private_rows": private.rows,
        "released_points": len(values), "epsilon": o["epsilon"], "delta": o["delta"], "alpha": o["alpha"],
        "beta": o["beta"], **proven, **params.to_dict(),
        "rows_certified": SanPointsParameters.least_rows(o["epsilon"], o["delta"], o["alpha"], o["beta"]),
        "rows_for_utility": params.utility_rows(),
        "answer": "a point query's answer is the weight of its value (0 if absent): a share of the private rows",
        "privacy": "private" if noise.private else "NOT PRIVATE (seeded noise)",
    }
    write_synthetic(o["out"], feature, values, weights, noise.private,
                    **{k: v for k, v in summary.items() if k not in ("out", "feature", "privacy")})
    emit_summary({**summary, "ledger": charge_note(charged)}, o["as_json"])


command = sanitize_command
