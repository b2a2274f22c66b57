"""What a run may ask of the machine: the range of every numeric parameter and the bounds on the
sizes derived from them, in one place (issue 11, "bounded work").

Every parameter of ``train``, ``answer``, ``learn``, ``release`` and ``plan`` is checked against
these before anything is charged or read (:mod:`pcqr.pipeline.privacy.subsamp`, :mod:`pcqr.pipeline.privacy.planner`, the
mechanisms' parameter classes, :func:`pcqr.pipeline.hypotheses.check_enumerable`). A value outside its
range, or a parameter set whose derived structure would exceed its bound, is refused in one line
naming the option, the limit and, where one exists, the largest (or smallest) value that fits.

The bounds and why:

* one structure the driver builds up front stays below :data:`MEMORY_BOUND` (1 GiB) and takes
  a few seconds at most to build;
* counts that enter float formulas stay exact floats (below 2^53);
* probabilities stay normal floats with room to spare (above 1e-300), and e^eps stays finite.
"""
from __future__ import annotations

import math
from typing import Callable

from pcqr.pipeline.options import MAX_CLASSES
from pcqr.pipeline.spelling import spelled, spelled_with

#: Memory one up-front structure of the driver may take (bytes).
MEMORY_BOUND = 1 << 30

#: --epsilon: e^eps enters the sampler terms ((1 + e^eps) m 3e-39, (1 + e^eps) TV(n)) and must be
#: a finite float (e^709.8 overflows). Far above any meaningful privacy parameter.
MAX_EPSILON = 700.0

#: --delta, --beta, --alpha: at least this. 2/delta must be a finite float, and the delta terms,
#: divided by factors up to ~1e4 (Algorithm 3's delta_hat), must stay normal floats (2.2e-308).
MIN_PROBABILITY = 1e-300

#: --epsilon of the exponential mechanism (pcqr learn): a shard keeps the levels within 311/eps
#: mistakes of its best, compared as int64 (pcqr.pipeline.mechanisms.exponential).
MIN_EM_EPSILON = 1e-15

#: --alpha of pcqr release: PMW runs at alpha/2 and makes c = 4 ln|X~| / (alpha/2)^2 updates at
#: most, which must be a float ((alpha/2)^2 >= 1e-300). (--beta: beta/2 >= MIN_PROBABILITY.)
MIN_PMW_ALPHA = 2e-150

#: --queries-max (m), and counts such as --vc, --features, --rows-per-model: they enter float
#: formulas (log(4 m T / delta), m alpha, the sampler term), so they must be exact floats.
MAX_COUNT = 2**53

#: --cutoff (T): the T thresholds are drawn by OpenDP when the session is created (about 10 us
#: each: 10 s at 10^6) and kept in the private state (thresholds.npy, 8 bytes each: 8 MB).
MAX_CUTOFF = 10**6

#: Entries of the coordinator's DiscreteLaplaceTail table (scale 4 lambda, pcqr.pipeline.privacy.noise), built
#: in full at construction: about 480 ns and 105 bytes per entry while building (the Python
#: integers of its 256-bit recurrence), 16 bytes kept. 2^23 entries: about 4 s and 0.9 GiB to
#: build, 134 MB kept; that is lambda up to about 23,000.
MAX_TAIL_ENTRIES = 1 << 23

#: --batch-size: one batch is read by a worker, voted on, and held by the driver's coordinator with
#: its votes, row keys and log columns (about 8 bytes per feature plus ~40 per query): 10^7 queries of
#: a few features stay well under MEMORY_BOUND per batch, and one log file per batch stays readable.
MAX_BATCH_SIZE = 10**7

#: --subsamples (k): the driver holds the k models (a stump about 0.8 kB, a small scikit-learn
#: model about 1.4 kB) and one window of k + 1 tail entries per instance: about 1 GiB at 10^6.
MAX_SUBSAMPLES = 10**6

#: The realizable split's counts table: one int64 per (part of 500,000 rows, subsample), drawn part
#: by part in the driver (pcqr.pipeline.models.subsample.assignment_counts).
MAX_SPLIT_CELLS = MEMORY_BOUND // 8

#: --threshold (w): the coordinator computes floor(2w + Z2) + 1 in floats and int64. Far beyond any
#: useful w: the tail table spans fewer than 2^24 entries and k is at most 10^6, so every query
#: would abstain.
MAX_THRESHOLD = 2.0**40

#: Dichotomies of a hypothesis class on a sample (the exponential mechanism scores every one, in
#: shards of 2^20: at about 10^8 candidates per second per core, 2^36 is ten minutes).
MAX_DICHOTOMIES = 1 << 36

#: Elementary steps of enumerating them (e.g. halfspaces: m^3 on m points; rectangles: u^4).
MAX_ENUMERATION_STEPS = 1 << 40


def count_range(option: str, value: int, lowest: int = 1, highest: int = MAX_COUNT, why: str = "") -> None:
    """Refuse an integer option outside [lowest, highest], one line naming it and the range."""
    from pcqr.pipeline.errors import PcqrError

    if not lowest <= value <= highest:
        reason = f" ({why})" if why else ""
        raise PcqrError(f"{spelled(option)} must be between {lowest:,} and {highest:,}{reason}, got {value:,}")


def largest_fitting(fits: Callable[[int], bool], lowest: int, highest: int) -> int | None:
    """The largest n in [lowest, highest] with fits(n), for a predicate True up to some n and False
    after it (bisection: O(log(highest - lowest)) calls); None if fits(lowest) is False."""
    if not fits(lowest):
        return None
    lo, hi = lowest, highest + 1  # fits(lo) is True; hi is beyond the range (or fails)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def show_count(value: int | float) -> int | float | str:
    """A count as reported: exact up to 2^53, else via :func:`show_big` (a float, "1.23e+456", "inf")."""
    return value if value <= 2**53 else show_big(math.log(value))


def show_big(log_value: float) -> float | str:
    """A positive number given by its natural logarithm: the float itself when it is one (below
    1e300), else its decimal notation computed via log10 (e.g. "1.23e+456", "inf" if unbounded)."""
    if math.isnan(log_value):
        raise ValueError("the logarithm of a size must be a number")
    if log_value < 690.0:  # e^690 = 1e299.7: a float with room to spare
        return math.exp(log_value)
    if math.isinf(log_value):
        return "inf"
    exponent10 = log_value / math.log(10)
    whole = math.floor(exponent10)
    mantissa = 10 ** (exponent10 - whole)
    if mantissa >= 9.995:  # rounding to 3 digits would print 10.00
        mantissa, whole = 1.0, whole + 1
    return f"{mantissa:.3g}e+{whole}"


# --- A_SubSamp's session: the coordinator's table (lambda), the T thresholds, k, w -------------

#: pcqr plan reports Algorithm 5's values beyond the limits above (nothing is built), but the
#: stability term is computed in 80-digit decimals: q = e^(-1/(4 lambda)) must stay far from 1.
MAX_REPORTED_LAMBDA = 1e9


def paper_lambda(epsilon: float, delta: float, cutoff: int) -> float:
    """Algorithm 5's lambda = sqrt(32 T log(2/delta)) / eps."""
    return math.sqrt(32 * cutoff * math.log(2 / delta)) / epsilon


def tail_entries(lam: float) -> int:
    """Entries of the coordinator's tail table at lambda (its query noise has scale 4 lambda)."""
    from pcqr.pipeline.privacy.tail_window import tail_span

    return tail_span(4 * lam) + 2


def largest_lambda() -> float:
    """The largest lambda whose tail table fits MAX_TAIL_ENTRIES (to a relative 1e-9)."""
    lam = (MAX_TAIL_ENTRIES - 3) / (4 * 130 * math.log(2))
    while tail_entries(lam) > MAX_TAIL_ENTRIES:
        lam *= 1 - 1e-9
    return lam


def lambda_problem(lam: float) -> str | None:
    """Why the coordinator cannot be built at ``lam`` (one clause), or None when it can."""
    if not lam > 0:
        return f"lambda = {lam:.4g} is not a positive number"
    if lam > largest_lambda():
        entries = f"{tail_entries(lam):,}" if lam <= MAX_REPORTED_LAMBDA else f"about {360.4 * lam:.3g}"
        return (f"lambda = {lam:.4g} needs a noise table of {entries} entries, above the limit of "
                f"{MAX_TAIL_ENTRIES:,} (about 1 GiB and 4 s to build; pcqr.pipeline.privacy.limits.MAX_TAIL_ENTRIES)")
    return None


def subsamp_limit_problem(lam: float, cutoff: int, threshold: float, signed: bool = False) -> str | None:
    """Why a session with these (lambda, T, w) cannot run (one clause naming the limit), or None.
    ``signed``: w may be negative (the guess gate), down to -MAX_THRESHOLD."""
    if not 1 <= cutoff <= MAX_CUTOFF:
        return f"cutoff T = {cutoff:,} is outside [1, {MAX_CUTOFF:,}] (pcqr.pipeline.privacy.limits.MAX_CUTOFF)"
    lowest = -MAX_THRESHOLD if signed else 0.0
    if not (math.isfinite(threshold) and lowest <= threshold <= MAX_THRESHOLD):
        return (f"threshold w = {threshold} is outside [{lowest:g}, {MAX_THRESHOLD:g}] "
                "(pcqr.pipeline.privacy.limits.MAX_THRESHOLD)")
    return lambda_problem(lam)


def check_overrides(subsamples: int | None, threshold: float | None, enforce_limits: bool = True) -> None:
    """--subsamples in [1, MAX_SUBSAMPLES] and --threshold in [0, MAX_THRESHOLD], when given."""
    from pcqr.pipeline.errors import PcqrError

    if subsamples is not None:
        count_range("--subsamples (k)", subsamples, 1, MAX_SUBSAMPLES if enforce_limits else MAX_COUNT,
                    "the driver holds every model" if enforce_limits else "an exact float")
    if threshold is not None and not (math.isfinite(threshold) and 0 <= threshold <= MAX_THRESHOLD):
        raise PcqrError(f"--threshold must be a number in [0, {MAX_THRESHOLD:g}] (beyond it every query "
                        f"abstains), got {threshold}")


def check_subsamp_options(epsilon: float, delta: float, cutoff: int, subsamples: int | None,
                          threshold: float | None, enforce_limits: bool = True) -> None:
    """Refuse (one line naming the option, the limit and what fits) a --cutoff, --subsamples,
    --threshold or an (eps, T, delta) whose lambda the machine cannot hold. Without
    ``enforce_limits`` (pcqr plan's report of the paper's values): only what the arithmetic needs."""
    from pcqr.pipeline.errors import PcqrError

    exact = "an exact float"
    count_range("--cutoff (T)", cutoff, 1, MAX_CUTOFF if enforce_limits else MAX_COUNT,
                "the T thresholds are drawn when the session starts: about 10 s and 8 MB at the limit"
                if enforce_limits else exact)
    check_overrides(subsamples, threshold, enforce_limits)
    lam = paper_lambda(epsilon, delta, cutoff)
    where = (f"{spelled_with('--epsilon', f'{epsilon:g}')} with {spelled_with('--cutoff', cutoff)} and "
             f"{spelled_with('--delta', f'{delta:g}')}")
    if enforce_limits:
        problem = lambda_problem(lam)
        if problem is not None:
            raise PcqrError(f"{where}: {problem}; {fitting_epsilon_or_cutoff(epsilon, delta, cutoff)}")
    elif not (math.isfinite(lam) and lam <= MAX_REPORTED_LAMBDA):
        raise PcqrError(f"{where}: lambda = {lam:.4g} is above {MAX_REPORTED_LAMBDA:g}, where the stability "
                        "term's 80-digit arithmetic is no longer proven")


def fitting_epsilon_or_cutoff(epsilon: float, delta: float, cutoff: int) -> str:
    """The smallest eps (at this T) and the largest T (at this eps) whose lambda fits the table."""
    top = largest_lambda()
    exact = paper_lambda(1.0, delta, cutoff) / top
    step = 10.0 ** (math.floor(math.log10(exact)) - 2)  # 3 significant digits, rounded up
    smallest = math.ceil(exact / step) * step
    while paper_lambda(smallest, delta, cutoff) > top:
        smallest += step
    advice = f"the smallest {spelled('--epsilon')} that fits is {smallest:g}"
    most = min(MAX_CUTOFF, math.floor((top * epsilon) ** 2 / (32 * math.log(2 / delta))))
    while most >= 1 and paper_lambda(epsilon, delta, most) > top:
        most -= 1
    if most >= 1:
        advice += f" (or {spelled('--cutoff')} at most {most:,})"
    return advice


def check_training_size(subsamples: int, parts: int, source: str) -> None:
    """Refuse, before any charge, k models the driver cannot hold or a split whose counts table
    (``parts`` x k int64s, pcqr.pipeline.models.subsample.assignment_counts) exceeds MAX_SPLIT_CELLS; one line
    with the largest --subsamples that fits. ``source`` says where k came from."""
    from pcqr.pipeline.errors import PcqrError

    if subsamples > MAX_SUBSAMPLES:
        raise PcqrError(f"{source} k = {subsamples:,} models is above the limit of {MAX_SUBSAMPLES:,} (the driver "
                        f"holds every model; pcqr.pipeline.privacy.limits.MAX_SUBSAMPLES): pass --subsamples at most {MAX_SUBSAMPLES:,}")
    if parts * subsamples > MAX_SPLIT_CELLS:
        raise PcqrError(f"{source} k = {subsamples:,} models over {parts:,} parts of the private data: the split's "
                        f"counts table ({parts:,} x {subsamples:,} int64s) is above the limit of {MAX_SPLIT_CELLS:,} "
                        f"cells (1 GiB; pcqr.pipeline.privacy.limits.MAX_SPLIT_CELLS); the largest --subsamples that fits is "
                        f"{MAX_SPLIT_CELLS // parts:,}")


def gnmax_limit_problem(sigma: float, cutoff: int, queries_max: int, threshold: float) -> str | None:
    """Why a gnmax session cannot run (one clause naming the limit), or None: its Gaussian table
    (scale sigma / sqrt(2), pcqr.pipeline.privacy.noise.DiscreteGaussianTail) within MAX_TAIL_ENTRIES, and
    the fields it does not use as the gate sets them (T = m, w = 0; an edited state otherwise)."""
    from pcqr.pipeline.privacy.gnmax import count_sigma
    from pcqr.pipeline.privacy.tail_window import gaussian_tail_span

    if cutoff != queries_max or threshold != 0:
        return f"gnmax gate has T = {cutoff:,} and w = {threshold:g}; it needs T = m = {queries_max:,} and w = 0"
    if not (math.isfinite(sigma) and sigma > 0):
        return f"sigma = {sigma:.4g} is not a positive number"
    entries = gaussian_tail_span(count_sigma(sigma)) + 2 if sigma < 1e12 else math.inf
    if entries > MAX_TAIL_ENTRIES:
        return (f"sigma = {sigma:.4g} needs a noise table of {entries:,} entries, above the limit of "
                f"{MAX_TAIL_ENTRIES:,} (pcqr.pipeline.privacy.limits.MAX_TAIL_ENTRIES)")
    return None


# --- a delta that means something (issue 47, item 7) ----------------------------------------------

#: A --classes name: at most this many characters (a name is public and printed in summaries).
MAX_CLASS_NAME = 64


def parse_classes(text: str) -> tuple[int, tuple[str, ...] | None]:
    """``--classes``: a count ("5": labels 0 .. 4) or names in class order ("low,mid,high": class i is
    the i-th name), as (c, names or None); PcqrError in one line otherwise (the names are public: they
    are echoed)."""
    from pcqr.pipeline.errors import PcqrError

    text = text.strip()
    if text.isdigit():
        check_classes(int(text))
        return int(text), None
    names = tuple(name.strip() for name in text.split(","))
    bad = next((n for n in names if not n or len(n) > MAX_CLASS_NAME or not n.isprintable()), None)
    if len(names) < 2 or bad is not None or len(set(names)) != len(names):
        why = (f"the name {bad!r} is empty, longer than {MAX_CLASS_NAME} characters or not printable"
               if bad is not None else "a name is given twice" if len(names) >= 2 else "give at least two names")
        raise PcqrError(f"{spelled_with('--classes', text[:80])}: expected a count (e.g. 5) or two or more distinct names "
                        f"separated by commas (e.g. low,mid,high); {why}")
    check_classes(len(names))
    return len(names), names


def check_classes(classes: object) -> None:
    """Refuse (one line) a class count (--classes) that is not a whole number in [2, MAX_CLASSES]
    (pcqr.pipeline.options.MAX_CLASSES, where the data layer reads it too)."""
    from pcqr.pipeline.errors import PcqrError

    if isinstance(classes, bool) or not isinstance(classes, int) or not 2 <= classes <= MAX_CLASSES:
        raise PcqrError(f"{spelled('--classes')} must be a whole number of classes in [2, {MAX_CLASSES}], "
                        f"got {classes!r}")


#: --delta at or above this is refused, wherever a delta is taken from a user (train, answer, learn,
#: release, sanitize, plan, the Python API): a mechanism that publishes each row with probability
#: delta is (0, delta)-DP, so such a guarantee allows publishing whole rows. (A budget's delta,
#: ``pcqr budget set``, is a cap on what jobs spend together, not a guarantee: not refused.) The
#: audit surface (pcqr.pipeline.audit) builds mechanisms at any delta in (0, 1), on purpose.
MAX_DELTA = 0.01


class LargeDeltaWarning(UserWarning):
    """delta is at or above 1/n, n the private rows: publishing one row drawn at random is
    (0, 1/n)-DP, so the guarantee allows a mechanism that publishes a whole row
    (:func:`delta_note`). The Python API issues it through :mod:`warnings`; the commands write it on
    stderr, once they have succeeded."""


def check_delta(delta: float, option: str = "--delta") -> None:
    """Refuse a delta in [MAX_DELTA, 1) in one line naming ``option``, before anything is read or
    charged. Values outside (0, 1), NaN included, are left to the range checks beside each mechanism
    (:func:`pcqr.pipeline.privacy.subsamp.check_fraction`), which name the range."""
    from pcqr.pipeline.errors import PcqrError
    from pcqr.pipeline.spelling import spelled_with

    if MAX_DELTA <= delta < 1:
        raise PcqrError(f"{spelled_with(option, f'{delta:g}')}: at or above {MAX_DELTA:g} an (eps, delta) "
                        "guarantee allows publishing whole rows (a mechanism that publishes each row with probability "
                        "delta is (0, delta)-DP); use a delta below 1/n, n the private rows (e.g. 1e-6 for fewer "
                        "than a million rows)")


def suggested_delta(rows: int) -> float:
    """The largest power of ten below 1/n (n = ``rows`` >= 1; at most 1e-3, below MAX_DELTA): 10^-d for
    an n of d digits (10^(d-1) <= n < 10^d, so 10^-d < 1/n <= 10^-(d-1))."""
    return 10.0 ** -max(len(str(max(rows, 1))), 3)


def delta_note(delta: float, rows: int, option: str = "--delta") -> str | None:
    """One line when ``delta`` is not below 1/n (n = ``rows``, public: replace-one neighbours), saying
    what such a delta allows and a delta to choose; None otherwise (or with no rows)."""
    from fractions import Fraction

    from pcqr.pipeline.spelling import spelled_with

    if rows < 1 or not math.isfinite(delta) or Fraction(delta) * rows < 1:  # exact: delta == 1/n is not below it
        return None
    where = "is above" if Fraction(delta) * rows > 1 else "equals"
    return (f"{spelled_with(option, f'{delta:g}')} {where} 1/n = 1/{rows:,} (n the private rows): an (eps, delta) "
            "guarantee with delta >= 1/n allows a mechanism that publishes one whole row (a row drawn at random: "
            f"(0, 1/n)-DP); choose a delta below 1/n (e.g. {suggested_delta(rows):.0e})")


def warn_large_delta(delta: float, rows: int, note: Callable[[str], None] | None) -> str | None:
    """Give :func:`delta_note`'s line, once: a :class:`LargeDeltaWarning` to a caller of the Python API
    (or without ``note``), else ``note("warning: ...")`` (a command's stderr). Returns the line (None:
    nothing said). Called when the job has succeeded, so a refusal stays one line."""
    import warnings

    from pcqr.pipeline.spelling import speaking_python

    line = delta_note(delta, rows)
    if line is None:
        return None
    if note is None or speaking_python():
        warnings.warn(line, LargeDeltaWarning, stacklevel=3)
    else:
        note(f"warning: {line}")
    return line
