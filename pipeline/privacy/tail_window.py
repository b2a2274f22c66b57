"""How wide the samplers' tail tables are: a function of the public scale alone.

:class:`pcqr.pipeline.privacy.noise.DiscreteLaplaceTail` and ``DiscreteGaussianTail`` tabulate
P(Z >= a) in 128-bit fixed point over a saturation window [1, J + 2], beyond which the tail is
below what the table can hold. J is needed both where the tables are built (pcqr.pipeline.privacy.noise)
and where a parameter is checked before any charge (pcqr.pipeline.privacy.limits: a scale whose
table would exceed ``MAX_TAIL_ENTRIES`` is refused), so it lives here, below both.
"""
from __future__ import annotations

import math

#: F(a) = floor(P(Z >= a) * 2^128): the tables' fixed-point precision.
SCALE_BITS = 128
#: The Gaussian window ends where the truncated tail is below 2^-150.
GAUSS_TAIL_BITS = 150


def tail_span(scale: float) -> int:
    """J, the half-width of the discrete Laplace table's saturation window at ``scale``:
    q^J < 2^-130. The table stores J + 2 entries (a = 1 .. J + 2)."""
    return math.ceil(scale * (SCALE_BITS + 2) * math.log(2)) + 1


def gaussian_tail_span(sigma: float) -> int:
    """J for the discrete Gaussian table at ``sigma``: exp(-J^2 / (2 sigma^2)) < 2^-150, so P(Z >= J) is
    far below 2^-128 and the table saturates at 0 inside its J + 2 entries."""
    return math.ceil(sigma * math.sqrt(2 * GAUSS_TAIL_BITS * math.log(2))) + 2
