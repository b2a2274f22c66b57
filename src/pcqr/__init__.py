"""pcqr: private classification-query release on Dask, with a proof of differential privacy.

The library is :mod:`pcqr.pipeline`, the ``pcqr`` command's jobs are :mod:`pcqr.jobs`.
See docs/architecture.md for the data flow and docs/privacy.md for every mechanism.
"""
from __future__ import annotations

from pcqr.pipeline import __version__

__all__ = ["__version__"]
