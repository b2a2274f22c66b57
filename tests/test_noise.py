"""The noise sources against the exact discrete-Laplace distribution.

Every statistical assertion here fails by chance with probability at most
P_FAIL = 1e-6 (chi-square or binomial tail at that level).
"""
from __future__ import annotations

import math
from decimal import Decimal, localcontext

import numpy as np
import pytest
from scipy import stats

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.privacy.noise import (
    DiscreteLaplaceTail,
    KeyedStream,
    SecureNoise,
    SeededNoise,
    discrete_laplace_pmf,
    noise_source,
    session_key,
)
from tests.conftest import P_FAIL


def _chi_square_pvalue(draws: np.ndarray, scale: float, support: int) -> float:
    """Goodness of fit of integer draws to DLap(scale), bins -support..support plus two tails."""
    z = np.arange(-support, support + 1)
    pmf = discrete_laplace_pmf(z, scale)
    tail = (1 - pmf.sum()) / 2
    expected = np.concatenate(([tail], pmf, [tail])) * draws.size
    clipped = np.clip(draws, -support - 1, support + 1) + support + 1
    observed = np.bincount(clipped, minlength=2 * support + 3)
    return float(stats.chisquare(observed, expected).pvalue)


@pytest.mark.parametrize("scale", [0.7, 3.0])
def test_secure_discrete_laplace_matches_pmf(scale: float) -> None:
    noise = SecureNoise()
    draws = np.array([noise.discrete_laplace(scale) for _ in range(20_000)])
    assert _chi_square_pvalue(draws, scale, support=int(4 * scale) + 2) > P_FAIL


@pytest.mark.parametrize("scale", [0.7, 3.0, 40.0])
def test_seeded_discrete_laplace_matches_pmf(scale: float) -> None:
    noise = SeededNoise(1234)
    draws = np.array([noise.discrete_laplace(scale) for _ in range(50_000)])
    assert _chi_square_pvalue(draws, scale, support=int(3 * scale) + 2) > P_FAIL


@pytest.mark.parametrize("noise", [SecureNoise(), SeededNoise(77)], ids=["secure", "seeded"])
def test_vector_draws_match_pmf(noise) -> None:
    draws = noise.discrete_laplace_vector(2.5, 30_000)
    assert draws.dtype == np.int64 and draws.shape == (30_000,)
    assert _chi_square_pvalue(draws, 2.5, support=12) > P_FAIL
    assert noise.discrete_laplace_vector(2.5, 0).shape == (0,)


def test_tail_table_matches_closed_form() -> None:
    scale = 5.0
    tail = DiscreteLaplaceTail(scale)
    q = math.exp(-1 / scale)
    for a in range(-60, 61):
        exact = q**a / (1 + q) if a >= 1 else 1 - q ** (1 - a) / (1 + q)
        assert tail.probability(a) == pytest.approx(exact, rel=1e-12, abs=1e-300)
    assert tail.probability(10**9) == 0.0
    assert tail.probability(-(10**9)) == pytest.approx(1.0, abs=1e-30)


@pytest.mark.parametrize("scale", [0.7, 5.0, 600.0])
def test_tail_table_is_within_the_stated_bound_of_the_exact_tail(scale: float) -> None:
    """Every checked entry, both signs and the window's edges: |F(a) - 2^128 P(Z >= a)| <= 1 + 2^-84
    (the docstring's 2^-128 + 2^-212 in probability), from 120-digit decimal arithmetic."""
    tail = DiscreteLaplaceTail(scale)
    edge = tail.span + 1
    points = [*range(-40, 41), edge - 1, edge, edge + 5, -edge + 1, -edge, -edge - 5, edge // 2, -edge // 3]
    with localcontext() as ctx:
        ctx.prec = 120
        q = (Decimal(-1) / Decimal(scale)).exp()
        for a in points:
            if abs(a) > edge:  # beyond the window: saturated, within q^J < 2^-130 of the tail
                exact = Decimal(0) if a > 0 else Decimal(2) ** 128
            else:
                p = q**a / (1 + q) if a >= 1 else 1 - q ** (1 - a) / (1 + q)
                exact = p * Decimal(2) ** 128
            assert abs(Decimal(tail.fixed(a)) - exact) <= 1 + Decimal(2) ** -84, a
            assert 0 <= tail.fixed(a) < 2**128
    assert tail.fixed(edge) == 0 and tail.fixed(-edge) == 2**128 - 1


def test_tail_table_is_built_whole_at_construction() -> None:
    """The window [-J-1, J+1] is fixed by the public scale and built once; lookups anywhere
    (inside or far outside) change nothing, and the table is shared by every sampler of that scale."""
    tail = DiscreteLaplaceTail(40.0)
    assert tail.size == 2 * tail.span + 3 and tail.span == math.ceil(40.0 * 130 * math.log(2)) + 1
    stored = (tail._hi, tail._lo)
    assert stored[0].size == tail.span + 2 and not stored[0].flags.writeable
    tail.lookup(np.array([-(10**12), -5, 0, 7, 10**12]))
    tail.window(10**9, 1000)
    assert (tail._hi, tail._lo) == stored
    assert DiscreteLaplaceTail(40.0)._hi is stored[0]  # cached: a public function of the scale


def test_window_is_the_tail_at_each_a() -> None:
    tail = DiscreteLaplaceTail(3.0)
    for top in (-200, -3, 0, 4, 200):
        hi, lo = tail.window(top, 10)
        assert hi.shape == lo.shape == (11,)
        assert [(int(h) << 64) | int(l) for h, l in zip(hi, lo)] == [tail.fixed(a) for a in range(top - 10, top + 1)]


@pytest.mark.parametrize("noise", [SecureNoise(), SeededNoise(7)], ids=["secure", "seeded"])
def test_tail_bits_have_the_tail_probability(noise) -> None:
    tail = DiscreteLaplaceTail(3.0)
    n = 200_000
    for a in (-4, 0, 1, 3, 9):
        hits = int(tail.draw_at_least(np.full(n, a), noise).sum())
        p = tail.probability(a)
        assert stats.binomtest(hits, n, p).pvalue > P_FAIL, (a, hits / n, p)


def test_tail_bits_reproduce_the_pmf() -> None:
    """P(Z >= a) - P(Z >= a+1) from the bit sampler equals the pmf at a."""
    tail, noise, n = DiscreteLaplaceTail(2.0), SecureNoise(), 400_000
    for a in (-2, 0, 2):
        at_least = tail.draw_at_least(np.full(n, a), noise).mean()
        above = tail.draw_at_least(np.full(n, a + 1), noise).mean()
        pmf = float(discrete_laplace_pmf(np.array([a]), 2.0)[0])
        # difference of two independent binomial means: normal bound at 1e-6 two-sided (z = 4.89)
        sd = math.sqrt((at_least * (1 - at_least) + above * (1 - above)) / n)
        assert abs((at_least - above) - pmf) < 4.89 * sd + 1e-9


class _ScriptedWords:
    """A fake source returning prepared words, to check the 128-bit comparison exactly."""

    private = False

    def __init__(self, words: list[int]) -> None:
        self.words = np.array(words, dtype=np.uint32)

    def uniform_words(self, size: int) -> np.ndarray:
        assert self.words.size == size  # four words per draw, always
        return self.words


def test_comparison_is_exact_on_all_four_words() -> None:
    """U < F(a) on the whole 128-bit numbers, most significant word first."""
    tail = DiscreteLaplaceTail(3.0)
    f = tail.fixed(2)
    cases = [f - 1, f, f + 1, f - 2**64, f + 2**64, f - 2**96, (f >> 32 << 32) + 2**32 - 1]
    words = [(u >> (96 - 32 * w)) & 0xFFFFFFFF for u in cases for w in range(4)]
    bits = tail.draw_at_least(np.full(len(cases), 2), _ScriptedWords(words))
    assert bits.tolist() == [u < f for u in cases] == [True, False, False, True, False, True, False]


def test_keyed_stream_is_chacha20_at_each_position() -> None:
    """U_i = keystream bytes [16 i, 16 i + 16), whatever the range asked for, also across the
    32-bit block counter's wrap; different keys give different streams."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

    key = bytes(range(32))
    stream = KeyedStream(key)
    raw = Cipher(algorithms.ChaCha20(key, bytes(8) + b"pcqr:U_i"), mode=None).encryptor().update(bytes(16 * 70_001))
    expected = np.frombuffer(raw, dtype=">u8").reshape(-1, 2)
    for start, count in ((0, 70_001), (1, 5), (3, 65_000), (69_999, 2), (7, 0)):
        hi, lo = stream.uniforms(start, count)
        assert hi.dtype == lo.dtype == np.uint64 and hi.shape == (count,)
        assert (hi == expected[start : start + count, 0]).all() and (lo == expected[start : start + count, 1]).all()
    wrap = 4 * (2**32 - 1)  # the last block of counter word 0 and the first of the next nonce
    whole = stream.uniforms(wrap - 6, 20)
    pieces = [stream.uniforms(wrap - 6, 9), stream.uniforms(wrap + 3, 11)]
    assert (np.concatenate([p[0] for p in pieces]) == whole[0]).all()
    assert (np.concatenate([p[1] for p in pieces]) == whole[1]).all()
    assert not (KeyedStream(bytes(32)).uniforms(0, 8)[0] == stream.uniforms(0, 8)[0]).any()
    assert not (stream.uniforms(4 * 2**32, 4)[0] == stream.uniforms(0, 4)[0]).any()  # block 2^32 is not block 0
    with pytest.raises(ValueError, match="32 bytes"):
        KeyedStream(bytes(16))


def test_keyed_stream_bits_are_uniform() -> None:
    """Each of the 128 bit positions of U_i is 1 half the time (binomial, each at 1e-6 / 128)."""
    hi, lo = KeyedStream(session_key(SecureNoise())).uniforms(10**9, 50_000)
    for half in (hi, lo):
        for bit in range(64):
            ones = int(np.count_nonzero((half >> np.uint64(bit)) & np.uint64(1)))
            assert stats.binomtest(ones, half.size, 0.5).pvalue > P_FAIL / 128, bit


def test_session_key_is_secure_or_reproducible() -> None:
    secure = [session_key(SecureNoise()) for _ in range(2)]
    assert len(secure[0]) == 32 and secure[0] != secure[1]
    assert session_key(SeededNoise(3)) == session_key(SeededNoise(3)) != session_key(SeededNoise(4))


def test_seed_needs_insecure_flag() -> None:
    assert noise_source(None, False).private
    with pytest.raises(PcqrError, match="--insecure-seed"):
        noise_source(5, False)
    with pytest.raises(PcqrError, match="--seed"):
        noise_source(None, True)
    assert not noise_source(5, True).private


def test_noise_from_opendp_imports_no_scikit_learn() -> None:
    """Every OpenDP constructor pcqr draws from (the secure source's sampler and Laplace mechanism,
    the stable histogram's threshold mechanism, the CDF tree's epsilon map) is built, and run, in a
    fresh process without importing scikit-learn: ``opendp.prelude`` imports it (2.2 s of every
    command that draws noise, against 0.25 s for the modules pcqr uses)."""
    import subprocess
    import sys

    code = (
        "import sys, numpy as np\n"
        "from pcqr.pipeline.privacy.noise import SecureNoise\n"
        "from pcqr.pipeline.mechanisms.stable_histogram import _opendp_threshold\n"
        "from pcqr.pipeline.mechanisms.hierarchical_cdf import CdfParameters\n"
        "from pcqr.pipeline.mechanisms.integer_domain import Domain\n"
        "noise = SecureNoise()\n"
        "assert noise.discrete_laplace_vector(2.0, 3).shape == (3,)\n"
        "assert noise.laplace_mechanism(np.array([1, 2]), 2.0).shape == (2,)\n"
        "assert set(_opendp_threshold(1.0, 4)({10: 100})) <= {10}\n"
        "assert CdfParameters.create(2.0, 2, Domain(0, 3), branch_bits=1, expand_at=1).opendp_epsilon() == 2.0\n"
        "print(sorted(m for m in ('sklearn', 'opendp.extras', 'opendp.prelude') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"
