"""RecConcave: private approximation of quasi-concave promise problems (Beimel-Nissim-Stemmer,
papers/002 section 3.3, Figure 5, Lemmas 3.12 and 3.14; ALGORITHMS.md section 8).

A promise problem over the solutions [0, T]: a quality Q(S, i) of sensitivity 1 (replace-one), a
promise r and an approximation alpha; when Q(S, .) is quasi-concave and some Q(S, p) >= r, a good
output is any k with Q(S, k) >= (1 - alpha) r. Privacy must hold whatever S is.

Works on intervals, never on the domain: Q is a :class:`StepQuality`, constant on consecutive
segments of [0, T] (a threshold's correct-count changes only at the sample's values), so T = 2^64
costs what the number of segments costs. The algorithm, one level (Fig. 5):

1. if T <= 32 or this is the last level allowed: the exponential mechanism on Q over [0, T];
2. T' = the least power of 2 >= T, Q(S, i) = min(0, Q(S, T)) for T < i <= T';
3. L(S, j) = max over windows of 2^j consecutive solutions of [0, T'] of the window's least Q
   (0 <= j <= log T'), L(S, log T' + 1) = min(0, L(S, log T'));
4. q(S, j) = floor(min(L(S, j) - (1 - alpha) r, r - L(S, j + 1))) (the floor is ours: it keeps q an
   integer of sensitivity 1, for the exact sampler and A_dist; the proof loses at most 1 per level);
5-6. k = RecConcave on [0, log T'] with q, promise R = alpha r / 2, approximation 1/4; K = 2^k;
7. the partitions A_i = [8K i, 8K (i + 1) - 1] and B_i = [8K i + 4K, 8K (i + 1) + 4K - 1] of [0, T]
   (trimmed at T: the padded solutions are not solutions);
8-9. A_dist (:mod:`pcqr.pipeline.mechanisms.adist`) once on the A's, once on the B's, with the
   quality u(S, I) = max of Q over I (sensitivity 1, Observation 3.11); a family of one interval
   is taken without A_dist (a public choice); a family of none gives nothing;
10. the exponential mechanism on Q over the union of the intervals released (bottom if none).

Privacy (Lemma 3.12 with KOV's composition, :class:`RecConcaveParameters`): the recursion depth N
is a public function of T (Observation 3.10: at most log* T); the run invokes at most M = 3N - 2
mechanisms, each eps0-DP (the exponential mechanisms, through pcqr's exact sampler: plus its
delta_EM) or (eps0, delta_adist) (the 2(N - 1) A_dist's). By Kairouz-Oh-Viswanath Theorem 3.5 they
compose to (eps, delta_pure + sum of their deltas): eps0 is the largest with delta_pure <= delta/2,
the A_dist's share the other half (minus a margin for the samplers' terms). A learner that runs
RecConcave several times on one database (the rectangle learner: 2d runs) certifies all the runs'
mechanisms together (``runs``). Every
quality in the run has sensitivity 1 because Q has (Observation 3.11: max and min of sensitivity-1
functions, minus constants, floored).

Utility (Lemma 3.14, reported, not enforced): with max Q >= r >= 8^N 4/(alpha eps0) (log2(32 /
(beta delta_adist)) + log^(N) T), the output has Q >= (1 - alpha) r except with probability 2 beta N.
"""
from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass
from fractions import Fraction
from typing import Iterator, Sequence

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.mechanisms.adist import AdistParameters, propose_test_release
from pcqr.pipeline.mechanisms.exponential import MAX_CANDIDATES, choose
from pcqr.pipeline.privacy.em_sampler import sampler_delta
from pcqr.pipeline.privacy.composition import EXACT_MAX_COUNT, largest_eps0
from pcqr.pipeline.privacy.noise import NoiseSource
from pcqr.pipeline.privacy.subsamp import check_epsilon_delta, delta_certificate, round_up

#: Fig. 5 step 1: at most this many solutions are chosen by the exponential mechanism directly.
BASE_RANGE = 32
#: A_dist's share of delta is scaled by this, leaving room for the samplers' delta_EM terms.
ADIST_MARGIN = 1 - 2**-20


@dataclass(frozen=True)
class StepQuality:
    """An integer quality over the solutions [0, last], constant on segments: ``starts[0] = 0``,
    strictly increasing, ``values[s]`` on [starts[s], starts[s + 1] - 1] (the last segment up to
    ``last``)."""

    last: int
    starts: tuple[int, ...]
    values: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.starts or self.starts[0] != 0 or len(self.starts) != len(self.values) or self.last < 0:
            raise ValueError("a step quality needs segments starting at 0, one value each, over [0, last]")
        if any(b <= a for a, b in zip(self.starts, self.starts[1:])) or self.starts[-1] > self.last:
            raise ValueError("segment starts must increase strictly and lie in [0, last]")

    @classmethod
    def of_points(cls, values: Sequence[int]) -> StepQuality:
        """One value per solution 0..len - 1 (equal neighbours merged)."""
        starts, kept = [0], [int(values[0])]
        for i, v in enumerate(values[1:], 1):
            if int(v) != kept[-1]:
                starts.append(i)
                kept.append(int(v))
        return cls(len(values) - 1, tuple(starts), tuple(kept))

    def segments(self, lo: int = 0, hi: int | None = None) -> Iterator[tuple[int, int, int]]:
        """(first, last, value) of each segment's part within [lo, hi]."""
        hi = self.last if hi is None else min(hi, self.last)
        s = max(0, bisect_right(self.starts, lo) - 1)
        while s < len(self.starts) and self.starts[s] <= hi:
            end = self.starts[s + 1] - 1 if s + 1 < len(self.starts) else self.last
            yield max(lo, self.starts[s]), min(hi, end), self.values[s]
            s += 1

    def at(self, i: int) -> int:
        return self.values[bisect_right(self.starts, i) - 1]

    def padded(self, last: int) -> StepQuality:
        """Fig. 5 step 2: extended to [0, last] with min(0, Q(T)) beyond T."""
        if last == self.last:
            return self
        fill = min(0, self.values[-1])
        if fill == self.values[-1]:
            return StepQuality(last, self.starts, self.values)
        return StepQuality(last, (*self.starts, self.last + 1), (*self.values, fill))


def window_max_min(quality: StepQuality, widths: Sequence[int]) -> list[int]:
    """L for each width w: the largest x such that some w consecutive solutions all have Q >= x
    (the max over windows of the window's min), by adding segments in decreasing value and
    tracking the longest run of added neighbours (union-find on segments: O(s log s))."""
    lengths = [hi - lo + 1 for lo, hi, _ in quality.segments()]
    values = list(quality.values)
    parent = list(range(len(values)))
    run = lengths[:]
    added = [False] * len(values)

    def root(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    order = sorted(range(len(values)), key=lambda s: -values[s])
    pending = sorted(set(widths))
    result: dict[int, int] = {}
    longest, i = 0, 0
    while i < len(order) and pending:
        level = values[order[i]]
        while i < len(order) and values[order[i]] == level:  # every segment at this value, then the runs
            s = order[i]
            added[s] = True
            for t in (s - 1, s + 1):
                if 0 <= t < len(values) and added[t]:
                    a, b = root(s), root(t)
                    if a != b:
                        parent[b] = a
                        run[a] += run[b]
            longest = max(longest, run[root(s)])
            i += 1
        while pending and pending[0] <= longest:
            result[pending.pop(0)] = level
    if pending:
        raise ValueError(f"window widths {pending} exceed the range's {quality.last + 1} solutions")
    return [result[w] for w in widths]


def recursion_depth(last: int) -> int:
    """N: the levels Fig. 5 runs on [0, last] (Observation 3.10: at most log* T)."""
    depth = 1
    while last > BASE_RANGE:
        last = _log2_ceil_power(last)
        depth += 1
    return depth


def _log2_ceil_power(last: int) -> int:
    """log2 T' for T' the least power of 2 >= T (T >= 1)."""
    return max(0, (last - 1).bit_length())


@dataclass(frozen=True)
class RecConcaveParameters:
    """The request, the range, its depth N, eps0 of each mechanism, A_dist's parameters and the
    database size (public) for the samplers' terms."""

    epsilon: float
    delta: float
    last: int
    depth: int
    eps0: float
    adist: AdistParameters | None
    rows: int
    runs: int = 1

    @classmethod
    def create(cls, epsilon: float, delta: float, last: int, rows: int, runs: int = 1) -> RecConcaveParameters:
        """Split (eps, delta) over the mechanisms of ``runs`` runs on the same database (module
        docstring: one run unless a learner composes several, e.g. the rectangle learner's 2d);
        refused in one line when the range is beyond the exact sampler or the split cannot be
        certified."""
        check_epsilon_delta(epsilon, delta)
        if not (isinstance(last, int) and 1 <= last < MAX_CANDIDATES):
            raise PcqrError(f"RecConcave's range [0, T] needs 1 <= T < 2^64, got T = {last!r}")
        if not (isinstance(rows, int) and rows >= 1):
            raise PcqrError(f"RecConcave needs at least one row, got {rows!r}")
        if not (isinstance(runs, int) and runs >= 1):
            raise PcqrError(f"RecConcave needs at least one run, got {runs!r}")
        depth = recursion_depth(last)
        mechanisms = runs * (3 * depth - 2)
        if mechanisms > EXACT_MAX_COUNT:
            raise PcqrError(f"{runs} runs of RecConcave at depth {depth} are {mechanisms:,} mechanisms; their optimal "
                            f"composition is certified for at most {EXACT_MAX_COUNT:,}")
        eps0 = largest_eps0(mechanisms, epsilon, delta / 2)
        adists = 2 * runs * (depth - 1)
        adist = None if depth == 1 else AdistParameters.create(eps0, delta / (2 * adists) * ADIST_MARGIN)
        params = cls(epsilon, delta, last, depth, eps0, adist, rows, runs)
        proven = params.certificate()["proven_delta"]
        if proven > delta:  # cannot happen with the split above; the last word
            raise PcqrError(f"RecConcave at eps {epsilon:g}, delta {delta:g}: proves only delta {proven:.3g}")
        return params

    @classmethod
    def within(cls, eps0: float, adist_delta: float, last: int, rows: int) -> RecConcaveParameters:
        """One run's parameters inside a larger composition that the caller certifies (SanThresholds
        runs RecConcave once per call): every mechanism at ``eps0``, each A_dist at ``adist_delta``.
        :meth:`certificate` then means nothing alone; the caller composes :attr:`mechanisms` and
        adds :meth:`delta_terms`."""
        if not (isinstance(last, int) and 1 <= last < MAX_CANDIDATES):
            raise PcqrError(f"RecConcave's range [0, T] needs 1 <= T < 2^64, got T = {last!r}")
        depth = recursion_depth(last)
        adist = None if depth == 1 else AdistParameters.create(eps0, adist_delta)
        return cls(eps0, adist_delta, last, depth, eps0, adist, rows)

    @property
    def mechanisms(self) -> int:
        """M = runs (3N - 2): per run an exponential mechanism per level, two A_dist's per level but
        the last."""
        return self.runs * (3 * self.depth - 2)

    def sampler_rows(self) -> int:
        """A bound on the quality levels besides the best that any one exponential mechanism of the
        run sees (the sampler's TV(rows), :func:`pcqr.pipeline.privacy.em_sampler.total_variation`):
        the caller's contract is that the top level's Q takes at most rows + 1 distinct values (a
        count of rows does, and so does the rectangle learner's min(C, 2t - C) with C a count), and
        every lower level has at most log2 T' + 1 <= 65 solutions, so at most 64 levels besides the best."""
        return max(self.rows, 65)

    def certificate(self) -> dict[str, float]:
        """KOV's composition: delta_composition (the pure part at eps), delta_stability (the A_dist's
        tails), delta_sampler (the exponential mechanisms'), proven_delta, rounded up."""
        from pcqr.pipeline.privacy.composition import optimal_delta

        return delta_certificate(self.epsilon, {
            "composition": optimal_delta(self.eps0, self.mechanisms, self.epsilon), **self.delta_terms()})

    def delta_terms(self) -> dict[str, float]:
        """The runs' delta besides the pure composition, rounded up: "stability" (the 2 runs (N - 1)
        A_dist's tails) and "sampler" (the runs N exponential mechanisms' delta_EM)."""
        adists = 2 * self.runs * (self.depth - 1)
        tail = self.adist.certificate()["proven_delta"] if self.adist is not None else 0.0
        return {"stability": round_up(adists * tail),
                "sampler": round_up(self.runs * self.depth * sampler_delta(self.eps0, self.sampler_rows()))}

    def promise_needed(self, alpha: float, beta: float) -> float:
        """Lemma 3.14's r >= 8^N 4/(alpha eps0) (log2(32/(beta delta_adist)) + log^(N) T)."""
        delta_adist = self.adist.delta if self.adist is not None else self.delta
        iterated = float(self.last)
        for _ in range(self.depth):
            iterated = float(math.ceil(math.log2(max(iterated, 2.0))))
        return 8.0**self.depth * 4 / (alpha * self.eps0) * (math.log2(32 / (beta * delta_adist)) + iterated)


def exponential_choice(quality: StepQuality, ranges: Sequence[tuple[int, int]], epsilon: float,
                       noise: NoiseSource) -> int:
    """The exponential mechanism (weights e^(eps Q / 2), Q of sensitivity 1) over the solutions in
    the disjoint ``ranges`` (sorted), through pcqr's exact sampler: levels of max Q - Q, counted per
    segment; the rank within the level mapped back to a solution in increasing order."""
    parts = [(lo, hi, v) for a, b in ranges for lo, hi, v in quality.segments(a, b)]
    best = max(v for _, _, v in parts)
    levels: dict[int, int] = {}
    for lo, hi, v in parts:
        levels[best - v] = levels.get(best - v, 0) + hi - lo + 1
    choice = choose([levels], epsilon, noise)
    rank = choice.rank
    for lo, hi, v in parts:
        if best - v == choice.mistakes:
            if rank <= hi - lo:
                return lo + rank
            rank -= hi - lo + 1
    raise AssertionError("unreachable: the ranks of a level cover its segments")


def interval_best_two(quality: StepQuality, offset: int, width: int) -> tuple[list[tuple[int, int]], int, int]:
    """For the partition of [0, last] into [offset + width i, offset + width (i + 1) - 1] (the first
    may start at ``offset`` > 0; trimmed at ``last``): (the intervals as (first, last) of the best
    and nothing else needed, the best's index, its u minus the second best's), u(I) = max Q over I;
    ties to the smallest index. Works on segments: O(segments), whatever the number of intervals."""
    def index(i: int) -> int:
        return (i - offset) // width

    def bounds(k: int) -> tuple[int, int]:
        return offset + width * k, min(quality.last, offset + width * (k + 1) - 1)

    parts = list(quality.segments(offset))
    top = max(v for _, _, v in parts)
    best = min(index(lo) for lo, _, v in parts if v == top)
    second = max((v for lo, hi, v in parts if not (index(lo) == best == index(hi))), default=None)
    count = index(quality.last) + 1
    return [bounds(best)], best, (top - second) if second is not None and count > 1 else -1


def inner_quality(quality: StepQuality, promise: Fraction, alpha: Fraction) -> StepQuality:
    """Fig. 5 steps 2-4: q over [0, log2 T'], q(j) = floor(min(L(j) - (1 - alpha) r, r - L(j + 1))),
    L the window max-min of Q padded to T' (sensitivity 1 when Q has: Observation 3.11)."""
    log_top = _log2_ceil_power(quality.last)
    padded = quality.padded(1 << log_top)
    lows = window_max_min(padded, [1 << j for j in range(log_top + 1)])
    lows.append(min(0, lows[-1]))
    low_cut = (1 - alpha) * promise
    return StepQuality.of_points([math.floor(min(lows[j] - low_cut, promise - lows[j + 1]))
                                  for j in range(log_top + 1)])


def rec_concave(quality: StepQuality, promise: Fraction, alpha: Fraction, params: RecConcaveParameters,
                noise: NoiseSource, depth: int | None = None) -> int | None:
    """Fig. 5 on [0, quality.last]: a solution, or None when both A_dist tests of step 9 refuse."""
    depth = params.depth if depth is None else depth
    last = quality.last
    if last <= BASE_RANGE or depth == 1:
        return exponential_choice(quality, [(0, last)], params.eps0, noise)
    k = rec_concave(inner_quality(quality, promise, alpha), alpha * promise / 2, Fraction(1, 4), params, noise,
                    depth - 1)
    if k is None:
        return None
    width = 8 << k
    released: list[tuple[int, int]] = []
    for offset in (0, width // 2):
        if offset > last:
            continue
        chosen, best, gap = interval_best_two(quality, offset, width)
        if gap < 0:  # one interval: a public choice, nothing to test
            released.extend(chosen)
        elif params.adist is not None and propose_test_release(best, gap, params.adist, noise) is not None:
            released.extend(chosen)
    if not released:
        return None
    return exponential_choice(quality, _union(released), params.eps0, noise)


def _union(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Disjoint sorted ranges covering the given ones (an A and a B overlap)."""
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged
