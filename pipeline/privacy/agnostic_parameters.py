"""The parameters of A_AgPrivCl (Algorithm 3 of papers/001), checked and certified: step 1, the
A_SubSamp it runs, and the privacy chain that proves the whole run (the algorithm itself, steps 2-5,
is :mod:`pcqr.pipeline.mechanisms.relabel`).

Step 1, from the run's (eps, delta, alpha, beta, m, n):

    n'        = floor(eps n / 56)
    T         = max(1, m alpha / 8 + (1/4) sqrt(3 m alpha log(m / beta)))   (we use ceil(T))
    eps'      = alpha max(1, sqrt(m alpha));   eps* = min(1, eps')
    eps_hat   = eps* / log(2 / delta)
    delta_hat = delta / (2 e^eps* log(2 / delta))

Privacy: the chain of Lemma 3.4 (Lemma 8 of papers/000), each link computed for
the actual run by :meth:`AgnosticParameters.privacy_chain`:

1. A_SubSamp on S_hat is (e1, d1)-DP with (e1, d1) <= (eps_hat, delta_hat): the
   sparse-vector composition bound of :mod:`pcqr.pipeline.privacy.subsamp` for its lambda, T,
   d1 its delta terms (composition, stability, sampler).
2. Resampling: one record of S'' appears r times in S_hat, r ~ Bin(n', 1/n').
   With R = floor(log(2/delta)), P(r > R) is bounded from above (summed exactly,
   :func:`binomial_upper_tail`; the paper's Chernoff bound says <= delta/2). Group
   privacy over R copies: (e2, d2) = (R e1, R e^(R e1) d1 + P(r > R)) in S''.
3. Lemma 3.1 (BNS15 Lemma 4.1): an algorithm that is (1, d2)-DP on the
   relabelled data is (4, 4 e d2)-DP on S' once A_Relabel (EM with eps~ = 1) is
   put in front; it needs e2 <= 1. The lemma is about the exact EM; ours is
   within total variation TV(n') of it (:func:`pcqr.pipeline.privacy.em_sampler.total_variation`,
   the scores are mistake counts on the n' rows of S'), and so is the whole
   composition A(Relabel(.)) (post-processing cannot increase TV). A mechanism
   within TV tau of a (4, d)-DP one is (4, d + (1 + e^4) tau)-DP, so this link is
   (4, 4 e d2 + (1 + e^4) TV(n')); the added term is reported in delta_sampler.
4. Amplification by subsampling without replacement (n' of n rows; Balle,
   Barthe, Gaboardi 2018 Thm 9 for substitution neighbours; [KLN+08, LQS12]):
   (log(1 + (n'/n)(e^4 - 1)), (n'/n) d3). It needs n' <= n: eps > 56 can give
   n' > n, which is refused.

Each link's delta is linear in the earlier one, so the chain carries the delta term
by term (composition, stability, sampler, resampling), each multiplied by the links'
factors; every product and sum is rounded up (:func:`pcqr.pipeline.mechanisms.exponential.round_up`).
The run is refused when the chain does not end within (eps, delta), by any amount.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.privacy.em_sampler import sampler_delta
from pcqr.pipeline.privacy.limits import MAX_COUNT, check_overrides, largest_fitting, paper_lambda, subsamp_limit_problem
from pcqr.pipeline.privacy.subsamp import (
    SubSampParameters, check_epsilon_delta, check_fraction, check_queries_max, delta_certificate, round_up, total_delta,
)

RELABEL_EPSILON = 1.0  # eps~ of Algorithm 2, fixed by the paper


def binomial_upper_tail(trials: int, p: float, above: int) -> float:
    """An upper bound on P(X > above) for X ~ Bin(trials, p) with trials p <= 1, tight to ~1e-9.

    The first 200 terms are summed in log space; the rest, whose consecutive ratios are
    at most trials p / ((i + 1)(1 - p)) < 1/2 there, are at most the last summed term.
    The sum is enlarged by 1e-9 relative for the rounding of lgamma, log and exp.
    """
    if above >= trials:
        return 0.0
    last = min(trials, above + 200)
    log_terms = [
        math.lgamma(trials + 1) - math.lgamma(i + 1) - math.lgamma(trials - i + 1)
        + i * math.log(p) + (trials - i) * math.log1p(-p)
        for i in range(above + 1, last + 1)
    ]
    if last < trials:
        log_terms.append(log_terms[-1])  # the omitted tail, at most the last term
    peak = max(log_terms)
    return float(min(1.0, math.exp(peak) * sum(math.exp(t - peak) for t in log_terms) * (1 + 1e-9)))


def step1(alpha: float, beta: float, delta: float, queries_max: int) -> tuple[float, float, float, float, float]:
    """Step 1 of Algorithm 3 but n': (T before rounding up, eps', eps*, eps_hat, delta_hat)."""
    m, log2d = queries_max, math.log(2 / delta)
    t_formula = max(1.0, m * alpha / 8 + 0.25 * math.sqrt(3 * m * alpha * math.log(m / beta)))
    eps_prime = alpha * max(1.0, math.sqrt(m * alpha))
    eps_star = min(1.0, eps_prime)
    return t_formula, eps_prime, eps_star, eps_star / log2d, delta / (2 * math.exp(eps_star) * log2d)


def subsamp_problem(alpha: float, beta: float, delta: float, queries_max: int, threshold: float | None) -> str | None:
    """Why the A_SubSamp that Algorithm 3 derives for m queries cannot run (pcqr.pipeline.privacy.limits), or None."""
    t_formula, _, _, eps_hat, delta_hat = step1(alpha, beta, delta, queries_max)
    cutoff = math.ceil(t_formula)
    lam = paper_lambda(eps_hat, delta_hat, cutoff)
    return subsamp_limit_problem(lam, cutoff, threshold or 0.0)


def check_subsamp_limits(alpha: float, beta: float, delta: float, queries_max: int, subsamples: int | None,
                         threshold: float | None, queries_name: str = "--queries-max") -> None:
    """Refuse (one line, with the largest --queries-max that fits) an A_AgPrivCl whose A_SubSamp,
    at Algorithm 3's derived T, eps_hat and delta_hat, exceeds pcqr.pipeline.privacy.limits: checked before
    SubSampParameters.paper, whose messages name options the user did not set here."""
    check_overrides(subsamples, threshold)
    problem = subsamp_problem(alpha, beta, delta, queries_max, threshold)
    if problem is None:
        return
    largest = largest_fitting(lambda m: subsamp_problem(alpha, beta, delta, m, threshold) is None,
                              1, min(queries_max, MAX_COUNT))
    advice = (f"the largest --queries-max that fits is {largest:,}" if largest is not None
              else "no --queries-max fits at this --alpha, --beta and --delta: use a larger --alpha")
    raise PcqrError(f"{queries_name} {queries_max:,} with --alpha {alpha:g}: in Algorithm 3's A_SubSamp, {problem}; "
                    f"{advice}")


def _scaled(terms: dict[str, float], factor: float) -> dict[str, float]:
    return {k: round_up(v * factor) for k, v in terms.items()}


@dataclass(frozen=True)
class AgnosticParameters:
    """Every derived parameter of one A_AgPrivCl run (all public)."""

    epsilon: float
    delta: float
    alpha: float
    beta: float
    queries_max: int
    rows: int  # n
    sample_rows: int  # n'
    cutoff_formula: float  # T of step 1 before rounding up
    eps_prime: float
    eps_star: float
    eps_hat: float
    delta_hat: float
    subsamp: SubSampParameters

    @classmethod
    def algorithm3(
        cls,
        epsilon: float,
        delta: float,
        alpha: float,
        beta: float,
        queries_max: int,
        rows: int,
        subsamples: int | None = None,
        threshold: float | None = None,
        queries_name: str = "--queries-max",
    ) -> AgnosticParameters:
        """Step 1 of Algorithm 3, then A_SubSamp's parameters for (eps_hat, delta_hat, T), refused
        (one line) beyond pcqr.pipeline.privacy.limits; ``queries_name`` is what m is called in the message."""
        check_epsilon_delta(epsilon, delta)
        check_fraction(alpha, "--alpha")
        check_fraction(beta, "--beta")
        check_queries_max(queries_max)
        m = queries_max
        sample_rows = math.floor(epsilon * rows / 56)
        if sample_rows > rows:
            raise PcqrError(
                f"--epsilon too large: A_AgPrivCl at eps = {epsilon:g} samples n' = floor(eps n / 56) = "
                f"{sample_rows} of n = {rows} rows; n' <= n needs its eps <= 56 (universal mode runs it at "
                "--epsilon / 2)"
            )
        if sample_rows < 1:
            raise PcqrError(
                f"agnostic mode samples n' = eps n / 56 = {epsilon * rows / 56:.3g} rows: "
                f"needs at least {math.ceil(56 / epsilon)} private rows, the dataset has {rows}"
            )
        check_subsamp_limits(alpha, beta, delta, m, subsamples, threshold, queries_name)
        t_formula, eps_prime, eps_star, eps_hat, delta_hat = step1(alpha, beta, delta, m)
        subsamp = SubSampParameters.paper(
            eps_hat, delta_hat, math.ceil(t_formula), m, beta, subsamples, threshold
        )
        params = cls(
            epsilon, delta, alpha, beta, m, rows, sample_rows, t_formula,
            eps_prime, eps_star, eps_hat, delta_hat, subsamp,
        )
        eps_final, delta_final = params.privacy_chain()[-1][1:]
        if eps_final > epsilon or delta_final > delta:
            raise PcqrError(
                f"--epsilon {epsilon} --delta {delta}: Algorithm 3's chain only certifies "
                f"({eps_final:.4g}, {delta_final:.3g})-DP for n = {rows}; see docs/privacy.md"
            )
        return params

    def links(self) -> list[tuple[str, float, dict[str, float]]]:
        """(step, eps, delta terms) for each link of Lemma 3.4's argument, for this run."""
        e1, terms = self.subsamp.guarantee()[0], asdict(self.subsamp.delta_terms())
        terms1 = {**terms, "resampling": 0.0}  # DeltaTerms' three and the resample's dropped tail
        repeats = math.floor(math.log(2 / self.delta))
        tail = binomial_upper_tail(self.sample_rows, 1 / self.sample_rows, repeats)
        e2 = round_up(repeats * e1)
        if e2 > 1:
            raise PcqrError(f"agnostic mode: group privacy over {repeats} repeats gives eps {e2:.3g} > 1")
        terms2 = _scaled(terms1, repeats * math.exp(e2))
        terms2["resampling"] = round_up(terms2["resampling"] + tail)
        e3 = 4.0
        terms3 = _scaled(terms2, 4 * math.e)
        relabel_em = sampler_delta(e3, self.sample_rows)
        terms3["sampler"] = round_up(terms3["sampler"] + relabel_em)
        rate = self.sample_rows / self.rows
        e4, terms4 = round_up(math.log1p(rate * math.expm1(e3))), _scaled(terms3, rate)
        return [
            ("A_SubSamp on S_hat (sparse-vector composition)", e1, terms1),
            (f"resampling: group privacy over r <= {repeats} repeats, P(r > {repeats}) <= {tail:.3g}", e2, terms2),
            (f"A_Relabel in front (Lemma 3.1: (1, d) -> (4, 4 e d)), plus (1 + e^4) TV = {relabel_em:.3g} "
             "for its sampled EM", e3, terms3),
            (f"subsampling n'/n = {rate:.4g} without replacement (amplification)", e4, terms4),
        ]

    def privacy_chain(self) -> list[tuple[str, float, float]]:
        """(step, eps, delta) for each link of Lemma 3.4's argument, for this run."""
        return [(step, eps, total_delta(terms)) for step, eps, terms in self.links()]

    def certificate(self) -> dict[str, float]:
        """The whole run's proven_epsilon, each delta term and proven_delta (the chain's last link)."""
        _, eps, terms = self.links()[-1]
        return delta_certificate(eps, terms)

    def summary(self) -> dict[str, Any]:
        """Every derived parameter, for the job summary."""
        data = asdict(self)
        data.pop("subsamp")
        data["cutoff"] = self.subsamp.cutoff
        data["privacy_chain"] = [
            {"step": step, "epsilon": e, "delta": d} for step, e, d in self.privacy_chain()
        ]
        return data

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["subsamp"] = self.subsamp.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AgnosticParameters:
        values = dict(data)
        values["subsamp"] = SubSampParameters.from_dict(values["subsamp"])
        return cls(**values)
