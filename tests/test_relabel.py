"""A_AgPrivCl's derived parameters (Algorithm 3, step 1) and its privacy chain (Lemma 3.4)."""
from __future__ import annotations

import math

import pytest
from scipy import stats

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.privacy.em_sampler import total_variation
from pcqr.pipeline.privacy.agnostic_parameters import AgnosticParameters, binomial_upper_tail


@pytest.mark.parametrize(
    "eps,delta,alpha,beta,m,n",
    [(1.0, 1e-6, 0.1, 0.05, 1000, 5 * 10**7), (1.0, 1e-6, 0.1, 0.05, 10_000, 200_000),
     (0.5, 1e-8, 0.05, 0.1, 100, 10**6), (2.0, 1e-5, 0.2, 0.05, 10**5, 10**7)],
)
def test_derived_parameters_are_algorithm_3(eps, delta, alpha, beta, m, n) -> None:
    p = AgnosticParameters.algorithm3(eps, delta, alpha, beta, m, n, subsamples=10)
    log2d = math.log(2 / delta)
    assert p.sample_rows == math.floor(eps * n / 56)
    t = max(1, m * alpha / 8 + 0.25 * math.sqrt(3 * m * alpha * math.log(m / beta)))
    assert p.cutoff_formula == pytest.approx(t) and p.subsamp.cutoff == math.ceil(t)
    eps_prime = alpha * max(1, math.sqrt(m * alpha))
    assert p.eps_prime == pytest.approx(eps_prime)
    assert p.eps_hat == pytest.approx(min(1, eps_prime) / log2d)
    assert p.delta_hat == pytest.approx(delta / (2 * math.exp(min(1, eps_prime)) * log2d))
    assert (p.subsamp.epsilon, p.subsamp.delta) == (p.eps_hat, p.delta_hat)
    assert p.subsamp.lam == pytest.approx(math.sqrt(32 * math.ceil(t) * math.log(2 / p.delta_hat)) / p.eps_hat)
    # the chain ends within the requested budget, and every link is as the module states
    chain = p.privacy_chain()
    (_, e1, d1), (_, e2, d2), (_, e3, d3), (_, e4, d4) = chain
    repeats = math.floor(log2d)
    assert e1 <= p.eps_hat and d1 <= p.delta_hat
    assert e2 == pytest.approx(repeats * e1) and e2 <= 1
    # Lemma 3.1's link adds (1 + e^4) TV(n') for the sampled EM of A_Relabel; every link rounds up
    em = (1 + math.e**4) * total_variation(p.sample_rows)
    assert e3 == 4.0 and d3 >= 4 * math.e * d2 + em and d3 == pytest.approx(4 * math.e * d2 + em, rel=1e-9)
    rate = p.sample_rows / n
    assert e4 >= math.log1p(rate * math.expm1(4.0)) and e4 == pytest.approx(math.log1p(rate * math.expm1(4.0)))
    assert d4 >= rate * d3 and d4 == pytest.approx(rate * d3)
    assert e4 <= eps and d4 <= delta
    # the certificate reports the chain's last link term by term; the terms add up to proven_delta
    cert = p.certificate()
    assert (cert["proven_epsilon"], cert["proven_delta"]) == (e4, d4)
    terms = [cert[f"delta_{k}"] for k in ("composition", "stability", "sampler", "resampling")]
    assert math.fsum(terms) <= d4 and cert["delta_stability"] > 0 and cert["delta_sampler"] > 0
    assert cert["delta_sampler"] >= rate * em  # the relabelling EM's term is in delta_sampler


def test_the_issue_benchmark_configuration() -> None:
    """eps 1, delta 1e-6, alpha 0.1, beta 0.05, m 1000 on 5e7 rows: n' ~ 8.9e5, lambda ~ 1,823."""
    p = AgnosticParameters.algorithm3(1.0, 1e-6, 0.1, 0.05, 1000, 5 * 10**7, subsamples=40_000)
    assert p.sample_rows == 892_857
    assert 1800 < p.subsamp.lam < 1880  # 1,823 with the fractional T; we round T up to 27


def test_resampling_tail_is_an_upper_bound_on_the_binomial() -> None:
    for n, r in ((100, 3), (5000, 14), (10**6, 10), (300, 250)):
        exact = float(stats.binom.sf(r, n, 1 / n))
        assert binomial_upper_tail(n, 1 / n, r) >= exact
        assert binomial_upper_tail(n, 1 / n, r) == pytest.approx(exact, rel=1e-6)


def test_more_sampled_rows_than_rows_is_refused() -> None:
    """n' = floor(eps n / 56) > n when eps > 56: one line naming --epsilon, before anything is read."""
    with pytest.raises(PcqrError, match="--epsilon") as refused:
        AgnosticParameters.algorithm3(60.0, 1e-6, 0.1, 0.05, 100, 1000)
    assert "n' = floor(eps n / 56) = 1071 of n = 1000" in str(refused.value)
    assert "\n" not in str(refused.value)


def test_too_few_rows_is_refused() -> None:
    with pytest.raises(PcqrError, match="needs at least 56 private rows"):
        AgnosticParameters.algorithm3(1.0, 1e-6, 0.1, 0.05, 100, 40)
    with pytest.raises(PcqrError, match="--alpha"):
        AgnosticParameters.algorithm3(1.0, 1e-6, 1.5, 0.05, 100, 10**6)
