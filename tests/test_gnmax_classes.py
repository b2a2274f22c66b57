"""The gnmax gate over c > 2 classes (issue 49): the sampler, the exact law of the released class on
every neighbouring pair of small count vectors, the certificate, and the two-class path unchanged."""
from __future__ import annotations

import itertools
import json
import math
from dataclasses import replace

import numpy as np
import pytest
from scipy import stats

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.gates.gate import SparseVectorState
from pcqr.pipeline.gates.noisy_argmax import NoisyArgmax
from pcqr.pipeline.privacy.gnmax import count_sigma, dominating_noises, pld_delta, pld_epsilon
from pcqr.pipeline.privacy.noise import DiscreteGaussianTail
from pcqr.pipeline.privacy.subsamp import GUESS_COMPOSITION_SHARE, SubSampParameters
from tests.conftest import P_FAIL

SIGMA_C = 1.5  # the noise on each count in the exact-law cases: small, so the law is far from uniform


def _pmf(tail: DiscreteGaussianTail) -> tuple[np.ndarray, np.ndarray]:
    """(z, P(value = z)) of DiscreteGaussianTail.values, exactly from the table: (F(z) - F(z + 1)) / 2^128,
    the rest of the mass at -J."""
    zs = np.arange(-tail.span, tail.span + 1)
    tails = [tail.fixed(int(z)) for z in zs] + [tail.fixed(tail.span + 1)]
    masses = [tails[i] - tails[i + 1] for i in range(len(zs))]
    masses[0] += 2**128 - tails[0]
    return zs, np.array([m / 2.0**128 for m in masses])


def _released_law(counts: tuple[int, ...], tail: DiscreteGaussianTail) -> np.ndarray:
    """P(the gate releases class j | counts), exactly: argmax_j (ct(j) + Z_j), ties to the smallest j."""
    zs, p = _pmf(tail)
    cdf_below = np.concatenate([[0.0], np.cumsum(p)])  # cdf_below[i] = P(Z < zs[i])

    def below(t: np.ndarray) -> np.ndarray:  # P(Z < t) for integer t
        return cdf_below[np.clip(t - zs[0], 0, zs.size)]

    law = np.zeros(len(counts))
    for j, cj in enumerate(counts):
        level = cj + zs  # class j's noisy count, at each of its values
        chance = p.copy()
        for i, ci in enumerate(counts):
            if i < j:
                chance *= below(level - ci)  # a smaller index must be strictly below
            elif i > j:
                chance *= below(level - ci + 1)  # a larger index may tie
        law[j] = chance.sum()
    return law


def _neighbours(k: int, c: int) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Every pair (ct, ct') of count vectors summing to k where one vote moved from one class to another."""
    pairs = []
    for ct in itertools.product(range(k + 1), repeat=c):
        if sum(ct) != k:
            continue
        for a, b in itertools.permutations(range(c), 2):
            if ct[a] > 0:
                moved = list(ct)
                moved[a] -= 1
                moved[b] += 1
                pairs.append((ct, tuple(moved)))
    return pairs


def test_inverse_cdf_values_are_exact_at_every_boundary() -> None:
    """values(U) = max{z : U < F(z)}: at U = F(z) - 1 it is z, at U = F(z) it is z - 1, for every z of the
    window where F steps (so, by monotonicity, for every U): the law of a value is the table's."""
    tail = DiscreteGaussianTail(SIGMA_C)
    zs = [z for z in range(-tail.span + 1, tail.span + 1) if tail.fixed(z) > tail.fixed(z + 1)
          and tail.fixed(z - 1) > tail.fixed(z)]
    assert len(zs) >= 10
    for offset, expected in ((-1, 0), (0, -1)):
        us = [tail.fixed(z) + offset for z in zs]
        hi = np.array([u >> 64 for u in us], dtype=np.uint64)
        lo = np.array([u & (2**64 - 1) for u in us], dtype=np.uint64)
        assert tail.values(hi, lo).tolist() == [z + expected for z in zs]


def test_the_sampled_values_follow_the_discrete_gaussian() -> None:
    """200,000 keyed draws against N_Z(0, 1.5^2): a chi-square test, false-failure rate P_FAIL (cells
    with an expected count below 5 merged into the tails)."""
    from pcqr.pipeline.privacy.noise import KeyedStream

    tail = DiscreteGaussianTail(SIGMA_C)
    u_hi, u_lo = KeyedStream(bytes(range(32))).uniforms(0, 200_000)
    drawn = tail.values(u_hi, u_lo)
    zs = np.arange(-6, 7)
    exact = np.exp(-zs**2 / (2 * SIGMA_C**2))
    exact /= np.exp(-np.arange(-tail.span, tail.span + 1) ** 2 / (2 * SIGMA_C**2)).sum()
    observed = np.array([np.sum(drawn <= -6), *[np.sum(drawn == z) for z in zs[1:-1]], np.sum(drawn >= 6)])
    expected = np.array([exact[0] + (1 - exact.sum()) / 2, *exact[1:-1], exact[-1] + (1 - exact.sum()) / 2])
    statistic = float(((observed - 200_000 * expected) ** 2 / (200_000 * expected)).sum())
    assert statistic < stats.chi2.ppf(1 - P_FAIL, df=zs.size - 1)


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_every_neighbouring_pair_meets_the_certificate_exactly(k: int) -> None:
    """c = 3, every count vector of k <= 4 votes and every one-vote move: the exact law of the released
    class has Renyi divergence at most alpha / sigma_c^2 (rho of one answer) at each order, and its
    hockey-stick divergence at each eps is at most the PLD's certified delta for one answer
    (gnmax.pld_delta at dominating_noises(1, 3) = 2 unit shifts)."""
    tail = DiscreteGaussianTail(SIGMA_C)
    lam = SIGMA_C * math.sqrt(2)  # count_sigma(lam) = SIGMA_C
    assert count_sigma(lam) == pytest.approx(SIGMA_C)
    laws: dict[tuple[int, ...], np.ndarray] = {}
    for ct, moved in _neighbours(k, 3):
        p = laws.setdefault(ct, _released_law(ct, tail))
        q = laws.setdefault(moved, _released_law(moved, tail))
        assert p.sum() == pytest.approx(1.0, abs=1e-12)
        for alpha in (1.5, 2.0, 4.0, 10.0):
            renyi = math.log(float(np.sum(p**alpha * q ** (1 - alpha)))) / (alpha - 1)
            assert renyi <= alpha / SIGMA_C**2 + 1e-12
        for eps in (0.0, 0.25, 0.5, 1.0, 2.0):
            hockey = float(np.maximum(p - math.exp(eps) * q, 0).sum())
            assert hockey <= pld_delta(eps, lam, dominating_noises(1, 3)) + 1e-12


def test_the_exact_law_test_has_power() -> None:
    """The same check fails where it should: a gate drawing half the noise, or two votes moved at once
    (not neighbours), exceeds one answer's certificate at some eps (at the right noise the worst
    neighbouring pair reaches 0.84 of it)."""
    lam = SIGMA_C * math.sqrt(2)
    half = DiscreteGaussianTail(SIGMA_C / 2)
    assert any(float(np.maximum(_released_law(ct, half) - math.exp(eps) * _released_law(moved, half), 0).sum())
               > pld_delta(eps, lam, 2) for ct, moved in _neighbours(4, 3) for eps in (0.0, 0.5, 1.0))
    tail = DiscreteGaussianTail(SIGMA_C)
    p, q = _released_law((3, 0, 0), tail), _released_law((1, 2, 0), tail)
    assert any(float(np.maximum(p - math.exp(eps) * q, 0).sum()) > pld_delta(eps, lam, 2)
               for eps in (0.0, 0.25, 0.5, 1.0))


def _gate(classes: int, lam: float, answers: int, key: bytes = bytes(range(32))) -> NoisyArgmax:
    params = SubSampParameters.create("tight", 1.0, 1e-6, answers, answers, 0.05, gate="gnmax", classes=classes)
    return NoisyArgmax(replace(params, lam=lam), SparseVectorState(0, 0, key, np.zeros(0, dtype=np.int64)))


@pytest.mark.parametrize("counts", [(2, 1, 1), (1, 1, 2), (4, 0, 0), (0, 2, 2)])
def test_the_gate_releases_the_exact_law(counts: tuple[int, ...]) -> None:
    """60,000 answers of the gate on one count vector (k = 4, c = 3, sigma_c 1.5) against the exact law:
    a chi-square test, false-failure rate P_FAIL."""
    n = 60_000
    gate = _gate(3, SIGMA_C * math.sqrt(2), n)
    released = gate.release(np.tile(counts, (n, 1)), 4, lambda: np.zeros((n, 0)))
    assert released.spent == n and np.all(released.status == 0)
    law = _released_law(counts, DiscreteGaussianTail(SIGMA_C))
    observed = np.bincount(released.label, minlength=3)
    statistic = float(((observed - n * law) ** 2 / (n * law)).sum())
    assert statistic < stats.chi2.ppf(1 - P_FAIL, df=2)


def test_answers_are_fixed_by_the_key_and_the_position() -> None:
    """A batch run again (a kill before its commit) releases the same classes; another batching of the
    same stream too; another key differs."""
    rng = np.random.default_rng(0)
    counts = rng.multinomial(20, [0.4, 0.35, 0.25], size=300)
    whole = _gate(3, 4.0, 300).release(counts, 20, lambda: None).label
    split = _gate(3, 4.0, 300)
    parts = [split.release(counts[:120], 20, lambda: None).label, split.release(counts[120:], 20, lambda: None).label]
    assert np.array_equal(whole, np.concatenate(parts))
    assert not np.array_equal(whole, _gate(3, 4.0, 300, key=bytes(32)).release(counts, 20, lambda: None).label)


def test_the_gate_stops_at_m_and_refuses_bad_counts() -> None:
    gate = _gate(4, 6.0, 10)
    counts = np.tile([3, 3, 2, 2], (15, 1))
    counts[10:] = 0  # past the m answers the answer loop counts no votes: refused unread
    released = gate.release(counts, 10, lambda: None)
    assert released.spent == 10 and list(released.status[10:]) == [2] * 5 and gate.halted
    for bad in (np.tile([3, 3, 2, 1], (2, 1)), np.tile([3, 3, 4], (2, 1)), np.tile([11, -1, 0, 0], (2, 1))):
        with pytest.raises(ValueError, match="class vote counts"):
            _gate(4, 6.0, 10).release(bad, 10, lambda: None)


@pytest.mark.parametrize("classes", [3, 5, 10])
def test_the_certificate_is_the_two_class_one_at_2m(classes: int) -> None:
    """A c-class gnmax session is certified by the PLD at 2m unit shifts of N_Z(0, count_sigma(lam)^2):
    eps at most the request, the composition delta the PLD's at that eps, the sampler term counting
    c values per answer, every term at most the request."""
    params = SubSampParameters.create("tight", 1.0, 1e-6, 500, 500, 0.05, gate="gnmax", classes=classes)
    two = SubSampParameters.create("tight", 1.0, 1e-6, 500, 500, 0.05, gate="gnmax")
    assert params.classes == classes and params.accountant == "pld"
    eps, delta = params.guarantee()
    assert eps <= 1.0 and delta <= 1e-6
    assert pld_epsilon(params.lam, 1000, GUESS_COMPOSITION_SHARE * 1e-6) == eps
    assert params.lam == pytest.approx(two.lam * math.sqrt(2), rel=1e-3)  # PATE's sigma on each count
    terms = params.delta_terms()
    assert terms.sampler > two.delta_terms().sampler * classes  # c values a query, each over the table
    assert terms.sampler < 1e-25


@pytest.mark.parametrize("classes,epsilon,queries", [(3, 700.0, 2000), (5, 80.0, 2000), (100, 700.0, 10**6)])
def test_a_large_epsilon_is_certified_at_the_cap_of_c_values_an_answer(classes: int, epsilon: float,
                                                                       queries: int) -> None:
    """Beyond eps ~50 the sampler term (1 + e^eps) m c (2J + 3) 3e-39 caps the eps certified: the
    session is certified at the largest eps whose sampler term is at most 1/1000 of delta (a
    certificate at a smaller eps is one at the request), not refused; the two-class cap (one value an
    answer) would leave the c-class sampler term over it, as before this cap."""
    params = SubSampParameters.create("tight", epsilon, 1e-6, queries, queries, 0.05, gate="gnmax", classes=classes)
    eps, delta = params.guarantee()
    terms = params.delta_terms()
    assert 30 < eps < min(epsilon, 60.4) and delta <= 1e-6  # below the two-class cap, 60.38 at m 2,000
    assert terms.sampler <= 1.001e-9  # at most 1/1000 of delta (float rounding: nextafter)
    assert terms.composition <= GUESS_COMPOSITION_SHARE * 1e-6
    two = SubSampParameters.create("tight", epsilon, 1e-6, queries, queries, 0.05, gate="gnmax")
    over_two_cap = replace(params, lam=two.lam * math.sqrt(2))  # what a two-class cap alone would certify
    assert over_two_cap.guarantee()[0] > eps


@pytest.mark.parametrize("epsilon", [1.0, 8.0, 100.0, 700.0])
def test_the_stability_gate_over_c_classes_has_the_two_class_certificate(epsilon: float) -> None:
    """The sparse vector on the plurality's gap samples as on the two-class gap (a tail bit a query):
    every delta term, and so the certificate, is the two-class one (a c-class sampler term was counted
    here before, which refused eps 100 and 700 that two classes certify)."""
    two = SubSampParameters.create("tight", epsilon, 1e-6, 50, 2000, 0.05, gate="stability")
    five = SubSampParameters.create("tight", epsilon, 1e-6, 50, 2000, 0.05, gate="stability", classes=5)
    assert replace(five, classes=2) == two
    assert five.certificate() == two.certificate()


def test_the_paper_profile_names_the_epsilon_it_can_certify() -> None:
    """Algorithm 5's composition at eps 700 no longer covers its sampler term: refused in one line
    naming an eps it certifies, and that eps is certified."""
    with pytest.raises(PcqrError, match=r"certifies --epsilon ([0-9.]+) \(the largest found") as refused:
        SubSampParameters.create("paper", 700.0, 1e-6, 50, 2000, 0.05)
    named = float(str(refused.value).split("certifies --epsilon ")[1].split(" ")[0])
    assert 60 < named < 700
    assert SubSampParameters.create("paper", named, 1e-6, 50, 2000, 0.05).guarantee()[1] <= 1e-6
    with pytest.raises(PcqrError):  # 2% above is refused: the named eps is near the edge
        SubSampParameters.create("paper", named * 1.02, 1e-6, 50, 2000, 0.05)


def test_two_class_parameters_are_byte_identical() -> None:
    """session.json's parameters of a two-class session carry no new key; a c-class one round-trips."""
    two = SubSampParameters.create("tight", 1.0, 1e-6, 500, 500, 0.05, gate="gnmax")
    assert "classes" not in two.to_dict()
    assert SubSampParameters.from_dict(json.loads(json.dumps(two.to_dict()))) == two
    three = SubSampParameters.create("tight", 1.0, 1e-6, 500, 500, 0.05, gate="gnmax", classes=3)
    assert three.to_dict()["classes"] == 3
    assert SubSampParameters.from_dict(json.loads(json.dumps(three.to_dict()))) == three


@pytest.mark.parametrize("gate", ["guess"])
def test_other_gates_refuse_more_than_two_classes(gate: str) -> None:
    with pytest.raises(PcqrError, match=f"--gate {gate} answers two classes; 3 classes need --gate gnmax or stability"):
        SubSampParameters.create("tight", 1.0, 1e-6, 100, 1000, 0.05, gate=gate, classes=3)
    edited = replace(SubSampParameters.create("tight", 1.0, 1e-6, 100, 1000, 0.05, gate=gate), classes=3)
    with pytest.raises(PcqrError, match="answers two classes, not 3"):
        edited.certify()


@pytest.mark.parametrize("bad", [1, 0, -3, 101, True, 2.0, "3", None])
def test_a_bad_class_count_is_one_line(bad: object) -> None:
    with pytest.raises(PcqrError, match=r"^--classes must be a whole number of classes in \[2, 100\], got"):
        SubSampParameters.create("tight", 1.0, 1e-6, 500, 500, 0.05, gate="gnmax", classes=bad)  # type: ignore[arg-type]


#: sha256 of each two-class gate's parameters, thresholds, releases on fixed votes and final state, as
#: computed by the code before issue 49's c-class changes (fa09bbd): the two-class path is unchanged.
BEFORE_ISSUE_49 = {
    "stability": "5a97332291dd3a69a573b8505718aaa6c00a701af6bee503ce4db77be9d175fd",
    "guess": "3c8c21d33a76c7bde394c6afc825637fa9777730d95706171ab8d025e9cbf9da",  # parameters and thresholds
    "gnmax": "bbf8be75fa8b48ce79f72e8c5914c02680b3a8ca5980448a0c58f3105e973abf",
}


@pytest.mark.parametrize("gate", sorted(BEFORE_ISSUE_49))
def test_the_two_class_gates_release_byte_for_byte_what_they_did_before(gate: str) -> None:
    import hashlib

    from pcqr.pipeline.gates.registry import new_gate
    from pcqr.pipeline.privacy.noise import SeededNoise

    params = SubSampParameters.create("tight", 2.0, 1e-6, 50, 2000, 0.05, subsamples=400, gate=gate)
    released = new_gate(params, SeededNoise(5))
    rng = np.random.default_rng(11)
    digest = hashlib.sha256(json.dumps(params.to_dict(), sort_keys=True).encode())
    digest.update(np.asarray(released.state.thresholds).tobytes())
    X = rng.standard_normal((2000, 3))
    for start in () if gate == "guess" else range(0, 2000, 500):  # the guess gate's student needs a log
        out = released.release(rng.integers(0, 401, 500), 400, lambda: X[start:start + 500])
        for array in (out.status, out.label, out.source):
            digest.update(np.asarray(array).tobytes())
        digest.update(str(out.spent).encode())
    digest.update(json.dumps(released.state.to_dict(), sort_keys=True).encode())
    assert digest.hexdigest() == BEFORE_ISSUE_49[gate]
