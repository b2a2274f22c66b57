"""Counting queries answered from a released table (``pcqr release-answer``): post-processing, no
private data, no privacy cost.

From A_PAP's answer table (:mod:`pcqr.pipeline.models.answer_table`): G(h) of Bassily et al. 2020,
Algorithm 3, step 4: the query h is projected onto the cover, the member of H_tilde that labels the
public points as h does (:func:`pcqr.pipeline.mechanisms.pap.public_key`), and gets that member's
released answer. The public data is read again and must be the data the table was released from
(its fingerprint). From a synthetic database (:mod:`pcqr.pipeline.models.synthetic`, ``pcqr
sanitize``): the weights of the rows h labels 1, summed.

A query is given as ``key=value`` pairs (``feature=x0,threshold=0.3,direction=up``) or JSON
(:func:`parse_query`); every refusal is one line naming the ``--query``.
"""
from __future__ import annotations

from typing import Any, Sequence

from pcqr.pipeline.data.datasets import open_matching, read_public_features
from pcqr.pipeline.data.user_files import parse_json
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.hypotheses.base import Hypothesis
from pcqr.pipeline.hypotheses.fields import DIRECTIONS, number

#: The fields a query of a synthetic database's class must give (and the only ones it may).
SYNTHETIC_QUERY_FIELDS = {"point": frozenset({"value"}), "threshold": frozenset({"threshold"})}


def answer_counting_queries(table_path: str, queries: Sequence[str],
                            public_uri: str | None = None) -> list[dict[str, Any]]:
    """Each ``--query``'s answer from the released table at ``table_path`` (A_PAP's answer table, or
    a synthetic database): ``{"query", "answer"}``, and ``"member"`` (the cover member's index) from
    an answer table. ``public_uri``: the public data an answer table was released from (default:
    the path it records); a synthetic database needs none."""
    from pcqr.pipeline.models.synthetic import is_synthetic

    if is_synthetic(table_path):
        if public_uri is not None:
            raise PcqrError(f"--public: {table_path} is a synthetic database (pcqr sanitize); it needs no public data")
        return _from_synthetic(table_path, queries)
    return _from_answer_table(table_path, queries, public_uri)


def _from_answer_table(table_path: str, queries: Sequence[str], public_uri: str | None) -> list[dict[str, Any]]:
    """G(h): each query projected onto the cover by its labelling of the public points."""
    from pcqr.pipeline.hypotheses import make_class
    from pcqr.pipeline.hypotheses.representatives import representative_domain
    from pcqr.pipeline.mechanisms.pap import public_cells, public_key
    from pcqr.pipeline.models.answer_table import public_fingerprint, read_answer_table

    table, metadata = read_answer_table(table_path)
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
        hypothesis = query_hypothesis(text, query)
        member = by_key.get(public_key(hypothesis.predict(representatives)))
        if member is None:  # cannot happen for a query of the class: every labelling has a member
            raise PcqrError(f"--query {text!r}: no member of the cover labels the public points alike")
        out.append({"query": text, "answer": answers[member], "member": member})
    return out


def _from_synthetic(table_path: str, queries: Sequence[str]) -> list[dict[str, Any]]:
    """The weights of the rows each query of the sanitized class labels 1, summed."""
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
        out.append({"query": text, "answer": answer(query_hypothesis(text, query), values, weights)})
    return out


def parse_query(text: str, metadata: dict[str, Any]) -> dict[str, Any]:
    """``--query``: JSON, or ``key=value,...`` (e.g. ``feature=x0,threshold=0.3,direction=up``), checked
    against the table's ``metadata`` (its class and features): the query's hypothesis record."""
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
            if key.strip() in query:  # as JSON's duplicate keys: never the last one silently
                raise PcqrError(f"--query {text!r}: the key {key.strip()!r} is given twice; give each key once")
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


def query_hypothesis(text: str, query: dict[str, Any]) -> Hypothesis:
    """The query's hypothesis, or one line naming the --query."""
    from pcqr.pipeline.hypotheses import hypothesis_from_dict

    try:
        return hypothesis_from_dict(query)
    except (KeyError, ValueError, TypeError) as exc:
        raise PcqrError(f"--query {text!r}: incomplete query ({exc})") from None
