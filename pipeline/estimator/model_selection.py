"""Model selection under a privacy budget: what a cross-validation or a search over
``PrivateClassifier`` costs before it runs (:func:`privacy_cost`), and a cap on it enforced by the
ledger (:func:`set_budget`). docs/api.md, "Cross-validation and tuning under a privacy budget".

Every ``PrivateClassifier.fit`` is a charged mechanism: it creates a session whose whole
(epsilon, delta) goes to the ledger. A search fits many times on rows of the same people, so its
cost is the sum over its fits (basic composition, as the ledger counts it; folds of a
cross-validation overlap, so nothing smaller is claimed). The count of fits is public: it follows
from the search's parameters alone.

The scores a search computes are not private: they are computed from the labels of the held-out
rows, outside any mechanism. The private way to choose is a choice by public parameters only
(``learner='auto'``, pcqr.pipeline.estimator.classifier), whose cost is the one fit's.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow.parquet as pq

from pcqr.pipeline.data.private_folder import PrivateFolder, private_file
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.privacy.limits import check_delta
from pcqr.pipeline.spelling import python_api


@dataclass(frozen=True)
class PrivacyCost:
    """What a search charges in all: ``fits`` sessions, (``epsilon``, ``delta``) summed over them."""

    fits: int
    epsilon: float
    delta: float

    def __str__(self) -> str:
        return f"{self.fits} fits: (epsilon={self.epsilon:g}, delta={self.delta:g}) in all"


@python_api
def privacy_cost(estimator: Any, cv: Any = None, X: Any = None, y: Any = None, groups: Any = None) -> PrivacyCost:
    """The (epsilon, delta) a ``cross_val_score``, ``cross_validate`` or a search charges, before it runs.

    Parameters
    ----------
    estimator : estimator
        A :class:`pcqr.PrivateClassifier` (or a pipeline holding one), or a scikit-learn search
        over one (``GridSearchCV``, ``RandomizedSearchCV``, or any ``BaseSearchCV`` with a finite
        list of candidates).
    cv : int, cross-validation generator or iterable, optional
        For an estimator: the ``cv`` you will pass to ``cross_val_score`` (default 5, as there).
        A search's own ``cv`` is read from it.
    X, y, groups : optional
        Needed only by splitters whose number of splits depends on the data (``LeaveOneOut``...).

    Returns
    -------
    PrivacyCost
        Fits, and their epsilons and deltas summed (a search's refit on the whole data counted at
        its most expensive candidate).

    Raises
    ------
    pcqr.PcqrError
        No ``PrivateClassifier`` in ``estimator``, or a search whose candidates cannot be counted.
    """
    from sklearn.base import clone
    from sklearn.model_selection import GridSearchCV, RandomizedSearchCV, check_cv

    if isinstance(estimator, (GridSearchCV, RandomizedSearchCV)):
        base, candidates = estimator.estimator, _candidates(estimator)
        cv, refit = estimator.cv, bool(estimator.refit)
    else:
        base, candidates, refit = estimator, [{}], False
    splits = check_cv(cv, y, classifier=True).get_n_splits(X, y, groups)
    costs = [_fit_cost(clone(base).set_params(**params)) for params in candidates]
    epsilon = splits * sum(c[0] for c in costs) + (max(c[0] for c in costs) if refit else 0.0)
    delta = splits * sum(c[1] for c in costs) + (max(c[1] for c in costs) if refit else 0.0)
    return PrivacyCost(splits * len(candidates) + int(refit), epsilon, delta)


def _candidates(search: Any) -> list[dict[str, Any]]:
    from sklearn.model_selection import GridSearchCV, ParameterGrid, ParameterSampler

    if isinstance(search, GridSearchCV):
        return list(ParameterGrid(search.param_grid))
    return list(ParameterSampler(search.param_distributions, search.n_iter, random_state=search.random_state))


def _fit_cost(estimator: Any) -> tuple[float, float]:
    """(epsilon, delta) one fit of ``estimator`` charges: a PrivateClassifier's budget, or the sum over
    a pipeline's steps (each fitted once). Any other estimator that holds one may fit it many times
    (bagging, successive halving, ...): refused rather than undercounted."""
    from sklearn.pipeline import Pipeline

    from pcqr.pipeline.estimator.classifier import PrivateClassifier

    if isinstance(estimator, PrivateClassifier):
        check_delta(float(estimator.delta))  # a fit at 0.01 or more would be refused: so is its cost
        return float(estimator.epsilon), float(estimator.delta)
    if isinstance(estimator, Pipeline):
        costs = [_fit_cost(step) for _, step in estimator.steps if _holds_private(step)]
        if costs:
            return sum(c[0] for c in costs), sum(c[1] for c in costs)
    if _holds_private(estimator):
        raise PcqrError(f"privacy_cost: cannot count how often {type(estimator).__name__} fits the "
                        "pcqr.PrivateClassifier it holds; use GridSearchCV, RandomizedSearchCV, cross_val_score or a "
                        "Pipeline, or add the costs of its fits yourself")
    raise PcqrError(f"privacy_cost: {type(estimator).__name__} holds no pcqr.PrivateClassifier")


def _holds_private(estimator: Any) -> bool:
    from pcqr.pipeline.estimator.classifier import PrivateClassifier

    return isinstance(estimator, PrivateClassifier) or any(
        isinstance(v, PrivateClassifier) for v in getattr(estimator, "get_params", dict)(deep=True).values())


@python_api
def set_budget(X: Any, y: Any, epsilon: float, delta: float, *, name: str | None = None,
               ledger: str | None = None, classes: Any = None) -> dict[str, Any]:
    """Give the rows ``X``, ``y`` a total privacy budget in the ledger (``pcqr budget set`` for data in memory).

    Every later ``PrivateClassifier.fit`` on rows of ``X`` -- each fold of a cross-validation, each
    candidate of a search -- is charged to this budget as well as its own (its rows are contained
    in these: pcqr.pipeline.budget.overlap), and refused, charging nothing, once the budget would be
    exceeded. Pass ``X`` as you will pass it to ``fit`` (the same columns, or the same array).

    Parameters
    ----------
    X, y : array-like
        The private rows, as ``fit`` takes them. Hashed in this process; the Parquet copy the
        hashing reads is written 0600 in a private temporary folder and removed.
    epsilon, delta : float
        The total every fit on these rows may spend together (basic composition).
    name : str, optional
        The budget's label in the ledger (``pcqr budget show NAME``); default "PrivateClassifier data".
    ledger : str, optional
        The ledger: a SQLite file or a team's ``postgresql://`` URL (default ``$PCQR_LEDGER``, else the user's).
    classes : list of two labels, optional
        As ``PrivateClassifier(classes=...)``, when ``y`` holds labels other than 0 and 1: the rows are
        hashed with each label's index in the sorted list, as ``fit`` writes them, so every fit with
        the same two labels, in whatever order, is charged to this budget.

    Returns
    -------
    dict
        ``dataset`` (the label), ``identity``, ``epsilon``, ``delta``, ``spent_epsilon``, ``spent_delta``.

    Raises
    ------
    pcqr.PcqrError
        A budget below what these rows have already spent, or a name that names other data.
    """
    from pcqr.pipeline.budget.ledger import Ledger, check_budget
    from pcqr.pipeline.budget.location import ledger_location
    from pcqr.pipeline.budget.overlap import identify
    from pcqr.pipeline.estimator.classifier import PrivateClassifier

    check_budget(epsilon, delta, name)
    table = PrivateClassifier(classes=classes).rows_table(X, y)  # exactly the rows fit writes
    label = name or "PrivateClassifier data"
    with PrivateFolder() as folder, Ledger(ledger_location(ledger)) as book:
        book.check_may_set_budgets()  # before the rows are written and hashed
        path = folder.join("rows.parquet")
        private_file(path)
        pq.write_table(table, path)
        found, _ = identify([path], book, registering=True)
        identity = found.identity
        book.set_budget(identity, label, float(epsilon), float(delta), name, found.row_sketch, found.rows)
        spent = book.store.spent(identity)
    return {"dataset": label, "identity": identity, "epsilon": float(epsilon), "delta": float(delta),
            "spent_epsilon": spent[0], "spent_delta": spent[1]}
