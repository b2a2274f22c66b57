"""The released label's stability term (pipeline/privacy/stability.py, ALGORITHMS.md section 2).

The closed form is checked against a direct convolution of the two pmfs; the certificate's
delta_stability is checked against the exact probability, computed from the pmfs, that a fresh
instance answers an unstable query (gap 0, 1 or 2), over a grid of (eps, T, k, w).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.privacy.subsamp import SubSampParameters
from pcqr.pipeline.privacy.stability import difference_tail, smallest_threshold, stability_delta


def dlap_pmf(z: np.ndarray, scale: float) -> np.ndarray:
    q = math.exp(-1.0 / scale)
    return (1 - q) / (1 + q) * q ** np.abs(z)


def dlap_tail(a: np.ndarray, scale: float) -> np.ndarray:
    """P(Z >= a), Z ~ DLap(scale), from the one-variable closed form (another derivation)."""
    q = math.exp(-1.0 / scale)
    a = np.asarray(a, dtype=float)
    return np.where(a >= 1, q ** np.maximum(a, 1) / (1 + q), 1 - q ** np.maximum(1 - a, 1) / (1 + q))


def convolved_tail(a: int, scale1: float, scale2: float) -> float:
    """P(Z1 - Z2 >= a) = sum_z P(Z2 = z) P(Z1 >= a + z), summed far into both tails."""
    span = int(60 * scale2) + abs(a) + 10
    z = np.arange(-span, span + 1)
    return float(np.sum(dlap_pmf(z, scale2) * dlap_tail(a + z, scale1)))


@pytest.mark.parametrize("scale1,scale2", [(4.0, 2.0), (40.0, 20.0), (3.0, 3.0), (1.5, 7.0), (152.4, 76.2)])
@pytest.mark.parametrize("a", [-30, -3, 0, 1, 2, 5, 17, 60, 400])
def test_closed_form_matches_the_convolution(scale1: float, scale2: float, a: int) -> None:
    exact = convolved_tail(a, scale1, scale2)
    bound = difference_tail(a, scale1, scale2)
    assert bound >= exact * (1 - 1e-9)  # float convolution's own error is ~1e-12 relative
    assert bound == pytest.approx(exact, rel=1e-9, abs=1e-300)


def test_tail_is_rounded_up_and_monotone() -> None:
    values = [difference_tail(a, 12.0, 6.0) for a in range(-50, 200)]
    assert all(x >= y for x, y in zip(values, values[1:]))
    assert difference_tail(-10**6, 12.0, 6.0) == 1.0


GRID = [
    (eps, T, k, w)
    for eps in (0.5, 1.0, 4.0)
    for T in (1, 20, 200)
    for k in (100, 101, 2000)
    for w in (None, 3.0)
]


def answer_probability_from_pmfs(gap: int, params: SubSampParameters) -> float:
    """P(gap + Z1 > 2w + Z2) by summing over Z2 (the test the coordinator runs, in gap units)."""
    b1, b2 = params.query_noise_scale, params.threshold_noise_scale
    span = int(60 * b2) + 10
    z2 = np.arange(-span, span + 1)
    first_above = np.floor(2 * params.threshold + z2) + 1 - gap
    return float(np.sum(dlap_pmf(z2, b2) * dlap_tail(first_above, b1)))


@pytest.mark.parametrize("eps,T,k,w", GRID)
def test_certificate_counts_the_exact_tie_probability(eps: float, T: int, k: int, w: float | None) -> None:
    delta = 1e-3 if w is not None else 1e-6
    try:
        p = SubSampParameters.paper(eps, delta, T, 10_000, 0.05, subsamples=k, threshold=w)
    except PcqrError as exc:  # an uncertifiable w must be refused, never certified
        assert w is not None and "smallest --threshold that fits" in str(exc)
        smallest = float(str(exc).rsplit(" ", 1)[1])
        p = SubSampParameters.paper(eps, delta, T, 10_000, 0.05, subsamples=k, threshold=smallest)
        assert smallest > w
    unstable_gaps = (1,) if k % 2 else (0, 2)
    worst = max(answer_probability_from_pmfs(g, p) for g in unstable_gaps)
    terms = p.delta_terms()
    assert T * worst <= terms.stability * (1 + 1e-9)
    assert terms.total <= delta and p.guarantee()[0] <= eps
    # the smallest certifiable w: half a unit less would not fit
    if w is None:
        less = stability_delta(p.threshold - 0.5, T, p.query_noise_scale, p.threshold_noise_scale)
        assert terms.composition + terms.sampler + less > delta


def test_uncertifiable_threshold_is_refused_with_the_smallest_that_fits() -> None:
    # the README's old setting: a tie answered with probability ~0.09 per instance
    with pytest.raises(PcqrError, match=r"--threshold 150: .* smallest --threshold that fits is 1373.5$"):
        SubSampParameters.paper(4.0, 1e-6, 50, 10_000, 0.05, subsamples=2000, threshold=150)
    with pytest.raises(PcqrError, match="--threshold 0"):
        SubSampParameters.paper(4.0, 1e-6, 50, 10_000, 0.05, subsamples=2000, threshold=0)
    ok = SubSampParameters.paper(4.0, 1e-6, 50, 10_000, 0.05, subsamples=2000, threshold=1373.5)
    assert ok.guarantee()[1] <= 1e-6


def test_default_threshold_is_below_the_papers() -> None:
    p = SubSampParameters.paper(1.0, 1e-6, 50, 10_000, 0.05)
    paper_w = 2 * p.lam * math.log(2 * 10_000 / 1e-6)
    assert p.threshold < paper_w and p.threshold_source == "smallest_certifiable"
    at_paper = stability_delta(paper_w, 50, p.query_noise_scale, p.threshold_noise_scale)
    assert at_paper < 1e-8  # ALGORITHMS.md: about 2e-9 at these settings


def test_smallest_threshold_search() -> None:
    budget = 1e-4
    w = smallest_threshold(budget, 10, 8.0, 4.0)
    assert w is not None and stability_delta(w, 10, 8.0, 4.0) <= budget
    assert stability_delta(w - 0.5, 10, 8.0, 4.0) > budget
    assert smallest_threshold(0.0, 10, 8.0, 4.0) is None


def test_too_few_models_are_named_with_the_smallest_that_works() -> None:
    p = SubSampParameters.paper(4.0, 1e-6, 50, 10_000, 0.05, subsamples=2000)
    warning = p.usefulness_warning()
    assert warning is not None and "k >= " in warning
    k = int(warning.split("k >= ")[1].split()[0])
    enough = SubSampParameters.paper(4.0, 1e-6, 50, 10_000, 0.05, subsamples=k)
    assert enough.unanimous_abstention() <= 50 / 10_000
    fewer = SubSampParameters.paper(4.0, 1e-6, 50, 10_000, 0.05, subsamples=k - 1)
    assert fewer.unanimous_abstention() > 50 / 10_000
    assert enough.usefulness_warning() is None


def test_observed_tie_answers_match_p1_and_stay_within_the_certified_term() -> None:
    """Many independent sessions through the real coordinator (pcqr.pipeline.audit), one query each, on
    neighbouring vote vectors: gap 2 (ct(1) = 26 of 50, label 1) and gap 0 (ct(1) = 25, label 0).

    w = 20 at eps 2, T = 1 makes p1 about 0.055, large enough to measure, and delta = 0.3 admits it.
    Each of the four binomial tests fails by chance with probability below 1e-6 (union: 4e-6).
    """
    from scipy.stats import binomtest

    from pcqr.pipeline import audit
    from pcqr.pipeline.privacy.stability import answer_probability

    p = audit.subsamp_parameters(epsilon=2.0, delta=0.3, cutoff=1, queries_max=1, subsamples=50, threshold=20.0,
                                 profile="paper")
    certified = p.delta_terms().stability  # T * p1 with T = 1
    sessions = 20_000
    for ones, gap in ((26, 2), (25, 0)):
        codes = audit.run_sparse_vector(np.array([ones]), 50, p, sessions=sessions)[:, 0]
        answered = int(np.count_nonzero(codes < 2))
        assert set(np.unique(codes[codes < 2]).tolist()) <= {int(ones * 2 > 50)}  # the majority label
        exact = answer_probability(gap, p.threshold, p.query_noise_scale, p.threshold_noise_scale)
        assert binomtest(answered, sessions, exact).pvalue > 1e-6
        assert binomtest(answered, sessions, certified, alternative="greater").pvalue > 1e-6
    # the same w with a small delta cannot be certified: refused, with the smallest w that fits
    with pytest.raises(PcqrError, match="--threshold 20: .*smallest --threshold that fits"):
        audit.subsamp_parameters(epsilon=2.0, delta=1e-3, cutoff=1, queries_max=1, subsamples=50, threshold=20.0,
                                 profile="paper")


def test_a_state_edited_to_an_uncertifiable_threshold_is_refused(tmp_path) -> None:
    import json

    from pcqr.pipeline.gates.sparse_vector import SparseVector
    from pcqr.pipeline.privacy.noise import SeededNoise
    from pcqr.pipeline.session.state import SESSION_FILE, SessionState, load_session, save_session

    params = SubSampParameters.paper(4.0, 1e-6, 20, 10_000, 0.05, subsamples=2500)
    coordinator = SparseVector.create(params, SeededNoise(1))
    session = SessionState(params=params, learner={"name": "stump", "params": {}}, features=["x0"], private_uri="p",
                      private_rows=10, seed=1, sparse_vector=coordinator.state)
    save_session(str(tmp_path), session)
    assert load_session(str(tmp_path)).params.threshold == params.threshold
    data = json.loads((tmp_path / SESSION_FILE).read_text())
    data["params"]["threshold"] = 150.0
    (tmp_path / SESSION_FILE).write_text(json.dumps(data))
    with pytest.raises(PcqrError, match="cannot be certified .*--threshold 150"):
        load_session(str(tmp_path))


def _exact_answer_probability(gap: int, threshold: float, query_scale: float, threshold_scale: float) -> float:
    """P(gap + Z1 > 2w + Z2) by direct summation over Z1's pmf in 60-digit arithmetic (mpmath; not
    the closed form under test): P(Z2 <= Z1 - a) with a = floor(2w) + 1 - gap, truncated where
    both tails are below e^-200."""
    import mpmath

    with mpmath.workdps(60):
        q1, q2 = mpmath.exp(-1 / mpmath.mpf(query_scale)), mpmath.exp(-1 / mpmath.mpf(threshold_scale))
        c1 = (1 - q1) / (1 + q1)

        def at_most(t: int) -> mpmath.mpf:  # P(Z2 <= t)
            return q2 ** (-t) / (1 + q2) if t < 0 else 1 - q2 ** (t + 1) / (1 + q2)

        a = math.floor(2 * threshold) + 1 - gap
        reach = int(200 * max(query_scale, threshold_scale))
        return mpmath.fsum(c1 * q1 ** abs(x) * at_most(x - a) for x in range(-reach, reach + 1))


def test_the_readme_session_answers_an_unstable_query_within_its_certificate() -> None:
    """Regression (issue 27): at the README's own session (eps 4, delta 1e-6, T 20, m 10,000,
    k 2,500, w 280, --profile tight) the exact probability that T instances answer an unstable
    query (gap 2 for even k, the most likely to pass; gap 0 is less likely) is at most the
    certificate's delta_stability, and the two agree to 1e-9: only the upward rounding keeps the
    claim true, so a change that rounds down (or computes p1 at the wrong gap) fails here."""
    params = SubSampParameters.tight(4.0, 1e-6, 20, 10_000, 0.05, 2_500, 280.0)
    certified = params.delta_terms().stability
    scales = (params.query_noise_scale, params.threshold_noise_scale)
    at_gap = {gap: 20 * float(_exact_answer_probability(gap, 280.0, *scales)) for gap in (0, 2)}
    assert at_gap[0] < at_gap[2] <= certified
    assert certified <= at_gap[2] * (1 + 1e-9)
    assert params.certificate()["proven_delta"] <= 1e-6
