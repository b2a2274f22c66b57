"""The choosing mechanism (Beimel-Nissim-Stemmer Fig. 8, Lemmas 4.4-4.5; issue 14): its exact output
law on every pair of neighbouring tiny databases against the certificate, the sampler against that
law, refusals outside Lemma 4.4, and utility."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.mechanisms.choosing import ChoosingParameters, choose_solution
from pcqr.pipeline.privacy.noise import SecureNoise, SeededNoise
from tests.conftest import P_FAIL


def _tail(a: int, scale: float) -> float:
    """P(Z >= a), Z ~ DLap(scale), closed form."""
    q = math.exp(-1 / scale)
    return q**a / (1 + q) if a >= 1 else 1 - q ** (1 - a) / (1 + q)


def exact_law(qualities: list[int], params: ChoosingParameters) -> dict:
    """{candidate index or None: probability} of the mechanism with an exact exponential mechanism:
    step 1 passes iff max q + Z >= pass_quality; then P(f) proportional to exp(eps q / 4) on q >= 1."""
    best = max(qualities)
    passed = _tail(params.pass_quality - best, params.scale)
    members = [i for i, q in enumerate(qualities) if q >= 1]
    if not members:
        return {None: 1.0}
    weights = np.array([math.exp(params.epsilon * qualities[i] / 4) for i in members])
    law = {i: passed * w / weights.sum() for i, w in zip(members, weights)}
    law[None] = 1 - passed
    return law


@pytest.mark.parametrize(("epsilon", "alpha", "rows"), [(2.0, 0.5, 25), (4.0, 0.6, 20), (1.0, 0.9, 30)])
def test_exact_law_is_eps_delta_dp_on_every_neighbouring_pair(epsilon: float, alpha: float, rows: int) -> None:
    """q(S, a) = copies of a in S (1-bounded growth, Example 4.3) over a 3-value domain: for every
    multiset S of ``rows`` elements and every replace-one neighbour S', the hockey-stick divergence
    sum_o max(0, P(o|S) - e^eps P(o|S')) is at most the certified delta (composition and sampler
    aside: the law here uses the exact exponential mechanism), and it is positive (pure eps-DP fails:
    the delta is needed)."""
    params = ChoosingParameters.create(epsilon, 0.9, alpha, 0.5, 1, rows)
    terms = params.delta_terms()
    bound = max(terms["case_a"], terms["case_b"])
    worst = 0.0
    for split in itertools.combinations_with_replacement(range(3), rows):
        counts = [split.count(a) for a in range(3)]
        law = exact_law(counts, params)
        for removed, added in itertools.product(range(3), range(3)):
            if counts[removed] == 0 or removed == added:
                continue
            other = list(counts)
            other[removed] -= 1
            other[added] += 1
            law2 = exact_law(other, params)
            divergence = sum(max(0.0, p - math.exp(epsilon) * law2.get(o, 0.0)) for o, p in law.items())
            worst = max(worst, divergence)
    assert 0 < worst <= bound * (1 + 1e-9)


# the secure source, which private runs use; the seeded one's law is tests/test_noise.py's
@pytest.mark.parametrize("noise_factory", [SecureNoise], ids=["secure"])
def test_the_sampler_draws_the_exact_law(noise_factory) -> None:
    """20,000 runs of choose_solution on qualities [0, 3, 5, 6, 1] against exact_law (chi-square,
    false failure 1e-6): step 1 through OpenDP's discrete Laplace, step 2 through the exact sampler."""
    params = ChoosingParameters.create(2.0, 0.9, 0.5, 0.5, 1, 25)  # pass at 7: P(Z >= 1) = 0.28
    qualities = [0, 3, 5, 6, 1]
    law = exact_law(qualities, params)
    noise = noise_factory()
    trials = 20_000
    seen: dict = {}
    for _ in range(trials):
        out = choose_solution(np.array(qualities), params, noise)
        seen[out] = seen.get(out, 0) + 1
    assert set(seen) <= set(law) and 0 not in seen  # a zero-quality candidate is never chosen
    outcomes = sorted(law, key=lambda o: -1 if o is None else o)
    observed = [seen.get(o, 0) for o in outcomes]
    expected = [trials * law[o] for o in outcomes]
    assert min(expected) > 20
    assert stats.chisquare(observed, expected).pvalue > P_FAIL


def test_parameters_outside_lemma_4_4_are_refused_with_the_rows_that_would_do() -> None:
    with pytest.raises(PcqrError, match="Fact 3 of Lemma 4.4.*it needs at least 2,241 rows"):
        ChoosingParameters.create(1.0, 1e-6, 0.1, 0.05, 1, 100)
    with pytest.raises(PcqrError, match="proves only delta"):
        ChoosingParameters.create(2.0, 0.1, 0.5, 0.5, 1, 25)  # delta_b = 0.22 > 0.1
    fits = ChoosingParameters.create(1.0, 1e-6, 0.1, 0.05, 1, 2_241)
    assert fits.certificate()["proven_delta"] <= 1e-6
    more = ChoosingParameters.create(1.0, 1e-6, 0.1, 0.05, 3, 100_000)  # a larger growth k costs delta_b
    assert more.delta_terms()["case_b"] > ChoosingParameters.create(1.0, 1e-6, 0.1, 0.05, 1, 100_000).delta_terms()["case_b"]
    for bad in ({"growth": 0}, {"rows": 0}, {"epsilon": -1.0}, {"alpha": 1.5}):
        args = {"epsilon": 1.0, "delta": 1e-6, "alpha": 0.1, "beta": 0.05, "growth": 1, "rows": 10_000, **bad}
        with pytest.raises(PcqrError):
            ChoosingParameters.create(**args)


def test_utility_an_alpha_good_solution_with_probability_beta() -> None:
    """m = 10,000, alpha 0.1, beta 0.05: qualities with a clear best (2,000) and a crowd near 0: every
    one of 200 runs returns an alpha-good solution (q >= max - alpha m = 1,000), as Lemma 4.5 says
    for m >= utility_rows()."""
    params = ChoosingParameters.create(1.0, 1e-6, 0.1, 0.05, 1, 10_000)
    assert params.utility_rows() <= 10_000
    qualities = np.array([2_000, 1_500, *([3] * 500), *([0] * 100)])
    noise = SecureNoise()
    outs = [choose_solution(qualities, params, noise) for _ in range(200)]
    assert all(o is not None and qualities[o] >= 2_000 - 1_000 for o in outs)
    assert choose_solution(np.zeros(5, np.int64), params, noise) is None  # nothing good: bottom


def test_pcqr_plan_without_public_data_reports_both_mechanisms(capsys) -> None:
    """pcqr plan --without-public-data: A_dist's threshold and the POINT_d learner's sample sizes, the
    least m the choosing mechanism certifies (the one create() accepts, m - 1 refused) and Lemma 4.5's;
    parameters beyond a float are reported, not crashed on."""
    import json

    from pcqr.jobs.cli import main

    assert main(["plan", "--without-public-data", "--epsilon", "1", "--alpha", "0.1", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["algorithms"]
    assert plan["point"]["adist_threshold"]["value"] == 13
    assert plan["point"]["rows_needed"]["value"] == 720 and plan["point"]["paper_rows"]["value"] == 1456
    certified = plan["choosing"]["rows_certified"]["value"]
    ChoosingParameters.create(1.0, 1e-6, 0.1, 0.05, 1, certified)
    with pytest.raises(PcqrError):
        ChoosingParameters.create(1.0, 1e-6, 0.1, 0.05, 1, certified - 1)
    assert plan["choosing"]["rows_for_utility"]["value"] == 3502
    assert main(["plan", "--without-public-data", "--epsilon", "1e-15", "--alpha", "1e-300", "--delta", "1e-300",
                 "--beta", "1e-300", "--json"]) == 0
    extreme = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["algorithms"]
    assert extreme["point"]["rows_needed"]["value"] == "inf"
    assert str(extreme["choosing"]["rows_certified"]["value"]).startswith("none")
