"""``pcqr learn`` (A_SSPP: release a private classifier using public unlabelled data) and
``pcqr predict`` (apply a released classifier: post-processing, no privacy cost).

The released model is a small JSON file: the hypothesis class and its parameters,
the feature names, and the provenance. It is public and loadable without any of
pcqr's private state (:mod:`pcqr.pipeline.models.released`).
"""
from __future__ import annotations

import os
from typing import Any

import click
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pcqr.jobs.common import (
    allow_overlap_option, check_writable_directory, check_writable_file, cluster_option, emit_summary, json_option,
    ledger_option, note, split_features,
)
from pcqr.pipeline.data.atomic import write_atomic
from pcqr.pipeline.data.cluster import load_cluster_config, open_client
from pcqr.pipeline.data.datasets import feature_matrix, id_values, open_dataset, open_matching, read_part, read_public_features
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.budget.charging import provisional_charge
from pcqr.pipeline.budget.ledger import charge_note
from pcqr.pipeline.privacy.limits import MIN_EM_EPSILON
from pcqr.pipeline.privacy.subsamp import check_epsilon, check_fraction
from pcqr.pipeline.models.released import load_model, write_model
from pcqr.pipeline.models.subsample import PART_ROWS
from pcqr.pipeline.mechanisms.without_public_data import LEARNERS

#: ``pcqr learn --algorithm``: the semi-private learner, or Beimel-Nissim-Stemmer's learners (issue 14).
ALGORITHMS = ("sspp", *LEARNERS)


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
              "rectangle: delta (A_dist's probability of releasing an unstable answer, and the composition's).")
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
    if o["direction"] is not None and o["algorithm"] != "learn-thresholds":
        raise PcqrError("--direction is for --algorithm learn-thresholds")
    if o["algorithm"] != "sspp":
        _learn_without_public_data(o)
        return
    for option, key in (("--first-rows", "first_rows"), ("--features-are-public", "features_are_public")):
        if o[key] not in (None, False):
            raise PcqrError(f"{option} is for --algorithm label-private")
    for option, key in (("--public", "public_uri"), ("--hypothesis", "hypothesis")):
        if o[key] is None:
            raise PcqrError(f"Missing option '{option}' (--algorithm sspp, the default, needs it)")
    if o["domain"] is not None:
        raise PcqrError("--domain is for --algorithm point, learn-thresholds or rectangle; A_SSPP's candidates come "
                        "from --public")
    _learn_sspp(o)


def _learn_sspp(o: dict[str, Any]) -> None:
    from pcqr.pipeline.hypotheses import check_enumerable, make_class
    from pcqr.pipeline.mechanisms.sspp import certificate, release_classifier
    from pcqr.pipeline.privacy.noise import noise_source
    from pcqr.pipeline.budget.overlap import guard_public_inputs

    check_epsilon(o["epsilon"], lowest=MIN_EM_EPSILON)  # pcqr.pipeline.privacy.limits
    check_fraction(o["beta"], "--beta")
    check_writable_file(o["out"], "--out")  # before the charge, not after the release
    noise = noise_source(o["seed"], o["insecure_seed"])
    private = open_dataset(o["private"], "private", label=o["label"], features=split_features(o["features"]))
    public = open_matching(o["public_uri"], "public", list(private.features), "the private features")
    hclass = make_class(o["hypothesis"], len(private.features))  # refuses a bad class before the cluster starts
    points = read_public_features(public)
    check_enumerable(hclass, points.shape[0], f"--public {public.uri}")  # before the charge
    if certificate(o["epsilon"], private.rows)["proven_delta"] >= 1:  # the ledger could not charge it
        raise PcqrError(f"--epsilon {o['epsilon']:g}: at n = {private.rows} rows A_SSPP's sampled exponential "
                        "mechanism proves nothing (delta_EM = (1 + e^eps) TV(n) >= 1); use a smaller --epsilon")
    load_cluster_config(o["cluster"])
    allowed: dict[str, Any] = {"allow_private_overlap": True} if o["allow_private_overlap"] else {}
    with open_client(o["cluster"], echo=note) as client:
        guard_public_inputs([("--public", public)], bool(allowed), o["ledger"], private, client, note)  # uncharged
        proven = certificate(o["epsilon"], private.rows)
        with provisional_charge(private.files, private.uri, "learn", o["epsilon"], proven["proven_delta"],
                                {"hypothesis": o["hypothesis"], "epsilon": o["epsilon"], "public": public.uri,
                                 "out": o["out"], **allowed}, o["ledger"], client, private.features) as charged:
            _, model = release_classifier(client, o["hypothesis"], private, points, o["epsilon"], o["beta"], noise,
                                          **allowed)
    _write_and_report(o, model, charged)


def _learn_without_public_data(o: dict[str, Any]) -> None:
    """--algorithm point / learn-thresholds / rectangle / label-private:
    pcqr.pipeline.mechanisms.without_public_data does the job."""
    from pcqr.pipeline.mechanisms.without_public_data import learn_without_public_data

    if o["algorithm"] == "label-private" and o["public_uri"] is not None:
        raise PcqrError("--public: label-private reads no public dataset: S1 is the first rows of --private "
                        "(--first-rows); for a separate public sample use --algorithm sspp")
    for option, key in (("--public", "public_uri"), ("--hypothesis", "hypothesis")):
        if o[key] is not None and o["algorithm"] != "label-private":
            raise PcqrError(f"{option} is for --algorithm sspp; --algorithm {o['algorithm']} reads no public data")
    summary = learn_without_public_data(
        o["private"], o["out"], algorithm=o["algorithm"], domain=o["domain"], features=o["features"], label=o["label"],
        epsilon=o["epsilon"], delta=o["delta"], alpha=o["alpha"], beta=o["beta"], direction=o["direction"] or "up",
        hypothesis=o["hypothesis"], first_rows=o["first_rows"], features_are_public=o["features_are_public"],
        cluster=o["cluster"], ledger=o["ledger"], seed=o["seed"], insecure_seed=o["insecure_seed"], note=note)
    emit_summary(summary, o["as_json"])


def _write_and_report(o: dict[str, Any], model: dict[str, Any], charged: dict[str, Any]) -> None:
    """Write the released model file and print its public record (not the hypothesis itself) and the charge."""
    write_model(o["out"], model)
    summary = {k: v for k, v in model.items() if k not in ("hypothesis", "format")}
    emit_summary({"model": o["out"], **summary, "ledger": charge_note(charged)}, o["as_json"])


def _predict_part(part: Any, features: list[str], id_column: str | None, hypothesis: Any) -> pa.Table:
    """Worker: predictions for one part of the query dataset."""
    columns = [*features] + ([id_column] if id_column else [])
    table = read_part(part, columns)
    X = feature_matrix(table, features, part.file)
    ids = (id_values(table, id_column, part.file) if id_column
           else pa.array(np.arange(part.start, part.start + table.num_rows)))
    return pa.table({"query_id": ids, "prediction": pa.array(hypothesis.predict(X), type=pa.int8())})


@click.command("predict")
@click.argument("model_path", metavar="MODEL")
@click.argument("queries", metavar="QUERIES")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Public: the output directory of Parquet predictions.")
@click.option("--id-column", default=None, help="Query id column (integers). Default: query_id if the queries have it, "
              "else row positions; a column given here must exist.")
@allow_overlap_option
@ledger_option
@cluster_option
@json_option
def predict_command(model_path: str, queries: str, out: str, id_column: str | None, allow_private_overlap: bool,
                    ledger: str | None, cluster: str | None, as_json: bool) -> None:
    """Apply a released model to queries (post-processing: no privacy cost).

    MODEL: a released model file (public; pcqr learn's or pcqr distill's). QUERIES: the queries
    (Parquet file or directory, public) with the model's feature columns. Queries holding rows of a
    registered private dataset are refused (the predictions would publish a function of each of
    those rows, by id) unless --allow-private-overlap."""
    from pcqr.pipeline.budget.overlap import guard_public_inputs

    hypothesis, features, _ = load_model(model_path)
    dataset = open_matching(queries, "queries", features, "the model's features", id_column)
    if os.path.isdir(out) and os.listdir(out):
        raise PcqrError(f"--out {out}: directory is not empty")
    check_writable_directory(out, "--out")
    load_cluster_config(cluster)
    with open_client(cluster, echo=note, array_work=True) as client:  # a released hypothesis: numpy only
        guard_public_inputs([("QUERIES", dataset)], allow_private_overlap, ledger, client=client, echo=note)
        futures = client.map(_predict_part, dataset.parts(PART_ROWS), features=features, id_column=dataset.id_column,
                              hypothesis=hypothesis, pure=False)
        total = 0
        for i, future in enumerate(futures):
            table = future.result()
            sink = pa.BufferOutputStream()
            pq.write_table(table, sink, write_page_checksum=True)
            write_atomic(os.path.join(out, f"part-{i:05d}.parquet"), sink.getvalue().to_pybytes())
            total += table.num_rows
    emit_summary({"out": out, "predictions": total, "model": model_path,
                  **({"allow_private_overlap": True} if allow_private_overlap else {})}, as_json)


command = learn_command
