"""A released classifier h_priv as a portable public artifact (``pcqr.released-classifier/1``).

A small JSON file: the hypothesis class and its parameters, the feature names it
reads (in order), and the provenance of the release (mechanism, epsilon, sizes).
Written by ``pcqr learn`` (A_SSPP) and by the universal mode of ``pcqr answer``
(A_UnvPrivCl) when it switches to h_priv; read by ``pcqr predict`` or by anyone
with :func:`load_model` -- no pcqr private state is needed. Everything in it is
public: h_priv is an output of an eps-DP mechanism, the rest are public sizes.
"""
from __future__ import annotations

import json
from typing import Any

from pcqr.pipeline.data import locations
from pcqr.pipeline import __version__
from pcqr.pipeline.data.atomic import write_atomic
from pcqr.pipeline.data.user_files import MODEL_JSON_LIMIT, parse_json
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.hypotheses.base import Hypothesis

MODEL_FORMAT = "pcqr.released-classifier/1"


def model_record(hypothesis: Hypothesis, features: list[str], private: bool, **provenance: Any) -> dict[str, Any]:
    """The JSON record of a released classifier; ``provenance`` adds public facts (epsilon, sizes...)."""
    return {
        "format": MODEL_FORMAT,
        "hypothesis": hypothesis.to_dict(),
        "features": list(features),
        **provenance,
        "version": __version__,
        "privacy": "private" if private else "NOT PRIVATE (seeded noise)",
    }


def encode_model(record: dict[str, Any]) -> bytes:
    return json.dumps(record, indent=1, sort_keys=True).encode()


def write_model(path: str, record: dict[str, Any]) -> None:
    """Write the record atomically (a reader never sees half a model)."""
    write_atomic(path, encode_model(record))


def write_released(path: str, record: dict[str, Any]) -> dict[str, Any]:
    """Write the record (:func:`write_model`); what a job reports of it: ``model`` (the path) and the
    record's public facts, not the hypothesis itself."""
    write_model(path, record)
    return {"model": path, **{k: v for k, v in record.items() if k not in ("hypothesis", "format")}}


def load_model(path: str, option: str = "MODEL") -> tuple[Hypothesis, list[str], dict[str, Any]]:
    """A released model: (hypothesis, feature names, the whole record). The file (named by ``option``)
    is read strictly (pcqr.pipeline.data.user_files: a regular file of at most MODEL_JSON_LIMIT bytes,
    UTF-8 JSON, unique keys, bounded depth), then every field is checked
    (pcqr.pipeline.hypotheses.fields: finite numbers, known directions, feature indices within the
    features); anything else is a one-line PcqrError naming the file."""
    from pcqr.pipeline.hypotheses import hypothesis_from_dict

    model = parse_json(locations.read_file(path, option, MODEL_JSON_LIMIT), f"{path}: not a pcqr released model")
    try:
        if not isinstance(model, dict) or model.get("format") != MODEL_FORMAT:
            found = model.get("format") if isinstance(model, dict) else type(model).__name__
            raise ValueError(f"format is {found!r}, expected {MODEL_FORMAT}")
        hypothesis = hypothesis_from_dict(model["hypothesis"])
        features = model["features"]
        if not isinstance(features, list) or not all(isinstance(f, str) for f in features) \
                or len(set(features)) != len(features):
            raise ValueError(f"features must be a list of distinct column names, got {features!r}")
        _check_classes(model, getattr(hypothesis, "labels", ()))
        record = model["hypothesis"]
        used = [record["feature"]] if "feature" in record else list(record.get("features") or [])
        if any(i >= len(features) for i in used):
            raise ValueError(f"the hypothesis reads feature index {max(used)}, the model has {len(features)} features")
        return hypothesis, list(features), model
    except (ValueError, KeyError, TypeError) as exc:
        raise PcqrError(f"{path}: not a pcqr released model ({exc})") from None


def _check_classes(model: dict[str, Any], labels: tuple[int, ...]) -> None:
    """ValueError unless the record's ``classes`` (c, absent for two) and ``class_names`` (absent, or c
    distinct names) agree with the labels its hypothesis predicts: a student of a session over c > 2
    classes lists its labels, each below c; a two-class one lists none."""
    from pcqr.pipeline.options import MAX_CLASSES

    classes = model.get("classes", 2)
    if isinstance(classes, bool) or not isinstance(classes, int) or not 2 <= classes <= MAX_CLASSES:
        raise ValueError(f"classes must be a count of 2 to {MAX_CLASSES}, got {classes!r}")
    if (classes > 2) != bool(labels) or (labels and labels[-1] >= classes):
        raise ValueError(f"the hypothesis predicts the labels {list(labels) or [0, 1]}, not class indices of "
                         f"{classes} classes")
    names = model.get("class_names")
    if names is not None and not (isinstance(names, list) and len(names) == classes
                                  and all(isinstance(n, str) for n in names) and len(set(names)) == classes):
        raise ValueError(f"class_names must be {classes} distinct names")
