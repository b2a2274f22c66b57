"""The exact optimal-composition certifier (pcqr.pipeline.privacy.composition, KOV Theorem 3.3):
equal to the hockey-stick divergence of T randomized responses enumerated outcome by outcome,
the closed form at T = 1, never looser than advanced composition, never below the exact value
(directed rounding, with libm's exp checked against an exact series), and within 0.5% of
dp_accounting's privacy-loss-distribution accountant. The same for two families of mechanisms
(:func:`optimal_delta_two`, PMW's accountant): KOV at 2T when the eps's are equal, the enumeration on
small T, between dp_accounting's optimistic and pessimistic PLDs of the discrete Laplace, and never
above advanced composition per family."""
from __future__ import annotations

import itertools
import math
from fractions import Fraction

import pytest

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.privacy.composition import (
    EXACT_MAX_COUNT, TWO_FAMILY_MAX_COUNT, exp_above, exp_below, largest_eps0, optimal_delta, optimal_delta_at,
    optimal_delta_estimate, optimal_delta_two, optimal_epsilon_two,
)
from pcqr.pipeline.privacy.subsamp import composition_guarantee


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


def _brute_force(factors: list[Fraction], e: Fraction) -> Fraction:
    """sum over outcomes o in {0,1}^T of [P(o) - e Q(o)]_+, P and Q the product of RR(a_t) on
    neighbours, a_t = e^eps_t the given ``factors`` (RR(a) says 1 w.p. a/(1+a) on one, 1/(1+a) on the other)."""
    total = Fraction(0)
    for outcome in itertools.product((0, 1), repeat=len(factors)):
        p = q = Fraction(1)
        for a, o in zip(factors, outcome):
            p, q = p * (a if o else 1) / (1 + a), q * (1 if o else a) / (1 + a)
        total += max(Fraction(0), p - e * q)
    return total


@pytest.mark.parametrize(("eps0", "count", "epsilon"),
                         [(0.3, 1, 0.1), (0.3, 4, 0.5), (1.0, 7, 2.0), (0.05, 10, 0.2), (0.7, 9, 0.0)])
def test_sum_equals_the_hockey_stick_of_randomized_responses(eps0: float, count: int, epsilon: float) -> None:
    a, e = exp_above(eps0), exp_below(epsilon)
    assert optimal_delta_at(a, e, count) == _brute_force([a] * count, e)


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


@pytest.mark.parametrize(("eps0", "count", "epsilon"),
                         [(0.1, 10, 1.0), (0.0561, 10, 1.0), (0.0561, 10, 0.3), (0.02, 1000, 1.0), (0.5, 3, 0.0)])
def test_two_equal_families_are_kov_at_twice_the_count(eps0: float, count: int, epsilon: float) -> None:
    exact = optimal_delta(eps0, 2 * count, epsilon)  # exact rationals, rounded up by a hair
    got = optimal_delta_two(eps0, eps0, count, epsilon)
    assert got >= exact * (1 - 1e-12) and got == pytest.approx(exact, rel=1e-9)


@pytest.mark.parametrize(("eps_a", "eps_b", "count", "epsilon"),
                         [(0.3, 0.1, 1, 0.0), (0.3, 0.1, 4, 0.2), (1.0, 0.05, 5, 0.5), (0.2, 0.7, 6, 1.0),
                          (0.0561, 0.0025, 6, 0.1)])
def test_two_families_match_the_enumeration(eps_a: float, eps_b: float, count: int, epsilon: float) -> None:
    """Every outcome of c RR(eps_a) and c RR(eps_b), exactly: the bound is above the exact value (bracketed
    by rational e^x from both sides: delta grows with each eps0 and falls with eps) and within 1e-9 of it."""
    low = _brute_force([exp_below(eps_a)] * count + [exp_below(eps_b)] * count, exp_above(epsilon))
    high = _brute_force([exp_above(eps_a)] * count + [exp_above(eps_b)] * count, exp_below(epsilon))
    got = optimal_delta_two(eps_a, eps_b, count, epsilon)
    assert Fraction(got) >= high and got == pytest.approx(float(low), rel=1e-9)


@pytest.mark.parametrize(("eps_a", "eps_b", "count", "epsilon"),  # dyadic eps's: the grid holds every loss exactly
                         [(3 / 64, 1 / 512, 200, 1.0), (3 / 32, 1 / 32, 100, 2.0), (0.25, 0.25, 40, 3.0),
                          (5 / 256, 1 / 1024, 2000, 1.0), (3 / 64, 1 / 512, 300, 0.5)])
def test_two_families_lie_between_dp_accounting_optimistic_and_pessimistic(
        eps_a: float, eps_b: float, count: int, epsilon: float) -> None:
    """dp_accounting's PLD of the discrete Laplace (sensitivity 1, the mechanism PMW releases with) composed
    c times per family: the optimistic grid bounds the true delta from below, the pessimistic from above;
    ours is never below the first and, on a grid that holds every loss (eps_b / 8), within 1e-6 of both."""
    from dp_accounting.pld import privacy_loss_distribution as pld

    def theirs(pessimistic: bool) -> float:
        step = eps_b / 8
        a, b = (pld.from_discrete_laplace_mechanism(e, pessimistic_estimate=pessimistic, value_discretization_interval=step)
                for e in (eps_a, eps_b))
        return a.self_compose(count).compose(b.self_compose(count)).get_delta_for_epsilon(epsilon)

    got, below, above = optimal_delta_two(eps_a, eps_b, count, epsilon), theirs(False), theirs(True)
    assert got >= below * (1 - 1e-9) and got <= above * (1 + 1e-9)
    assert got == pytest.approx(below, rel=1e-6) and got == pytest.approx(above, rel=1e-6)


@pytest.mark.parametrize("count", [1, 10, 200, 1475, 13271])
@pytest.mark.parametrize(("eps_a", "eps_b"), [(0.01, 0.0005), (0.05, 0.05), (0.3, 0.02)])
@pytest.mark.parametrize("delta", [1e-9, 1e-6, 1e-3])
def test_two_families_never_looser_than_advanced_composition(count: int, eps_a: float, eps_b: float, delta: float) -> None:
    """PMW's accountant before issue 29: each family by the better of basic and advanced at delta / 2, added."""
    (e_a, d_a), (e_b, d_b) = composition_guarantee(eps_a, count, delta), composition_guarantee(eps_b, count, delta)
    assert optimal_delta_two(eps_a, eps_b, count, e_a + e_b) <= d_a + d_b
    assert optimal_epsilon_two(eps_a, eps_b, count, delta) <= e_a + e_b


def test_two_families_bad_arguments_are_refused() -> None:
    for args in [(0.0, 0.1, 5, 1.0), (0.1, math.nan, 5, 1.0), (0.1, 0.1, 0, 1.0), (0.1, 0.1, 5, -1.0), (701.0, 0.1, 5, 1.0)]:
        with pytest.raises(PcqrError):
            optimal_delta_two(*args)
    with pytest.raises(PcqrError, match="at most"):
        optimal_delta_two(0.01, 0.01, TWO_FAMILY_MAX_COUNT + 1, 1.0)
    basic = optimal_epsilon_two(0.1, 0.2, 10, 0.0)  # basic composition's point, rounded up: delta 0 exactly
    assert Fraction(basic) >= 10 * (Fraction(0.1) + Fraction(0.2)) and basic == pytest.approx(3.0)
    assert optimal_delta_two(0.1, 0.2, 10, basic) == 0.0 < optimal_delta_two(0.1, 0.2, 10, basic * (1 - 1e-9))
