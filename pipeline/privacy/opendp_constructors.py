"""The OpenDP constructors pcqr's noise comes from, imported without ``opendp.prelude``.

The prelude also imports ``opendp.extras.sklearn``, and through it scikit-learn wherever that is
installed: 2.2 s of every command that draws noise, against 0.25 s for the modules below (OpenDP
0.16, measured on the 2-core machine). The constructors are the same objects either way.
"""
from __future__ import annotations

import functools
from types import SimpleNamespace


@functools.cache
def dp_names() -> SimpleNamespace:
    """OpenDP's names as the prelude spells them (``dp.m.make_laplace``, ``dp.atom_domain``,
    ``dp.i64``, ...), with the ``contrib`` features enabled (the discrete Laplace mechanisms)."""
    import opendp.domains as domains
    import opendp.measurements as measurements
    import opendp.metrics as metrics
    import opendp.typing as typing
    from opendp.mod import enable_features

    enable_features("contrib")
    return SimpleNamespace(
        m=measurements, i64=typing.i64,
        atom_domain=domains.atom_domain, vector_domain=domains.vector_domain, map_domain=domains.map_domain,
        l1_distance=metrics.l1_distance, l01inf_distance=metrics.l01inf_distance,
        absolute_distance=metrics.absolute_distance,
    )
