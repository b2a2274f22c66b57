"""``pcqr release`` (A_PAP: answer every counting query of a class privately, with public data's
help) and ``pcqr release-answer`` (answer any query of the class from the released table:
post-processing, no privacy cost).

The released table is one Parquet file: a row per member of the cover H_tilde with its
parameters (``class``, ``feature``, ``threshold``/``direction``, ``low``/``high`` or ``value``),
``answer`` (the released fraction of private rows the query labels 1), ``measured`` (whether PMW
spent a noisy measurement on it) and ``public_labelling`` (the key of its labelling of the public
points, which is how any query is projected onto the cover). The schema metadata
``pcqr.release`` holds the provenance: class, features, the public dataset and its fingerprint,
every parameter and the privacy and error statements.
"""
from __future__ import annotations

import hashlib
import io
import json
from typing import Any

import click
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pcqr.jobs.common import (
    allow_overlap_option, check_writable_file, cluster_option, emit_summary, json_option, ledger_option, note,
    progress, split_features,
)
from pcqr.pipeline import __version__
from pcqr.pipeline.data.atomic import write_atomic
from pcqr.pipeline.data.cluster import load_cluster_config, open_client
from pcqr.pipeline.data.datasets import load_features, open_dataset, open_matching, read_public_features
from pcqr.pipeline.data.user_files import parse_json
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.hypotheses.fields import DIRECTIONS, number
from pcqr.pipeline.budget.charging import provisional_charge
from pcqr.pipeline.budget.ledger import charge_note
from pcqr.pipeline.privacy.limits import MIN_PMW_ALPHA, MIN_PROBABILITY
from pcqr.pipeline.mechanisms.pmw import PMWParameters
from pcqr.pipeline.privacy.subsamp import check_epsilon_delta, check_fraction
from pcqr.pipeline.data.parquet_opener import read_parquet

TABLE_FORMAT = "pcqr.query-release/1"
METADATA_KEY = b"pcqr.release"
#: The fields a query of a synthetic database's class must give (and the only ones it may).
SYNTHETIC_QUERY_FIELDS = {"point": frozenset({"value"}), "threshold": frozenset({"threshold"})}
_PARAMETER_COLUMNS = {"threshold": pa.float64(), "direction": pa.string(), "low": pa.float64(),
                      "high": pa.float64(), "value": pa.float64()}


def public_fingerprint(domain: Any) -> str:
    """SHA-256 of the public data's distinct values per chosen feature (what the cover depends on)."""
    digest = hashlib.sha256()
    for values in domain.values:
        digest.update(np.ascontiguousarray(values, dtype=np.float64).tobytes())
        digest.update(b"|")
    return digest.hexdigest()


def _table(release: Any, features: list[str]) -> pa.Table:
    columns: dict[str, list[Any]] = {"index": [], "class": [], "feature": []}
    columns.update({name: [] for name in _PARAMETER_COLUMNS})
    for i, member in enumerate(release.params):
        columns["index"].append(i)
        columns["class"].append(member["class"])
        columns["feature"].append(features[int(member["feature"])])
        for name in _PARAMETER_COLUMNS:
            value = member.get(name)
            columns[name].append(value if value is None or name == "direction" else float(value))
    arrays = {"index": pa.array(columns["index"], pa.int64()), "class": pa.array(columns["class"], pa.string()),
              "feature": pa.array(columns["feature"], pa.string())}
    for name, kind in _PARAMETER_COLUMNS.items():
        if any(v is not None for v in columns[name]):
            arrays[name] = pa.array(columns[name], kind)
    arrays["answer"] = pa.array(release.result.answers, pa.float64())
    arrays["measured"] = pa.array(release.result.updated, pa.bool_())
    arrays["public_labelling"] = pa.array(release.keys, pa.string())
    return pa.table(arrays)


@click.command("release")
@click.option("--private", required=True, help="Private: the dataset (Parquet); read by the workers only, charged to the "
              "ledger; labels are not used.")
@click.option("--public", "public_uri", required=True, help="Public: a dataset (Parquet) with the same feature columns.")
@click.option("--hypothesis", required=True, help="Query class: threshold, interval, point (one feature) or stump (several).")
@click.option("--features", default=None, help="Comma-separated feature columns (default: every column of the public data; one of a type pcqr cannot read as a number is refused by name).")
@click.option("--epsilon", type=float, default=1.0, show_default=True, help="Privacy parameter eps.")
@click.option("--delta", type=float, default=1e-6, show_default=True, help="Privacy parameter delta, in (0, 1).")
@click.option("--alpha", type=float, default=0.1, show_default=True, help="Target error alpha (PMW runs with alpha/2).")
@click.option("--beta", type=float, default=0.05, show_default=True, help="Failure probability beta (PMW runs with beta/2).")
@click.option("--pmw-constants", type=click.Choice(["dwork-roth", "calibrated"]), default="dwork-roth", show_default=True,
              help="dwork-roth: PMW's noise and threshold exactly as Dwork-Roth 4.2 (certifies about eps/2 under "
              "pcqr's accountant); calibrated: all scaled down by one factor until the accountant certifies exactly eps.")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Public: the released table (one Parquet file).")
@click.option("--seed", type=int, default=None, help="Seed all randomness (tests only: needs --insecure-seed).")
@click.option("--insecure-seed", is_flag=True, help="Accept that --seed makes the output NOT private.")
@allow_overlap_option
@ledger_option
@cluster_option
@json_option
def release_command(**o: Any) -> None:
    """Release answers to every counting query of a class (A_PAP of Bassily et al. 2020): the cover
    and the representative domain from the public data, then private multiplicative weights
    (Dwork-Roth 4.2) on the private rows mapped to representatives. (eps, delta)-DP."""
    from pcqr.pipeline.hypotheses import check_enumerable, make_class
    from pcqr.pipeline.hypotheses.representatives import representative_domain
    from pcqr.pipeline.mechanisms.pap import release_queries
    from pcqr.pipeline.mechanisms.sspp import cover_radius
    from pcqr.pipeline.privacy.noise import noise_source
    from pcqr.pipeline.budget.overlap import guard_public_inputs

    check_epsilon_delta(o["epsilon"], o["delta"])
    check_fraction(o["alpha"], "--alpha", MIN_PMW_ALPHA)  # PMW runs at alpha/2 and beta/2 (pcqr.pipeline.privacy.limits)
    check_fraction(o["beta"], "--beta", 2 * MIN_PROBABILITY)
    check_writable_file(o["out"], "--out")  # before the charge, not after the release
    noise = noise_source(o["seed"], o["insecure_seed"])
    public = open_dataset(o["public_uri"], "public", features=split_features(o["features"]))
    features = list(public.features)
    private = open_matching(o["private"], "private", features, "the public features")
    hclass = make_class(o["hypothesis"], len(features))
    points = read_public_features(public)
    check_enumerable(hclass, points.shape[0], f"--public {public.uri}")  # before the charge
    domain = representative_domain(hclass, points)  # public only; refuses unsupported classes
    # PMW's certificate depends on (eps, delta, alpha, |X~|) only, not on the cover: refused before the charge
    PMWParameters.dwork_roth(o["epsilon"], o["delta"], o["alpha"] / 2, o["beta"] / 2, max(private.rows, 1),
                             domain.size(), 1)
    load_cluster_config(o["cluster"])
    allowed: dict[str, Any] = {"allow_private_overlap": True} if o["allow_private_overlap"] else {}
    with open_client(o["cluster"], echo=note) as client:
        guard_public_inputs([("--public", public)], bool(allowed), o["ledger"], private, client, note)  # uncharged
        charge = provisional_charge(private.files, private.uri, "release", o["epsilon"], o["delta"],
                                    {k: o[k] for k in ("hypothesis", "epsilon", "delta", "alpha", "beta", "out")}
                                    | {"public": public.uri, "features": features, **allowed}, o["ledger"], client,
                                    private.features)
        with charge as charged, progress(1, "private multiplicative weights") as bar:
            parts = [client.submit(load_features, p, features, pure=False) for p in private.parts(500_000)]

            def plan(params: Any) -> None:
                bar.length = params.queries  # type: ignore[attr-defined]

            release = release_queries(client, hclass, points, parts, private.rows, o["epsilon"], o["delta"],
                                      o["alpha"], o["beta"], noise, on_progress=bar.update, on_plan=plan,
                                      constants=o["pmw_constants"])
    pmw = release.pmw
    eps, delta = pmw.guarantee()
    accuracy = pmw.accuracy()
    radius = cover_radius(release.public_points, hclass.vc_dimension(), o["beta"] / 2)
    summary: dict[str, Any] = {
        "out": o["out"], "class": o["hypothesis"], "features": features, "queries": pmw.queries,
        "public_points": release.public_points, "representatives": domain.size(),
        "private_rows": private.rows, "epsilon": o["epsilon"], "delta": o["delta"],
        "proven_epsilon": eps, "proven_delta": delta, "alpha": o["alpha"], "beta": o["beta"],
        "pmw_updates": release.result.updates, "pmw_updates_max": pmw.updates, "pmw_halted": release.result.halted,
        "pmw_constants": pmw.constants, "pmw_threshold": pmw.threshold, "pmw_error_bound": accuracy["error_bound"],
        "pmw_rows_needed": accuracy["rows_needed"], "cover_radius_bound": radius,
        "error_bound": None if accuracy["error_bound"] is None else accuracy["error_bound"] + radius,
        "privacy": "private" if noise.private else "NOT PRIVATE (seeded noise)",
        **allowed,
        "ledger": charge_note(charged),
    }
    if accuracy["error_bound"] is None:
        note(f"at n = {private.rows} Theorem 4.15 of Dwork-Roth gives no accuracy guarantee for PMW "
             f"(it needs n >= {accuracy['rows_needed']} at alpha/2 = {o['alpha'] / 2}); the answers are still private")
    metadata = {
        "format": TABLE_FORMAT, "version": __version__, "mechanism": "A_PAP (Bassily et al. 2020, Algorithm 3) "
        "with private multiplicative weights (Dwork-Roth 2014, Section 4.2)",
        "class": o["hypothesis"], "class_features": [features[i] for i in domain.features], "features": features,
        "public": public.uri, "public_fingerprint": public_fingerprint(domain), "pmw": pmw.to_dict(),
        "answer": "fraction of private rows the query labels 1 (E[h] in the +-1 convention is 2 answer - 1)",
        **{k: v for k, v in summary.items() if k not in ("out", "features", "class", "ledger")},
    }
    table = _table(release, features)
    table = table.replace_schema_metadata({METADATA_KEY: json.dumps(metadata, default=str).encode()})
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd", write_page_checksum=True)
    write_atomic(o["out"], sink.getvalue())
    emit_summary(summary, o["as_json"])


def read_release(path: str) -> tuple[pa.Table, dict[str, Any]]:
    table = read_parquet(path)
    if METADATA_KEY not in (table.schema.metadata or {}):
        raise PcqrError(f"{path}: not a pcqr release table (no {METADATA_KEY.decode()} metadata: neither pcqr release's "
                        "nor pcqr sanitize's output)")
    try:
        metadata = parse_json(table.schema.metadata[METADATA_KEY], f"{path}: not a pcqr release table")
        if metadata.get("format") != TABLE_FORMAT:
            raise ValueError(f"format is {metadata.get('format')!r}, expected {TABLE_FORMAT}")
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowException) as exc:
        raise PcqrError(f"{path}: not a pcqr release table ({exc})") from None
    return table, metadata


def parse_query(text: str, metadata: dict[str, Any]) -> dict[str, Any]:
    """``--query``: JSON, or ``key=value,...`` (e.g. ``feature=x0,threshold=0.3,direction=up``)."""
    features = metadata["features"]
    if text.lstrip()[:1] in ("{", "[", '"'):
        query = parse_json(text, f"--query {text!r}")
        if not isinstance(query, dict):
            raise PcqrError(f"--query {text!r}: a JSON query is an object of fields, not a {type(query).__name__}")
    else:
        query = {}
        for item in filter(None, (s.strip() for s in text.split(","))):
            key, sep, value = item.partition("=")
            if not sep:
                raise PcqrError(f"--query {text!r}: expected key=value pairs, got {item!r}")
            query[key.strip()] = value.strip()
    table_class = metadata["class"]
    query.setdefault("class", "threshold" if table_class == "stump" else table_class)
    query.setdefault("direction", "up")
    if "feature" not in query and len(metadata["class_features"]) == 1:
        query["feature"] = metadata["class_features"][0]
    feature = query.get("feature")
    name = feature
    if (isinstance(feature, int) and not isinstance(feature, bool)) or (isinstance(feature, str) and feature.isdigit()):
        name = features[int(feature)] if 0 <= int(feature) < len(features) else None
    elif not isinstance(feature, str):
        name = None
    if name not in metadata["class_features"]:
        raise PcqrError(f"--query {text!r}: feature {feature!r} is not one of the class's features "
                        f"({', '.join(metadata['class_features'])})")
    query["feature"] = features.index(name)
    expected = {"threshold": "threshold", "stump": "threshold"}.get(table_class, table_class)
    if query["class"] != expected:
        raise PcqrError(f"--query {text!r}: a {table_class} table answers {expected} queries, not {query['class']}")
    for key in ("threshold", "low", "high", "value"):
        if key in query and query[key] is not None:
            try:
                query[key] = number(query, key)
            except ValueError as exc:
                raise PcqrError(f"--query {text!r}: {exc}") from None
    if query.get("direction") not in DIRECTIONS:
        raise PcqrError(f"--query {text!r}: direction must be 'up' or 'down', got {query.get('direction')!r}")
    return query


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
    from pcqr.pipeline.hypotheses import make_class
    from pcqr.pipeline.hypotheses.representatives import representative_domain
    from pcqr.pipeline.mechanisms.pap import public_cells, public_key
    from pcqr.pipeline.models.synthetic import is_synthetic

    if is_synthetic(table_path):
        if public_uri is not None:
            raise PcqrError(f"--public: {table_path} is a synthetic database (pcqr sanitize); it needs no public data")
        _answer_synthetic(table_path, queries, as_json)
        return
    table, metadata = read_release(table_path)
    parsed = [parse_query(q, metadata) for q in queries]
    public = open_matching(public_uri or metadata["public"], "public", metadata["features"], "the release's features")
    points = read_public_features(public)
    features = metadata["features"]
    indices = [features.index(f) for f in metadata["class_features"]]
    hclass = make_class(metadata["class"], len(features), indices)
    domain = representative_domain(hclass, points)
    if public_fingerprint(domain) != metadata["public_fingerprint"]:
        raise PcqrError(f"{public.uri}: not the public data {table_path} was released from (fingerprint differs)")
    representatives = domain.points()[public_cells(domain, points)]
    by_key = {k: i for i, k in enumerate(table.column("public_labelling").to_pylist())}
    answers = table.column("answer").to_pylist()
    out = []
    for text, query in zip(queries, parsed):
        hypothesis = _hypothesis(text, query)
        member = by_key.get(public_key(hypothesis.predict(representatives)))
        if member is None:  # cannot happen for a query of the class: every labelling has a member
            raise PcqrError(f"--query {text!r}: no member of the cover labels the public points alike")
        out.append({"query": text, "answer": answers[member], "member": member})
    _emit(table_path, out, as_json)


def _answer_synthetic(table_path: str, queries: tuple[str, ...], as_json: bool) -> None:
    """Answer queries of the sanitized class from a synthetic database (pcqr sanitize): the weights
    of the rows each query labels 1, summed."""
    from pcqr.pipeline.models.synthetic import answer, read_synthetic

    values, weights, metadata = read_synthetic(table_path)
    out = []
    fields = SYNTHETIC_QUERY_FIELDS[metadata["class"]]
    for text in queries:
        query = parse_query(text, metadata)
        extra = sorted(set(query) - fields - {"class", "feature", "direction"})
        if extra:
            raise PcqrError(f"--query {text!r}: {', '.join(extra)} is not a field of a {metadata['class']} query "
                            f"({', '.join(sorted(fields))})")
        missing = sorted(f for f in fields if query.get(f) is None)
        if missing:
            raise PcqrError(f"--query {text!r}: a {metadata['class']} query needs {', '.join(missing)} (e.g. "
                            f"{missing[0]}=3)")
        out.append({"query": text, "answer": answer(_hypothesis(text, query), values, weights)})
    _emit(table_path, out, as_json)


def _hypothesis(text: str, query: dict[str, Any]) -> Any:
    """The query's hypothesis, or one line naming the --query."""
    from pcqr.pipeline.hypotheses import hypothesis_from_dict

    try:
        return hypothesis_from_dict(query)
    except (KeyError, ValueError, TypeError) as exc:
        raise PcqrError(f"--query {text!r}: incomplete query ({exc})") from None


def _emit(table_path: str, out: list[dict[str, Any]], as_json: bool) -> None:
    """The answers: one JSON object, or a line each (with the cover member when there is one)."""
    if as_json:
        click.echo(json.dumps({"table": table_path, "answers": out}))
        return
    for row in out:
        member = f"  (member {row['member']})" if "member" in row else ""
        click.echo(f"{row['answer']:.6f}  {row['query']}{member}")


command = release_command
