"""The exponential mechanism's sampler, as a certificate sees it: its distance from the exact EM and
the delta that distance adds (the argument, steps (a)-(c), is in the docstring of
:mod:`pcqr.pipeline.mechanisms.exponential`, whose sampler it bounds).

Every certificate that runs the sampler inside an eps-DP claim adds :func:`sampler_delta` to its
``delta_sampler``: A_Relabel inside A_AgPrivCl, A_SSPP and A_UnvPrivCl, the choosing mechanism,
RecConcave. It lives here, with the accounting, so that the parameter classes of
:mod:`pcqr.pipeline.privacy` certify a run without importing the mechanisms that run it.
"""
from __future__ import annotations

import math

from pcqr.pipeline.privacy.subsamp import round_up


def total_variation(rows: int) -> float:
    """TV(rows) = (rows + 2) 2^-159: the sampler's total variation distance from the exact EM
    when the scores are mistake counts on ``rows`` rows (module docstring, (a)-(c))."""
    return math.ldexp(max(int(rows), 0) + 2, -159)


def sampler_delta(epsilon: float, rows: int) -> float:
    """delta_EM = (1 + e^epsilon) TV(rows), rounded up: the delta a certificate adds for one run
    of this sampler inside an ``epsilon``-DP mechanism (capped at 1, where it says nothing)."""
    if epsilon > 700:  # e^epsilon overflows; (1 + e^700) 2^-159 is far above 1
        return 1.0
    return min(1.0, round_up((1 + math.exp(epsilon)) * total_variation(rows)))
