"""pcqr: private classification-query release on Dask, with a proof of differential privacy.

The Python API (docs/api.md):

- :class:`Session` -- train k models on private data within a privacy budget, answer queries
  through the sparse-vector coordinator into a public log, look at the budget (``status()``).
- :class:`SessionStatus` -- what ``Session.status()`` returns.
- :class:`PrivateClassifier` -- the scikit-learn estimator over a session.
- :func:`distill` -- a student of a session's public log, written as a model file (no budget).
- :func:`learn_without_public_data` -- a point, threshold or box classifier from private rows alone
  (Beimel-Nissim-Stemmer: A_dist, RecConcave), or any enumerable class's by their label-private
  learner when the feature columns are stated public (Fig. 13), written as a model file.
- :func:`sanitize` -- a synthetic database answering every point query (SanPoints) or every threshold
  query (SanThresholds) within alpha.
- :func:`privacy_cost` -- what a cross-validation or a search over ``PrivateClassifier`` will charge,
  before it runs; :func:`set_budget` -- a ledger budget on rows in memory that caps it.
- :class:`PrivacyCostWarning`, :class:`UnansweredWarning`, :class:`SmallDataWarning`,
  :class:`OneClassWarning` -- what ``PrivateClassifier`` (and ``Session``) warn of through
  :mod:`warnings` (a fit's charge; queries without an answer; too few rows; models that see one
  class only).
- :class:`LargeDeltaWarning` -- a delta at or above 1/n of the private rows, which allows publishing a
  whole row (every API call that takes a delta; 0.01 or more is refused).
- :class:`Reporter` -- where progress and notes go.
- :class:`PcqrError` -- every refusal: one line naming the parameter, file or column.

The library is :mod:`pcqr.pipeline`, the ``pcqr`` command's jobs are :mod:`pcqr.jobs`.
See docs/architecture.md for the data flow and docs/privacy.md for every mechanism.

Every call through these names speaks Python: a refusal names the keyword (``queries_max``,
``allow_private_overlap=True``), not the command line's option (pcqr.pipeline.spelling); the functions
are their library's, run under :func:`pcqr.pipeline.spelling.python_api`.

The names are imported when first used (PEP 562), so that ``import pcqr.pipeline...`` -- every
``pcqr`` command and every Dask worker task -- does not pay for scikit-learn and the session
modules it does not need.
"""
from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from pcqr.pipeline import __version__

if TYPE_CHECKING:  # what the names below resolve to, for type checkers and readers
    from pcqr.pipeline.errors import PcqrError
    from pcqr.pipeline.mechanisms.without_public_data import learn_without_public_data, sanitize
    from pcqr.pipeline.session.distillation import distill
    from pcqr.pipeline.estimator.classifier import (PrivacyCostWarning, PrivateClassifier, SmallDataWarning,
                                                 UnansweredWarning)
    from pcqr.pipeline.estimator.model_selection import PrivacyCost, privacy_cost, set_budget
    from pcqr.pipeline.privacy.limits import LargeDeltaWarning
    from pcqr.pipeline.session.planning import OneClassWarning
    from pcqr.pipeline.session.progress import Reporter
    from pcqr.pipeline.session.session import Session, SessionStatus

_HOMES = {
    "PcqrError": "pcqr.pipeline.errors",
    "PrivateClassifier": "pcqr.pipeline.estimator.classifier",
    "PrivacyCostWarning": "pcqr.pipeline.estimator.classifier",
    "UnansweredWarning": "pcqr.pipeline.estimator.classifier",
    "SmallDataWarning": "pcqr.pipeline.estimator.classifier",
    "OneClassWarning": "pcqr.pipeline.session.planning",
    "LargeDeltaWarning": "pcqr.pipeline.privacy.limits",
    "PrivacyCost": "pcqr.pipeline.estimator.model_selection",
    "privacy_cost": "pcqr.pipeline.estimator.model_selection",
    "set_budget": "pcqr.pipeline.estimator.model_selection",
    "distill": "pcqr.pipeline.session.distillation",
    "learn_without_public_data": "pcqr.pipeline.mechanisms.without_public_data",
    "sanitize": "pcqr.pipeline.mechanisms.without_public_data",
    "Reporter": "pcqr.pipeline.session.progress",
    "Session": "pcqr.pipeline.session.session",
    "SessionStatus": "pcqr.pipeline.session.session",
}

__all__ = ["LargeDeltaWarning", "OneClassWarning", "PcqrError", "PrivacyCost", "PrivacyCostWarning",
           "PrivateClassifier", "Reporter", "Session", "SessionStatus", "SmallDataWarning", "UnansweredWarning",
           "__version__", "distill", "learn_without_public_data", "privacy_cost", "sanitize", "set_budget"]
#: The library functions the face hands out under Python's spelling (the classes' entry points,
#: Session's and PrivateClassifier's methods and model_selection's functions, are marked in their modules).
_SPOKEN = ("distill", "learn_without_public_data", "sanitize")


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'pcqr' has no attribute {name!r}")
    value = getattr(import_module(home), name)
    if name in _SPOKEN:
        from pcqr.pipeline.spelling import python_api

        value = python_api(value)
    globals()[name] = value  # once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
