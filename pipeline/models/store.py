"""The k trained models on disk without pickle: ``STATE/models.npz`` (issue 11).

A pickle runs code when it is loaded, so pcqr never writes or reads one. The model file is
a NumPy ``.npz`` read with ``allow_pickle=False``; its ``kind`` says how the models are kept:

* ``stump``: built-in thresholds and stumps (and constant models) as three arrays,
  ``feature`` (int64), ``threshold`` (float64), ``polarity`` (int8) -- what
  :class:`pcqr.pipeline.models.votes.StumpVotes` counts with, so k = 240,000 loads in milliseconds;
* ``linear``: binary linear classifiers (and constants) as ``coef`` (k x features) and
  ``intercept`` (:class:`pcqr.pipeline.models.votes.LinearVotes`);
* ``trees``: scikit-learn decision trees (``learner="auto"``), over two classes or c > 2, as their node
  arrays, constants in ``constant`` (:mod:`pcqr.pipeline.models.tree_store`: 1,000 trees in
  milliseconds, where skops took seconds; 800 five-class depth-6 trees: 4.2 MB written in 0.03 s and
  read in 0.01 s, where skops took 17.6 MB, 0.65 s and 0.82 s);
* ``erm``: agnostic mode's :class:`pcqr.pipeline.hypotheses.ERMClassifier` models as JSON (their
  parameters and the chosen hypothesis's ``to_dict``), constants in ``constant``;
* ``skops``: any other allowed scikit-learn classifier, through ``skops.io``, constants in
  ``constant``. On load every type skops does not trust by default must be a class under
  the allowed learner modules (pcqr.pipeline.models.learners.LEARNER_MODULES plus the operator's
  ``pcqr: learners: allow:``); anything else is refused, naming the type.

Every load checks the file against the session: k models, feature indices below the number
of features, finite parameters, known directions. A file that fails is refused in one line
naming it; nothing from it is used.
"""
from __future__ import annotations

import io
import json
from typing import Any, Sequence

import numpy as np

from pcqr.pipeline.data.user_files import ARRAY_FILE_LIMIT, check_zip, parse_json, parse_npz, read_bytes
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.models.constant import ConstantModel
from pcqr.pipeline.models.tree_store import dump_trees, load_trees, plain_trees
from pcqr.pipeline.models.votes import Ensemble, LinearVotes, ModelVotes, StumpVotes

FORMAT = "pcqr-models/1"
#: skops archives hold at most this many models each (``skops_sizes`` splits the bytes): skops looks
#: its archive's member list up once per array it writes, so one archive of k models costs
#: O(k^2) (4,000 gradient-boosted models: over 10 minutes; in chunks, linear).
SKOPS_CHUNK = 64


def dump_models(ensemble: Ensemble) -> bytes:
    """The bytes of a model file for ``ensemble`` (np.savez: plain arrays, no object arrays)."""
    counter = ensemble.counter
    arrays: dict[str, np.ndarray]
    if isinstance(counter, StumpVotes):
        arrays = {"kind": np.array("stump"), "feature": counter.features, "threshold": counter.thresholds,
                  "polarity": counter.polarities}
    elif isinstance(counter, LinearVotes):
        arrays = {"kind": np.array("linear"), "coef": counter.coefs, "intercept": counter.intercepts}
    else:
        assert isinstance(counter, ModelVotes)
        arrays = _dump_fitted(counter.models, counter.classes)
    sink = io.BytesIO()
    np.savez(sink, allow_pickle=False, format=np.array(FORMAT), **arrays)  # an object array is an error
    return sink.getvalue()


def load_models_file(path: str, k: int, n_features: int, modules: Sequence[str] = (), classes: int = 2) -> Ensemble:
    """The ensemble in ``path``, checked against a session of ``k`` models on ``n_features`` features.

    Parameters
    ----------
    path : str
        A file written from :func:`dump_models`.
    k, n_features : int
        The session's number of models and of feature columns.
    modules : sequence of str
        The operator's extra allowed learner modules (cluster.yaml ``pcqr: learners: allow:``).
    classes : int
        c, the session's labels 0 .. c - 1 (a one-class model's label must be one of them).

    Raises
    ------
    PcqrError
        One line naming ``path``: not a model file, another session's (other k or features),
        a value out of range, or a type outside the allowed modules.
    """
    return _from_arrays(_read(path), path, k, n_features, modules, classes)


def check_storable(model: Any, n_features: int, modules: Sequence[str] = (), classes: int = 2) -> None:
    """Refuse, before any charge, a learner whose fitted models could not be saved and loaded back
    (a type skops cannot write, or one outside the allowed modules): one fitted trial model goes
    through the same write and checked read as the session's k models will."""
    name = f"{type(model).__module__}.{type(model).__qualname__}"
    try:
        data = dump_models(Ensemble([model], classes))
    except Exception as exc:  # noqa: BLE001 -- skops refuses what it cannot represent
        raise PcqrError(f"--learner: a fitted {name} cannot be stored without pickle ({_first_line(exc)})") from None
    arrays = parse_npz(data, "the trial model file", ARRAY_FILE_LIMIT)
    try:
        _from_arrays(arrays, "the trial model file", 1, n_features, modules, classes)
    except PcqrError as exc:
        raise PcqrError(f"--learner: a fitted {name} cannot be stored and loaded back ({exc})") from None


def _from_arrays(arrays: dict[str, np.ndarray], path: str, k: int, n_features: int, modules: Sequence[str],
                 classes: int = 2) -> Ensemble:
    kind = str(arrays.pop("kind", ""))
    if str(arrays.pop("format", "")) != FORMAT:
        raise PcqrError(f"{path}: not a pcqr model file (format {FORMAT} expected)")
    check = _Checker(path, arrays, k, n_features)
    if classes > 2 and kind in ("stump", "linear"):
        raise check.error(f"{kind} models vote between two labels; the session has {classes} classes")
    if kind == "stump":
        features = check.array("feature", np.int64, (k,))
        thresholds = check.array("threshold", np.float64, (k,))
        polarities = check.array("polarity", np.int8, (k,))
        check.indices(features, "feature")
        check.that(not bool(np.isnan(thresholds).any()), "a threshold is NaN")
        check.that(bool(np.isin(polarities, (0, 1)).all()), "a polarity is neither 0 nor 1")
        return Ensemble.of(StumpVotes(features, thresholds, polarities))
    if kind == "linear":
        coefs = check.array("coef", np.float64, (k, n_features))
        intercepts = check.array("intercept", np.float64, (k,))
        check.that(bool(np.isfinite(coefs).all() and np.isfinite(intercepts).all()), "a coefficient is not finite")
        return Ensemble.of(LinearVotes(coefs, intercepts))
    if kind in ("trees", "erm", "skops"):  # models as objects: scikit-learn is imported for erm and skops only
        constant = check.array("constant", np.int8, (k,))
        check.that(bool(np.isin(constant, (-1, *range(classes))).all()),
                   "a constant label is not -1, 0 or 1" if classes == 2 else f"a constant label is not -1 or 0 .. {classes - 1}")
        fitted_count = int((constant == -1).sum())
        if kind == "trees":
            fitted = load_trees(check.arrays, fitted_count, n_features, check.error, classes)
        elif kind == "erm":
            fitted = _load_erm(check, fitted_count)
        else:
            from pcqr.pipeline.models.learners import LEARNER_MODULES

            fitted = _load_skops(check, fitted_count, (*LEARNER_MODULES, *modules))
        models, it = [], iter(fitted)
        for label in constant.tolist():
            models.append(next(it) if label == -1 else ConstantModel(label))
        return Ensemble.of(ModelVotes(models, classes))
    raise PcqrError(f"{path}: not a pcqr model file (unknown kind {kind!r})")


def _read(path: str) -> dict[str, Any]:
    """The arrays of an .npz, read through pcqr.pipeline.data.user_files: a regular file, every member's
    declared size, shape and dtype bounded before it is allocated, no object array (never a pickle)."""
    data = read_bytes(path, "the model file", ARRAY_FILE_LIMIT)
    return parse_npz(data, f"{path}: not a pcqr model file", ARRAY_FILE_LIMIT)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


class _Checker:
    """One-line refusals naming the model file, and the session it is checked against."""

    def __init__(self, path: str, arrays: dict[str, np.ndarray], k: int, n_features: int) -> None:
        self.path, self.arrays, self.k, self.n_features = path, arrays, k, n_features

    def error(self, message: str) -> PcqrError:
        return PcqrError(f"{self.path}: {message} (a model file of another session, or damaged: retrain)")

    def that(self, condition: bool, message: str) -> None:
        if not condition:
            raise self.error(message)

    def array(self, name: str, dtype: type, shape: tuple[int, ...]) -> np.ndarray:
        if name not in self.arrays:
            raise PcqrError(f"{self.path}: not a pcqr model file (no {name!r} array)")
        value = self.arrays[name]
        if value.dtype != dtype:
            raise self.error(f"{name!r} holds {value.dtype} values, expected {np.dtype(dtype)}")
        if value.shape != shape:
            if value.shape[:1] != shape[:1]:
                raise self.error(f"holds {value.shape[0] if value.ndim else 0} models, the session has k = {self.k}")
            raise self.error(f"{name!r} has shape {value.shape}: models of {value.shape[-1]} features, "
                             f"the session has {self.n_features}")
        return value

    def indices(self, values: Any, what: str) -> None:
        values = np.asarray(values)
        bad = values[(values < 0) | (values >= self.n_features)]
        if bad.size:
            raise self.error(f"{what} index {int(bad[0])} is out of range: the session has {self.n_features} features")

    def text(self, name: str) -> str:
        if name not in self.arrays or self.arrays[name].dtype.kind != "U" or self.arrays[name].ndim != 0:
            raise PcqrError(f"{self.path}: not a pcqr model file (no {name!r} text)")
        return str(self.arrays[name])


def _dump_fitted(models: Sequence[Any], classes: int = 2) -> dict[str, np.ndarray]:
    """Constants as labels, the rest as node arrays (decision trees), ERM JSON (agnostic mode) or skops bytes."""
    from pcqr.pipeline.hypotheses import ERMClassifier

    constant = np.array([m.label if isinstance(m, ConstantModel) else -1 for m in models], dtype=np.int8)
    fitted = [m for m in models if not isinstance(m, ConstantModel)]
    if plain_trees(fitted, classes):
        return {"kind": np.array("trees"), "constant": constant, **dump_trees(fitted, classes)}
    if all(type(m) is ERMClassifier and m.models is None for m in fitted):
        records = [{"params": m.get_params(), "hypothesis": m.hypothesis_.to_dict(), "mistakes": m.mistakes_,
                    "n_candidates": m.n_candidates_, "n_features": m.n_features_in_} for m in fitted]
        return {"kind": np.array("erm"), "constant": constant, "erm": np.array(json.dumps(records))}
    import skops.io

    chunks = [skops.io.dumps(fitted[i:i + SKOPS_CHUNK]) for i in range(0, len(fitted), SKOPS_CHUNK)]
    sizes = np.array([len(c) for c in chunks], dtype=np.int64)
    payload = np.frombuffer(b"".join(chunks), dtype=np.uint8)
    return {"kind": np.array("skops"), "constant": constant, "skops": payload, "skops_sizes": sizes}


def _load_erm(check: _Checker, count: int) -> list[Any]:
    """ERMClassifier models rebuilt from JSON; each hypothesis must survive to_dict(from_dict(d)) == d
    (so no unknown direction, NaN or stray key) and use only the session's feature indices."""
    from pcqr.pipeline.hypotheses import ERMClassifier, hypothesis_from_dict, make_class

    try:
        records = parse_json(check.text("erm"), f"{check.path}: a malformed ERM model")
        check.that(isinstance(records, list) and len(records) == count,
                   f"holds {len(records) if isinstance(records, list) else 0} fitted models, the constants say {count}")
        models = []
        for record in records:
            params, d = record["params"], record["hypothesis"]
            check.that(int(record["n_features"]) == check.n_features,
                       f"a model was fitted on {record['n_features']} features, the session has {check.n_features}")
            check.that(params.get("models") is None, "an ERM model of a finite class cannot be stored as JSON")
            model = ERMClassifier(**params)
            hypothesis = hypothesis_from_dict(d)
            check.that(hypothesis.to_dict() == d, f"hypothesis {d!r} is not in canonical form")
            features = d.get("features", [d.get("feature", 0)])
            check.indices(np.array(features, dtype=np.int64), "feature")
            model.hypothesis_class_ = make_class(model.hypothesis, check.n_features, model.features)
            model.hypothesis_, model.mistakes_ = hypothesis, int(record["mistakes"])
            model.n_candidates_, model.n_features_in_ = int(record["n_candidates"]), check.n_features
            model.classes_ = np.array([0, 1])
            models.append(model)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise check.error(f"a malformed ERM model ({type(exc).__name__}: {exc})") from None
    except PcqrError as exc:
        if str(exc).startswith(check.path):
            raise
        raise check.error(f"a malformed ERM model ({exc})") from None
    return models


def _load_skops(check: _Checker, count: int, modules: tuple[str, ...]) -> list[Any]:
    """skops bytes, loaded only if every type skops does not trust by default is a class under ``modules``."""
    import skops.io

    from pcqr.pipeline.models.learners import module_allowed

    payload = check.arrays.get("skops")
    if payload is None or payload.dtype != np.uint8 or payload.ndim != 1:
        raise PcqrError(f"{check.path}: not a pcqr model file (no 'skops' bytes)")
    models: list[Any] = []
    for data in _skops_chunks(check, payload):
        check_zip(data, f"{check.path}: not a pcqr model file (skops)", ARRAY_FILE_LIMIT).close()
        try:
            untrusted = skops.io.get_untrusted_types(data=data)
        except Exception as exc:  # noqa: BLE001 -- a damaged archive raises anything
            raise PcqrError(f"{check.path}: not a pcqr model file (skops: {exc})") from None
        for name in untrusted:
            if not _allowed_class(name, modules):
                raise PcqrError(
                    f"{check.path}: holds type {name}, which is not a class under the allowed learner modules "
                    f"({', '.join(modules)}; cluster.yaml pcqr: learners: allow:); refusing to load it"
                )
        try:
            chunk = skops.io.loads(data, trusted=untrusted)
        except Exception as exc:  # noqa: BLE001
            raise PcqrError(f"{check.path}: not a pcqr model file (skops: {exc})") from None
        check.that(isinstance(chunk, list), "the fitted models do not match the constants")
        models.extend(chunk)
    check.that(len(models) == count, "the fitted models do not match the constants")
    for model in models:
        cls = type(model)
        check.that(module_allowed(cls.__module__, modules) and callable(getattr(model, "predict", None)),
                   f"holds a {cls.__module__}.{cls.__qualname__}, not an allowed classifier")
        width = getattr(model, "n_features_in_", check.n_features)
        check.that(width == check.n_features, f"a model was fitted on {width} features, the session has {check.n_features}")
    return models


def _skops_chunks(check: _Checker, payload: np.ndarray) -> list[bytes]:
    """The skops archives in ``payload``: split at ``skops_sizes`` (one archive if a file has none)."""
    sizes = check.arrays.get("skops_sizes")
    if sizes is None:
        return [payload.tobytes()]
    if not (sizes.dtype == np.int64 and sizes.ndim == 1 and bool((sizes > 0).all())
            and int(sizes.sum()) == payload.size):
        raise PcqrError(f"{check.path}: not a pcqr model file (skops: its sizes do not split its bytes)")
    ends = np.cumsum(sizes)
    return [payload[end - size:end].tobytes() for size, end in zip(sizes.tolist(), ends.tolist())]


def _allowed_class(name: str, modules: tuple[str, ...]) -> bool:
    """Whether skops' type ``name`` (``module.Class``) is a class under ``modules`` (imported only if so)."""
    import importlib

    from pcqr.pipeline.models.learners import module_allowed

    module, _, attr = name.rpartition(".")
    if not module or not module_allowed(module, modules):
        return False
    try:
        value = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError):
        return False
    return isinstance(value, type) and module_allowed(value.__module__, modules)
