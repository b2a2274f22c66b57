"""Non-private learners B for A_SubSamp: built-in exact ERM learners and scikit-learn classifiers.

The built-in learners are scikit-learn estimators (``fit`` returns self,
learned state ends in ``_``) so they compose with the rest of the ecosystem:

* :class:`ThresholdLearner` -- thresholds on one feature, both directions;
* :class:`StumpLearner` -- decision stumps: the best threshold over all features.

Both are exact empirical-risk minimisers computed by sorting plus prefix sums
(O(n log n) per feature). A subsample whose labels are all one class gets a
:class:`ConstantModel` from :func:`fit_subsample`, whatever the learner.

``--learner`` names code, so it runs no code by name (issue 11): besides
``threshold`` and ``stump`` it takes only a dotted path whose module lies under an allowed
prefix (:data:`LEARNER_MODULES`, plus the operator's ``pcqr: learners: allow:`` in
cluster.yaml), checked before anything is imported, naming a scikit-learn classifier class.
"""
from __future__ import annotations

import functools
import importlib
import math
import re
import warnings
from dataclasses import dataclass, field
from numbers import Integral
from typing import Any, Sequence

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, clone, is_classifier
from sklearn.utils._param_validation import Interval

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.models.constant import ConstantModel
from pcqr.pipeline.options import AUTO, AUTO_TREE

BUILTIN_LEARNERS = ("threshold", "stump")
#: Module prefixes ``--learner`` may always name: scikit-learn and pcqr's own library.
LEARNER_MODULES = ("sklearn.", "pcqr.pipeline.")
#: Before pcqr 0.2 the library was the top-level package ``pipeline``: states and specs naming
#: ``pipeline.X`` mean ``pcqr.pipeline.X`` (same class; the hypotheses kept their path).
LEGACY_PREFIX = "pipeline."
#: Rows of the public sample a learner is tried on before the charge (fewer if a subsample has fewer).
TRIAL_ROWS = 64
_EXPONENT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")
_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def module_allowed(module: str, prefixes: Sequence[str]) -> bool:
    """Whether ``module`` is one of ``prefixes`` (``xgboost.`` or ``xgboost``) or lies under one."""
    return any(module == p.rstrip(".") or module.startswith(p.rstrip(".") + ".") for p in prefixes)


def _refuse(name: str, prefixes: Sequence[str], why: str) -> PcqrError:
    return PcqrError(
        f"--learner {name!r}: {why}; --learner takes 'threshold', 'stump' or a scikit-learn classifier "
        f"class under the allowed modules ({', '.join(prefixes)}; an operator adds more in cluster.yaml "
        "under pcqr: learners: allow:)"
    )


@functools.lru_cache(maxsize=64)
def resolve_learner(name: str, prefixes: tuple[str, ...]) -> type:
    """The classifier class a dotted ``--learner`` path names, checked before and after import.

    Before importing anything the path must be dotted identifiers whose module lies under
    ``prefixes``; after, the attribute must be a public class defined under them too,
    a scikit-learn estimator with ``fit`` and ``predict`` that is a classifier.
    """
    if name.startswith(LEGACY_PREFIX):
        name = "pcqr." + name
    module_name, _, attr = name.rpartition(".")
    if not _DOTTED.fullmatch(name) or not module_name:
        raise _refuse(name, prefixes, "not a dotted class path")
    if not module_allowed(module_name, prefixes):
        raise _refuse(name, prefixes, f"module {module_name} is not allowed")
    if attr.startswith("_"):
        raise _refuse(name, prefixes, "not a public class")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise _refuse(name, prefixes, f"cannot be imported ({exc})") from None
    if not (isinstance(cls, type) and module_allowed(cls.__module__, prefixes)):
        raise _refuse(name, prefixes, "not a class defined in the allowed modules")
    if not (issubclass(cls, BaseEstimator) and callable(getattr(cls, "fit", None))
            and callable(getattr(cls, "predict", None))):
        raise _refuse(name, prefixes, "not a scikit-learn estimator with fit and predict")
    if not issubclass(cls, ClassifierMixin):
        try:
            classifier = is_classifier(cls())
        except Exception:  # noqa: BLE001 -- a class that cannot be built with defaults is judged a non-classifier
            classifier = False
        if not classifier:
            raise _refuse(name, prefixes, "not a classifier")
    return cls


def best_threshold(x: np.ndarray, y: np.ndarray) -> tuple[float, int, int]:
    """Exact ERM over thresholds on one feature, both directions.

    Returns ``(threshold, polarity, mistakes)``: polarity 1 predicts 1 where
    ``x > threshold``, polarity 0 predicts 1 where ``x <= threshold``.
    Candidates cut between consecutive distinct values (midpoints), plus -inf.
    """
    order = np.argsort(x, kind="stable")
    xs, ys = x[order], y[order].astype(np.int64)
    n, ones_total = xs.shape[0], int(ys.sum())
    ones_le = np.concatenate(([0], np.cumsum(ys)))  # ones among the first i rows
    cut = np.concatenate(([0], np.flatnonzero(xs[1:] != xs[:-1]) + 1, [n]))  # rows below each cut
    zeros_above = (n - cut) - (ones_total - ones_le[cut])
    up = ones_le[cut] + zeros_above  # mistakes of "1 iff x > t"
    down = n - up  # mistakes of "1 iff x <= t"
    i_up, i_down = int(np.argmin(up)), int(np.argmin(down))
    best, polarity = (i_up, 1) if up[i_up] <= down[i_down] else (i_down, 0)
    mistakes = int(up[best] if polarity == 1 else down[best])
    c = int(cut[best])
    if c == 0:
        threshold = -np.inf
    elif c == n:
        threshold = np.inf
    else:
        threshold = float((xs[c - 1] + xs[c]) / 2)
    return threshold, polarity, mistakes


class _StumpModel(ClassifierMixin, BaseEstimator):
    """Shared predict for models of the form ``polarity XOR (x[feature] <= threshold)``."""

    feature_: int
    threshold_: float
    polarity_: int

    def predict(self, X: np.ndarray) -> np.ndarray:
        above = np.asarray(X)[:, self.feature_] > self.threshold_
        return (above == bool(self.polarity_)).astype(np.int8)


class ThresholdLearner(_StumpModel):
    """Exact ERM over thresholds on one feature (column index ``feature``), both directions."""

    _parameter_constraints: dict[str, list[Any]] = {"feature": [Interval(Integral, 0, None, closed="left")]}

    def __init__(self, feature: int = 0) -> None:
        self.feature = feature

    def fit(self, X: np.ndarray, y: np.ndarray) -> ThresholdLearner:
        X = np.asarray(X)
        self.feature_ = int(self.feature)
        if not 0 <= self.feature_ < X.shape[1]:
            raise ValueError(f"feature {self.feature_} is out of range: the data has {X.shape[1]} features")
        self.threshold_, self.polarity_, _ = best_threshold(X[:, self.feature_], np.asarray(y))
        self.classes_ = np.array([0, 1])
        return self


class StumpLearner(_StumpModel):
    """Exact ERM over decision stumps: the best one-feature threshold over all features."""

    _parameter_constraints: dict[str, list[Any]] = {}

    def fit(self, X: np.ndarray, y: np.ndarray) -> StumpLearner:
        X, y = np.asarray(X), np.asarray(y)
        fits = [best_threshold(X[:, j], y) for j in range(X.shape[1])]
        self.feature_ = int(np.argmin([f[2] for f in fits]))
        self.threshold_, self.polarity_, _ = fits[self.feature_]
        self.classes_ = np.array([0, 1])
        return self


@dataclass(frozen=True)
class LearnerSpec:
    """A learner by name: ``threshold``, ``stump``, or an allowed scikit-learn classifier's import path.

    ``modules``: the operator's extra allowed module prefixes (cluster.yaml ``pcqr: learners:
    allow:``), on top of :data:`LEARNER_MODULES`; the spec travels to the workers with them.
    """

    name: str
    params: dict[str, Any] = field(default_factory=dict)
    modules: tuple[str, ...] = ()

    @property
    def allowed(self) -> tuple[str, ...]:
        return (*LEARNER_MODULES, *self.modules)

    def estimator_class(self) -> type:
        if self.name == "threshold":
            return ThresholdLearner
        if self.name == "stump":
            return StumpLearner
        return resolve_learner(self.name, self.allowed)

    def build(self) -> Any:
        """A fresh, unfitted estimator with ``params`` (unknown parameter names refused)."""
        cls = self.estimator_class()
        try:
            return clone(cls(**self.params))
        except (TypeError, ValueError) as exc:
            raise PcqrError(f"--learner-param for {self.name}: {_first_line(exc)}") from None

    def check(self, n_features: int, rows: int, classes: int = 2) -> Any:
        """Everything about the learner that can be checked before the charge; returns a fitted trial model.

        Builds the estimator, lets it validate its parameters (scikit-learn's declared
        constraints), then fits it on a small PUBLIC sample (``min(rows, TRIAL_ROWS)`` rows of
        small integers, both labels, ``n_features`` columns) so that parameters only ``fit``
        rejects (a solver that does not support a penalty, a feature index out of range) are
        refused now, in one line, and not on a worker after the charge.
        """
        if classes > 2 and self.name in BUILTIN_LEARNERS:
            raise PcqrError(f"--learner {self.name}: a one-feature threshold predicts two labels; "
                            f"--classes {classes} needs a multi-class learner (auto, or a scikit-learn classifier)")
        estimator = self.build()
        where = f"--learner {self.name}" + (f" --learner-param {_shown(self.params)}" if self.params else "")
        if hasattr(estimator, "_parameter_constraints"):
            try:
                estimator._validate_params()
            except (TypeError, ValueError) as exc:
                raise PcqrError(f"--learner-param for {self.name}: {_first_line(exc)}") from None
        X, y = trial_sample(n_features, rows, classes)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return estimator.fit(X, y)
        except Exception as exc:  # noqa: BLE001 -- whatever the learner raises is the user's to fix
            raise PcqrError(
                f"{where}: fails on a small public sample ({type(exc).__name__}: {_first_line(exc)})"
            ) from None

    @property
    def min_rows(self) -> int:
        """Rows a subsample needs so the learner sees at least one example."""
        return 1


def trial_sample(n_features: int, rows: int, classes: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """A fixed public sample: small non-negative integers (valid for count-based learners too), labels
    0, 1, 0, ... (over c classes: 0, 1, ..., c - 1, 0, ...)."""
    n = max(classes, min(rows, TRIAL_ROWS))
    X = np.random.default_rng(0).integers(0, 4, size=(n, n_features)).astype(np.float64)
    return X, np.arange(n) % classes


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _shown(params: dict[str, Any]) -> str:
    return " ".join(f"{k}={v!r}" for k, v in params.items())


def parse_learner_params(items: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """``key=value`` strings to a dict; values parsed as YAML scalars (1, 0.5, true, text; none or null: None).

    Lists, mappings, dates, non-finite numbers and a key given twice are refused: a learner
    parameter is a plain value, stored in the session's JSON and its public provenance.
    """
    from pcqr.pipeline.data.user_files import parse_yaml

    params: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise PcqrError(f"--learner-param {item!r}: expected key=value with a parameter name as key")
        if key in params:
            raise PcqrError(f"--learner-param {key}: given twice")
        where = f"--learner-param {item!r}: the value is not a YAML scalar"
        parsed = None if value.strip() in ("none", "None") else parse_yaml(value, where)
        if isinstance(parsed, str) and _EXPONENT.fullmatch(parsed.strip()):
            parsed = float(parsed)  # 1e-3: a number (YAML 1.1 reads it as text)
        plain = parsed is None or isinstance(parsed, (str, bool, int)) or (
            isinstance(parsed, float) and math.isfinite(parsed))
        if not plain:
            got = "a non-finite number" if isinstance(parsed, float) else f"a {type(parsed).__name__}"
            raise PcqrError(f"--learner-param {item!r}: expected a finite number, true/false, none or text, got {got}")
        params[key] = parsed
    return params


def fit_subsample(spec: LearnerSpec, X: np.ndarray, y: np.ndarray) -> Any:
    """Train B on one subsample; one class (or no rows) gives a constant model, not a crash."""
    labels = np.unique(y)
    if labels.size <= 1:
        return ConstantModel(int(labels[0]) if labels.size else 0)
    return spec.build().fit(X, y)


AUTO_MAX_DEPTH = 6
#: The shallowest tree the rule gives: below it a model cannot express even a two-feature interaction
#: (a stump cannot draw a circle), and the majority of many such models is as wrong as each.
AUTO_MIN_DEPTH = 3


def auto_learner(rows_per_model: int) -> tuple[str, dict[str, Any]]:
    """``learner='auto'``: a decision tree as deep as the rows a model gets can support, from public
    parameters only (n and k): depth round(log2(n / k)) - 1, between 3 and 6 -- about 2-4 rows a
    leaf at full depth (depth 3 up to 22 rows a model, 4 at 23-45, 5 at 46-90, 6 from 91).

    Deep enough to be nearly unbiased, not shallow enough to be stable: the majority of k models
    averages away their variance (each sees other rows) but never their shared bias, so a teacher
    should err by variance. Measured (issue 48, offline: benchmarks/teacher_rules.py --part depth;
    eps 1, pcqr's default M and k, 2 seeds, the noise-free vote of the k trees and the stream of
    2,000 queries through gnmax's noise and the student; the rule before was round(log2(n / k)) - 3,
    between 1 and 6): a 4,300-row two-feature
    task (10 rows a model) went from depth 1 to 3, its vote from 0.565-0.576 to 0.819-0.823 and its
    stream from 0.57-0.61 to 0.76-0.77; Adult (35 columns, 82 rows a model) from depth 3 to 5, vote
    0.827-0.831 to 0.8375, stream 0.816-0.820 to 0.823-0.824; at 250 rows a model (depth 5 to 6) a
    generated 140,000-row task, the corner task and XOR moved by at most 0.002 in their vote."""
    depth = min(AUTO_MAX_DEPTH, max(AUTO_MIN_DEPTH, round(np.log2(max(rows_per_model, 1))) - 1))
    return AUTO_TREE, {"max_depth": int(depth)}


#: Fewer rows a model than this, and the plan says why its teachers are still trees this deep.
AUTO_FEW_ROWS = 46


def auto_reason(rows_per_model: int, subsamples: int, params: dict[str, Any] | None = None) -> str:
    """Why ``learner='auto'`` chose its tree (one clause for the summary's ``learner_chosen``);
    ``params``: the learner's resolved parameters (a ``max_depth`` the user gave wins over the rule's)."""
    depth = auto_learner(rows_per_model)[1]["max_depth"]
    given = (params or {}).get("max_depth", depth)
    if given != depth:
        return (f"depth-{given} trees as given (learner parameter max_depth); the rule's would be depth {depth} at "
                f"{rows_per_model:,} private rows a model (k = {subsamples:,})")
    why = (f"depth-{depth} trees: {rows_per_model:,} private rows a model (k = {subsamples:,}), "
           f"depth round(log2 {rows_per_model:,}) - 1 in [{AUTO_MIN_DEPTH}, {AUTO_MAX_DEPTH}]")
    if rows_per_model < AUTO_FEW_ROWS:
        why += ("; few rows a model: each tree errs by variance, which the vote of all k averages away "
                "(a shallower tree's bias it could not); fewer models would give each more rows but leave the "
                "vote's margin smaller against the same noise")
    return why


def resolve_auto(name: str, params: dict[str, Any], rows: int) -> tuple[str, dict[str, Any]]:
    """``name`` and ``params`` as given, or for 'auto' the rule's tree at ``rows`` rows a fit (public:
    n / k for a teacher, the count of released answers for a student), the user's parameters over
    the rule's. A student of an 'auto' session is 'auto' too: it fits the public log's answers, far
    more rows than one teacher's, so it may grow deeper (up to AUTO_MAX_DEPTH) as they come."""
    if name != AUTO:
        return name, params
    tree, rule = auto_learner(rows)
    return tree, {**rule, **params}


def deterministic(learner: LearnerSpec) -> LearnerSpec:
    """``learner`` with ``random_state`` 0 when it has one left unset (a student's fits repeat)."""
    if learner.build().get_params().get("random_state", 0) is None:
        return LearnerSpec(learner.name, {**learner.params, "random_state": 0}, learner.modules)
    return learner


def named_learner(named: dict[str, Any], rows: int, modules: tuple[str, ...] = ()) -> LearnerSpec:
    """A recorded learner ({"name", "params"}: a session's student, a guess) as fitted on ``rows`` rows."""
    return LearnerSpec(*resolve_auto(named["name"], dict(named.get("params") or {}), rows), modules)
