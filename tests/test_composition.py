"""The exact optimal-composition certifier (pcqr.pipeline.privacy.composition, KOV Theorem 3.3):
equal to the hockey-stick divergence of T randomized responses enumerated outcome by outcome,
the closed form at T = 1, never looser than advanced composition, never below the exact value
(directed rounding, with libm's exp checked against an exact series), and within 0.5% of
dp_accounting's privacy-loss-distribution accountant."""
from __future__ import annotations

import itertools
import math
from fractions import Fraction

import pytest

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.privacy.composition import (
    EXACT_MAX_COUNT, exp_above, exp_below, largest_eps0, optimal_delta, optimal_delta_at, optimal_delta_estimate,
)


def _exp_bounds(x: Fraction, terms: int = 150) -> tuple[Fraction, Fraction]:
    """Exact rational bounds on e^x for 0 <= x < terms: the series' partial sum (below) and it
    plus the tail bound x^(N+1)/(N+1)! / (1 - x/(N+2)) (above)."""
    total, term = Fraction(0), Fraction(1)
    for n in range(terms + 1):
        total += term
        term = term * x / (n + 1)
    return total, total + term / (1 - x / (terms + 2))


@pytest.mark.parametrize("x", [1e-9, 0.001, 0.0561, 0.1, 1 / 3, 0.5, 1.0, 2.0, math.log(2), 4.0, 9.75, 20.0])
def test_exp_brackets_hold_against_the_exact_series(x: float) -> None:
    below, above = _exp_bounds(Fraction(x))
    assert exp_below(x) <= below and exp_above(x) >= above
    assert exp_above(x) / exp_below(x) < 1 + 1e-14  # and tight


def _brute_force(a: Fraction, e: Fraction, count: int) -> Fraction:
    """sum over outcomes o in {0,1}^T of [P(o) - e Q(o)]_+, P and Q the T-fold RR(a) on neighbours."""
    total = Fraction(0)
    for outcome in itertools.product((0, 1), repeat=count):
        ones = sum(outcome)
        p = a**ones / (1 + a) ** count
        q = a ** (count - ones) / (1 + a) ** count
        total += max(Fraction(0), p - e * q)
    return total


@pytest.mark.parametrize(("eps0", "count", "epsilon"),
                         [(0.3, 1, 0.1), (0.3, 4, 0.5), (1.0, 7, 2.0), (0.05, 10, 0.2), (0.7, 9, 0.0)])
def test_sum_equals_the_hockey_stick_of_randomized_responses(eps0: float, count: int, epsilon: float) -> None:
    a, e = exp_above(eps0), exp_below(epsilon)
    assert optimal_delta_at(a, e, count) == _brute_force(a, e, count)


@pytest.mark.parametrize(("eps0", "epsilon"), [(0.5, 0.1), (2.0, 1.0), (0.01, 0.0), (1.0, 1.0), (1.0, 3.0)])
def test_one_instance_is_the_closed_form(eps0: float, epsilon: float) -> None:
    exact = max(0.0, (math.exp(eps0) - math.exp(epsilon)) / (1 + math.exp(eps0)))
    got = optimal_delta(eps0, 1, epsilon)
    assert got >= exact * (1 - 1e-15) and got == pytest.approx(exact, rel=1e-12, abs=1e-300)


@pytest.mark.parametrize("count", [1, 5, 20, 50, 200, 1000])
@pytest.mark.parametrize("eps0", [0.001, 0.0336, 0.1, 0.5])
@pytest.mark.parametrize("delta", [1e-9, 5e-7, 1e-3])
def test_never_looser_than_advanced_composition(count: int, eps0: float, delta: float) -> None:
    """Dwork-Rothblum-Vadhan: T eps0-DP mechanisms are (sqrt(2 T log(1/d)) eps0 + T eps0 (e^eps0 - 1), d)-DP."""
    advanced = math.sqrt(2 * count * math.log(1 / delta)) * eps0 + count * eps0 * math.expm1(eps0)
    assert optimal_delta(eps0, count, advanced * (1 + 1e-12)) <= delta
    basic = count * eps0
    while Fraction(basic) < count * Fraction(eps0):
        basic = math.nextafter(basic, math.inf)
    assert optimal_delta(eps0, count, basic) == 0.0  # and basic composition's point, exactly


@pytest.mark.parametrize(("eps0", "count", "epsilon"),
                         [(0.0561, 20, 1.0), (0.0335, 50, 1.0), (0.0163, 200, 1.0), (0.2, 30, 2.0), (0.5, 10, 0.5)])
def test_estimate_is_close_and_the_certificate_is_not_below_it(eps0: float, count: int, epsilon: float) -> None:
    exact, estimate = optimal_delta(eps0, count, epsilon), optimal_delta_estimate(eps0, count, epsilon)
    assert exact == pytest.approx(estimate, rel=1e-9) and exact >= estimate * (1 - 1e-12)


@pytest.mark.parametrize(("count", "lam"), [(20, 35.6), (50, 59.7), (200, 122.6)])
def test_calibration_matches_the_figures_in_algorithms_md(count: int, lam: float) -> None:
    """eps = 1, delta / 2 = 5e-7: lambda = 2 / eps0 as ALGORITHMS.md section 10 states, certified."""
    eps0 = largest_eps0(count, 1.0, 5e-7)
    assert 2 / eps0 == pytest.approx(lam, abs=0.06)
    assert optimal_delta(eps0, count, 1.0) <= 5e-7 < optimal_delta(eps0 * (1 + 1e-9), count, 1.0)


def test_agrees_with_dp_accounting_pld() -> None:
    """dp_accounting's PLD accountant (self-composition of an eps0-DP mechanism) within 0.5%."""
    from dp_accounting.pld.common import DifferentialPrivacyParameters
    from dp_accounting.pld import privacy_loss_distribution as pld

    for eps0, count, epsilon in [(0.0561, 20, 1.0), (0.0335, 50, 1.0), (0.0163, 200, 1.0), (0.1, 100, 2.0),
                                 (0.25, 40, 3.0)]:
        # the privacy loss of an eps0-DP mechanism is +-eps0: a grid that holds eps0 discretises it exactly
        theirs = pld.from_privacy_parameters(DifferentialPrivacyParameters(eps0, 0.0),
                                             value_discretization_interval=eps0 / 64).self_compose(count)
        expected = theirs.get_delta_for_epsilon(epsilon)
        assert optimal_delta(eps0, count, epsilon) == pytest.approx(expected, rel=5e-3), (eps0, count, epsilon)


def test_bad_arguments_are_refused() -> None:
    for args in [(0.0, 5, 1.0), (math.nan, 5, 1.0), (0.1, 0, 1.0), (0.1, 5, -1.0)]:
        with pytest.raises(PcqrError):
            optimal_delta(*args)
    with pytest.raises(PcqrError, match="at most"):
        optimal_delta(0.01, EXACT_MAX_COUNT + 1, 1.0)
