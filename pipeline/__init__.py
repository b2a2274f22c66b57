"""pcqr: private classification-query release on Dask.

The library behind the ``pcqr`` command. See docs/architecture.md for the data
flow and docs/privacy.md for every mechanism and its guarantee.
"""
from __future__ import annotations

__version__ = "0.2.1"
