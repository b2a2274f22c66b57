"""Privacy parameters of A_SubSamp and the accounting that proves the run's guarantee.

Algorithm 5 of papers/001 (BTT18, restated in ALGORITHMS.md section 2):

    lambda = sqrt(32 T log(2/delta)) / eps
    k      = 34 sqrt(2) lambda log(4 m T / min(delta, beta/2))
    w      = the smallest threshold whose stability term fits (below); the paper's
             2 lambda log(2 m / delta) is a conservative value of the same bound

k decides accuracy only; lambda, T AND w enter the proof. The run's delta is the sum of
three terms, each computed and reported (:class:`DeltaTerms`), none rounded down:

* ``delta_composition``: between two bottoms the coordinator is one AboveThreshold instance
  (Dwork-Roth, "The Algorithmic Foundations of Differential Privacy", Thm 3.23, run on the
  negated statistic) on the distance to instability (gap / 2, sensitivity 1) with threshold
  noise Lap(lambda) = Lap(2/eps0) and query noise Lap(2 lambda) = Lap(4/eps0): each instance is
  eps0 = 2/lambda -DP (the tight profile splits the same eps0 differently, below). The session
  halts after T bottoms, so at most T instances run, and their composition is the better of
  basic composition (T eps0, 0) and advanced composition (Dwork-Rothblum-Vadhan; Dwork-Roth
  Thm 3.20) with delta' = delta/2:
  sqrt(2 T log(2/delta)) eps0 + T eps0 (e^eps0 - 1). With the paper's lambda the advanced
  bound's first term is exactly eps/2.
* ``delta_stability``: the released label is the exact majority, which one record can flip on
  an unstable query; T * p1 bounds the probability that one is ever answered
  (:mod:`pcqr.pipeline.privacy.stability`). This is what w pays for.
* ``delta_sampler``: the per-query tail bits are within TAIL_SAMPLER_ERROR of exact, over at
  most m queries: (1 + e^eps) m TAIL_SAMPLER_ERROR.

Two profiles (``--profile``). ``paper``: Algorithm 5 as written (lambda above, composition by the
better of basic and advanced composition). ``tight`` (the default): the same mechanism, its eps0
split between threshold and query noise as Lyu, Su and Li found optimal (:func:`noise_scales`:
1 : 2^(2/3), threshold DLap(2.59 lambda) and query DLap(3.26 lambda) in gap units, the same eps0 =
2/lambda; about 15% less w and 10-14% fewer models for a unanimous query), certified by the exact
optimal composition of the T instances (Kairouz-Oh-Viswanath Theorem 3.3,
:mod:`pcqr.pipeline.privacy.composition`): ``delta_composition`` is the exact delta of T
eps0-DP instances at the requested eps, lambda the smallest that keeps it within its share of
delta, and the share is the one (of TIGHT_SHARES) that needs the fewest models for a unanimous
query to be answered (:meth:`SubSampParameters.useful_subsamples`): composition and stability
both spend delta, and a smaller lambda asks for a larger w in lambda units. k keeps the paper's
formula at the tight lambda. At eps = 1, delta = 1e-6, T = 50 tight's lambda is 61.0 against the
paper's 152.4.

Two sparse-vector gates (``--gate``; without it pcqr.pipeline.privacy.gate_choice.recommend_gate picks one of
the three from public parameters). ``stability``: Algorithm 5's test above. ``guess`` (ALGORITHMS.md
section 10, pcqr.pipeline.gates.public_guess): the same sparse vector with the same noise, run on
the signed margin ct(g) - ct(1 - g) of the k votes toward a PUBLIC guess g(x); below the noisy
threshold an instance is spent and 1 - g(x) is released, above it g(x). The released label is a
function of the sparse vector's output and of public information, so the run's delta has no
stability term (``delta_stability`` = 0) and w is not a privacy parameter (it may be negative,
to charge only clear disagreements with g; default 0, GUESS_DISAGREEMENT: the noisy majority); lambda is calibrated with the whole delta but the sampler's share, and the
default k is the smallest at which a unanimous query that agrees with g is charged with
probability at most min(1/2, T / 4m) at w = 0 (:meth:`SubSampParameters.useful_subsamples`).

A third gate, ``gnmax`` (ALGORITHMS.md section 10; :mod:`pcqr.pipeline.privacy.gnmax`), is not a sparse
vector: every one of at most m queries gets the noisy majority, ct(1) + Z > k/2 with Z a discrete
Gaussian of scale sigma / sqrt(2) (PATE's Gaussian noisy argmax over two labels, per-label scale
sigma), and the session halts after m answers. Each answer is 1/sigma^2 -zCDP, m compose to
m/sigma^2 -zCDP, converted to (eps, delta) by the tight conversion. Its parameters reuse the fields:
``lam`` holds sigma, ``cutoff`` = ``queries_max`` = m (each answer is one "instance": the odometer
counts answers), ``threshold`` is 0 and unused; ``delta_stability`` is 0 (the released label is the
mechanism's own output) and ``delta_composition`` is the conversion's delta. Its default k is the
smallest at which a query that GNMAX_AGREEMENT of the models agree on gets their label with
probability at least GNMAX_CORRECT. Only ``--profile tight``: Algorithm 5 has no such gate.

A run whose eps or summed delta exceeds the request, by any amount, is refused before
anything is read; a --threshold that does not fit is refused with the smallest one that does.
So is a run the machine cannot hold (:meth:`SubSampParameters.check_limits`, the bounds of
:mod:`pcqr.pipeline.privacy.limits`): the coordinator's tail table (lambda), the T pre-drawn thresholds, k, w.
"""
from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass, replace
from fractions import Fraction
from typing import Any, Callable, Mapping

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.privacy.limits import (
    MAX_COUNT, MAX_THRESHOLD, MAX_EPSILON, MIN_PROBABILITY, check_classes, check_overrides, check_subsamp_options,
    count_range,
    gnmax_limit_problem, paper_lambda, subsamp_limit_problem,
)
from pcqr.pipeline.privacy.composition import EXACT_MAX_COUNT, largest_eps0, optimal_delta
from pcqr.pipeline.privacy.gnmax import ACCOUNTANTS, calibrate_sigma, count_sigma, dominating_noises, gnmax_guarantee
from pcqr.pipeline.privacy.tail_window import gaussian_tail_span
from pcqr.pipeline.privacy.stability import answer_probability, smallest_integer, smallest_threshold, stability_delta
from pcqr.pipeline.spelling import spelled

# Per-query error of DiscreteLaplaceTail (see pcqr.pipeline.privacy.noise): its bits differ
# from exact discrete-Laplace tails by at most this much in probability.
TAIL_SAMPLER_ERROR = 3e-39
_ROUND_UP = 1 + 2.0**-40  # covers the float rounding of a few operations (2^-53 each)
#: The profiles: how lambda, k and w are computed and the composition is certified.
PROFILES = ("tight", "paper")
#: How each sparse-vector instance's eps0 is split between its threshold noise and its query noise,
#: as the ratio eps2 / eps1 (module docstring): ``equal`` is Algorithm 5's (Lap(lambda) and
#: Lap(2 lambda) in distance units), ``lyu_su_li`` the accuracy-optimal 1 : (2c)^(2/3) of Lyu, Su and
#: Li for c = 1 positive per instance (the tight profile's).
NOISE_SPLITS = {"equal": 1.0, "lyu_su_li": 2.0 ** (2 / 3)}
#: The tight profile's split (both sparse-vector gates: their statistics have sensitivity 1 but are
#: not monotone, one changed model can move two queries' counts in opposite directions).
TIGHT_SPLIT = "lyu_su_li"
#: The gnmax gate's default k: a query on which this share of the k models agree ...
GNMAX_AGREEMENT = 0.75
#: ... gets their label with at least this probability (the smallest such k).
GNMAX_CORRECT = 0.95
#: With n known (public), gnmax's default k is raised to leave this many rows per model: its noise is
#: fixed in votes, so a weak learner's margin (say 60% of the models agreeing, not 75%) clears it
#: only with more models (measured on issue 13's XOR task, n = 10^6, eps 1, m 2,000, depth-4 trees:
#: k 1,333 answered at 0.816, 3,000 at 0.895, 10,000 at 0.896) ...
GNMAX_ROWS_PER_MODEL = 250
#: ... up to this many models (the accuracy has levelled off long before; training time has not).
GNMAX_MAX_DEFAULT_SUBSAMPLES = 10_000
#: The guess gate's default k: a unanimous query that agrees with the guess is charged with
#: probability at most min(1/2, T / (GUESS_SPARE m)): a 1/GUESS_SPARE share of T for such noise.
GUESS_SPARE = 4
#: The guess gate's default w: a query is charged (1 - g released) when about this share of the k
#: models disagree with g, w = k (1/2 - share): 1/2 releases the noisy majority (w = 0). Any w is
#: certifiable; a larger share (negative w) spends T on clear disagreements only and releases g on
#: near-ties. On Adult at eps 1 (T 20, k 786 -- measured before issue 13's split, which made the default
#: k 706 --, logistic models) 0.5 answered 214 of 2,000 queries at
#: 83% before the halt, 0.75 answered 1,069 at 78%, 0.9 all at 76% (the majority class's rate).
GUESS_DISAGREEMENT = 0.5
#: The share of delta the tight profile gives the guess gate's composition term (the sampler's
#: is at most 1/1000 of delta: :func:`tight_epsilon`).
GUESS_COMPOSITION_SHARE = 0.998
#: What a refusal by the composition bound advises (the paper profile names an eps it certifies instead).
COMPOSITION_ADVICE = "use a smaller --epsilon or a larger --cutoff"
#: Rounds of gnmax's cap on eps over c > 2 classes (SubSampParameters.gnmax; two or three settle it).
MAX_CAP_ROUNDS = 8
#: The shares of delta the tight profile tries for the composition term (the rest: stability, sampler).
TIGHT_SHARES = tuple(round(0.05 * i, 2) for i in range(1, 20))


def round_up(value: float) -> float:
    """``value`` enlarged past the float rounding of the few operations that computed it
    (at most 2^-53 relative each): what a certificate reports, never rounded in its favour."""
    return value * _ROUND_UP


def check_epsilon(epsilon: float, option: str = "--epsilon", lowest: float = 0.0) -> None:
    """Refuse an impossible eps with a one-line error naming the parameter: a positive number (at
    least ``lowest`` if given) at most MAX_EPSILON (pcqr.pipeline.privacy.limits: e^eps must be a finite float)."""
    if not (math.isfinite(epsilon) and 0 < epsilon <= MAX_EPSILON and epsilon >= lowest):
        low = f"at least {lowest:g} and " if lowest else "a positive number "
        raise PcqrError(f"{spelled(option)} must be {low}at most {MAX_EPSILON:g}, got {epsilon}")


def check_fraction(value: float, option: str, lowest: float = MIN_PROBABILITY) -> None:
    """Refuse a probability that must lie in [lowest, 1) (--alpha, --beta, --delta; lowest is
    MIN_PROBABILITY unless a mechanism needs more), naming it."""
    if not (lowest <= value < 1):
        raise PcqrError(f"{spelled(option)} must be in (0, 1), at least {lowest:g}, got {value}")


def check_queries_max(queries_max: int) -> None:
    count_range("--queries-max (m)", queries_max, 1, MAX_COUNT, "an exact float")


def check_epsilon_delta(epsilon: float, delta: float) -> None:
    """Refuse impossible (eps, delta) with a one-line error naming the parameter."""
    check_epsilon(epsilon)
    check_fraction(delta, "--delta")


def total_delta(terms: Mapping[str, float]) -> float:
    """The proven delta of a run: its delta terms' sum (fsum, exactly rounded), rounded up."""
    total = math.fsum(terms.values())
    return math.nextafter(total, math.inf) if total > 0 else 0.0


def delta_certificate(epsilon: float, terms: Mapping[str, float]) -> dict[str, float]:
    """The summary's privacy keys (a contract: users' scripts read them): proven_epsilon, each
    ``delta_<term>`` and proven_delta (:func:`total_delta`)."""
    return {"proven_epsilon": epsilon, **{f"delta_{k}": v for k, v in terms.items()},
            "proven_delta": total_delta(terms)}


@dataclass(frozen=True)
class DeltaTerms:
    """The run's delta, term by term (each an upper bound, none rounded down)."""

    composition: float
    stability: float
    sampler: float

    @property
    def total(self) -> float:
        """The proven delta: the terms' sum, rounded up."""
        return total_delta(asdict(self))


def _check_request(epsilon: float, delta: float, cutoff: int, queries_max: int, beta: float,
                   subsamples: int | None, threshold: float | None, enforce_limits: bool = True) -> None:
    """Every constructor's checks of the requested values, before any calibration."""
    check_epsilon_delta(epsilon, delta)
    check_queries_max(queries_max)
    check_fraction(beta, "--beta")
    check_subsamp_options(epsilon, delta, cutoff, subsamples, threshold, enforce_limits)


def _check_exact_cutoff(cutoff: int) -> None:
    """The tight profile certifies the T-fold composition exactly only up to EXACT_MAX_COUNT."""
    if cutoff > EXACT_MAX_COUNT:
        raise PcqrError(f"--cutoff {cutoff}: --profile tight certifies at most T = {EXACT_MAX_COUNT:,} instances "
                        "exactly; use a smaller --cutoff or --profile paper")


@dataclass(frozen=True)
class SubSampParameters:
    """Every parameter of one A_SubSamp session (all public)."""

    epsilon: float
    delta: float
    beta: float
    cutoff: int
    queries_max: int
    lam: float
    subsamples: int
    threshold: float
    subsamples_source: str  # "paper", "guess_useful", "gnmax_useful", "gnmax_rows" or "override"
    threshold_source: str  # "smallest_certifiable" or "override"
    profile: str = "paper"  # "tight" or "paper" (sessions before the profiles were all "paper")
    gate: str = "stability"  # "stability" or "guess" (sessions before the gates were all "stability")
    noise_split: str = "equal"  # a NOISE_SPLITS key (sessions before the split were all "equal")
    accountant: str | None = None  # gnmax: "pld" or "rdp" (gnmax.ACCOUNTANTS; None: "rdp", before issue 29)
    classes: int = 2  # c, the public class list's length (gnmax only beyond two; issue 49)

    @classmethod
    def paper(
        cls,
        epsilon: float,
        delta: float,
        cutoff: int,
        queries_max: int,
        beta: float,
        subsamples: int | None = None,
        threshold: float | None = None,
        enforce_limits: bool = True,
    ) -> SubSampParameters:
        """Algorithm 5's lambda and k, the smallest certifiable w, with optional overrides of
        k and w; refused (one line) unless the whole (eps, delta) is certified and, with
        ``enforce_limits`` (always, but for ``pcqr plan``'s report of the paper's values), unless the
        session fits pcqr.pipeline.privacy.limits."""
        _check_request(epsilon, delta, cutoff, queries_max, beta, subsamples, threshold, enforce_limits)
        lam = paper_lambda(epsilon, delta, cutoff)
        k = _paper_subsamples(lam, queries_max, cutoff, delta, beta)
        params = cls(
            epsilon=epsilon,
            delta=delta,
            beta=beta,
            cutoff=cutoff,
            queries_max=queries_max,
            lam=lam,
            subsamples=subsamples if subsamples is not None else k,
            threshold=threshold if threshold is not None else 0.0,
            subsamples_source="paper" if subsamples is None else "override",
            threshold_source="smallest_certifiable" if threshold is None else "override",
        )
        largest = None if params.composition_fits() else _largest_paper_epsilon(epsilon, delta, cutoff, queries_max)
        params.check_composition(COMPOSITION_ADVICE if largest is None else (
            f"at --cutoff {cutoff} and --delta {delta:g} it certifies --epsilon {largest:g} (the largest found, to "
            "3 digits), or use a larger --cutoff, or --profile tight"))
        if threshold is None:
            params = replace(params, threshold=params.smallest_threshold())
        params.certify(enforce_limits)
        return params

    @classmethod
    def create(cls, profile: str, epsilon: float, delta: float, cutoff: int, queries_max: int, beta: float,
               subsamples: int | None = None, threshold: float | None = None,
               gate: str = "stability", classes: int = 2) -> SubSampParameters:
        """A session's parameters under ``profile`` (``--profile``: ``tight`` or ``paper``) for ``gate``
        (``--gate``: one of GATES, each with its constructor in :data:`GATE_PARAMETERS`) over ``classes``
        labels (``--classes``: more than two under gnmax only, so far)."""
        if gate not in GATE_PARAMETERS:
            raise PcqrError(f"--gate must be one of {', '.join(GATES)}, got {gate!r}")
        check_classes(classes)
        if classes == 2:
            return GATE_PARAMETERS[gate](profile, epsilon, delta, cutoff, queries_max, beta, subsamples, threshold)
        if gate == "stability":  # the plurality's gap: the binary gap's sensitivity and stability (sparse_vector)
            params = replace(GATE_PARAMETERS[gate](profile, epsilon, delta, cutoff, queries_max, beta, subsamples,
                                                   threshold), classes=classes)
            params.certify()
            return params
        if gate != "gnmax":
            raise PcqrError(f"--gate {gate} answers two classes; {classes} classes need --gate gnmax or stability "
                            f"({GUESS_OVER_CLASSES})")
        return cls.gnmax(profile, epsilon, delta, cutoff, queries_max, beta, subsamples, threshold, classes=classes)

    @classmethod
    def stability(cls, profile: str, epsilon: float, delta: float, cutoff: int, queries_max: int, beta: float,
                  subsamples: int | None = None, threshold: float | None = None) -> SubSampParameters:
        """Algorithm 5's stability gate under ``profile``: :meth:`paper` or :meth:`tight`."""
        if profile == "paper":
            return cls.paper(epsilon, delta, cutoff, queries_max, beta, subsamples, threshold)
        if profile == "tight":
            return cls.tight(epsilon, delta, cutoff, queries_max, beta, subsamples, threshold)
        raise PcqrError(f"--profile must be one of {', '.join(PROFILES)}, got {profile!r}")

    @classmethod
    def tight(
        cls,
        epsilon: float,
        delta: float,
        cutoff: int,
        queries_max: int,
        beta: float,
        subsamples: int | None = None,
        threshold: float | None = None,
    ) -> SubSampParameters:
        """The tight profile (module docstring): the same checks as :meth:`paper`, lambda from the exact
        optimal composition at the best share of delta, the paper's k at that lambda, the smallest
        certifiable w (or the given k and w, refused unless certified)."""
        _check_request(epsilon, delta, cutoff, queries_max, beta, subsamples, threshold)
        certified = tight_epsilon(epsilon, delta, queries_max)  # a delta the samplers leave no room in: refused
        # every other check (not w's fit), at the eps certified: beyond the cap the paper's own composition
        # does not fit its sampler term, which must not refuse the tight profile's certificate
        paper = replace(cls.paper(certified, delta, cutoff, queries_max, beta, subsamples), epsilon=epsilon)
        _check_exact_cutoff(cutoff)
        best: SubSampParameters | None = None
        best_models = math.inf
        shares: list[SubSampParameters] = []
        for share in TIGHT_SHARES:
            lam = _tight_lambda(certified, share * delta, cutoff, TIGHT_SPLIT)
            trial = replace(paper, lam=lam, profile="tight", noise_split=TIGHT_SPLIT, threshold=0.0,
                            subsamples=subsamples if subsamples is not None else _paper_subsamples(
                                lam, queries_max, cutoff, delta, beta))
            shares.append(trial)
            try:
                trial = replace(trial, threshold=threshold if threshold is not None else trial.smallest_threshold())
                trial.certify()
            except PcqrError:
                continue  # this share leaves the stability term (or the given w) no room
            models = trial.useful_subsamples()
            if models < best_models:
                best, best_models = trial, models
        fits = [] if best is not None or threshold is None else [
            w for w in map(_smallest_certified_threshold, shares) if w is not None]
        if fits:
            raise PcqrError(f"--threshold {threshold:g}: the released label's stability term does not fit --delta "
                            f"{delta} at any split of delta (--profile tight); the smallest --threshold that fits "
                            f"is {min(fits):g}")
        if best is None:  # the paper's parameters are certified: some share is (its lambda is larger)
            raise PcqrError(f"--epsilon {epsilon} with --cutoff {cutoff} and --delta {delta}: no split of delta "
                            "between composition and stability certifies --profile tight; use --profile paper")
        return best

    @classmethod
    def guess(
        cls,
        profile: str,
        epsilon: float,
        delta: float,
        cutoff: int,
        queries_max: int,
        beta: float,
        subsamples: int | None = None,
        threshold: float | None = None,
    ) -> SubSampParameters:
        """The public-guess gate's parameters (module docstring): lambda from ``profile``'s composition
        with no stability term, k the smallest useful one unless given, w = k (1/2 - GUESS_DISAGREEMENT)
        unless given (any w in [-MAX_THRESHOLD, MAX_THRESHOLD] is certifiable: it only moves answers
        between g and 1 - g)."""
        if profile not in PROFILES:
            raise PcqrError(f"--profile must be one of {', '.join(PROFILES)}, got {profile!r}")
        _check_request(epsilon, delta, cutoff, queries_max, beta, subsamples, None)
        if threshold is not None and subsamp_limit_problem(1.0, 1, threshold, signed=True) is not None:
            raise PcqrError(f"--threshold must be a number in [-{MAX_THRESHOLD:g}, {MAX_THRESHOLD:g}] under the guess "
                            f"gate, got {threshold}")
        if profile == "tight":
            _check_exact_cutoff(cutoff)
            lam = _tight_lambda(tight_epsilon(epsilon, delta, queries_max), GUESS_COMPOSITION_SHARE * delta, cutoff,
                                TIGHT_SPLIT)
        else:
            lam = paper_lambda(epsilon, delta, cutoff)
        params = cls(
            epsilon=epsilon, delta=delta, beta=beta, cutoff=cutoff, queries_max=queries_max, lam=lam,
            subsamples=subsamples if subsamples is not None else 1,
            threshold=threshold if threshold is not None else 0.0,
            subsamples_source="guess_useful" if subsamples is None else "override",
            threshold_source="guess_disagreement" if threshold is None else "override",
            profile=profile, gate="guess", noise_split=TIGHT_SPLIT if profile == "tight" else "equal",
        )
        if subsamples is None:  # useful at w = 0; the default w below only makes unanimous flips rarer
            params = replace(params, subsamples=params.useful_subsamples())
        if threshold is None:
            params = replace(params, threshold=math.floor(2 * params.subsamples * (0.5 - GUESS_DISAGREEMENT)) / 2)
        params.certify()
        return params

    @classmethod
    def gnmax(
        cls,
        profile: str,
        epsilon: float,
        delta: float,
        cutoff: int,
        queries_max: int,
        beta: float,
        subsamples: int | None = None,
        threshold: float | None = None,
        classes: int = 2,
    ) -> SubSampParameters:
        """The Gaussian noisy argmax's parameters (module docstring): sigma the smallest that the tight
        RDP conversion certifies for m answers at GUESS_COMPOSITION_SHARE of delta (the rest covers the
        sampler), k the smallest useful one unless given. No threshold: refused if given. ``cutoff`` is not
        used: gnmax's T is m (pcqr.pipeline.privacy.session_plan refuses a --cutoff other than m). Over
        ``classes`` > 2 labels sigma certifies gnmax.dominating_noises(m, c) = 2m unit shifts."""
        if profile != "tight":
            raise PcqrError(f"--profile {profile}: --gate gnmax is certified by Renyi DP only (--profile tight); "
                            "--profile paper reproduces Algorithm 5's stability gate")
        if threshold is not None:
            raise PcqrError(f"--threshold {threshold:g}: --gate gnmax has no threshold (each answer is the noisy "
                            "majority); leave --threshold out")
        check_epsilon_delta(epsilon, delta)
        check_queries_max(queries_max)
        check_fraction(beta, "--beta")
        check_overrides(subsamples, None)
        check_classes(classes)
        values = 1  # sampled values per answer, as tight_epsilon counts them
        for _ in range(MAX_CAP_ROUNDS):
            target = (tight_epsilon(epsilon, delta, queries_max, values), GUESS_COMPOSITION_SHARE * delta,
                      dominating_noises(queries_max, classes))
            try:  # the privacy-loss distribution where it runs (about m <= 35,000 at eps 1), else zCDP
                sigma, accountant = calibrate_sigma(*target, accountant="pld"), "pld"
            except PcqrError:
                sigma, accountant = calibrate_sigma(*target, accountant="rdp"), "rdp"
            # over c > 2 classes each answer samples c values of a table spanning J at sigma: at an eps
            # capped for fewer values the sampler term would not fit, so cap again for these (a lower eps
            # gives a larger sigma and J: a few rounds settle, as J grows like sigma and the cap like log J)
            needed = answer_values(classes, sigma)
            if needed <= values:
                break
            values = needed
        params = cls(
            epsilon=epsilon, delta=delta, beta=beta, cutoff=queries_max, queries_max=queries_max, lam=sigma,
            subsamples=subsamples if subsamples is not None else 1, threshold=0.0,
            subsamples_source="gnmax_useful" if subsamples is None else "override", threshold_source="not_used",
            profile="tight", gate="gnmax", accountant=accountant, classes=classes,
        )
        params.check_limits()  # before useful_subsamples builds the Gaussian table at sigma
        if subsamples is None:
            params = replace(params, subsamples=params.useful_subsamples())
        params.certify()
        return params

    def for_rows(self, rows: int) -> SubSampParameters:
        """The gnmax gate with its default k, n = ``rows`` known (public): k raised to leave
        GNMAX_ROWS_PER_MODEL rows per model, at most GNMAX_MAX_DEFAULT_SUBSAMPLES (never lowered; k
        is not in gnmax's certificate). Any other gate, or a k the user gave, is returned as is."""
        if self.gate != "gnmax" or self.subsamples_source != "gnmax_useful":
            return self
        k = min(rows // GNMAX_ROWS_PER_MODEL, GNMAX_MAX_DEFAULT_SUBSAMPLES)
        return replace(self, subsamples=k, subsamples_source="gnmax_rows") if k > self.subsamples else self

    @property
    def sigma(self) -> float:
        """The gnmax gate's per-label Gaussian scale (held in ``lam``)."""
        if self.gate != "gnmax":
            raise AttributeError("sigma: only the gnmax gate has a Gaussian scale (the sparse vector's is lam)")
        return self.lam

    @property
    def accountant_name(self) -> str:
        """What certified the composition (the summary's ``accountant``): gnmax's privacy-loss
        distribution ("pld") or zCDP ("rdp"); the tight profile's exact optimal composition
        ("optimal_composition", KOV); the paper's better of basic and advanced composition."""
        if self.gate == "gnmax":
            return self.accountant or "rdp"
        return "optimal_composition" if self.profile == "tight" else "basic_or_advanced_composition"

    @property
    def threshold_noise_scale(self) -> float:
        """Scale of the threshold noise in gap units: (1 + r) lambda for the split r = eps2 / eps1
        (``equal``: 2 lambda, i.e. 2 x Lap(lambda) on dist = gap/2)."""
        return noise_scales(self.lam, self.noise_split)[0]

    @property
    def query_noise_scale(self) -> float:
        """Scale of the per-query noise in gap units: 2 (1 + r) / r lambda (``equal``: 4 lambda, i.e.
        2 x Lap(2 lambda) on dist = gap/2)."""
        return noise_scales(self.lam, self.noise_split)[1]

    @property
    def instance_epsilon(self) -> float:
        """eps0 of one sparse-vector instance, from the scales the samplers use (never understated)."""
        return instance_epsilon(self.lam, self.noise_split)

    def _composition(self) -> tuple[float, float, float]:
        """(eps, delta_composition, delta_sampler); the sampler term is inf when e^eps is not a float
        (such an eps is above every request, MAX_EPSILON, and is refused)."""
        if self.gate == "gnmax":
            delta = GUESS_COMPOSITION_SHARE * self.delta
            eps = gnmax_guarantee(self.lam, dominating_noises(self.queries_max, self.classes), delta,
                                  self.accountant or "rdp")[0]
        elif self.profile == "tight":
            eps = tight_epsilon(self.epsilon, self.delta, self.queries_max)
            delta = optimal_delta(self.instance_epsilon, self.cutoff, eps)
        else:
            eps, delta = composition_guarantee(self.instance_epsilon, self.cutoff, self.delta)
        if eps > MAX_EPSILON:
            return eps, delta, math.inf
        sampler = math.nextafter((1 + math.exp(eps)) * self.sampler_error(), math.inf)
        return eps, delta, sampler

    def sampler_error(self) -> float:
        """The total variation between the run's sampled noise and exact noise, over all m queries: a
        tail bit per query (TAIL_SAMPLER_ERROR each), or, for gnmax over c > 2 classes, c noise values
        per answer by inverse CDF, each within (2 J + 3) TAIL_SAMPLER_ERROR
        (pcqr.pipeline.privacy.noise.DiscreteLaplaceTail.values; J the table's span at count_sigma).
        The stability gate over c > 2 classes samples as over two (a tail bit per query, on the
        plurality's gap)."""
        values = answer_values(self.classes if self.gate == "gnmax" else 2, self.lam)
        if values == 1:
            return self.queries_max * TAIL_SAMPLER_ERROR
        return math.nextafter(self.queries_max * values * TAIL_SAMPLER_ERROR, math.inf)

    def delta_terms(self) -> DeltaTerms:
        """Each term of the run's delta; see the module docstring."""
        _, composition, sampler = self._composition()
        if self.gate in ("guess", "gnmax"):  # the released label is the mechanism's output (and public g)
            return DeltaTerms(composition, 0.0, sampler)
        stab = stability_delta(self.threshold, self.cutoff, self.query_noise_scale, self.threshold_noise_scale)
        return DeltaTerms(composition, stab, sampler)

    def guarantee(self) -> tuple[float, float]:
        """The (eps, delta) this session provably satisfies; see the module docstring."""
        return self._composition()[0], self.delta_terms().total

    def certificate(self) -> dict[str, float]:
        """The summary's privacy keys: proven_epsilon and every delta term."""
        return delta_certificate(self._composition()[0], asdict(self.delta_terms()))

    def stability_budget(self) -> float:
        """What is left of delta for delta_stab once composition and sampler are paid."""
        _, composition, sampler = self._composition()
        return self.delta - composition - sampler  # float error here only shrinks w's search by ulps

    def smallest_threshold(self) -> float:
        """The smallest w (a multiple of 1/2) whose whole delta fits the request."""
        budget = self.stability_budget()
        w = smallest_threshold(budget, self.cutoff, self.query_noise_scale, self.threshold_noise_scale)
        if w is None:
            raise PcqrError(
                f"--delta {self.delta}: the composition and sampler terms leave no room for the stability "
                "term of the released label; use a larger --delta or --epsilon"
            )
        while replace(self, threshold=w).guarantee()[1] > self.delta:  # the total, rounded up, must fit too
            w += 0.5
        return w

    def composition_fits(self) -> bool:
        """Whether the composition bound reaches eps with room left in delta (no tolerance)."""
        eps, composition, sampler = self._composition()
        return eps <= self.epsilon and composition + sampler < self.delta

    def check_composition(self, advice: str = COMPOSITION_ADVICE) -> None:
        """Refuse (lambda, T) for which the composition bound does not reach eps (:meth:`composition_fits`),
        in one line ending with ``advice``."""
        if not self.composition_fits():
            eps, composition, sampler = self._composition()
            raise PcqrError(
                f"--epsilon {self.epsilon} with --cutoff {self.cutoff} and --delta {self.delta}: "
                f"lambda {self.lam:.6g} only certifies ({eps:.4g}, {composition + sampler:.3g})-DP by composition "
                f"(--profile {self.profile}); {advice}"
            )

    def check_limits(self) -> None:
        """Refuse (one line) a session the machine cannot hold (pcqr.pipeline.privacy.limits): the parameters'
        ranges, the coordinator's tail table at lambda, T and w. Cheap: nothing is built. (k is
        bounded when the models are trained: pcqr.pipeline.privacy.limits.check_training_size.)"""
        check_epsilon_delta(self.epsilon, self.delta)
        check_queries_max(self.queries_max)
        check_fraction(self.beta, "--beta")
        if self.gate == "gnmax":
            problem = gnmax_limit_problem(self.lam, self.cutoff, self.queries_max, self.threshold)
            if problem is not None:
                raise PcqrError(f"the session's {problem}")
            return
        problem = subsamp_limit_problem(self.lam, self.cutoff, self.threshold, signed=self.gate == "guess")
        if problem is not None:
            raise PcqrError(f"the session's {problem}")

    def certify(self, enforce_limits: bool = True) -> None:
        """Refuse parameters whose eps or summed delta exceed the request, by any amount (and, first,
        a session outside pcqr.pipeline.privacy.limits)."""
        if self.profile not in PROFILES:  # a state edited by hand: no accountant to certify it with
            raise PcqrError(f"--profile must be one of {', '.join(PROFILES)}, got {self.profile!r}")
        if self.gate not in GATES:
            raise PcqrError(f"--gate must be one of {', '.join(GATES)}, got {self.gate!r}")
        check_classes(self.classes)
        if self.classes != 2 and self.gate not in ("gnmax", "stability"):
            raise PcqrError(f"--gate {self.gate} answers two classes, not {self.classes}")
        if self.accountant not in (None, *ACCOUNTANTS) or (self.accountant is not None and self.gate != "gnmax"):
            raise PcqrError(f"accountant must be one of {', '.join(ACCOUNTANTS)} (gnmax only), got {self.accountant!r}")
        if self.noise_split not in NOISE_SPLITS:
            raise PcqrError(f"noise_split must be one of {', '.join(NOISE_SPLITS)}, got {self.noise_split!r}")
        if enforce_limits:
            self.check_limits()
        self.check_composition()
        if self.gate == "gnmax" and self.profile != "tight":
            raise PcqrError(f"--profile {self.profile}: --gate gnmax is certified by Renyi DP only (--profile tight)")
        if self.gate in ("guess", "gnmax"):
            if self.guarantee()[1] > self.delta:  # composition and sampler alone: check_composition's margin
                raise PcqrError(f"--epsilon {self.epsilon} with --cutoff {self.cutoff} and --delta {self.delta}: "
                                f"the {self.gate} gate's delta {self.guarantee()[1]:.4g} exceeds the request")
            return
        if self.guarantee()[1] > self.delta:
            smallest = self.smallest_threshold()
            raise PcqrError(
                f"--threshold {self.threshold:g}: the released label's stability term "
                f"{self.delta_terms().stability:.3g} does not fit --delta {self.delta}; "
                f"the smallest --threshold that fits is {smallest:g}"
            )

    def unanimous_abstention(self) -> float:
        """P(a unanimous query, gap = k, is answered bottom) by a fresh instance (about); 0 under gnmax,
        which never abstains."""
        if self.gate == "gnmax":
            return 0.0
        answered = answer_probability(self.subsamples, self.threshold, self.query_noise_scale,
                                      self.threshold_noise_scale)
        return max(0.0, 1.0 - answered)

    def useful_subsamples(self) -> int:
        """The smallest k at which a unanimous query abstains with probability at most
        min(1/2, T/m): then m unanimous queries fit in the T abstentions, in expectation. (Guess
        gate: a unanimous query that agrees with the guess is charged with probability at most
        min(1/2, T/(GUESS_SPARE m)), leaving most of T for the guess's mistakes.)"""
        if self.gate == "gnmax":  # a GNMAX_AGREEMENT majority gets its label w.p. >= GNMAX_CORRECT
            return max(1, smallest_integer(
                lambda k: replace(self, subsamples=k).majority_kept(math.ceil(GNMAX_AGREEMENT * k)) >= GNMAX_CORRECT,
                start=16))
        spare = GUESS_SPARE if self.gate == "guess" else 1
        target = min(0.5, self.cutoff / (spare * self.queries_max))

        return max(1, smallest_integer(
            lambda k: replace(self, subsamples=k).unanimous_abstention() <= target,
            start=2 * math.ceil(self.threshold),
        ))

    def majority_kept(self, agreeing: int) -> float:
        """gnmax: the probability that a query on which ``agreeing`` of the k models agree gets their
        label (the smaller of the two labels' cases: ties go to 0), from the sampler's own table. Over
        c > 2 classes, the continuous Gaussians' approximation (this only chooses the default k, which
        is not in the certificate): the rest of the votes on one other class, margin d = 2 agreeing - k,
        Phi(d / (sqrt 2 s)) less the c - 2 empty classes' chances Q(agreeing / (sqrt 2 s)), s the noise
        on each count (count_sigma(lam))."""
        from pcqr.pipeline.privacy.noise import DiscreteGaussianTail

        if self.classes > 2:
            spread = math.sqrt(2) * count_sigma(self.lam)
            won = 0.5 * math.erfc(-(2 * agreeing - self.subsamples) / (spread * math.sqrt(2)))
            return won - (self.classes - 2) * 0.5 * math.erfc(agreeing / (spread * math.sqrt(2)))
        tail = DiscreteGaussianTail(count_sigma(self.lam))
        k = self.subsamples
        ones = tail.probability(k // 2 + 1 - agreeing)  # label 1, ct(1) = agreeing: Z >= k//2 + 1 - ct(1)
        zeros = 1.0 - tail.probability(k // 2 + 1 - (k - agreeing))  # label 0, ct(1) = k - agreeing
        return min(ones, zeros)

    def usefulness_warning(self) -> str | None:
        """One line when k / 2 is not comfortably above w plus the noise, else None."""
        if self.gate == "gnmax":
            kept = self.majority_kept(self.subsamples)
            if kept >= GNMAX_CORRECT:
                return None
            return (f"k = {self.subsamples} models is too few for sigma = {self.lam:.4g}: even a unanimous query gets "
                    f"the models' label with probability only {kept:.2f}; k >= {self.useful_subsamples()} would give "
                    f"a {GNMAX_AGREEMENT:g} majority its label {GNMAX_CORRECT:.0%} of the time "
                    f"(for eps {self.epsilon:g}, delta {self.delta:g}, m {self.queries_max})")
        abstain = self.unanimous_abstention()
        if abstain <= 0.5:
            return None
        return (
            f"k = {self.subsamples} models is too few for w = {self.threshold:g} at lambda = {self.lam:.4g}: "
            f"even a unanimous query abstains with probability {abstain:.2f}; k >= {self.useful_subsamples()} "
            f"would answer most (for eps {self.epsilon:g}, delta {self.delta:g}, T {self.cutoff}, "
            f"m {self.queries_max})"
        )

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if self.classes == 2:  # two-class sessions' states stay byte for byte as before issue 49
            del data["classes"]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SubSampParameters:
        return cls(**data)


def _smallest_certified_threshold(params: SubSampParameters) -> float | None:
    """The smallest w that certifies ``params`` (its lambda and k), or None if none does."""
    try:
        fitted = replace(params, threshold=params.smallest_threshold())
        fitted.certify()
    except PcqrError:
        return None
    return fitted.threshold


def noise_scales(lam: float, split: str) -> tuple[float, float]:
    """(threshold, query) noise scales in gap units for lambda and a NOISE_SPLITS key.

    One AboveThreshold instance on dist (sensitivity 1; 2 in gap units) with threshold noise of
    scale b_t and query noise of scale b_q (gap units) is (2/b_t + 4/b_q)-DP (Lyu-Su-Li 2017,
    the privacy theorem of their Algorithm 1 with c = 1: the threshold moves by the sensitivity, the
    halting query's noise by twice it). With r = eps2 / eps1 and eps0 = 2/lambda: eps1 = eps0 / (1 + r)
    gives b_t = (1 + r) lambda, eps2 = r eps0 / (1 + r) gives b_q = 2 (1 + r) lambda / r; r = 1 is
    Algorithm 5's (2 lambda, 4 lambda).
    """
    r = NOISE_SPLITS[split]
    return (1 + r) * lam, 2 * (1 + r) / r * lam


def instance_epsilon(lam: float, split: str) -> float:
    """eps0 = 2/b_t + 4/b_q of one instance at the float scales the samplers use (:func:`noise_scales`),
    computed exactly in rationals and rounded up to a float: 2/lambda, never understated."""
    threshold, query = noise_scales(lam, split)
    exact = Fraction(2) / Fraction(threshold) + Fraction(4) / Fraction(query)
    approx = float(exact)
    return approx if Fraction(approx) >= exact else math.nextafter(approx, math.inf)


def sparse_vector_guarantee(lam: float, cutoff: int, delta: float, split: str = "equal") -> tuple[float, float]:
    """(eps, delta) of at most ``cutoff`` AboveThreshold instances, each 2/lam -DP
    (see :func:`composition_guarantee`)."""
    return composition_guarantee(instance_epsilon(lam, split), cutoff, delta)


def composition_guarantee(eps0: float, count: int, delta: float) -> tuple[float, float]:
    """(eps, delta) of ``count`` adaptively composed eps0-DP mechanisms.

    The better of basic composition (count eps0, 0) and advanced composition with
    delta' = delta / 2 (Dwork-Rothblum-Vadhan; Dwork-Roth Thm 3.20):
    sqrt(2 count log(2/delta)) eps0 + count eps0 (e^eps0 - 1).
    """
    basic = round_up(count * eps0)
    advanced = round_up(math.sqrt(2 * count * math.log(2 / delta)) * eps0 + count * eps0 * math.expm1(eps0))
    if basic <= advanced:
        return basic, 0.0
    return advanced, delta / 2


def tight_epsilon(epsilon: float, delta: float, queries_max: int, values: int = 1) -> float:
    """The eps the tight profile certifies: the requested one, or less when e^eps would make the
    sampler term (1 + e^eps) m v TAIL_SAMPLER_ERROR exceed 1/1000 of delta (eps beyond ~60: a
    certificate at a smaller eps is also one at the requested eps); ``values`` v: the sampled values
    per query, each within TAIL_SAMPLER_ERROR (1: a tail bit; c (2 J + 3) for gnmax over c > 2
    classes, SubSampParameters.sampler_error). A delta so small that the cap is not positive leaves
    the sampler no room at any eps: refused, naming the smallest --delta that leaves some (a larger
    one may still be needed for the rest of the certificate)."""
    cap = math.log(1e-3 * delta / (queries_max * values * TAIL_SAMPLER_ERROR)) - 1e-9
    if not cap > 0:
        least = 1e3 * queries_max * values * TAIL_SAMPLER_ERROR * math.exp(2e-9)
        shown = float(f"{math.nextafter(least, math.inf):.3g}")
        shown = shown if shown > least else float(f"{least * 1.001:.3g}")
        each = "m" if values == 1 else f"m {values:,}"
        raise PcqrError(f"--delta {delta:g}: the samplers' error over m = {queries_max:,} queries "
                        f"((1 + e^eps) {each} {TAIL_SAMPLER_ERROR:g}) leaves no room for the tight profile's "
                        f"certificate; --delta must be above {shown:g}")
    return min(epsilon, cap)


def answer_values(classes: int, sigma: float) -> int:
    """The sampled values an answer's noise costs, each within TAIL_SAMPLER_ERROR of exact: 1 (a tail
    bit) over two classes, or for gnmax over c > 2 classes c inverse-CDF values of a table spanning J
    at count_sigma(sigma), each within 2 J + 3 entries' error (noise.DiscreteLaplaceTail.values)."""
    return 1 if classes == 2 else classes * (2 * gaussian_tail_span(count_sigma(sigma)) + 3)


def _largest_paper_epsilon(epsilon: float, delta: float, cutoff: int, queries_max: int) -> float | None:
    """The largest eps below ``epsilon`` (3 significant digits, rounded down) whose Algorithm 5 lambda
    certifies by composition, or None: at a large eps the paper's composition (its eps0 grows with eps)
    no longer covers its sampler term (1 + e^eps) m TAIL_SAMPLER_ERROR. Bisection on a log scale; the
    value named is checked."""
    def fits(eps: float) -> bool:
        trial = _paper_trial(eps, delta, cutoff, queries_max)
        if not trial.composition_fits():
            return False
        try:  # paper()'s certificate (without the machine's limits, which k and w are checked against later)
            replace(trial, threshold=trial.smallest_threshold()).certify(enforce_limits=False)
        except PcqrError:
            return False
        return True

    low, high = 1e-3, epsilon
    if not fits(low):
        return None
    for _ in range(60):
        middle = math.sqrt(low * high)
        low, high = (middle, high) if fits(middle) else (low, middle)
    shown = float(f"{low:.3g}")
    while shown > 1e-3 and (shown > low or not fits(shown)):  # one step of the third digit down
        shown = float(f"{shown - 10 ** (math.floor(math.log10(shown)) - 2):.3g}")
    return shown if fits(shown) else None


def _paper_trial(epsilon: float, delta: float, cutoff: int, queries_max: int) -> SubSampParameters:
    """Algorithm 5's lambda at ``epsilon`` in a stability session (for its composition alone)."""
    return SubSampParameters(epsilon=epsilon, delta=delta, beta=0.05, cutoff=cutoff, queries_max=queries_max,
                             lam=paper_lambda(epsilon, delta, cutoff), subsamples=1, threshold=0.0,
                             subsamples_source="paper", threshold_source="smallest_certifiable")


def _paper_subsamples(lam: float, queries_max: int, cutoff: int, delta: float, beta: float) -> int:
    """Algorithm 5's k = 34 sqrt(2) lambda log(4 m T / min(delta, beta/2)), rounded up."""
    ratio = 4 * queries_max * cutoff / min(delta, beta / 2)  # beyond a float: from the logs
    log_ratio = math.log(ratio) if ratio < math.inf else (
        math.log(4 * queries_max * cutoff) - math.log(min(delta, beta / 2)))
    return math.ceil(34 * math.sqrt(2) * lam * log_ratio)


@functools.lru_cache(maxsize=256)
def _tight_lambda(epsilon: float, delta: float, cutoff: int, split: str = "equal") -> float:
    """The smallest float lambda whose T instances (each :func:`instance_epsilon`-DP) compose, by the
    exact optimal composition, to (epsilon, delta) or better."""
    lam = math.nextafter(2.0 / largest_eps0(cutoff, epsilon, delta), math.inf)
    while optimal_delta(instance_epsilon(lam, split), cutoff, epsilon) > delta:
        lam = math.nextafter(lam, math.inf)
    return lam



#: Why the guess gate answers two classes only (issue 49; docs/privacy.md, "the gates for c > 2 classes").
GUESS_OVER_CLASSES = ("over more than two classes a disagreement with the guess has no one other label to release: "
                      "an abstention would teach its student nothing, and a noisy argmax is not yet certified "
                      "together with the sparse vector")
#: The gates' parameter constructors (``--gate``): (profile, eps, delta, T, m, beta, k or None, w or
#: None) to the gate's certified parameters. A new gate is one entry here and one module in
#: pcqr.pipeline.gates.
GATE_PARAMETERS: dict[str, Callable[..., SubSampParameters]] = {
    "stability": SubSampParameters.stability,
    "guess": SubSampParameters.guess,
    "gnmax": SubSampParameters.gnmax,
}
#: The gates: what the coordinator tests (module docstring).
GATES = tuple(GATE_PARAMETERS)
