"""Secret draws fixed by the session key: samples and selections that must be secure and repeatable.

A session's secret key (:func:`pcqr.pipeline.privacy.noise.session_key`, drawn from the secure
source when the session is created, before any private value is read, and kept in its private
state) drives the sparse vector's per-query numbers through :class:`KeyedStream`. Two other draws
of the papers' algorithms use it too, each under a key derived for its purpose:

* A_AgPrivCl's secret sample S' of n' rows drawn without replacement, and S_hat, n' rows of the
  relabelled S'' drawn with replacement (Nandi-Bassily Algorithm 3, steps 2 and 4). Amplification
  by subsampling (Lemma 3.4's last link) holds only if the sample is uniform *and secret*: drawn
  from ChaCha20 keystream under a secret key, not from a statistical generator (numpy's PCG64,
  whose state its outputs reveal).
* Universal mode's single A_SSPP selection (Algorithm 4, step 3). Drawn from the session key, the
  selection is fixed before the private rows touch it: a run killed after A_SSPP but before its
  save draws the same h_priv when it runs again, so killing and retrying gains nothing.

Derived keys: ``BLAKE2b(purpose, key=session key)`` (a pseudorandom function of the purpose), so
the streams of different purposes, and the sparse vector's own stream under the session key, are
computationally independent. The integers and subsets below are exactly uniform given uniform
words (rejection sampling; first distinct values of an i.i.d. sequence), so the only gap to the
ideal draw is ChaCha20's pseudorandomness, as for the sparse vector.
"""
from __future__ import annotations

import hashlib

import numpy as np

from pcqr.pipeline.privacy.noise import KeyedStream

#: What each derived key is for (part of the PRF's input: never reuse one for another draw).
SAMPLE = b"A_AgPrivCl: S' without replacement"
RESAMPLE = b"A_AgPrivCl: S_hat with replacement"
SSPP = b"A_UnvPrivCl: A_SSPP selection"


def derived_key(key: bytes, purpose: bytes) -> bytes:
    """The 256-bit key of one purpose's stream: BLAKE2b of ``purpose`` keyed by the session key."""
    if len(key) != 32:
        raise ValueError(f"the session key must be 32 bytes, got {len(key)}")
    return hashlib.blake2b(purpose, key=key, digest_size=32).digest()


class KeyedWords:
    """A noise source of uniform 32-bit words, read in order from the keystream of one purpose.

    Enough for every draw that needs only uniform words: the exponential mechanism's level-then-
    rank choice (:func:`pcqr.pipeline.mechanisms.exponential.choose`) and the samples below. The
    same key and purpose give the same words in the same order: a repeated run repeats the draw.
    ``private`` is the privacy of the source the session key came from (False for a seeded test
    session: its key, hence everything here, follows from the seed).
    """

    def __init__(self, key: bytes, purpose: bytes, private: bool) -> None:
        self._stream = KeyedStream(derived_key(key, purpose))
        self._position = 0  # next 128-bit number of the stream
        self.private = private

    def uniform_words(self, size: int) -> np.ndarray:
        """``size`` independent uniform 32-bit words (uint32): the halves of :meth:`uniform_64`'s values."""
        return self.uniform_64(-(-size // 2)).astype(">u8").view(">u4").astype(np.uint32)[:size]

    def uniform_64(self, size: int) -> np.ndarray:
        """``size`` independent uniform 64-bit integers (uint64)."""
        numbers = -(-size // 2)
        hi, lo = self._stream.uniforms(self._position, numbers)
        self._position += numbers
        return np.stack([hi, lo], axis=1).reshape(-1)[:size]

    def discrete_laplace(self, scale: float) -> int:
        raise NotImplementedError("a keyed source draws uniform words only")

    def discrete_laplace_vector(self, scale: float, size: int) -> np.ndarray:
        raise NotImplementedError("a keyed source draws uniform words only")

    def laplace_mechanism(self, values: np.ndarray, scale: float) -> np.ndarray:
        raise NotImplementedError("a keyed source draws uniform words only")

    def generator_seed(self) -> int:
        raise NotImplementedError("a keyed source seeds no statistical generator")


def uniform_integers(source: KeyedWords, bound: int, count: int) -> np.ndarray:
    """``count`` independent, exactly uniform integers in [0, bound) (int64), bound < 2^63:
    64-bit words below the largest multiple of ``bound`` under 2^64 are kept (mod bound), the
    others rejected (probability < bound / 2^64 each) and drawn again, in order."""
    if not 0 < bound < 2**63 or count < 0:
        raise ValueError(f"bad uniform draw: bound {bound}, count {count}")
    limit = np.uint64(2**64 - 2**64 % bound)
    kept: list[np.ndarray] = []
    have = 0
    while have < count:
        words = source.uniform_64(count - have)
        words = words[words < limit]
        kept.append((words % np.uint64(bound)).astype(np.int64))
        have += words.size
    return np.concatenate(kept)[:count] if kept else np.zeros(0, dtype=np.int64)


def uniform_subset(source: KeyedWords, population: int, count: int) -> np.ndarray:
    """A uniformly random ``count``-subset of [0, population), sorted (int64).

    The first ``c`` distinct values of an i.i.d. uniform sequence on [0, N) form a uniform c-subset
    (the sequence's law is invariant under every permutation of [0, N), so the set's is too). For
    count > N / 2 the complement is drawn that way (fewer draws: at most about 1.4 c for c <= N/2)."""
    if not 0 <= count <= population:
        raise ValueError(f"cannot draw {count} of {population} without replacement")
    wanted = min(count, population - count)
    draws = np.zeros(0, dtype=np.int64)
    while True:
        values, first = np.unique(draws, return_index=True)
        if values.size >= wanted:
            break
        missing = wanted - values.size
        draws = np.concatenate([draws, uniform_integers(source, population, missing + missing // 4 + 16)])
    chosen = np.sort(values[np.argsort(first, kind="stable")[:wanted]])
    if wanted == count:
        return chosen
    keep = np.ones(population, dtype=bool)
    keep[chosen] = False
    return np.flatnonzero(keep).astype(np.int64)
