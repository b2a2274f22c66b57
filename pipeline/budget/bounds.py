"""What the ledger accepts, in one place: the client's policy (:mod:`pcqr.pipeline.budget.ledger`) and
the server's functions (:mod:`pcqr.pipeline.budget.postgres_schema`, which embeds these values in
its SQL) check the same ranges.
"""
from __future__ import annotations

#: Charges are compared with a budget within this relative tolerance (three charges of 1e-6 fit a
#: budget of 3e-6 despite rounding; pcqr.pipeline.budget.ledger).
RELATIVE_TOLERANCE = 1e-9
