"""``pcqr learn`` (A_SSPP: release a private classifier using public unlabelled data; or
Beimel-Nissim-Stemmer's learners without public data) and ``pcqr predict`` (apply a released
classifier: post-processing, no privacy cost).

The jobs are pcqr.pipeline.mechanisms.private_learners.learn_private_classifier (A_SSPP or
Beimel-Nissim-Stemmer's learners) and pcqr.pipeline.models.predictions.predict_queries. The released
model is a small JSON file: the hypothesis class and its parameters, the feature names, and the
provenance. It is public and loadable without any of pcqr's private state
(:mod:`pcqr.pipeline.models.released`).
"""
from __future__ import annotations

from typing import Any

import click

from pcqr.jobs.common import (
    allow_overlap_option, cluster_option, emit_summary, json_option, ledger_option, note, overwrite_option,
)
from pcqr.pipeline.data.outputs import Output, check_outputs
from pcqr.pipeline.mechanisms.private_learners import ALGORITHMS


@click.command("learn")
@click.option("--private", required=True,
              help="Private: the labelled dataset (Parquet); read by the workers only, charged to the ledger.")
@click.option("--algorithm", type=click.Choice(ALGORITHMS), default="sspp", show_default=True,
              help="'sspp': A_SSPP, the semi-private learner (needs --public and --hypothesis). 'point': "
              "Beimel-Nissim-Stemmer's proper learner for point functions on one integer feature over the public "
              "--domain, via A_dist ((eps, delta)-DP, Lemma 3.2; no --public). 'learn-thresholds': their proper "
              "learner for thresholds over --domain via RecConcave ((eps, delta)-DP, Theorem 3.18; no --public). "
              "'rectangle': an axis-aligned box on every --features column over --domain, 2d runs of RecConcave "
              "((eps, delta)-DP, Theorem 3.22; no --public). 'label-private': their generic label-private learner "
              "(Fig. 13; needs --hypothesis and --features-are-public; no --public): candidates from the feature "
              "values of the first --first-rows rows, which the output REVEALS, the exponential mechanism on the "
              "labels of the others (pure eps in the labels, plus the sampler's delta).")
@click.option("--public", "public_uri", default=None, help="Public: --algorithm sspp: an unlabelled dataset (Parquet) "
              "with the same feature columns.")
@click.option("--hypothesis", default=None, help="--algorithm sspp / label-private: hypothesis class (threshold, "
              "interval, point, stump, rectangle, halfspace).")
@click.option("--features-are-public", is_flag=True, help="--algorithm label-private (required): your statement that "
              "the feature columns of --private are public knowledge (only the labels are private). The learner "
              "reveals the first rows' feature values; under this statement its label guarantee is the record-level "
              "one the ledger charges. Recorded in the model, the ledger charge and the summary.")
@click.option("--first-rows", type=int, default=None, help="--algorithm label-private: n, the first rows (in dataset "
              "order: files, then row groups) whose feature values build the candidates; their labels are never "
              "read; the other rows' labels are scored. Default: Fig. 13's n = ceil(32/alpha (VC ln(64/alpha) + "
              "ln(8/beta))). They should be a random sample of the rows for the utility bound.")
@click.option("--domain", default=None, help="--algorithm point / learn-thresholds / rectangle: the features' "
              "public integer domain LO:HI (e.g. 0:4294967295), given by you, never read from the rows; a row outside it "
              "counts for no point (point) or is labelled like the domain's nearest end (thresholds, box edges).")
@click.option("--direction", type=click.Choice(["up", "down"]), default=None, help="--algorithm learn-thresholds: "
              "the class, 'x > theta' (up, the default) or 'x <= theta' (down).")
@click.option("--epsilon", type=float, default=1.0, show_default=True, help="Privacy parameter eps.")
@click.option("--delta", type=float, default=1e-6, show_default=True, help="--algorithm point / learn-thresholds / "
              "rectangle: delta (A_dist's probability of releasing an unstable answer, and the composition's); below 0.01 "
              "(refused otherwise) and, to mean something, below 1/n of the private rows (warned of otherwise).")
@click.option("--alpha", type=float, default=0.1, show_default=True, help="--algorithm point / learn-thresholds / "
              "rectangle / label-private: target error alpha (learn-thresholds: RecConcave's approximation is "
              "alpha/2; rectangle: each edge cuts about alpha m / 4d positive rows; point: only the reported sample "
              "bounds; label-private: the default --first-rows and the reported sizes).")
@click.option("--beta", type=float, default=0.05, show_default=True, help="Failure probability for the reported "
              "cover radius (sspp, label-private) or sample bounds (point, label-private's default --first-rows).")
@click.option("--label", default="label", show_default=True, help="Label column (0/1) of the private data.")
@click.option("--features", default=None, help="Comma-separated feature columns (default: every column but the label; a column of a type pcqr cannot read as a number is refused by name).")
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False), help="Public: where to write the released model (JSON).")
@click.option("--seed", type=int, default=None, help="Seed all randomness (tests only: needs --insecure-seed).")
@click.option("--insecure-seed", is_flag=True, help="Accept that --seed makes the output NOT private.")
@allow_overlap_option
@overwrite_option
@ledger_option
@cluster_option
@json_option
def learn_command(**o: Any) -> None:
    """Release a private classifier as a model file `pcqr predict` serves.

    --algorithm sspp (default): h_priv = A_SSPP(private, public): the cover from public points, the
    exponential mechanism on the private rows ((eps, delta_EM)-DP: ABM19, Lemma 3.2 of papers/004,
    plus the sampler's delta_EM, tiny; see pipeline/mechanisms/sspp.py).

    --algorithm point: the point function c_j(x) = [x == j] on one integer feature over --domain,
    j the value with the most rows labelled 1 when A_dist's noisy stability test passes, else the
    all-zero function ((eps, delta)-DP: Beimel-Nissim-Stemmer Lemma 3.2 and Prop 2.26; see
    pipeline/mechanisms/learn_point.py).

    --algorithm learn-thresholds: the threshold 'x > theta' (or 'x <= theta' with --direction down)
    on one feature over --domain, theta chosen by RecConcave on the rows each threshold labels
    correctly ((eps, delta)-DP: Beimel-Nissim-Stemmer Theorem 3.18 and Lemma 3.12; see
    pipeline/mechanisms/learn_thresholds.py).

    --algorithm rectangle: the box 'lo_i < x_i <= hi_i' on every --features column, each edge
    chosen by RecConcave to cut about alpha m / 4d positive rows off its side ((eps, delta)-DP:
    Beimel-Nissim-Stemmer Theorem 3.22; the construction and its proof are in docs/privacy.md,
    Mechanism 13; pipeline/mechanisms/learn_rectangle.py).

    --algorithm label-private: Beimel-Nissim-Stemmer's generic label-private learner (Fig. 13): one
    --hypothesis per dichotomy of the class on the first n rows' feature values, the exponential
    mechanism on the labels of the rows after them. LABEL privacy only: the output reveals those
    feature values. Refused unless --features-are-public states that the feature columns are public
    knowledge; under that statement it is (eps, delta_EM)-DP per record, charged so (guarantee
    "label privacy: the feature columns are stated public"; docs/privacy.md, Mechanism 15;
    pipeline/mechanisms/label_private.py)."""
    from pcqr.pipeline.mechanisms.private_learners import learn_private_classifier

    check_outputs([Output("--out", o["out"])], [("--private", o["private"]), ("--public", o["public_uri"]),
                                                ("--ledger", o["ledger"]), ("--cluster", o["cluster"])], o["overwrite"])
    summary = learn_private_classifier(
        o["algorithm"], o["private"], o["out"], public=o["public_uri"], hypothesis=o["hypothesis"], domain=o["domain"],
        direction=o["direction"], first_rows=o["first_rows"], features_are_public=o["features_are_public"],
        features=o["features"], label=o["label"], epsilon=o["epsilon"], delta=o["delta"], alpha=o["alpha"],
        beta=o["beta"], allow_private_overlap=o["allow_private_overlap"], cluster=o["cluster"], ledger=o["ledger"],
        seed=o["seed"], insecure_seed=o["insecure_seed"], note=note)
    emit_summary(summary, o["as_json"])


@click.command("predict")
@click.argument("model_path", metavar="MODEL")
@click.argument("queries", metavar="QUERIES")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Public: the output directory of Parquet predictions.")
@click.option("--id-column", default=None, help="Query id column (integers). Default: query_id if the queries have it, "
              "else row positions; a column given here must exist.")
@allow_overlap_option
@overwrite_option
@ledger_option
@cluster_option
@json_option
def predict_command(model_path: str, queries: str, out: str, id_column: str | None, allow_private_overlap: bool,
                    overwrite: bool, ledger: str | None, cluster: str | None, as_json: bool) -> None:
    """Apply a released model to queries (post-processing: no privacy cost).

    MODEL: a released model file (public; pcqr learn's or pcqr distill's). QUERIES: the queries
    (Parquet file or directory, public) with the model's feature columns. Queries holding rows of a
    registered private dataset are refused (the predictions would publish a function of each of
    those rows, by id) unless --allow-private-overlap. Each part file holds query_id and prediction:
    0 or 1, or for a student of a session over c > 2 classes the class index 0 .. c - 1 (as the log's
    answer; the summary names the classes)."""
    from pcqr.pipeline.models.predictions import predict_queries

    summary = predict_queries(model_path, queries, out, id_column=id_column, overwrite=overwrite,
                              allow_private_overlap=allow_private_overlap, ledger=ledger, cluster=cluster, note=note)
    emit_summary(summary, as_json)


command = learn_command
