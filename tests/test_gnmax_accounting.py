"""The gnmax gate's accountant (pcqr.pipeline.privacy.gnmax) and its sampler's table
(pcqr.pipeline.privacy.noise.DiscreteGaussianTail): the issue's figures, dp_accounting's RDP accountant,
the exact Gaussian curve as a floor, minimal sigma, directed rounding; the table against an 80-digit
direct sum and OpenDP's discrete Gaussian sampler."""
from __future__ import annotations

import math
from decimal import Decimal, localcontext

import numpy as np
import pytest
from scipy import stats

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.privacy.gnmax import (
    calibrate_sigma, count_sigma, gnmax_guarantee, gnmax_rho, mironov_epsilon, zcdp_epsilon,
)
from pcqr.pipeline.privacy.noise import DiscreteGaussianTail, SeededNoise
from tests.conftest import P_FAIL


def test_the_issues_figures() -> None:
    """eps 1, delta 1e-6, m 2,000: sigma about 287 by the tight conversion, 338 by Mironov's."""
    assert 286 <= calibrate_sigma(1.0, 1e-6, 2000) <= 288
    simple = next(s / 10 for s in range(2000, 5000) if mironov_epsilon(2000 / (s / 10) ** 2, 1e-6) <= 1)
    assert 337 <= simple <= 339


@pytest.mark.parametrize(("sigma", "m", "delta"), [(287.0, 2000, 1e-6), (50.0, 100, 1e-5), (1000.0, 10**5, 1e-9),
                                                   (5.0, 3, 1e-3)])
def test_agrees_with_dp_accounting_and_stays_above_the_exact_curve(sigma: float, m: int, delta: float) -> None:
    from dp_accounting import GaussianDpEvent, SelfComposedDpEvent
    from dp_accounting.rdp import RdpAccountant

    ours = gnmax_guarantee(sigma, m, delta)[0]
    accountant = RdpAccountant(orders=list(1 + np.geomspace(1e-3, 1e4, 4000)))
    accountant.compose(SelfComposedDpEvent(GaussianDpEvent(count_sigma(sigma)), m))
    theirs = accountant.get_epsilon(delta)
    assert theirs * (1 - 1e-3) <= ours <= theirs * (1 + 1e-6)
    # the exact curve of m Gaussians (sensitivity 1, scale sigma/sqrt 2): mu = sqrt(m) / sc
    mu = math.sqrt(m) / count_sigma(sigma)
    exact = lambda e: stats.norm.cdf(-e / mu + mu / 2) - math.exp(e) * stats.norm.cdf(-e / mu - mu / 2)  # noqa: E731
    assert exact(ours) <= delta  # our eps is at or above the true one at delta


def test_calibrated_sigma_is_minimal_and_certifies() -> None:
    s = calibrate_sigma(1.0, 1e-6, 2000)
    assert gnmax_guarantee(s, 2000, 1e-6)[0] <= 1.0 < gnmax_guarantee(s * (1 - 1e-6), 2000, 1e-6)[0]
    assert calibrate_sigma(2.0, 1e-6, 2000) < s < calibrate_sigma(1.0, 1e-7, 2000)
    assert s < calibrate_sigma(1.0, 1e-6, 2001)


@pytest.mark.parametrize(("rho", "delta"), [(1e-4, 1e-6), (0.0243, 1e-6), (3.0, 1e-3), (1e-7, 1e-12)])
def test_conversion_is_rounded_outward(rho: float, delta: float) -> None:
    eps, alpha = zcdp_epsilon(rho, delta)
    with localcontext() as ctx:
        ctx.prec = 60
        a, r, d = Decimal(alpha), Decimal(rho), Decimal(delta)
        exact = r * a + ((a - 1) / a).ln() - (d.ln() + a.ln()) / (a - 1)
    assert Decimal(eps) >= exact and eps - float(exact) < 1e-9 * max(1.0, eps)
    assert gnmax_rho(287.0, 2000) >= 2000 / 287.0**2


@pytest.mark.parametrize(("args", "message"), [((0.0, 1e-6, 10), "--epsilon"), ((1.0, 1.5, 10), "--delta"),
                                               ((1.0, 1e-6, 0), "--queries-max")])
def test_bad_inputs_are_refused(args: tuple, message: str) -> None:
    with pytest.raises(PcqrError, match=message):
        calibrate_sigma(*args)


def _exact_tail(sigma: float, a: int, weights: dict[int, Decimal], total: Decimal) -> Decimal:
    return sum((v for z, v in weights.items() if z >= a), Decimal(0)) / total


@pytest.mark.parametrize("sigma", [0.6, 2.5, 10.3])
def test_gaussian_table_is_exact_to_3e_39(sigma: float) -> None:
    """Every entry within 3e-39 of an 80-digit direct sum, on both sides of 0 and past the window;
    monotone; symmetric (F(a) + F(1 - a) = 2^128 - 1)."""
    tail = DiscreteGaussianTail(sigma)
    with localcontext() as ctx:
        ctx.prec = 80
        width = int(40 * sigma) + 50
        weights = {z: (Decimal(-z * z) / (2 * Decimal(sigma) ** 2)).exp() for z in range(-width, width + 1)}
        total = sum(weights.values(), Decimal(0))
        values = [tail.fixed(a) for a in range(-tail.span - 4, tail.span + 5)]
        for a, f in zip(range(-tail.span - 4, tail.span + 5), values):
            assert abs(Decimal(f) / Decimal(2) ** 128 - _exact_tail(sigma, a, weights, total)) <= Decimal("3e-39")
            assert f + tail.fixed(1 - a) == 2**128 - 1
    assert values == sorted(values, reverse=True) and values[0] == 2**128 - 1 and values[-1] == 0


def test_gaussian_table_matches_opendps_sampler() -> None:
    """200,000 draws of OpenDP's discrete Gaussian (scale 3): the share of Z >= a for a in -3..6 against
    the table (two-sided normal test, false failure P_FAIL per a); and the table's own draws."""
    import opendp.prelude as dp

    dp.enable_features("contrib")
    sampler = dp.m.make_gaussian(dp.vector_domain(dp.atom_domain(T=int)), dp.l2_distance(T=int), scale=3.0)
    draws = np.asarray(sampler([0] * 200_000))
    tail = DiscreteGaussianTail(3.0)
    bits = tail.draw_at_least(np.full(200_000, 2), SeededNoise(4))
    for a in range(-3, 7):
        p = tail.probability(a)
        z = abs(np.mean(draws >= a) - p) / math.sqrt(p * (1 - p) / draws.size)
        assert z < stats.norm.isf(P_FAIL / 2), a
    p = tail.probability(2)
    assert abs(bits.mean() - p) / math.sqrt(p * (1 - p) / bits.size) < stats.norm.isf(P_FAIL / 2)


def test_gaussian_table_refuses_bad_scales() -> None:
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError):
            DiscreteGaussianTail(bad)
    with pytest.raises(ValueError, match="MAX_TAIL_ENTRIES"):
        DiscreteGaussianTail(1e7)
