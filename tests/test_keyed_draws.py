"""Secret draws fixed by the session key (pipeline/privacy/keyed_draws.py): A_AgPrivCl's sample
without replacement and its resample, universal mode's A_SSPP selection.

The laws are checked exactly where they can be (every subset equally likely, chi-square over all
C(6, 2) and C(6, 4) subsets and every residue, false failure P_FAIL each) and the repeatability
by construction: the same key and purpose give the same draw; another purpose or key, another."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.stats import chisquare

from pcqr.pipeline.privacy.keyed_draws import (
    RESAMPLE, SAMPLE, SSPP, KeyedWords, derived_key, uniform_integers, uniform_subset,
)
from pcqr.pipeline.mechanisms.relabel import sample_positions
from tests.conftest import P_FAIL

KEY = bytes(range(32))


@pytest.mark.parametrize("count", [2, 4])  # 4 of 6: drawn as the complement of 2
def test_every_subset_is_equally_likely(count: int) -> None:
    words = KeyedWords(KEY, SAMPLE, private=False)
    subsets = list(itertools.combinations(range(6), count))
    draws = 12_000  # 800 a subset at C(6, 2) = 15
    seen = {s: 0 for s in subsets}
    for _ in range(draws):
        chosen = uniform_subset(words, 6, count)
        assert chosen.dtype == np.int64 and list(chosen) == sorted(set(chosen.tolist())) and len(chosen) == count
        seen[tuple(chosen.tolist())] += 1
    assert chisquare(list(seen.values())).pvalue > P_FAIL


def test_uniform_integers_are_uniform_and_in_range() -> None:
    words = KeyedWords(KEY, RESAMPLE, private=False)
    values = uniform_integers(words, 7, 70_000)
    assert values.dtype == np.int64 and values.min() >= 0 and values.max() <= 6
    assert chisquare(np.bincount(values, minlength=7)).pvalue > P_FAIL
    big = uniform_integers(words, 2**62 + 3, 1000)  # rejection region > 0: still in range
    assert (big >= 0).all() and (big < 2**62 + 3).all()


def test_the_same_key_and_purpose_repeat_the_draw_and_others_do_not() -> None:
    def draw(key: bytes, purpose: bytes) -> list[int]:
        return uniform_subset(KeyedWords(key, purpose, private=True), 10**6, 1000).tolist()

    first = draw(KEY, SAMPLE)
    assert first == draw(KEY, SAMPLE)  # a rerun after a kill draws the same sample
    assert first != draw(KEY, RESAMPLE) and first != draw(bytes(32), SAMPLE)
    assert len({derived_key(KEY, p) for p in (SAMPLE, RESAMPLE, SSPP)}) == 3
    assert KeyedWords(KEY, SSPP, private=True).uniform_words(5).tolist() == \
        KeyedWords(KEY, SSPP, private=True).uniform_words(5).tolist()


def test_the_sample_spans_the_parts_by_global_position() -> None:
    """sample_positions: the global subset split into each part's local positions (a part's share
    is then hypergeometric, as the paper's sample of the whole dataset needs)."""
    words = KeyedWords(KEY, SAMPLE, private=False)
    parts = [3, 0, 5, 2]
    shares = np.zeros(len(parts))
    for _ in range(2000):
        local = sample_positions(parts, 4, words)
        assert sum(p.size for p in local) == 4
        for rows, chosen in zip(parts, local):
            assert ((chosen >= 0) & (chosen < max(rows, 1))).all()
        shares += [p.size for p in local]
    expected = np.array(parts) * 4 / 10 * 2000
    assert np.abs(shares - expected).max() < 6 * math.sqrt(expected.max())  # 6 sigma: false failure < 1e-8
