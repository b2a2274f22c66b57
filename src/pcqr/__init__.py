"""pcqr: private classification-query release on Dask, with a proof of differential privacy.

The Python API (docs/api.md):

- :class:`Session` -- train k models on private data within a privacy budget, answer queries
  through the sparse-vector coordinator into a public log, look at the budget (``status()``).
- :class:`SessionStatus` -- what ``Session.status()`` returns.
- :class:`PcqrError` -- every refusal: one line naming the parameter, file or column.

The library is :mod:`pcqr.pipeline`, the ``pcqr`` command's jobs are :mod:`pcqr.jobs`.
See docs/architecture.md for the data flow and docs/privacy.md for every mechanism.
"""
from __future__ import annotations

from pcqr.pipeline import __version__
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.session.reporting import Reporter
from pcqr.pipeline.session.estimator import PrivateClassifier
from pcqr.pipeline.session.session import Session, SessionStatus

__all__ = ["PcqrError", "PrivateClassifier", "Reporter", "Session", "SessionStatus", "__version__"]
