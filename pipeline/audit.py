"""The audit surface: run pcqr's real mechanisms on inputs an outside auditor chooses.

An empirical privacy audit (neighbouring inputs, many independent runs, a lower bound on
epsilon from the observed output frequencies) must exercise the code that releases answers,
not a re-implementation of it. This module is the public way in, with no Dask and no private
names (issue 10, Deliver 9; documented in docs/privacy.md, "Audit surface"):

* :func:`subsamp_parameters` -- A_SubSamp's parameters, certified exactly as the CLI does
  (:meth:`pcqr.pipeline.privacy.subsamp.SubSampParameters.create`: the CLI's default profile,
  'tight', unless ``profile='paper'``; a setting pcqr would refuse is refused).
* :func:`run_sparse_vector` -- the sparse-vector coordinator (A_SubSamp with A_stab) on given
  vote counts, in many independent sessions, each with fresh secure noise
  (:meth:`pcqr.pipeline.gates.sparse_vector.SparseVector.create` and ``.process``).
* :func:`run_guess_gate` -- the public-guess gate (``--gate guess``) on given vote counts and
  fixed public guesses, likewise (``.process_guess``): codes ANSWERED_0 / ANSWERED_1 / REFUSED.
* :func:`run_gnmax` -- the Gaussian noisy argmax (``--gate gnmax``) on given vote counts, likewise
  (:class:`pcqr.pipeline.gates.noisy_argmax.NoisyArgmax`): codes ANSWERED_0 / ANSWERED_1 / REFUSED.
* :func:`exponential_selection` -- independent draws of the exponential mechanism
  (:mod:`pcqr.pipeline.mechanisms.exponential`: the histogram, the level-then-rank draw and the
  pick, as A_Relabel and A_SSPP run them) on given scores.
* :func:`learn_without_public_data_runs` -- independent runs of Beimel-Nissim-Stemmer's learners
  (``point``, ``learn-thresholds``, ``rectangle``, ``label-private``) on given rows, through the
  workers' counting (or enumeration and scoring) code and the parameters the CLI certifies: the
  released hypotheses' parameters.
* :func:`san_points_runs` -- independent runs of SanPoints on given values: the released tables.
* :func:`san_thresholds_runs` -- independent runs of SanThresholds on given values: the released tables.

Noise comes from :class:`pcqr.pipeline.privacy.noise.SecureNoise` unless the caller passes a source
(a seeded one makes runs reproducible and is, as everywhere, not private).

Answer codes of :func:`run_sparse_vector` (int8):

    0  ANSWERED_0  the query was answered, label 0
    1  ANSWERED_1  the query was answered, label 1
    2  ABSTAINED   the coordinator answered bottom (the count c of bottoms grew by one)
    3  REFUSED     the session had halted (c reached T) or had seen m queries

Over c > 2 classes (issue 49: ``subsamp_parameters(..., classes=c)``, gates 'gnmax' and 'stability'),
the queries are given as an (q, c) array of class counts and the codes are the class index j for
an answer j, c for an abstention and c + 1 for a refusal (the table above at c = 2).

Example
-------
>>> import numpy as np
>>> from pcqr.pipeline import audit
>>> p = audit.subsamp_parameters(100.0, 1e-3, cutoff=20, queries_max=10, subsamples=50)
>>> p.profile, p.gate
('tight', 'stability')
>>> codes = audit.run_sparse_vector(np.array([25, 26]), 50, p, sessions=1000)  # gap 0 vs gap 2
>>> codes.shape
(1000, 2)
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.mechanisms.exponential import MAX_CANDIDATES, choose, histogram, pick_in_shard
from pcqr.pipeline.mechanisms.integer_domain import Domain
from pcqr.pipeline.privacy.noise import NoiseSource, SecureNoise
from pcqr.pipeline.privacy.subsamp import SubSampParameters
from pcqr.pipeline.gates.sparse_vector import SparseVector
from pcqr.pipeline.public_log.batches import ABSTAINED as _ABSTAINED
from pcqr.pipeline.public_log.batches import ANSWERED as _ANSWERED

ANSWERED_0, ANSWERED_1, ABSTAINED, REFUSED = 0, 1, 2, 3
CODE_NAMES = ("answered 0", "answered 1", "abstained", "refused")
_INTEGER_SCORE = 1e-9  # how far score / sensitivity may be from an integer (floating-point representation)


def subsamp_parameters(
    epsilon: float,
    delta: float,
    cutoff: int,
    queries_max: int,
    subsamples: int,
    threshold: float | None = None,
    beta: float = 0.05,
    profile: str = "tight",
    gate: str = "stability",
    classes: int = 2,
) -> SubSampParameters:
    """A_SubSamp's parameters through the CLI's certification.

    Parameters
    ----------
    epsilon, delta : the requested guarantee.
    cutoff : T, the number of bottoms after which a session halts.
    queries_max : m, the number of queries a session may test.
    subsamples : k, the number of models (accuracy only).
    threshold : w in distance units; None for the smallest certifiable one (as the CLI).
    beta : enters only the paper's k, which ``subsamples`` overrides.
    profile : 'tight' (the default, as the CLI's in realizable mode: the exact optimal composition;
        the threshold noise and query noise scales are then ``params.threshold_noise_scale`` and
        ``params.query_noise_scale``, Lyu-Su-Li's split) or 'paper' (Algorithm 5 as written: 2 lambda
        and 4 lambda). Before 0.2.1 (issue 27) the default was 'paper'.
    gate : 'stability' (Algorithm 5's test; the default) or 'guess' (the public-guess gate: run it
        with :func:`run_guess_gate`; w may then be negative, default 0) or 'gnmax' (the Gaussian noisy
        argmax: run it with :func:`run_gnmax`; needs profile='tight' and threshold None; ``cutoff`` is
        not used: the session halts after ``queries_max`` answers).
    classes : c, the labels the votes range over (2; more for 'gnmax' and 'stability' only).

    Returns
    -------
    SubSampParameters
        ``.certificate()`` gives proven_epsilon and each delta term. Raises PcqrError
        (one line) for a setting pcqr refuses.
    """
    return SubSampParameters.create(profile, epsilon, delta, cutoff, queries_max, beta, subsamples, threshold, gate,
                                    classes)


def run_guess_gate(
    ones: np.ndarray,
    guesses: np.ndarray,
    subsamples: int,
    params: SubSampParameters,
    sessions: int,
    noise: NoiseSource | None = None,
) -> np.ndarray:
    """The public-guess gate (``--gate guess``) on the same queries and FIXED public guesses in
    ``sessions`` independent fresh sessions (the CLI's student changes g as answers are released;
    here g is given, which the proof allows: any g fixed before the query is tested).

    Parameters
    ----------
    ones : array of int, shape (q,)
        ct(1) of each query, in [0, subsamples].
    guesses : array of 0/1, shape (q,)
        g(x) of each query.
    subsamples : int
        k.
    params : SubSampParameters
        From :func:`subsamp_parameters` with ``gate='guess'``.
    sessions, noise
        As :func:`run_sparse_vector`.

    Returns
    -------
    np.ndarray of int8, shape (sessions, q)
        ANSWERED_0 / ANSWERED_1 (the released label: g, or 1 - g after a spent instance) or REFUSED
        (after T flips or m queries). The guess gate never abstains.
    """
    votes = _vote_counts(ones, subsamples)
    guess = np.asarray(guesses)
    if guess.shape != votes.shape or (guess.size and not np.isin(guess, (0, 1)).all()):
        raise PcqrError("guesses must hold one 0/1 label per query")
    if params.gate != "guess":
        raise PcqrError("params: run_guess_gate needs parameters made with gate='guess'")
    def one(source: NoiseSource) -> np.ndarray:
        status, label, _ = SparseVector.create(params, source).process_guess(votes, guess, subsamples)
        return np.where(status == _ANSWERED, label, REFUSED)

    return _independent_sessions(sessions, votes.shape[0], noise, one)


def run_gnmax(
    ones: np.ndarray,
    subsamples: int,
    params: SubSampParameters,
    sessions: int,
    noise: NoiseSource | None = None,
) -> np.ndarray:
    """The Gaussian noisy argmax (``--gate gnmax``) on the same queries in ``sessions`` independent
    fresh sessions (each with its own secret key: fresh per-query noise).

    Parameters
    ----------
    ones : array of int, shape (q,)
        ct(1) of each query, in [0, subsamples]; over c > 2 classes, shape (q, c): each query's class
        counts, summing to k.
    subsamples : int
        k.
    params : SubSampParameters
        From :func:`subsamp_parameters` with ``gate='gnmax'``.
    sessions, noise
        As :func:`run_sparse_vector`.

    Returns
    -------
    np.ndarray of int8, shape (sessions, q)
        ANSWERED_0 / ANSWERED_1 (the noisy majority) or REFUSED (after m answers). Never abstains.
        Over c > 2 classes: the released class, or c + 1 after m answers.
    """
    from pcqr.pipeline.gates.noisy_argmax import NoisyArgmax

    votes = _vote_counts(ones, subsamples, params.classes)
    if params.gate != "gnmax":
        raise PcqrError("params: run_gnmax needs parameters made with gate='gnmax'")
    refused = REFUSED if params.classes == 2 else params.classes + 1

    def one(source: NoiseSource) -> np.ndarray:
        gate = NoisyArgmax.create(params, source)
        status, label = gate.process(votes, subsamples) if params.classes == 2 else gate.process_classes(votes, subsamples)
        return np.where(status == _ANSWERED, label, refused)

    return _independent_sessions(sessions, votes.shape[0], noise, one)


def run_sparse_vector(
    ones: np.ndarray,
    subsamples: int,
    params: SubSampParameters,
    sessions: int,
    noise: NoiseSource | None = None,
) -> np.ndarray:
    """Answer the same queries in ``sessions`` independent fresh sessions.

    Parameters
    ----------
    ones : array of int, shape (q,)
        ct(1) of each query: how many of the ``subsamples`` models vote 1, in [0, subsamples]; over
        c > 2 classes, shape (q, c): each query's class counts, summing to k.
    subsamples : int
        k.
    params : SubSampParameters
        From :func:`subsamp_parameters` (or any certified SubSampParameters).
    sessions : int
        How many independent sessions; each starts fresh (c = 0, new threshold noise, new
        session randomness) and answers the q queries in order.
    noise : NoiseSource, optional
        Default: :class:`pcqr.pipeline.privacy.noise.SecureNoise`.

    Returns
    -------
    np.ndarray of int8, shape (sessions, q)
        The codes of the module docstring.
    """
    votes = _vote_counts(ones, subsamples, params.classes)
    if params.gate != "stability":
        raise PcqrError(f"params: run_sparse_vector runs the stability gate; use run_{params.gate.replace('guess', 'guess_gate')} "
                        f"for gate={params.gate!r}")
    abstained, refused = (ABSTAINED, REFUSED) if params.classes == 2 else (params.classes, params.classes + 1)

    def one(source: NoiseSource) -> np.ndarray:
        status, label = SparseVector.create(params, source).process(votes, subsamples)
        return np.where(status == _ANSWERED, label, np.where(status == _ABSTAINED, abstained, refused))

    return _independent_sessions(sessions, votes.shape[0], noise, one)


def _independent_sessions(sessions: int, queries: int, noise: NoiseSource | None,
                          one: Callable[[NoiseSource], np.ndarray]) -> np.ndarray:
    """``sessions`` rows of codes, each from ``one`` run on a fresh session (default: SecureNoise)."""
    if not (isinstance(sessions, (int, np.integer)) and sessions >= 0):
        raise PcqrError(f"sessions must be a non-negative integer, got {sessions!r}")
    source = noise if noise is not None else SecureNoise()
    codes = np.empty((int(sessions), queries), dtype=np.int8)
    for row in range(int(sessions)):
        codes[row] = one(source)
    return codes


def _vote_counts(ones: np.ndarray, subsamples: int, classes: int = 2) -> np.ndarray:
    if not (isinstance(subsamples, (int, np.integer)) and subsamples >= 1):
        raise PcqrError(f"subsamples (k) must be a positive integer, got {subsamples!r}")
    votes = np.asarray(ones)
    if classes > 2:
        if votes.ndim != 2 or votes.shape[1] != classes or not (votes.size == 0 or np.issubdtype(votes.dtype, np.integer)):
            raise PcqrError(f"ones must be a (q, {classes}) array of integer class counts (params.classes = {classes})")
        if votes.size and (votes.min() < 0 or np.any(votes.sum(axis=1) != subsamples)):
            raise PcqrError(f"ones: each query's class counts must be non-negative and sum to k = {subsamples}")
        return votes.astype(np.int64)
    if votes.ndim != 1 or not (votes.size == 0 or np.issubdtype(votes.dtype, np.integer)):
        raise PcqrError("ones must be a one-dimensional array of integer vote counts ct(1)")
    if votes.size and (votes.min() < 0 or votes.max() > subsamples):
        raise PcqrError(f"ones: every vote count ct(1) must be in [0, {subsamples}] (k = {subsamples} models)")
    return votes.astype(np.int64)


def exponential_selection(
    scores: np.ndarray,
    epsilon: float,
    sensitivity: float,
    draws: int,
    noise: NoiseSource | None = None,
) -> np.ndarray:
    """``draws`` independent selections of the exponential mechanism over the candidates.

    Candidate i is drawn with probability proportional to
    exp(epsilon scores[i] / (2 sensitivity)), through the code A_Relabel and A_SSPP run
    (one shard): the candidates' integer levels, :func:`pcqr.pipeline.mechanisms.exponential.histogram`,
    :func:`~pcqr.pipeline.mechanisms.exponential.choose` and
    :func:`~pcqr.pipeline.mechanisms.exponential.pick_in_shard`. Within total variation
    (L + 2) 2^-159 of the exact mechanism, L = (max - min score) / sensitivity
    (:func:`pcqr.pipeline.privacy.em_sampler.total_variation`).

    Parameters
    ----------
    scores : array of float, shape (c,)
        Higher is better. Each must be an integer multiple of ``sensitivity`` (the mechanism
        works on integer mistake counts); up to floating-point representation (1e-9
        relative), and the mechanism then runs on the integers round(score / sensitivity).
    epsilon, sensitivity : positive numbers.
    draws : int
        How many independent draws.
    noise : NoiseSource, optional
        Default: :class:`pcqr.pipeline.privacy.noise.SecureNoise`.

    Returns
    -------
    np.ndarray of int64, shape (draws,)
        The index of the candidate chosen in each draw.
    """
    for name, value in (("epsilon", epsilon), ("sensitivity", sensitivity)):
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise PcqrError(f"{name} must be a positive number, got {value!r}")
    if not (isinstance(draws, (int, np.integer)) and draws >= 0):
        raise PcqrError(f"draws must be a non-negative integer, got {draws!r}")
    mistakes = _mistake_levels(scores, float(sensitivity))
    source = noise if noise is not None else SecureNoise()
    shard = histogram(mistakes, float(epsilon))
    out = np.empty(int(draws), dtype=np.int64)
    for i in range(int(draws)):
        choice = choose([shard], float(epsilon), source)
        out[i] = pick_in_shard(mistakes, choice.mistakes, choice.rank)
    return out


def _mistake_levels(scores: np.ndarray, sensitivity: float) -> np.ndarray:
    """max level - level, level = score / sensitivity, refused unless every level is an integer."""
    values = np.asarray(scores, dtype=np.float64)
    if values.ndim != 1 or values.size == 0 or not np.all(np.isfinite(values)):
        raise PcqrError("scores must be a non-empty one-dimensional array of finite numbers")
    if values.size > MAX_CANDIDATES:
        raise PcqrError(f"scores: at most {MAX_CANDIDATES} candidates")
    levels = values / sensitivity
    rounded = np.rint(levels)
    off = np.abs(levels - rounded) > _INTEGER_SCORE * np.maximum(1.0, np.abs(levels))
    if np.any(off):
        first = int(np.flatnonzero(off)[0])
        raise PcqrError(
            f"scores[{first}] = {float(values[first])!r} is not an integer multiple of the sensitivity {sensitivity!r}: "
            "the exponential mechanism here works on integer mistake counts"
        )
    if np.max(np.abs(rounded)) >= 2.0**53:
        raise PcqrError("scores / sensitivity must be below 2^53 in magnitude")
    return (rounded.max() - rounded).astype(np.int64)


def learn_without_public_data_runs(
    X: np.ndarray, y: np.ndarray, algorithm: str, domain: str | None, epsilon: float, delta: float, runs: int,
    alpha: float = 0.1, direction: str = "up", noise: NoiseSource | None = None, hypothesis: str | None = None,
    first_rows: int | None = None,
) -> list[dict[str, object]]:
    """``runs`` independent releases of ``pcqr learn --algorithm point|learn-thresholds|rectangle|label-private``
    on the rows (``X`` of shape (n, d): one column for point and learn-thresholds; ``y`` labels 0/1),
    through the code the command runs on each part (the workers' counts) and its mechanism, with
    the parameters it certifies (refused alike: a one-line PcqrError). Each run draws fresh noise.

    ``label-private`` (Fig. 13) needs ``hypothesis`` and ``first_rows`` (n: the candidates are the
    dichotomies of the class on the first n rows' features, the exponential mechanism scores the
    labels of the others, as one shard); ``domain`` and ``delta`` are not used (pass None).

    Returns
    -------
    list of dict
        Each run's released hypothesis, as in the model file (``hypothesis.to_dict()``: ``value``
        for a point, ``threshold`` and ``direction``, or ``lows`` and ``highs``).
    """
    from pcqr.pipeline.mechanisms.integer_domain import Domain

    X = np.asarray(X, dtype=np.float64)
    labels = np.asarray(y)
    if X.ndim != 2 or labels.shape != (X.shape[0],) or not np.all(np.isfinite(X)) or not np.isin(labels, (0, 1)).all():
        raise PcqrError("X must be a finite (n, d) array and y n labels in {0, 1}")
    if not (isinstance(runs, (int, np.integer)) and runs >= 0):
        raise PcqrError(f"runs must be a non-negative integer, got {runs!r}")
    source = noise if noise is not None else SecureNoise()
    if algorithm == "label-private":
        return _label_private_runs(X, labels.astype(np.int8), hypothesis, first_rows, epsilon, int(runs), source)
    parsed = Domain.parse(domain or "", "domain")
    rows = (X, labels.astype(np.int8))
    if algorithm == "rectangle":
        from pcqr.pipeline.mechanisms.learn_rectangle import cut_size, learn_rectangle, positive_axis_counts
        from pcqr.pipeline.mechanisms.rec_concave import RecConcaveParameters

        cut_size(X.shape[0], X.shape[1], alpha)
        params = RecConcaveParameters.create(epsilon, delta, parsed.size, X.shape[0], runs=2 * X.shape[1])
        counts = positive_axis_counts(rows, parsed)
        return [learn_rectangle(counts, parsed, params, alpha, source)[0].to_dict() for _ in range(int(runs))]
    if X.shape[1] != 1:
        raise PcqrError(f"algorithm {algorithm!r} learns on ONE feature column, X has {X.shape[1]}")
    if algorithm == "point":
        from pcqr.pipeline.mechanisms.adist import AdistParameters
        from pcqr.pipeline.mechanisms.learn_point import learn_point, positive_counts

        adist = AdistParameters.create(epsilon, delta)
        point_counts = positive_counts(rows, parsed)
        return [learn_point(point_counts, parsed, adist, source)[0].to_dict() for _ in range(int(runs))]
    if algorithm == "learn-thresholds":
        from pcqr.pipeline.mechanisms.learn_thresholds import learn_thresholds, threshold_counts
        from pcqr.pipeline.mechanisms.rec_concave import RecConcaveParameters

        if direction not in ("up", "down"):
            raise PcqrError(f"direction must be 'up' or 'down', got {direction!r}")
        rec = RecConcaveParameters.create(epsilon, delta, parsed.size, X.shape[0])
        both = threshold_counts(rows, parsed)
        return [learn_thresholds(both, parsed, rec, alpha, source, direction == "up")[0].to_dict()
                for _ in range(int(runs))]
    raise PcqrError(f"algorithm must be point, learn-thresholds, rectangle or label-private, got {algorithm!r}")


def _label_private_runs(X: np.ndarray, y: np.ndarray, hypothesis: str | None, first_rows: int | None,
                        epsilon: float, runs: int, source: NoiseSource) -> list[dict[str, object]]:
    """Fig. 13's releases on in-memory rows (:func:`learn_without_public_data_runs`)."""
    from pcqr.pipeline.hypotheses import make_class
    from pcqr.pipeline.mechanisms.label_private import candidate_mistakes, check_first_rows
    from pcqr.pipeline.privacy.limits import MIN_EM_EPSILON
    from pcqr.pipeline.privacy.subsamp import check_epsilon

    if hypothesis is None:
        raise PcqrError("algorithm 'label-private' needs hypothesis (a class name)")
    check_epsilon(epsilon, lowest=MIN_EM_EPSILON)
    n = check_first_rows(first_rows if first_rows is not None else 0, X.shape[0], "first_rows")
    enumeration, mistakes = candidate_mistakes(make_class(hypothesis, X.shape[1]), X[:n], X[n:], y[n:])
    shard = histogram(mistakes, float(epsilon))
    out: list[dict[str, object]] = []
    for _ in range(runs):
        choice = choose([shard], float(epsilon), source)
        out.append(enumeration.hypothesis(pick_in_shard(mistakes, choice.mistakes, choice.rank)).to_dict())
    return out


def san_points_runs(
    x: np.ndarray, domain: str, epsilon: float, delta: float, alpha: float, beta: float, runs: int,
    noise: NoiseSource | None = None,
) -> list[dict[int, float]]:
    """``runs`` independent releases of ``pcqr sanitize --algorithm san-points`` on the values ``x``
    (one feature), through the workers' counting code and SanPoints with the parameters the command
    certifies (refused alike): each run's table as {value: weight}."""
    from pcqr.pipeline.mechanisms.integer_domain import value_counts
    from pcqr.pipeline.mechanisms.san_points import SanPointsParameters, san_points

    values, parsed, source = _one_feature_runs(x, domain, runs, noise)
    params = SanPointsParameters.create(epsilon, delta, alpha, beta, int(values.size))
    seen, counts = value_counts(values[:, None], parsed)
    return [dict(san_points(seen, counts, params, source)) for _ in range(int(runs))]


def san_thresholds_runs(
    x: np.ndarray, domain: str, epsilon: float, delta: float, alpha: float, beta: float, runs: int,
    noise: NoiseSource | None = None,
) -> list[dict[int, float]]:
    """``runs`` independent releases of ``pcqr sanitize --algorithm san-thresholds`` on the values
    ``x`` (one feature), through the workers' counting code (ceil(x) clipped to the domain) and
    SanThresholds with the parameters the command certifies (refused alike): each run's table as
    {value: weight}; a threshold query 'x < j' is the sum of the weights of the values below j."""
    from pcqr.pipeline.mechanisms.integer_domain import ceiling_counts
    from pcqr.pipeline.mechanisms.san_thresholds import SanThresholdsParameters, san_thresholds

    values, parsed, source = _one_feature_runs(x, domain, runs, noise)
    params = SanThresholdsParameters.create(epsilon, delta, alpha, beta, int(values.size), parsed)
    seen, counts = ceiling_counts(values[:, None], parsed)
    return [dict(san_thresholds(seen, counts, params, source)) for _ in range(int(runs))]


def histogram_runs(
    x: np.ndarray, domain: str, epsilon: float, delta: float, runs: int, alpha: float = 0.1, beta: float = 0.05,
    noise: NoiseSource | None = None,
) -> list[dict[int, float]]:
    """``runs`` independent releases of ``pcqr sanitize --algorithm histogram`` on the values ``x`` (one
    feature), through the workers' counting code and the stable histogram with the parameters the
    command certifies (refused alike): each run's table as {value: weight}."""
    from pcqr.pipeline.mechanisms.integer_domain import value_counts
    from pcqr.pipeline.mechanisms.stable_histogram import HistogramParameters, release_shards

    values, parsed, source = _one_feature_runs(x, domain, runs, noise)
    params = HistogramParameters.create(epsilon, delta, alpha, beta, int(values.size))
    seen = value_counts(values[:, None], parsed)
    return [dict(release_shards([seen], params, source)) for _ in range(int(runs))]


def cdf_runs(x: np.ndarray, domain: str, epsilon: float, runs: int,
             noise: NoiseSource | None = None) -> list[dict[int, float]]:
    """``runs`` independent releases of ``pcqr sanitize --algorithm cdf`` on the values ``x`` (one
    feature), through the workers' counting code (ceil(x) clipped to the domain, counted level by
    level) and the hierarchical CDF with the command's parameters: each run's table as {value: weight};
    'x <= theta' is the sum of the weights of the values <= theta."""
    from pcqr.pipeline.mechanisms import hierarchical_cdf as tree

    values, parsed, source = _one_feature_runs(x, domain, runs, noise)
    params = tree.CdfParameters.create(epsilon, int(values.size), parsed)
    offsets, counts = tree.offset_counts(values[:, None], parsed)
    counter = tree.local_counter(offsets, counts, params)
    return [dict(tree.synthetic_cdf(tree.hierarchical_cdf(counter, params, source))) for _ in range(int(runs))]


def _one_feature_runs(x: np.ndarray, domain: str, runs: int,
                      noise: NoiseSource | None) -> tuple[np.ndarray, Domain, NoiseSource]:
    """The checked inputs of a sanitizer's runs: (x as float64, the parsed domain, the noise source)."""
    values = np.asarray(x, dtype=np.float64)
    if values.ndim != 1 or not np.all(np.isfinite(values)):
        raise PcqrError("x must be a one-dimensional array of finite numbers")
    if not (isinstance(runs, (int, np.integer)) and runs >= 0):
        raise PcqrError(f"runs must be a non-negative integer, got {runs!r}")
    return values, Domain.parse(domain, "domain"), noise if noise is not None else SecureNoise()
