"""Noise sources: a cryptographically secure one for private runs, a seeded one for tests.

Every random draw that influences a released value goes through a
:class:`NoiseSource`. Two kinds exist:

* :class:`SecureNoise` -- the only one a private run may use. Discrete Laplace
  values come from OpenDP's sampler (``make_laplace`` on an integer domain:
  exact discrete Laplace, Canonne-Kamath-Steinke 2020, drawn from OpenDP's
  cryptographically secure generator); uniform words come from the operating
  system's CSPRNG (``os.urandom``).
* :class:`SeededNoise` -- numpy's PCG64 from a user seed. Reproducible, *not
  private* (the seed determines the noise); allowed only with
  ``--insecure-seed`` and then every output says "not private".

:class:`DiscreteLaplaceTail` draws the single bit ``Z >= a`` for
``Z ~ DLap(scale)`` without drawing ``Z`` itself: that is all the stability test
needs per query, and it is what lets the sparse-vector coordinator run at tens
of millions of queries per second on one core. See its docstring for the exact
error bound.
"""
from __future__ import annotations

import math
import os
import secrets
from decimal import Decimal, localcontext
from typing import Any, Protocol

import numpy as np


class NoiseSource(Protocol):
    """What the mechanisms need from a source of randomness."""

    @property
    def private(self) -> bool:
        """True only for a cryptographically secure, unseeded source."""

    def uniform_words(self, size: int) -> np.ndarray:
        """``size`` independent uniform 32-bit words (dtype uint32)."""

    def discrete_laplace(self, scale: float) -> int:
        """One draw of Z with P(Z = z) proportional to exp(-|z| / scale), z an integer."""

    def discrete_laplace_vector(self, scale: float, size: int) -> np.ndarray:
        """``size`` independent draws of the same (int64)."""

    def generator_seed(self) -> int:
        """A 128-bit seed for a numpy Generator used for non-released randomness
        (the subsample assignment, resampling); see :mod:`pipeline.subsample`."""


class SecureNoise:
    """Cryptographically secure noise: OpenDP for discrete Laplace, os.urandom for words.

    Discrete Laplace values are drawn from OpenDP in vectors of ``POOL`` and
    handed out one by one (an OpenDP call costs ~50 us, a pooled draw ~6 us).
    Drawing ahead is sound: the draws are independent of the data and of each
    other; the pool lives only in this process's memory, and draws lost with
    the process are simply never used.
    """

    private = True
    POOL = 256

    def __init__(self) -> None:
        self._samplers: dict[float, Any] = {}
        self._pools: dict[float, list[int]] = {}

    def uniform_words(self, size: int) -> np.ndarray:
        return np.frombuffer(os.urandom(4 * size), dtype=np.uint32)

    def discrete_laplace(self, scale: float) -> int:
        pool = self._pools.setdefault(scale, [])
        if not pool:
            pool.extend(int(z) for z in self._sampler(scale)([0] * self.POOL))
        return pool.pop()

    def discrete_laplace_vector(self, scale: float, size: int) -> np.ndarray:
        if size <= 0:
            return np.zeros(0, dtype=np.int64)
        return np.asarray(self._sampler(scale)([0] * size), dtype=np.int64)

    def _sampler(self, scale: float) -> Any:
        sampler = self._samplers.get(scale)
        if sampler is None:
            import opendp.prelude as dp

            dp.enable_features("contrib")
            # On an integer domain OpenDP's Laplace mechanism adds exact discrete
            # Laplace noise, P(z) proportional to exp(-|z| / scale), to each entry.
            sampler = dp.m.make_laplace(
                dp.vector_domain(dp.atom_domain(T=int)), dp.l1_distance(T=int), scale=float(scale)
            )
            self._samplers[scale] = sampler
        return sampler

    def generator_seed(self) -> int:
        return secrets.randbits(128)

    def state(self) -> None:
        """A secure source has no state to persist."""
        return None


class SeededNoise:
    """Reproducible noise from numpy's PCG64. NOT PRIVATE: for tests and debugging only."""

    private = False

    def __init__(self, seed: int, state: dict[str, Any] | None = None) -> None:
        self._rng = np.random.Generator(np.random.PCG64(seed))
        if state is not None:
            self._rng.bit_generator.state = state

    def uniform_words(self, size: int) -> np.ndarray:
        return self._rng.integers(0, 2**32, size=size, dtype=np.uint32)

    def discrete_laplace(self, scale: float) -> int:
        # The difference of two i.i.d. geometric variables (failures before the
        # first success, success probability 1 - exp(-1/scale)) is discrete Laplace.
        p = -math.expm1(-1.0 / scale)
        return int(self._rng.geometric(p)) - int(self._rng.geometric(p))

    def discrete_laplace_vector(self, scale: float, size: int) -> np.ndarray:
        p = -math.expm1(-1.0 / scale)
        return (self._rng.geometric(p, size) - self._rng.geometric(p, size)).astype(np.int64)

    def generator_seed(self) -> int:
        return int(self._rng.integers(0, 2**63))

    def state(self) -> dict[str, Any]:
        """The generator state, so a resumed session continues the same stream."""
        return dict(self._rng.bit_generator.state)


def noise_source(seed: int | None, insecure_seed: bool, state: Any = None) -> NoiseSource:
    """The noise source a run asked for: secure unless a seed *and* --insecure-seed are given."""
    from pipeline.errors import PcqrError

    if seed is None:
        if insecure_seed:
            raise PcqrError("--insecure-seed needs --seed")
        return SecureNoise()
    if not insecure_seed:
        raise PcqrError(
            "--seed makes the noise predictable, so the output is not private; "
            "add --insecure-seed to accept that (for tests only)"
        )
    return SeededNoise(seed, state)


def uniform_below(noise: NoiseSource, n: int) -> int:
    """An exactly uniform integer in [0, n), from the source's 32-bit words (rejection sampling)."""
    if n < 1:
        raise ValueError(f"n must be positive, got {n}")
    words = (n.bit_length() + 63) // 32  # at least 32 spare bits: rejections are rare
    span = 1 << (32 * words)
    limit = span - span % n
    while True:
        value = 0
        for word in noise.uniform_words(words).tolist():
            value = (value << 32) | int(word)
        if value < limit:
            return value % n


def discrete_laplace_pmf(z: np.ndarray, scale: float) -> np.ndarray:
    """Exact pmf of the discrete Laplace: (1 - q) / (1 + q) * q^|z|, q = exp(-1/scale)."""
    q = math.exp(-1.0 / scale)
    return (1 - q) / (1 + q) * np.power(q, np.abs(np.asarray(z, dtype=float)))


_WORDS = 4  # probabilities are held as 128-bit fixed point, four 32-bit words
_SCALE_BITS = 32 * _WORDS
_DECIMAL_DIGITS = 60  # about 200 bits


class DiscreteLaplaceTail:
    """Draw Bernoulli bits ``Z >= a`` with ``Z ~ DLap(scale)``, vectorised.

    For an integer ``a`` the tail of the discrete Laplace has a closed form
    (q = exp(-1/scale))::

        P(Z >= a) = q^a / (1 + q)              for a >= 1
        P(Z >= a) = 1 - q^(1-a) / (1 + q)      for a <= 0

    These are computed in 200-bit decimal arithmetic (each entry on its own, so
    no error accumulates) and kept as 128-bit fixed-point numbers
    ``F(a) = floor(P(Z >= a) * 2^128)``, lazily: only for the window of ``a``
    values the draws have needed so far (the coordinator needs about k + 1 of
    them per threshold). A draw compares a uniform 128-bit number U with F(a)
    lazily, 32 bits at a time (a second word is drawn only when the first
    words tie, with probability 2^-32), and returns ``U < F(a)``.

    Error bound: each returned bit is 1 with probability exactly F(a) / 2^128,
    which differs from the true tail P(Z >= a) by at most 2^-128 + 10^-50 <
    3e-39. Over m draws the joint output distribution is within total variation
    m * 3e-39 of exact discrete-Laplace noise, which adds at most
    (1 + e^eps) * m * 3e-39 to delta (stated in docs/privacy.md).

    Beyond |a| > J (where q^J / (1 + q) < 2^-130) the values saturate at 0 and
    1 - 2^-128, within the same bound.
    """

    def __init__(self, scale: float) -> None:
        if not scale > 0:
            raise ValueError(f"scale must be positive, got {scale}")
        self.scale = float(scale)
        with localcontext() as ctx:
            ctx.prec = _DECIMAL_DIGITS
            self._q = (Decimal(-1) / Decimal(repr(self.scale))).exp()
        # q^J / (1 + q) <= q^J = exp(-J / scale) < 2^-(bits + 2)
        self.span = math.ceil(self.scale * (_SCALE_BITS + 2) * math.log(2)) + 1
        self._lo = 0  # the window holds F(a) for a in [_lo, _lo + len)
        self._words = [np.zeros(0, dtype=np.uint32) for _ in range(_WORDS)]
        self._first_list: list[int] | None = None  # word 0 of the window, for scalar loops

    def _fixed(self, a: int) -> int:
        """F(a) = floor(P(Z >= a) * 2^128), saturated."""
        top = 2**_SCALE_BITS - 1
        if a > self.span:
            return 0
        if a < -self.span:
            return top
        with localcontext() as ctx:
            ctx.prec = _DECIMAL_DIGITS
            if a >= 1:
                p = self._q**a / (1 + self._q)
            else:
                p = 1 - self._q ** (1 - a) / (1 + self._q)
            return min(int(p * (Decimal(2) ** _SCALE_BITS)), top)

    def _entries(self, lo: int, hi: int) -> list[np.ndarray]:
        fixed = [self._fixed(a) for a in range(lo, hi)]
        shifts = [32 * (_WORDS - 1 - w) for w in range(_WORDS)]
        return [np.array([(f >> s) & 0xFFFFFFFF for f in fixed], dtype=np.uint32) for s in shifts]

    def _ensure(self, lo: int, hi: int) -> None:
        """Extend the window to cover a in [lo, hi]."""
        size = self._words[0].size
        if size and self._lo <= lo and hi < self._lo + size:
            return
        self._first_list = None
        if size == 0:
            self._lo, self._words = lo, self._entries(lo, hi + 1)
            return
        end = self._lo + size
        if lo < self._lo:
            before = self._entries(lo, self._lo)
            self._words = [np.concatenate((b, w)) for b, w in zip(before, self._words)]
            self._lo = lo
        if hi >= end:
            after = self._entries(end, hi + 1)
            self._words = [np.concatenate((w, x)) for w, x in zip(self._words, after)]

    def clip(self, a: int) -> int:
        """``a`` moved into [-J-1, J+1]: beyond it the values are saturated."""
        edge = self.span + 1
        return min(max(a, -edge), edge)

    def first_words(self, lo: int, hi: int) -> tuple[int, list[int]]:
        """For scalar loops: the window covering clipped [lo, hi], as (its first a, word 0 of each F)."""
        self._ensure(self.clip(lo), self.clip(hi))
        if self._first_list is None:
            self._first_list = self._words[0].tolist()
        return self._lo, self._first_list

    def tie_break(self, a: int, noise: NoiseSource) -> bool:
        """Finish one comparison ``U < F(a)`` whose first 32-bit words tied: fresh lower words.

        This is exactly how :meth:`draw_at_least` continues after a tie.
        """
        for word in self.words(a)[1:]:
            u = int(noise.uniform_words(1)[0])
            if u != word:
                return u < word
        return False

    def words(self, a: int) -> list[int]:
        """The four 32-bit words of F(a), most significant first."""
        a = self.clip(a)
        self._ensure(a, a)
        return [int(w[a - self._lo]) for w in self._words]

    def probability(self, a: int) -> float:
        """The stored P(Z >= a) as a float (for tests and reports)."""
        value = 0
        for word in self.words(a):
            value = (value << 32) | word
        return value / 2.0**_SCALE_BITS

    def draw_at_least(self, a: np.ndarray, noise: NoiseSource) -> np.ndarray:
        """Independent bits ``Z_i >= a_i`` for each integer a_i (bool array)."""
        a = np.asarray(a, dtype=np.int64)
        if a.size == 0:
            return np.zeros(0, dtype=bool)
        lo, hi = self.clip(int(a.min())), self.clip(int(a.max()))
        self._ensure(lo, hi)
        index = np.clip(a, lo, hi) - self._lo
        u = noise.uniform_words(index.shape[0])
        p = self._words[0][index]
        result = u < p
        undecided = np.flatnonzero(u == p)  # first words tie: probability 2^-32 each
        for w in range(1, _WORDS):
            if undecided.size == 0:
                break
            u = noise.uniform_words(undecided.size)
            p = self._words[w][index[undecided]]
            result[undecided[u < p]] = True
            undecided = undecided[u == p]
        return result
