"""``PrivateClassifier``: a pcqr session behind scikit-learn's ``fit`` / ``predict`` (``pcqr.PrivateClassifier``).

``fit`` creates a session on the private rows (written to the private state directory, which only
Dask workers read back; the whole (epsilon, delta) is charged to the ledger once); ``predict``
answers through that session's sparse-vector coordinator into its public log. What ``predict``
returns is exactly what the log records: the released majority label where the session answered,
NaN where it abstained or refused (after T abstentions every query is refused). Nothing else is
released: no probabilities, no decision function, no learned attributes from the data beyond
the public schema (``n_features_in_``, ``feature_names_in_``); ``classes_`` is fixed to [0, 1]
(pcqr answers binary {0, 1} queries), not read from the labels.
"""
from __future__ import annotations

import os
import tempfile
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets, type_of_target
from sklearn.utils.validation import check_is_fitted, validate_data

from pcqr.pipeline.budget.ledger import ledger_setting
from pcqr.pipeline.session.options import AnswerOptions, TrainingOptions
from pcqr.pipeline.session.session import Session

PRIVATE_FILE = "fit-private.parquet"
LABEL = "label"


class PrivateClassifier(ClassifierMixin, BaseEstimator):  # type: ignore[misc]
    """A differentially private classification-query server with scikit-learn's interface.

    ``fit(X, y)`` trains k models on k disjoint subsamples of the private rows within a privacy
    budget (epsilon, delta); ``predict(X)`` answers each row by the models' majority vote, released
    through the sparse-vector coordinator (Algorithm 5 of Nandi-Bassily; docs/privacy.md), and
    returns NaN for the queries the session abstained on or refused. The parameters are those of
    :meth:`pcqr.Session.create`.

    Parameters
    ----------
    epsilon, delta : float
        The session's whole privacy budget, charged to the ledger once, at ``fit``.
    cutoff : int
        T, the abstentions allowed before the session refuses every further query.
    queries_max : int
        m, the most queries the session will answer.
    subsamples : int, optional
        k, the number of subsample models (default: Algorithm 5's k at the profile's lambda).
    profile : {'tight', 'paper'}, optional
        As ``pcqr train --profile`` (default: tight).
    gate : {'stability', 'guess', 'gnmax'}, optional
        As ``pcqr train --gate`` (default: chosen from public parameters, as there). Under 'guess' every query gets an answer
        until T disagreements with the public guess; under 'gnmax' each of the first
        ``queries_max`` queries gets the Gaussian noisy majority.
    guess : str, optional
        As ``pcqr train --guess``: 'student' (the default for the guess gate), 'prior' or a released
        model file.
    learner : str
        'stump', 'threshold' or a scikit-learn classifier's import path.
    learner_params : dict, optional
        The learner's parameters.
    state : str, optional
        The private state directory (default: a new private temporary directory per ``fit``).
    log : str, optional
        The public log directory (default: a new temporary directory per ``fit``).
    fallback_label : {0, 1}, optional
        Return this label instead of NaN for abstained and refused queries (post-processing).
    batch_size : int
        Queries per log batch.
    cluster, ledger : str, optional
        As for :class:`pcqr.Session`.
    seed : int, optional
        Tests only, with ``insecure_seed=True``: the output is then NOT private.
    insecure_seed : bool
    allow_private_overlap : bool
        ``predict`` refuses queries that are rows of the private data (pcqr's misuse guard:
        docs/privacy.md); True accepts them (as ``pcqr answer --allow-private-overlap``).
    after_halt : {'refuse', 'student'}
        As ``pcqr answer --after-halt``: 'student' answers every query after the T-th instance by a
        student fitted on the answers already released (post-processing: no budget, no NaN).
    student_learner : str, optional
        The student's learner (default: the guess gate's student learner, else ``learner``).

    Attributes
    ----------
    classes_ : ndarray of shape (2,)
        Always [0, 1].
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        When ``X`` had column names.
    state_ : str
        The session's state directory.
    log_ : str
        The session's public log directory.

    Examples
    --------
    >>> import numpy as np, pcqr                                           # doctest: +SKIP
    >>> clf = pcqr.PrivateClassifier(epsilon=4.0, cutoff=20, subsamples=500)  # doctest: +SKIP
    >>> clf.fit(X_private, y_private).predict(X_queries)                   # doctest: +SKIP
    array([ 1.,  0., nan, ...])
    """

    def __init__(self, epsilon: float = TrainingOptions.epsilon, delta: float = TrainingOptions.delta,
                 cutoff: int = TrainingOptions.cutoff, queries_max: int = TrainingOptions.queries_max,
                 subsamples: int | None = None, profile: str | None = None, gate: str | None = None,
                 guess: str | None = None, learner: str = TrainingOptions.learner,
                 learner_params: dict[str, Any] | None = None, state: str | None = None, log: str | None = None,
                 fallback_label: int | None = None, batch_size: int = AnswerOptions.batch_size,
                 cluster: str | None = None, ledger: str | None = None, seed: int | None = None,
                 insecure_seed: bool = False, allow_private_overlap: bool = False, after_halt: str = "refuse",
                 student_learner: str | None = None) -> None:
        self.epsilon = epsilon
        self.delta = delta
        self.cutoff = cutoff
        self.queries_max = queries_max
        self.subsamples = subsamples
        self.profile = profile
        self.gate = gate
        self.guess = guess
        self.learner = learner
        self.learner_params = learner_params
        self.state = state
        self.log = log
        self.fallback_label = fallback_label
        self.batch_size = batch_size
        self.cluster = cluster
        self.ledger = ledger
        self.seed = seed
        self.insecure_seed = insecure_seed
        self.allow_private_overlap = allow_private_overlap
        self.after_halt = after_halt
        self.student_learner = student_learner

    def fit(self, X: Any, y: Any) -> PrivateClassifier:
        """Create a session on the private rows ``X``, ``y`` (labels 0 or 1), charging the ledger.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The private features (finite numbers).
        y : array-like of shape (n_samples,)
            The private labels, 0 or 1.

        Returns
        -------
        self

        Raises
        ------
        ValueError
            Bad input (NaN, infinite values, labels other than 0 and 1, ...), before anything
            is written or charged.
        pcqr.PcqrError
            A parameter that cannot be certified, named in one line; nothing is charged.
        """
        X, y = validate_data(self, X, y, dtype=np.float64)
        check_classification_targets(y)  # a continuous target: "Unknown label type"
        if type_of_target(y) == "multiclass":
            raise ValueError("Only binary classification is supported: pcqr answers binary queries, labels 0 or 1")
        if not np.isin(y, (0, 1)).all():  # classes_ is public and fixed, never read from the labels
            raise ValueError("y: labels must be 0 or 1 (pcqr answers binary queries; map your two classes to 0/1)")
        y = np.asarray(y, dtype=np.int8)
        ledger_setting(self.ledger)  # an empty ledger setting: refused before the rows are written
        self.classes_ = np.array([0, 1])
        names = self._feature_names()
        state = self.state if self.state is not None else tempfile.mkdtemp(prefix="pcqr-state-")
        self.log_ = self.log if self.log is not None else tempfile.mkdtemp(prefix="pcqr-log-")
        private = os.path.join(state, PRIVATE_FILE)  # inside the private state: workers read it back
        os.makedirs(state, exist_ok=True)
        pq.write_table(pa.table({**{n: X[:, i] for i, n in enumerate(names)}, LABEL: y.astype(np.int8)}), private)
        Session.create(
            state, private, epsilon=self.epsilon, delta=self.delta, cutoff=self.cutoff, queries_max=self.queries_max,
            profile=self.profile, gate=self.gate, guess=self.guess, subsamples=self.subsamples, learner=self.learner, learner_params=self.learner_params, features=names,
            label=LABEL, seed=self.seed, insecure_seed=self.insecure_seed, cluster=self.cluster, ledger=self.ledger,
        ).close()
        self.state_ = state
        return self

    def predict(self, X: Any) -> np.ndarray:
        """Answer each row of ``X`` through the session; NaN where it abstained or refused.

        Parameters
        ----------
        X : array-like of shape (n_queries, n_features)
            Public queries.

        Returns
        -------
        ndarray of shape (n_queries,), float
            0.0 or 1.0 where answered; NaN (or ``fallback_label``) where the session abstained or,
            after T abstentions, refused. Every call appends to the session's public log.
        """
        check_is_fitted(self, "state_")
        X = validate_data(self, X, dtype=np.float64, reset=False)
        if X.shape[0] == 0:
            return np.empty(0)
        queries = pa.table({n: X[:, i] for i, n in enumerate(self._feature_names())})
        with Session.open(self.state_, cluster=self.cluster, ledger=self.ledger) as session:
            table = session.answer(queries, log=self.log_, batch_size=self.batch_size,
                                   fallback_label=self.fallback_label,
                                   allow_private_overlap=self.allow_private_overlap,
                                   after_halt=self.after_halt, student_learner=self.student_learner)
        answers = np.full(X.shape[0], np.nan)
        ids = np.asarray(table.column("query_id").to_numpy(zero_copy_only=False), dtype=np.int64)
        answers[ids] = table.column("answer").cast(pa.float64()).fill_null(np.nan).to_numpy()
        return answers

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """Accuracy of ``predict(X)`` against ``y``, an abstained or refused query counting as wrong.

        Every call answers ``X`` through the session (its log grows; abstentions spend budget).
        """
        predicted = self.predict(X)
        correct = (predicted == np.asarray(y, dtype=np.float64)).astype(np.float64)  # NaN is never equal
        return float(np.average(correct, weights=sample_weight))

    def _feature_names(self) -> list[str]:
        names = getattr(self, "feature_names_in_", None)
        if names is None:
            return [f"x{i}" for i in range(self.n_features_in_)]
        if LABEL in names:
            raise ValueError(f"X: a feature may not be named {LABEL!r} (the label column of the private file)")
        return [str(n) for n in names]

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False  # binary {0, 1} labels only
        tags.non_deterministic = True  # secure noise: two fits release different sessions
        return tags


EXPECTED_FAILED_CHECKS: dict[str, str] = {
    "check_estimators_dtypes": "labels must be 0 or 1: classes_ is public and fixed, never read from the private labels",
    "check_classifier_data_not_an_array": "labels must be 0 or 1 (the check uses labels 1 and 2)",
    "check_classifiers_classes": "labels must be 0 or 1 (the check uses string and -1/1 labels)",
    "check_fit2d_1feature": "labels must be 0 or 1 (the check uses labels 1 and 2)",
    "check_fit2d_1sample": "k subsamples need at least k private rows; one row cannot be split",
    "check_classifiers_train": "at the check's sizes (at most 200 rows, k = 3 models) a certifiable session "
                               "spends its T instances within the check's queries and refuses the rest (NaN; "
                               "the stability gate abstains on every query): a few rows per model cannot "
                               "outvote the noise",
}
"""scikit-learn estimator checks that do not apply to a private classifier, and why (tests/test_estimator.py
runs every other check)."""
