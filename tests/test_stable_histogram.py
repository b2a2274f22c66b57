"""The stability-based histogram (``pcqr sanitize --algorithm histogram``, issue 31;
pipeline/mechanisms/stable_histogram.py): the exact output law on every replace-one neighbour pair of
tiny databases against the certificate, pcqr's sampler and OpenDP's make_laplace_threshold against
that law, the parameters, and the error bound on data."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.mechanisms.stable_histogram import (
    HistogramParameters, _opendp_threshold, conditional_release, least_threshold, release_shards, shard_of,
    stable_histogram,
)
from pcqr.pipeline.privacy.noise import SecureNoise, SeededNoise, discrete_laplace_pmf
from pcqr.pipeline.privacy.stability import laplace_tail
from tests.conftest import P_FAIL

#: The noisy values a key's exact law is enumerated over: [tau, WINDOW); the mass beyond is bounded.
WINDOW = 60


def _key_law(count: int, params: HistogramParameters) -> np.ndarray:
    """One key's output law: index 0 'not released', index 1 + j 'released with value tau + j'
    (j < WINDOW - tau); a key never seen (count 0) is never released."""
    values = np.arange(params.threshold, WINDOW)
    law = np.zeros(1 + values.size)
    if count == 0:
        law[0] = 1.0
        return law
    law[1:] = discrete_laplace_pmf(values - count, params.scale)
    law[0] = 1.0 - laplace_tail_exact(params.threshold - count, params.scale)
    return law


def laplace_tail_exact(a: int, scale: float) -> float:
    """P(Z >= a), Z ~ DLap(scale), in closed form, any integer a."""
    q = math.exp(-1 / scale)
    return q**a / (1 + q) if a >= 1 else 1 - q ** (1 - a) / (1 + q)


def _law(rows: tuple[int, ...], params: HistogramParameters, keys: int) -> np.ndarray:
    """The exact joint output law over every key of range(keys), as an array with one axis a key
    (the keys' outputs are independent)."""
    counts = np.bincount(np.array(rows, dtype=np.int64), minlength=keys)
    joint = np.ones(())
    for count in counts:
        joint = np.multiply.outer(joint, _key_law(int(count), params))
    return joint


@pytest.mark.parametrize(("epsilon", "delta"), [(1.0, 0.05), (2.0, 0.01)])
def test_every_tiny_neighbour_pair_is_within_the_certificate_and_the_worst_reaches_it(epsilon, delta) -> None:
    """Every multiset of 3 rows over 3 values and every replace-one neighbour: the hockey-stick
    divergence sum_o max(0, P(o | S) - e^eps P(o | S')) over the enumerated outputs, plus the mass
    beyond the window, is at most the certified delta; the worst pair reaches 99% of it (the
    certificate is tight: a value seen once, released only on one side)."""
    params = HistogramParameters.calibrated(epsilon, delta, 0.9, 0.5, 3)  # create() refuses 3 rows for utility
    assert params.scale == 2 / epsilon
    certified = params.certificate()
    assert certified["proven_epsilon"] == epsilon and certified["proven_delta"] <= delta
    beyond = 3 * laplace_tail(WINDOW - 3, params.scale)  # values past the window, any key
    worst = 0.0
    for rows in itertools.combinations_with_replacement(range(3), 3):
        p = _law(rows, params, 3)
        for i, new in itertools.product(range(3), range(3)):
            neighbour = rows[:i] + (new,) + rows[i + 1:]
            divergence = float(np.maximum(0.0, p - math.exp(epsilon) * _law(neighbour, params, 3)).sum())
            assert divergence <= certified["delta_threshold"] + beyond, (rows, neighbour)
            worst = max(worst, divergence)
    assert worst >= 0.99 * laplace_tail_exact(params.threshold - 1, params.scale)


def test_the_threshold_is_the_least_that_fits_delta() -> None:
    """tau: P(Z >= tau - 1) <= delta < P(Z >= tau - 2), at several scales and deltas."""
    for scale, delta in ((2.0, 1e-6), (0.5, 1e-9), (20.0, 1e-3), (2.0, 0.3)):
        tau = least_threshold(scale, delta)
        assert laplace_tail(tau - 1, scale) <= delta
        assert tau == 2 or laplace_tail(tau - 2, scale) > delta


def _chi_square(observed: dict, expected: dict, trials: int) -> float:
    """The p-value of Pearson's test of observed counts against expected probabilities (outcomes with
    expected count below 5 pooled)."""
    rare = [o for o, p in expected.items() if p * trials < 5]
    obs = [observed.get(o, 0) for o in expected if o not in rare] + [sum(observed.get(o, 0) for o in rare)
                                                                      + sum(v for o, v in observed.items()
                                                                            if o not in expected)]
    exp = [expected[o] * trials for o in expected if o not in rare] + [sum(expected[o] for o in rare) * trials]
    if exp[-1] == 0:
        assert obs[-1] == 0
        obs, exp = obs[:-1], exp[:-1]
    return float(stats.chisquare(obs, exp).pvalue)


@pytest.mark.parametrize("sampler", ["pcqr-secure", "pcqr-seeded", "opendp"])
def test_each_sampler_draws_the_law_the_certificate_is_about(sampler) -> None:
    """Counts {10: 1, 20: 3, 30: 6} at scale 1 and tau 4: 6,000 releases of each sampler (pcqr's
    tail bits and conditional noise, from the secure and the seeded source, and OpenDP's
    make_laplace_threshold itself), each key's outcomes (not released, or its value) against the
    exact law by Pearson's test; false-failure rate P_FAIL each."""
    params = HistogramParameters(1.0, 0.5, 0.9, 0.5, 10, 1.0, 4)
    values, counts = np.array([10, 20, 30]), np.array([1, 3, 6])
    noise = SecureNoise() if sampler == "pcqr-secure" else SeededNoise(11)
    measurement = _opendp_threshold(params.scale, params.threshold)
    trials = 6_000
    seen: list[dict] = [{} for _ in values]
    for _ in range(trials):
        if sampler == "opendp":
            out = measurement(dict(zip(values.tolist(), counts.tolist())))
        else:
            kept, noisy = stable_histogram(values, counts, params, noise)
            out = dict(zip(kept.tolist(), noisy.tolist()))
        for i, v in enumerate(values.tolist()):
            seen[i][out.get(v)] = seen[i].get(out.get(v), 0) + 1
    for i, count in enumerate(counts.tolist()):
        law = _key_law(count, params)
        expected = {None: law[0], **{params.threshold + j: float(p) for j, p in enumerate(law[1:])}}
        assert _chi_square(seen[i], expected, trials) > P_FAIL / 3, (sampler, count, seen[i])


@pytest.mark.parametrize("noise_factory", [lambda: SeededNoise(4), SecureNoise], ids=["seeded", "secure"])
def test_conditional_release_is_the_tail_of_the_noisy_count(noise_factory) -> None:
    """c + Z given c + Z >= tau at tau 5 for c = 2 (below tau: the memoryless geometric side) and
    c = 7 (rejection): 5,000 draws each, from the seeded and the secure source (OpenDP's mechanism on
    the bases), against the exact conditional law, Pearson's test, false-failure rate P_FAIL each."""
    scale, trials, tau = 1.5, 5_000, 5
    noise = noise_factory()
    for count in (2, 7):
        draws = conditional_release(np.full(trials, count), tau, scale, noise)
        assert draws.min() >= tau
        support = np.arange(tau, tau + 40)
        pmf = discrete_laplace_pmf(support - count, scale) / laplace_tail_exact(tau - count, scale)
        values, seen = np.unique(draws, return_counts=True)
        assert _chi_square(dict(zip(values.tolist(), seen.tolist())), dict(zip(support.tolist(), pmf.tolist())),
                           trials) > P_FAIL / 2


def test_the_secure_mechanism_adds_the_noise_inside_opendp_at_any_count() -> None:
    """SecureNoise.laplace_mechanism on counts near 2^40 (beyond OpenDP's default 32-bit integers):
    each output is its count plus noise of the scale's size, not a saturated value."""
    counts = np.array([2**40, 2**40 + 7, 3], dtype=np.int64)
    noisy = SecureNoise().laplace_mechanism(counts, 2.0)
    assert noisy.dtype == np.int64 and np.abs(noisy - counts).max() < 200


def test_rows_certified_is_the_least_m_within_alpha_and_fewer_are_refused_in_one_line() -> None:
    """least_rows certifies alpha; one row fewer is refused with that number in the message."""
    least = HistogramParameters.create(1.0, 1e-6, 0.01, 0.05, 10**6).least_rows()
    assert HistogramParameters.create(1.0, 1e-6, 0.01, 0.05, least).error_bound() <= 0.01
    with pytest.raises(PcqrError, match=f"needs at least {least:,} rows"):
        HistogramParameters.create(1.0, 1e-6, 0.01, 0.05, least - 1)


def test_every_point_query_within_the_error_bound_on_heavy_values_and_a_long_tail() -> None:
    """200,000 rows, half on ~20 heavy values, half uniform over [0, 2^32), split over 7 shards:
    every point query (each value seen and unseen) within error_bound (6.6e-4 here; beta 0.05, but
    the bound's union is over every value seen: a failure here is far rarer than beta); the shares
    of the released values sum to about the heavy half."""
    rng = np.random.default_rng(2)
    n = 200_000
    x = np.concatenate([np.floor(2 * rng.standard_normal(n // 2)).astype(np.int64) + 2**31,
                        rng.integers(0, 2**32, n - n // 2)])
    values, counts = np.unique(x, return_counts=True)
    params = HistogramParameters.create(1.0, 1e-6, 0.1, 0.05, n)
    where = shard_of(values, 7)
    released = release_shards([(values[where == s], counts[where == s]) for s in range(7)], params, SeededNoise(9))
    assert [v for v, _ in released] == sorted(v for v, _ in released)
    estimate = dict(released)
    truth = dict(zip(values.tolist(), (counts / n).tolist()))
    error = max(abs(estimate.get(v, 0.0) - truth.get(v, 0.0)) for v in set(estimate) | set(truth))
    assert error <= params.error_bound() < 1e-3
    assert abs(sum(estimate.values()) - 0.5) < 0.01


def test_shards_partition_the_values_by_a_public_hash() -> None:
    """The same value lands in the same shard however it is counted; every shard is used."""
    values = np.arange(-5_000, 5_000, dtype=np.int64) * 7919
    where = shard_of(values, 8)
    assert np.array_equal(where, shard_of(values.copy(), 8)) and set(where.tolist()) == set(range(8))
    assert np.array_equal(shard_of(values[::-1], 8), where[::-1])


def test_secure_draws_are_64_bit_not_saturated_at_two_to_the_31() -> None:
    """SecureNoise's draws at scale 10^10 pass 2^31 in magnitude (each with probability about 0.8; all
    20 below it has probability about 1e-14): OpenDP's Python ``int`` is 32-bit and saturated there."""
    draws = SecureNoise().discrete_laplace_vector(1e10, 20)
    assert draws.dtype == np.int64 and np.abs(draws).max() > 2**31
