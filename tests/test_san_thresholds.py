"""SanThresholds (Beimel-Nissim-Stemmer Fig. 11, Lemma 4.8; issue 14): each step's computation
against brute force and its sensitivity over every replace-one move, each mechanism's exact law at
eps0 through the real code, the exact composed law of a tiny run against the composition its
certificate is built from, the code against that law, the call order, the certificate and its
refusals, and utility on data whose every threshold answer is known."""
from __future__ import annotations

import itertools
import math
from fractions import Fraction
from functools import lru_cache

import numpy as np
import pytest
from scipy import stats

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.mechanisms.adist import noise_scale
from pcqr.pipeline.mechanisms.choosing import ChoosingParameters
from pcqr.pipeline.mechanisms.integer_domain import Domain, ceiling_counts
from pcqr.pipeline.privacy.em_sampler import sampler_delta
from pcqr.pipeline.mechanisms.rec_concave import RecConcaveParameters, recursion_depth
from pcqr.pipeline.mechanisms.san_thresholds import (
    GROWTH, Call, RangeCounts, SanThresholdsParameters, call_bound, candidates, log_top, san_thresholds,
    scale_quality, smallest_alpha, window_counts,
)
from pcqr.pipeline.privacy.composition import optimal_delta
from pcqr.pipeline.privacy.noise import SecureNoise, SeededNoise
from tests.conftest import P_FAIL
from tests.test_choosing import exact_law as choosing_law
from tests.test_san_points import clipped_count_law

TINY = Domain(0, 3)  # four values: log T = 2, RecConcave is one exponential mechanism over {0, 1, 2}


def _rows(multiset: tuple[int, ...]) -> RangeCounts:
    values, counts = np.unique(np.array(multiset, dtype=np.int64), return_counts=True)
    return RangeCounts(values, counts)


def _moves(multiset: tuple[int, ...], domain: Domain):
    """Every replace-one neighbour of a sorted multiset over the domain (sorted)."""
    for i, new in itertools.product(range(len(multiset)), range(domain.lo, domain.hi + 1)):
        if (i == 0 or multiset[i] != multiset[i - 1]) and new != multiset[i]:
            yield tuple(sorted(multiset[:i] + (new,) + multiset[i + 1:]))


def _ranges(domain: Domain):
    return [(k, l) for k in range(domain.lo, domain.hi + 1) for l in range(k, domain.hi + 1)]


# --- each step against brute force --------------------------------------------------------------------


def test_window_counts_against_brute_force() -> None:
    """I(S, j) (step 5) on 300 random samples and ranges, also shifted by 2^52 (the arithmetic on large
    values): the most rows in any [x, y] inside [k, l] with y - x + 1 <= 2^j, over every window."""
    rng = np.random.default_rng(1)
    for _ in range(300):
        x = rng.integers(0, 41, int(rng.integers(0, 30)))
        k = int(rng.integers(0, 41))
        l = int(rng.integers(k, 41))
        brute = [max(int(((x >= a) & (x <= b)).sum()) for a in range(k, l + 1) for b in range(a, min(l, a + 2**j - 1) + 1))
                 for j in range(log_top(l - k + 1) + 1)]
        for shift in (0, 2**52):
            values, counts = np.unique(x.astype(np.int64) + shift, return_counts=True)
            assert window_counts(RangeCounts(values, counts), k + shift, l + shift) == brute


def test_candidates_against_brute_force_and_bounded_growth() -> None:
    """Steps 9-10 on 300 random samples, ranges and z: the candidates holding a row and their counts
    equal the brute-force A_i's and B_i's (every window of the range, trimmed at l); every value of
    the range lies in exactly one candidate for z = 0 and at most GROWTH = 2 for z >= 1, so a
    replaced row moves at most 2 qualities down and 2 up, each by 1 (2-bounded growth)."""
    rng = np.random.default_rng(2)
    for _ in range(300):
        x = rng.integers(0, 61, int(rng.integers(1, 30)))
        k = int(rng.integers(0, 50))
        l = int(rng.integers(k, 61))
        z = int(rng.integers(0, log_top(l - k + 1) + 1))
        if z == 0:
            windows = [(a, a) for a in range(k, l + 1)]
        else:
            Z = 2**z
            windows = [(a, min(l, a + 2 * Z - 1)) for start in (k, k + Z) for a in range(start, l + 1, 2 * Z)]
        assert max(sum(a <= v <= b for a, b in windows) for v in range(k, l + 1)) <= (1 if z == 0 else GROWTH)
        assert all(sum(a <= v <= b for a, b in windows) >= 1 for v in range(k, l + 1))
        brute = {w: int(((x >= w[0]) & (x <= w[1])).sum()) for w in windows}
        values, counts = np.unique(x.astype(np.int64), return_counts=True)
        found, qualities = candidates(RangeCounts(values, counts), k, l, z)
        assert dict(zip(found, qualities.tolist())) == {w: c for w, c in brute.items() if c >= 1}
        assert len(set(found)) == len(found)


def test_quality_has_sensitivity_one_over_every_move() -> None:
    """Every multiset of 4 rows over 8 values, every range [k, l] and every replace-one move: I(S, j)
    and Q(S, j) (the real code, at two values of alpha m / 32) move by at most 1 at every j, and by
    exactly 1 somewhere (the check can fail)."""
    domain = Domain(0, 7)
    ranges = _ranges(domain)
    settings = ((4, 0.9), (400, 0.7))  # r = 0.11 and 8.75
    width = log_top(domain.size) + 1
    table: dict[tuple[int, ...], np.ndarray] = {}

    def profile(s: tuple[int, ...]) -> np.ndarray:
        """I(S, j) and both Q(S, j), j = 0..log T, for every range (zero past a range's own log T, alike
        for every S, so the padding never differs)."""
        if s not in table:
            out = np.zeros((len(ranges), 1 + len(settings), width), dtype=np.int64)
            for r, (k, l) in enumerate(ranges):
                windows = window_counts(_rows(s), k, l)
                out[r, 0, : len(windows)] = windows
                for i, (rows, alpha) in enumerate(settings, 1):
                    quality = scale_quality(windows, rows, alpha)
                    out[r, i, : quality.last + 1] = [quality.at(j) for j in range(quality.last + 1)]
            table[s] = out
        return table[s]

    largest = np.zeros(1 + len(settings), dtype=np.int64)
    for s in itertools.combinations_with_replacement(range(8), 4):
        for other in _moves(s, domain):
            largest = np.maximum(largest, np.abs(profile(s) - profile(other)).max(axis=(0, 2)))
    assert {"I": int(largest[0]), "Q": int(largest[1:].max())} == {"I": 1, "Q": 1}


# --- each mechanism's law at eps0, through the real code --------------------------------------------


def tiny_parameters(eps0: float, rows: int, alpha: float, calls: int, domain: Domain = TINY,
                    choosing_alpha: float | None = None) -> SanThresholdsParameters:
    """SanThresholds' pieces at a size the certified constructor refuses (so every law is
    non-trivial); ``calls`` in place of ceil(77/alpha), and optionally the choosing mechanism's
    approximation in place of alpha/64 (at m = 4, alpha/64 passes step 1 on a single row, so its
    delta0 is above 1/3 and a composed bound says nothing)."""
    approximation = alpha / 64 if choosing_alpha is None else choosing_alpha
    choosing = ChoosingParameters(eps0, 0.9, approximation, 0.5, GROWTH, rows, noise_scale(eps0, 4.0))
    rec = RecConcaveParameters.within(eps0, 0.1, log_top(domain.size), rows)
    return SanThresholdsParameters(1.0, 0.9, alpha, 0.5, rows, domain, calls, eps0, noise_scale(eps0), choosing, rec)


#: The tiny run of the law tests: eps0 = 4, m = 4, alpha 0.9 (step 3 halts iff the noisy count is <= 0),
#: two calls, the choosing mechanism passing step 1 at 3 rows (delta0 about 0.1).
SMALL_RUN = tiny_parameters(4.0, 4, 0.9, 2, choosing_alpha=1.5)


def _em_law(quality, eps: float) -> dict[int, float]:
    """The exponential mechanism of RecConcave's level (weights e^(eps Q / 2)) over [0, last], exactly."""
    q = np.array([quality.at(j) for j in range(quality.last + 1)], float)
    w = np.exp(eps * (q - q.max()) / 2)
    return dict(enumerate(w / w.sum()))


def _divergence(p: dict, q: dict, eps: float) -> float:
    return sum(max(0.0, v - math.exp(eps) * q.get(o, 0.0)) for o, v in p.items())


def _step_laws(s: tuple[int, ...], params: SanThresholdsParameters, k: int, l: int):
    """(RecConcave's law on [k, l], {z: the choosing mechanism's law over intervals (None: bottom)})
    for the multiset ``s``, through the real code's Q and candidates."""
    rows = _rows(s)
    em = _em_law(scale_quality(window_counts(rows, k, l), params.rows, params.alpha), params.eps0)
    chosen = {}
    for z in em:
        found, qualities = candidates(rows, k, l, z)
        law = choosing_law(qualities.tolist(), params.choosing) if found else {None: 1.0}
        chosen[z] = {(found[i] if i is not None else None): p for i, p in law.items()}
    return em, chosen


@lru_cache(maxsize=None)
def choosing_delta_exact(params: SanThresholdsParameters) -> float:
    """The choosing mechanism's exact worst hockey-stick divergence at eps0 over every quality vector
    SanThresholds gives it on the tiny domain (every multiset of m rows, range [k, l] with k < l, z)
    and every replace-one neighbour's vector for the same (k, l, z)."""
    worst = 0.0
    for s in itertools.combinations_with_replacement(range(TINY.lo, TINY.hi + 1), params.rows):
        for other in _moves(s, TINY):
            for k, l in _ranges(TINY):
                if k < l:
                    mine, theirs = _step_laws(s, params, k, l)[1], _step_laws(other, params, k, l)[1]
                    worst = max(worst, *(_divergence(mine[z], theirs[z], params.eps0) for z in mine))
    return worst


def test_each_mechanism_at_eps0_through_the_real_code() -> None:
    """On every multiset of 4 rows over 4 values, every range and every replace-one move: RecConcave's
    exponential mechanism (depth 1) on the real Q has privacy loss at most eps0 (pure), positive;
    the choosing mechanism on the real candidates' qualities (growth 2) is within its certified
    delta0 at eps0 and not pure; the counts' law has loss exactly 1/b <= eps0."""
    params = SMALL_RUN
    loss = 0.0
    for s in itertools.combinations_with_replacement(range(4), params.rows):
        for other in _moves(s, TINY):
            for k, l in _ranges(TINY):
                if k < l:
                    em, em2 = _step_laws(s, params, k, l)[0], _step_laws(other, params, k, l)[0]
                    loss = max(loss, max(abs(math.log(em[z] / em2[z])) for z in em))
    assert 0 < loss <= params.eps0 * (1 + 1e-12)
    terms = params.choosing.delta_terms()
    delta0 = choosing_delta_exact(params)
    assert 0 < delta0 <= max(terms["case_a"], terms["case_b"])
    laws = [clipped_count_law(c, params.rows, params.count_scale) for c in range(params.rows + 1)]
    count_loss = max(float(np.abs(np.log(a / b)).max()) for a, b in zip(laws, laws[1:]))
    assert params.eps0 * (1 - 1e-9) <= count_loss <= params.eps0 * (1 + 1e-12)


# --- the composed law --------------------------------------------------------------------------------


def composed_law(s: tuple[int, ...], params: SanThresholdsParameters) -> dict[tuple, float]:
    """{the calls' transcript: probability} of Fig. 11 on the multiset ``s`` with exact laws: per
    call (k, l, the step-3 clipped count or None, z, the choice, the step-11 clipped count). Step 2's
    output enters only as 'passed' or its clipped count (a post-processing the rest depends on alone)."""
    rows, m = _rows(s), params.rows
    halt_below = math.ceil(Fraction(params.alpha) * m / 8)
    law: dict[tuple, float] = {}

    def walk(stack: tuple, left: int, transcript: tuple, p: float) -> None:
        if not stack or left == 0:
            law[transcript] = law.get(transcript, 0.0) + p
            return
        (k, l), rest = stack[-1], stack[:-1]
        first = clipped_count_law(rows.count(k, l), m, params.count_scale)
        for v in range(halt_below):
            walk(rest, left - 1, transcript + ((k, l, v, None, None, v),), p * first[v])
        passed = p * float(first[halt_below:].sum())
        em, chosen = _step_laws(s, params, k, l) if k < l else ({0: 1.0}, {0: {(k, k): 1.0}})
        for z, pz in em.items():
            for interval, pc in chosen[z].items():
                a, b = interval if interval is not None else (k, l)
                after = rest + (((b + 1, l),) if b < l else ()) + (((k, a - 1),) if a > k else ())
                counted = clipped_count_law(rows.count(a, b), m, params.count_scale)
                for v, pv in enumerate(counted):
                    walk(after, left - 1, transcript + ((k, l, None, z, interval, v),), passed * pz * pc * pv)

    walk(((TINY.lo, TINY.hi),), params.calls, (), 1.0)
    return law


def _transcript(calls: list[Call], rows: int) -> tuple:
    return tuple((c.first, c.last, None if c.halted is None else round(c.halted * rows), c.z, c.chosen,
                  round(c.share * rows)) for c in calls)


def test_exact_composed_law_obeys_the_composition_its_certificate_is_built_from() -> None:
    """Two calls (M = 8 mechanisms at eps0 = 4) on every multiset of 4 rows over 4 values and every
    replace-one neighbour: the exact transcript's hockey-stick divergence at eps is at most KOV's
    heterogeneous bound, optimal_delta(eps0, M, eps) + calls x the choosing mechanism's EXACT worst
    delta0 (computed above over every quality vector the run can give it), at five eps. The bound
    says something (< 1) only from about eps = M eps0 / 2 up, where it is within 1.4x of the truth:
    the worst divergence there (0.149) exceeds one delta0 (0.099), so both calls' delta terms are
    needed, and it is positive (not pure DP)."""
    params = SMALL_RUN
    delta0 = choosing_delta_exact(params)
    epsilons = [8.0, 16.0, 24.0, 32.0, 40.0]
    bounds = [min(1.0, optimal_delta(params.eps0, params.mechanisms, eps) + params.calls * delta0) for eps in epsilons]
    laws = {s: composed_law(s, params) for s in itertools.combinations_with_replacement(range(4), params.rows)}
    assert all(abs(sum(law.values()) - 1) < 1e-9 for law in laws.values())
    worst = [0.0] * len(epsilons)
    for s, law in laws.items():
        for other in _moves(s, TINY):
            for i, eps in enumerate(epsilons):
                worst[i] = max(worst[i], _divergence(law, laws[other], eps))
    assert all(w <= b * (1 + 1e-9) for w, b in zip(worst, bounds)), (worst, bounds)
    assert bounds[-1] < 0.25 and worst[-1] > delta0 > 0.05, (worst, bounds, delta0)


# the secure source, which private runs use; the seeded one's law is tests/test_noise.py's
@pytest.mark.parametrize("noise_factory", [SecureNoise], ids=["secure"])
def test_the_code_draws_the_exact_law(noise_factory) -> None:
    """5,000 runs of san_thresholds (two calls) on the rows (0, 1, 1, 3) against composed_law: the
    transcripts (chi-square over those expected >= 20 times, the rest pooled), false failure 1e-6;
    at eps0 = 1 (the law spread over many transcripts)."""
    params = tiny_parameters(1.0, 4, 0.9, 2, choosing_alpha=1.5)
    s = (0, 1, 1, 3)
    law = composed_law(s, params)
    values, counts = np.unique(np.array(s), return_counts=True)
    noise = noise_factory()
    trials = 5_000
    seen: dict[tuple, int] = {}
    for _ in range(trials):
        calls: list[Call] = []
        san_thresholds(values, counts, params, noise, calls)
        key = _transcript(calls, params.rows)
        seen[key] = seen.get(key, 0) + 1
    assert set(seen) <= set(law)
    common = [k for k in law if trials * law[k] >= 20]
    observed = [seen.get(k, 0) for k in common] + [trials - sum(seen.get(k, 0) for k in common)]
    expected = [trials * law[k] for k in common] + [trials * (1 - sum(law[k] for k in common))]
    assert len(common) >= 10
    assert stats.chisquare(observed, expected).pvalue > P_FAIL


# --- the order of the calls, the certificate, utility ------------------------------------------------


def test_calls_run_depth_first_left_before_right_and_stop_at_c() -> None:
    """The calls' ranges are those of the paper's recursion (a recursive replay of the released
    intervals: step 12's range and all below it before step 13's), never more than c; when c is not
    reached the intervals [a, b] partition the domain."""
    rng = np.random.default_rng(3)
    for calls_allowed in (3, 40):
        params = tiny_parameters(1.0, 400, 0.9, calls_allowed, Domain(0, 99))
        x = np.concatenate([rng.integers(0, 100, 200), np.full(100, 17), np.full(100, 70)])
        values, counts = np.unique(x, return_counts=True)
        calls: list[Call] = []
        released = san_thresholds(values, counts, params, SeededNoise(int(rng.integers(10**6))), calls)
        replay = iter(calls)
        order: list[tuple[int, int]] = []

        def recurse(k: int, l: int) -> None:
            if len(order) == calls_allowed:
                return
            call = next(replay)
            assert (call.first, call.last) == (k, l)
            order.append((k, l))
            a, b = call.interval
            if a > k:
                recurse(k, a - 1)
            if b < l:
                recurse(b + 1, l)

        recurse(0, 99)
        assert len(order) == len(calls) <= calls_allowed and len(released) == len(calls)
        if len(calls) < calls_allowed:
            covered = sorted(c.interval for c in calls)
            assert covered[0][0] == 0 and covered[-1][1] == 99
            assert all(b + 1 == a for (_, b), (a, _) in zip(covered, covered[1:]))


def test_certificate_refusals_and_the_smallest_alpha() -> None:
    """At eps 1, delta 1e-6: the certificate fits; the least m is accepted and m - 1 refused in one
    line with it; c = ceil(77/alpha) and M = c (3N + 1); an alpha beyond the exact composition is
    refused naming the smallest that fits (0.154 over 2^32 values, N = 1; 0.2702 over 2^54, N = 2),
    which is accepted; bad values are refused."""
    wide, huge = Domain(0, 2**32 - 1), Domain(-(2**53 - 1), 2**53 - 1)
    params = SanThresholdsParameters.create(1.0, 1e-6, 0.5, 0.05, 10**7, wide)
    certificate = params.certificate()
    assert params.calls == call_bound(0.5) == 154 and params.rec.depth == 1 and params.mechanisms == 616
    assert certificate["proven_epsilon"] == 1.0 and 0 < certificate["proven_delta"] <= 1e-6
    assert certificate["delta_composition"] <= 5e-7
    assert optimal_delta(params.eps0, 616, 1.0) <= 5e-7 < optimal_delta(params.eps0 * 1.001, 616, 1.0)
    assert params.eps0 * (1 - 1e-12) <= 1 / params.count_scale <= params.eps0
    least = SanThresholdsParameters.least_rows(1.0, 1e-6, 0.5, 0.05, wide)
    SanThresholdsParameters.create(1.0, 1e-6, 0.5, 0.05, least, wide)
    with pytest.raises(PcqrError, match=f"needs at least {least:,} rows"):
        SanThresholdsParameters.create(1.0, 1e-6, 0.5, 0.05, least - 1, wide)
    for domain, depth, smallest in ((wide, 1, 0.154), (huge, 2, 0.2702)):
        alpha = smallest_alpha(depth)
        assert round(alpha, 4) == smallest and call_bound(alpha) * (3 * depth + 1) <= 2000
        deep = SanThresholdsParameters.create(1.0, 1e-6, alpha, 0.05, 10**9, domain)
        assert deep.rec.depth == depth and deep.certificate()["proven_delta"] <= 1e-6
        with pytest.raises(PcqrError, match=f"--alpha must be at least {smallest:.4g}"):
            SanThresholdsParameters.create(1.0, 1e-6, math.nextafter(alpha, 0) * 0.999, 0.05, 10**9, domain)
    for bad in ({"alpha": 0.0}, {"beta": 1.0}, {"delta": 0.0}, {"epsilon": float("nan")}, {"rows": 0}):
        args = {"epsilon": 1.0, "delta": 1e-6, "alpha": 0.5, "beta": 0.05, "rows": 10**7, "domain": wide, **bad}
        with pytest.raises(PcqrError):
            SanThresholdsParameters.create(**args)


def test_every_piece_runs_at_eps0_and_the_certificate_sums_every_term() -> None:
    """What create hands each mechanism, over 2^32 values (N = 1) and 2^54 (N = 2, A_dist's path), at
    the least certified m: RecConcave's exponential mechanisms and the choosing mechanism (growth 2)
    at eps0, A_dist's noise at most eps0, the depth the root range needs; and every certificate term
    recomputed from the pieces' own certificates -- the choosing mechanism's larger case (b here) and
    sampler term, c 2(N - 1) A_dist tails, c N exponential-mechanism sampler terms -- so that dropping
    any of them, or building a piece at 2 eps0, fails here (an independent review's mutants did not)."""
    wide, huge = Domain(0, 2**32 - 1), Domain(-(2**53 - 1), 2**53 - 1)
    for domain, depth in ((wide, 1), (huge, 2)):
        least = SanThresholdsParameters.least_rows(1.0, 1e-6, 0.5, 0.05, domain)
        p = SanThresholdsParameters.create(1.0, 1e-6, 0.5, 0.05, least, domain)
        assert p.rec.depth == depth == recursion_depth(log_top(domain.size))
        assert p.rec.eps0 == p.choosing.epsilon == p.eps0 and p.choosing.growth == GROWTH == 2
        assert (p.rec.adist is None) == (depth == 1)
        tail = 0.0
        if p.rec.adist is not None:
            assert p.eps0 * (1 - 1e-12) <= 1 / p.rec.adist.scale <= p.eps0
            tail = p.rec.adist.certificate()["proven_delta"]
            assert tail > 0
        terms, certificate = p.choosing.delta_terms(), p.certificate()
        assert terms["case_b"] > terms["case_a"] > 0 and terms["sampler"] > 0  # so each is seen below
        em = sampler_delta(p.eps0, p.rec.sampler_rows())
        stability = p.calls * (terms["case_b"] + 2 * (depth - 1) * tail)
        sampler = p.calls * (terms["sampler"] + depth * em)
        assert stability <= certificate["delta_stability"] <= stability * (1 + 1e-9)
        assert sampler <= certificate["delta_sampler"] <= sampler * (1 + 1e-9)
        assert certificate["delta_composition"] >= optimal_delta(p.eps0, p.mechanisms, 1.0)
        parts = certificate["delta_composition"] + certificate["delta_stability"] + certificate["delta_sampler"]
        assert parts * (1 - 1e-12) <= certificate["proven_delta"] <= 1e-6


@pytest.mark.parametrize("eps0", [0.05, 0.5, 5.0])
def test_no_call_runs_more_than_its_3n_plus_1_mechanisms(monkeypatch: pytest.MonkeyPatch, eps0: float) -> None:
    """Every mechanism a run executes, counted where it draws (the two counts, the choosing mechanism,
    RecConcave's exponential mechanisms and A_dist's), per call, on domains of 2^32 and 2^54 values
    and data that spikes, spreads and skews: at most 2 counts, one choosing, N exponential mechanisms
    and 2(N - 1) A_dist's a call (the 3N + 1 of M = c (3N + 1)), and the whole run within M; some
    call uses all 3N + 1 (so the counting sees them)."""
    import collections

    import pcqr.pipeline.mechanisms.rec_concave as rc
    import pcqr.pipeline.mechanisms.san_thresholds as st

    per_call: list[collections.Counter] = []

    def counted(module, name: str, kind: str) -> None:
        original = getattr(module, name)

        def wrapper(*args, **kwargs):
            per_call[-1][kind] += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapper)

    for module, name, kind in ((st, "noisy_count", "count"), (st, "choose_solution", "choosing"),
                               (rc, "exponential_choice", "em"), (rc, "propose_test_release", "adist")):
        counted(module, name, kind)
    start = st.sanitize_range

    def call(*args, **kwargs):
        per_call.append(collections.Counter())
        return start(*args, **kwargs)

    monkeypatch.setattr(st, "sanitize_range", call)
    rng = np.random.default_rng(4)
    for domain in (Domain(0, 2**32 - 1), Domain(-(2**53 - 1), 2**53 - 1)):
        depth = recursion_depth(log_top(domain.size))
        fullest = 0
        for shape in ("spike", "spread", "skew"):
            rows = 3000
            if shape == "spike":
                x = np.where(rng.random(rows) < 0.5, 7, rng.integers(0, 2**20, rows))
            elif shape == "spread":
                x = rng.integers(domain.lo // 2, domain.hi // 2, rows)
            else:
                x = np.floor(np.exp(rng.normal(3, 4, rows))).clip(0, domain.hi).astype(np.int64)
            values, counts = np.unique(x.astype(np.int64), return_counts=True)
            params = tiny_parameters(eps0, rows, 0.2, call_bound(0.2), domain)
            for seed in range(3):
                per_call.clear()
                san_thresholds(values, counts, params, SeededNoise(seed))
                assert len(per_call) <= params.calls
                for c in per_call:
                    assert c["count"] <= 2 and c["choosing"] <= 1 and c["em"] <= depth
                    assert c["adist"] <= 2 * (depth - 1) and sum(c.values()) <= 3 * depth + 1
                    fullest = max(fullest, sum(c.values()))
                assert sum(sum(c.values()) for c in per_call) <= params.mechanisms
        assert fullest == 3 * depth + 1


def _largest_error(released: list[tuple[int, float]], values: np.ndarray, counts: np.ndarray) -> float:
    """max over every integer cut j of |the rows below j / m - the weights below j|: both sides are
    step functions changing only at the values and the released points, so those cuts (+1) suffice."""
    points = np.array(sorted(b for b, _ in released), dtype=np.int64)
    weights = np.array([w for _, w in sorted(released)])
    cuts = np.unique(np.concatenate([values, values + 1, points, points + 1]))
    truth = np.concatenate([[0], np.cumsum(counts)])[np.searchsorted(values, cuts)] / counts.sum()
    answer = np.concatenate([[0.0], np.cumsum(weights)])[np.searchsorted(points, cuts)]
    return float(np.abs(truth - answer).max())


def test_every_threshold_query_within_alpha() -> None:
    """2 x 10^7 rows over [0, 2^32) (certified: the least m is 4.5 x 10^6 at eps 1, alpha 0.5), half
    spread uniformly, 30% on one value, 20% near the middle: every threshold query within alpha in
    each of 5 runs (Lemma 4.12 promises 1 - 3 c beta only at the paper's far larger m; measured
    errors are about alpha/5)."""
    rng = np.random.default_rng(4)
    m = 2 * 10**7
    spread = rng.integers(0, 2**32, 20_000)
    values, inverse = np.unique(np.concatenate([spread, [123_456_789], 2**31 + rng.integers(-5000, 5000, 2000)]),
                                return_inverse=True)
    weights = np.concatenate([np.full(20_000, 0.5 / 20_000), [0.3], np.full(2000, 0.2 / 2000)])
    counts = np.bincount(inverse, weights=weights * m).round().astype(np.int64)
    values, counts = values[counts > 0], counts[counts > 0]
    params = SanThresholdsParameters.create(1.0, 1e-6, 0.5, 0.05, int(counts.sum()), Domain(0, 2**32 - 1))
    errors = [_largest_error(san_thresholds(values, counts, params, SecureNoise()), values, counts) for _ in range(5)]
    assert max(errors) <= 0.5, errors


def test_ceiling_counts_keep_every_threshold_answer() -> None:
    """Rows at ceil(x) clipped to [lo, hi]: for every integer theta in [lo, hi - 1], the rows x <= theta
    (pcqr's 'threshold=theta,direction=down') are the same before and after (fractions, rows beyond
    both ends); for integer rows that is also the paper's x < theta + 1."""
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.uniform(-20, 60, 500), rng.integers(-30, 70, 500).astype(float)])
    values, counts = ceiling_counts(x[:, None], Domain(0, 40))
    assert values[0] >= 0 and values[-1] <= 40 and counts.sum() == x.size
    for theta in range(0, 40):
        assert counts[values <= theta].sum() == (x <= theta).sum()


def test_pcqr_plan_reports_san_thresholds(capsys) -> None:
    """pcqr plan --without-public-data: SanThresholds' c, M, eps0 and least certified m over the
    --domain (create accepts it, m - 1 is refused), the paper's m as stated far above it; an alpha
    beyond the exact composition is reported as none with the smallest alpha, not crashed on."""
    import json

    from pcqr.jobs.cli import main
    from pcqr.pipeline.mechanisms.san_thresholds import paper_rows

    domain = Domain(-(2**53 - 1), 2**53 - 1)
    assert main(["plan", "--without-public-data", "--epsilon", "1", "--alpha", "0.5", "--domain",
                 domain.describe(), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["algorithms"]["san_thresholds"]
    assert plan["calls"]["value"] == 154 and plan["mechanisms"]["value"] == 154 * 7
    certified = plan["rows_certified"]["value"]
    SanThresholdsParameters.create(1.0, 1e-6, 0.5, 0.05, certified, domain)
    with pytest.raises(PcqrError):
        SanThresholdsParameters.create(1.0, 1e-6, 0.5, 0.05, certified - 1, domain)
    assert plan["paper_rows"]["value"] == paper_rows(1.0, 1e-6, 0.5, 0.05, domain) > 100 * certified
    assert main(["plan", "--without-public-data", "--epsilon", "1", "--alpha", "0.15", "--json"]) == 0
    small = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["algorithms"]["san_thresholds"]
    assert str(small["rows_certified"]["value"]).startswith("none (--alpha 0.15") and "at least 0.154" in str(small)
