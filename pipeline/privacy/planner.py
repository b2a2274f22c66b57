"""Private sample sizes the papers' results require (``pcqr plan``).

Pure functions. "001"/"000" are papers/001 (HTML) and 000 (PDF) of Nandi-Bassily (ALT 2020;
001 Lemma 2.3/2.4, Thm 3.3, Lemma 3.5, Claim 3.6, Thm 4.1 = 000 Lemma 3/4, Thm 7, Lemma 9,
Claim 10, Thm 11), "004" is Alon-Bassily-Moran; ``L<n>`` are line numbers in those files.
Every figure is ``{"value", "kind", "ref"}``; kind ``exact`` = an explicit formula of a paper,
constants included; ``O()`` = a big-O bound with constant 1 (log factors kept); ``O~()`` =
a soft-O bound with constant 1 and its hidden log factors dropped. log is natural. The
factor log(m alpha / min(delta, beta/2)) of Thm 3.3 / 4.1 is floored at 1: it is below 1
only outside their regime m >= 8 log(1/(alpha beta)) / alpha (000 L848).

Bounded work (issue 11): every size is computed as its logarithm, so nothing is materialised
(2^d, 1/alpha^2 at alpha = 1e-300) and nothing overflows; a size beyond a float is reported as a
string ("1.23e+456", :func:`pcqr.pipeline.privacy.limits.show_big`), an integer one exactly while it is below
2^53. Every option's range is checked up front (:func:`check_inputs`). A_SubSamp's parameters
are Algorithm 5's even beyond what pcqr can run; the figure ``runs`` says whether it can
(pcqr.pipeline.privacy.limits) and, if not, why.
"""
from __future__ import annotations

import math
from typing import Any

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.privacy.gate_choice import CORRECT, correct_margin, gate_parameters, recommend_gate, recommend_labels
from pcqr.pipeline.privacy.limits import MAX_COUNT, MAX_CUTOFF, MAX_SUBSAMPLES, count_range, show_big
from pcqr.pipeline.privacy.subsamp import (SubSampParameters, check_epsilon_delta, check_fraction,
                                           check_queries_max)

Figure = dict[str, Any]
Algorithm = dict[str, Figure]
_EXACT_INTEGER = math.log(2.0**53)  # integer sizes below e^this are reported exactly

#: How the plan cites the papers (by name, year and result number: a user has the papers, not our copies of
#: them). Nandi-Bassily's numbers are the arXiv version's, with the ALT 2020 version's where they differ.
NB20 = "Nandi-Bassily 2020"
ABM19 = "Alon-Bassily-Moran 2019"
BCMNUW20 = "Bassily et al. 2020"


def fig(value: Any, kind: str, ref: str) -> Figure:
    """One figure of the plan: its value, how exact it is and where the formula is."""
    return {"value": value, "kind": kind, "ref": ref}


def size(log_value: float) -> float | str:
    """A size from its natural logarithm (a float, or a string beyond one: pcqr.pipeline.privacy.limits.show_big)."""
    return show_big(log_value)


def whole(log_value: float, exact: float | None = None) -> int | float | str:
    """An integer size (rounded up): exactly while below 2^53 (``exact``, the float itself, when given),
    else as :func:`size`."""
    if log_value < _EXACT_INTEGER:
        return math.ceil(exact if exact is not None else math.exp(log_value))
    return size(log_value)


def stump_vc(features: int) -> int:
    """An upper bound on the VC dimension of decision stumps over ``features`` = P features.

    On u points, stumps of one feature (x_j > t -> 1, or -> 0) induce at most 2u labellings,
    all-0 and all-1 shared by every feature, so at most 2 + 2P(u - 1) in all (cf. the count
    2p(u+1) of ALGORITHMS.md section 9). Shattering d points needs 2^d of them: the VC
    dimension is at most the largest d with 2^d <= 2 + 2P(d - 1), about log2 P + log2 log2 P
    (P = 1 gives 2, exactly the VC dimension of two-sided thresholds). P <= 2^53: d < 64 steps.
    """
    count_range("--features", features, 1, MAX_COUNT, "an exact float")
    d = 1
    while 2 ** (d + 1) <= 2 + 2 * features * d:
        d += 1
    return d


def check_inputs(d: int, alpha: float, beta: float, epsilon: float, delta: float, m: int,
                 gamma: float) -> None:
    """Refuse inputs outside their stated ranges (pcqr.pipeline.privacy.limits), one line naming the option:
    --vc and --queries-max in [1, 2^53], --alpha, --beta, --delta in [1e-300, 1), --epsilon in
    (0, 700], --gamma in [0, 1)."""
    check_fraction(alpha, "--alpha")
    check_fraction(beta, "--beta")
    check_epsilon_delta(epsilon, delta)
    check_queries_max(m)
    count_range("--vc", d, 1, MAX_COUNT, "an exact float")
    if not 0 <= gamma < 1:
        raise PcqrError(f"--gamma must be in [0, 1), got {gamma}")


def _subsamp(epsilon: float, delta: float, cutoff: float, m: int, beta: float) -> Algorithm:
    """Algorithm 5's lambda, k, w (001 L376-377) at the integer cutoff ceil(T), whether pcqr can
    run them (``runs``); all None when the arithmetic or pcqr's composition check
    (SubSampParameters.certify) refuses them (eps >> 1, or T or lambda beyond any float use)."""
    t = max(1, math.ceil(min(cutoff, MAX_COUNT)))
    src = f"{NB20}, Algorithm 5 (docs/privacy.md, Mechanism 1)"
    out = {"cutoff": fig(t, "exact", "ceil(T): c <= T allows the same bottoms")}
    try:
        p = SubSampParameters.paper(epsilon, delta, t, m, beta, enforce_limits=False)
    except PcqrError as exc:
        why = str(exc).split(":", 1)[-1].split(";")[0]
        none = fig(None, "exact", "refused by SubSampParameters.certify:" + why)
        return {**out, "lambda": none, "k": none, "w": none, "delta_stability": none, "k_useful": none, "runs": none}
    stab = "docs/privacy.md, Mechanism 1: the smallest w (a multiple of 1/2) with T p1 within delta"
    return {**out, "lambda": fig(p.lam, "exact", src), "k": fig(p.subsamples, "exact", src),
            "w": fig(p.threshold, "exact", stab),
            "delta_stability": fig(p.delta_terms().stability, "exact", "T p1 at that w"),
            "k_useful": fig(p.useful_subsamples(), "exact", USEFUL), "runs": _runs(p)}


def _runs(p: SubSampParameters) -> Figure:
    """Whether pcqr can run this A_SubSamp (pcqr.pipeline.privacy.limits), with the reason if not."""
    try:
        p.check_limits()
    except PcqrError as exc:
        return fig(False, "exact", f"beyond pcqr.pipeline.privacy.limits: {exc}")
    if p.subsamples > MAX_SUBSAMPLES:
        return fig(False, "exact", f"beyond pcqr.pipeline.privacy.limits: k above MAX_SUBSAMPLES = {MAX_SUBSAMPLES:,} "
                   "(pass a smaller --subsamples)")
    return fig(True, "exact", "within pcqr.pipeline.privacy.limits")


USEFUL = "smallest k at which a unanimous query abstains w.p. <= min(1/2, T/m) (SubSampParameters.useful_subsamples)"
TABLE_EPSILONS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)


def rows_needed(epsilons: list[float], delta: float, cutoff: int, m: int, beta: float,
                rows_per_model: int) -> list[dict[str, Any]]:
    """Per eps: A_SubSamp's lambda, smallest certifiable w, the smallest useful k, and the private
    rows that k needs at ``rows_per_model`` rows per model (k x rows_per_model); a refused eps
    gets its one-line reason instead."""
    count_range("--rows-per-model", rows_per_model, 1, MAX_COUNT, "an exact float")
    for eps in epsilons:  # the table's own grid is valid; a user's --epsilon may not be
        check_epsilon_delta(eps, delta)
    count_range("--cutoff (T)", cutoff, 1, MAX_CUTOFF, "pcqr.pipeline.privacy.limits.MAX_CUTOFF")
    check_queries_max(m)
    check_fraction(beta, "--beta")
    table = []
    for eps in epsilons:
        try:
            p = SubSampParameters.paper(eps, delta, cutoff, m, beta)
        except PcqrError as exc:
            table.append({"epsilon": eps, "refused": str(exc)})
            continue
        k = p.useful_subsamples()
        table.append({"epsilon": eps, "lambda": p.lam, "w": p.threshold, "k": k,
                      "private_rows": whole(math.log(k) + math.log(rows_per_model), k * rows_per_model),
                      **{key: v for key, v in p.certificate().items() if key != "proven_epsilon"}})
    return table


def _log_max1(log_value: float) -> float:
    """log max(1, x) from log x."""
    return max(0.0, log_value)


def _with_subsamp(log_n: float, t: float, error: float, ref: str, epsilon: float, delta: float,
                  m: int, beta: float) -> Algorithm:
    """A_SubSamp's O~() n and T, its error, and Algorithm 5 at that T (rows_per_model = n/k:
    below 1, the O~() constants and logs are what decide n)."""
    sub = _subsamp(epsilon, delta, t, m, beta)
    k = sub["k"]["value"]
    return {"n": fig(size(log_n), "O~()", ref), "T": fig(t, "O~()", ref), "error": fig(error, "exact", ref),
            "rows_per_model": fig(size(log_n - math.log(k)) if k else None, "O~()", "n/k"), **sub}


def subsamp_realizable(d: int, alpha: float, beta: float, epsilon: float, delta: float, m: int) -> Algorithm:
    """A_SubSamp realizable (001 Lemma 2.3 L120-122 = 000 Lemma 3 L420; BTT18 Thms 3.2, 3.4):
    n = O~(d/(eps alpha) max(1, sqrt(m alpha))), T = max(1, O~(m alpha)); error alpha."""
    ref = f"{NB20}, Lemma 2.3 (ALT: Lemma 3)"
    log_n = math.log(d) - math.log(epsilon) - math.log(alpha) + _log_max1(0.5 * math.log(m * alpha))
    return _with_subsamp(log_n, max(1.0, m * alpha), alpha, ref, epsilon, delta, m, beta)


def subsamp_agnostic(d: int, alpha: float, beta: float, epsilon: float, delta: float, m: int,
                     gamma: float = 0.0) -> Algorithm:
    """A_SubSamp agnostic (001 Lemma 2.4 L126-128 = 000 Lemma 4 L451; BTT18 Thms 3.2, 3.5):
    n = O~(d/(eps alpha^2) max(1, sqrt(m alpha))), T = max(1, O~(m (alpha + gamma)));
    error alpha + 3 gamma (gamma: the best error in the class)."""
    ref = f"{NB20}, Lemma 2.4 (ALT: Lemma 4)"
    log_n = math.log(d) - math.log(epsilon) - 2 * math.log(alpha) + _log_max1(0.5 * math.log(m * alpha))
    return _with_subsamp(log_n, max(1.0, m * (alpha + gamma)), alpha + 3 * gamma, ref, epsilon, delta, m, beta)


def agprivcl_step1(alpha: float, beta: float, delta: float, m: int) -> dict[str, float]:
    """Algorithm 3 step 1 (001 L177, 000 L671-676), all but n' = eps n / 56:
    T = max(1, m alpha/8 + sqrt(3 m alpha log(m/beta))/4); eps' = alpha max(1, sqrt(m alpha));
    eps_hat = min(1, eps')/log(2/delta); delta_hat = delta/(2 e^{min(1, eps')} log(2/delta)).
    """
    t = max(1.0, m * alpha / 8 + math.sqrt(3 * m * alpha * _log_ratio(m, beta)) / 4)
    eps_prime = alpha * max(1.0, math.sqrt(m * alpha))
    eps_star = min(1.0, eps_prime)
    log2d = math.log(2 / delta)
    return {"T": t, "eps_prime": eps_prime, "eps_hat": eps_star / log2d,
            "delta_hat": delta / (2 * math.exp(eps_star) * log2d)}


def _log_ratio(a: float, b: float) -> float:
    """log(a / b), from the logs when a / b is beyond a float."""
    q = a / b
    return math.log(q) if 0 < q < math.inf else math.log(a) - math.log(b)


def _agprivcl_logs(d: int, alpha: float, beta: float, delta: float, m: float) -> float:
    """(d log(1/alpha) + log(m/beta)) log^{3/2}(2/delta) log(m alpha / min(delta, beta/2)), the first
    and last factors floored at 1 (below 1 only outside the theorem's regime; finite: each factor
    is below 1e19 in the checked ranges)."""
    return (max(1.0, d * math.log(1 / alpha) + _log_ratio(m, beta)) * math.log(2 / delta) ** 1.5
            * max(1.0, _log_ratio(m * alpha, min(delta, beta / 2))))


def _agprivcl_log_logs(d: int, alpha: float, beta: float, delta: float, log_m: float) -> float:
    """log of :func:`_agprivcl_logs` at m = e^log_m (m_o of Algorithm 4 may be beyond a float)."""
    return (math.log(max(1.0, d * -math.log(alpha) + log_m - math.log(beta))) + 1.5 * math.log(math.log(2 / delta))
            + math.log(max(1.0, log_m + math.log(alpha) - math.log(min(delta, beta / 2)))))


def agprivcl(d: int, alpha: float, beta: float, epsilon: float, delta: float, m: int) -> Algorithm:
    """A_AgPrivCl (Algorithm 3; 001 Theorem 3.3 L185-189 = 000 Theorem 7 L706); error alpha + gamma.

    n (O()) = logs * max(1, sqrt(m) alpha^{3/2}) / (eps alpha^2), logs = _agprivcl_log_logs.
    n_exact = 56 n'/eps (step 1) with n' the largest of what the proof of 001 Lemma 3.5
    (000 Lemma 9) asks of |S''|: n' = 8000 logs max(1, sqrt(m) alpha^{3/2}) / alpha^2 (001 L235,
    000 L944); n' >= 7200 (d log(1/alpha) + log(8k/beta))/alpha^2 (001 L248, 000 L1103: Claim
    3.6/10, n_o >= 50 (d log(1/a) + log(1/b'))/a^2, at a = alpha/12, b' = beta/8k); and
    Lemma 3.2/6 (n' >= 256 (d + log(3/b))/a^2, 001 L165, 000 L619) at a = alpha/4, b = beta/4
    (000 L1156): 4096 (d + log(12/beta))/alpha^2. k is Algorithm 5's at (eps_hat, delta_hat, T);
    where it is refused, n'_7200 is left out (and n' says so).
    """
    ref = f"{NB20}, Theorem 3.3 (ALT: Theorem 7)"
    s1 = agprivcl_step1(alpha, beta, delta, m)
    sub = _subsamp(s1["eps_hat"], s1["delta_hat"], s1["T"], m, beta)
    k = sub["k"]["value"]
    la = math.log(alpha)
    log_shape = _log_max1(0.5 * math.log(m) + 1.5 * la)
    logs = _agprivcl_logs(d, alpha, beta, delta, m)
    parts = {"8000": math.log(8000) + math.log(logs) + log_shape - 2 * la,
             "4096": math.log(4096) + math.log(d + math.log(12 / beta)) - 2 * la}
    if k:
        parts["7200"] = math.log(7200) + math.log(d * -la + _log_ratio(8 * k, beta)) - 2 * la
    log_n_prime = max(parts.values())
    n_prime = whole(log_n_prime)
    if isinstance(n_prime, int):  # below 2^53 (so alpha > 1e-6): the same float formulas, exactly
        shape = max(1.0, math.sqrt(m) * alpha**1.5)
        direct = [8000 * logs * shape / alpha**2, 4096 * (d + math.log(12 / beta)) / alpha**2]
        if k:
            direct.append(7200 * (d * math.log(1 / alpha) + _log_ratio(8 * k, beta)) / alpha**2)
        n_prime = math.ceil(max(direct))
    n_exact = whole(math.log(56) + log_n_prime - math.log(epsilon),
                    56 * n_prime / epsilon if isinstance(n_prime, int) else None)
    alg3 = f"{NB20}, Algorithm 3 step 1 (docs/privacy.md, Mechanism 3)"
    log_m_min = math.log(8) + math.log(-la - math.log(beta)) - la
    return {"n": fig(size(math.log(logs) + log_shape - math.log(epsilon) - 2 * la), "O()", ref),
            "n_otilde": fig(size(math.log(d) - math.log(epsilon) - 2 * la + log_shape), "O~()", ref + ", logs dropped"),
            "n_exact": fig(n_exact, "exact", "n = 56 n'/eps, " + alg3),
            "n_prime": fig(n_prime, "exact", "max of the three n' below" + ("" if k else " (k refused: without n'_7200)")),
            "n_prime_8000": fig(size(parts["8000"]), "exact", f"{NB20}, proof of Lemma 3.5 (ALT: Lemma 9)"),
            "n_prime_7200": fig(size(parts["7200"]) if k else None, "exact", f"{NB20}, Claim 3.6 (ALT: Claim 10)"),
            "n_prime_4096": fig(size(parts["4096"]), "exact", f"{NB20}, Lemma 3.2 (ALT: Lemma 6) at (alpha/4, beta/4)"),
            "subsample_size": fig(size(log_n_prime - math.log(k)) if k else None, "exact", "n'/k rows per model"),
            "m_min": fig(size(log_m_min), "exact",
                         f"{NB20}, Lemma 3.5 (ALT: Lemma 9): m >= 8 log(1/(alpha beta))/alpha"),
            "m_condition_met": fig(math.log(m) >= log_m_min, "exact", "m >= m_min"),
            "error": fig("alpha + gamma", "exact", ref),
            **{key: fig(value, "exact", alg3) for key, value in s1.items()},
            **{key: value for key, value in sub.items() if key != "T"}}


def unvprivcl(d: int, alpha: float, beta: float, epsilon: float, delta: float, m: int) -> Algorithm:
    """A_UnvPrivCl (Algorithm 4; 001 Theorem 4.1 L302-308 = 000 Theorem 11 L1400):
    m_o = 32 (d log(1/alpha) + log(1/beta))/alpha (step 1, 001 L292, 000 L1383);
    n (O()) = Theorem 4.1 with m_o for m and max(1, sqrt(d) alpha log^{1/2}(1/alpha));
    n_otilde = d/(eps alpha^2) max(1, sqrt(d) alpha), independent of m.
    """
    ref = f"{NB20}, Theorem 4.1 (ALT: Theorem 11)"
    la = math.log(alpha)
    log_m_o = math.log(32) + math.log(d * -la - math.log(beta)) - la
    m_o = 32 * (d * math.log(1 / alpha) + math.log(1 / beta)) / alpha if log_m_o < 700 else math.inf
    m_first = min(math.ceil(m_o), m) if m_o < m else m
    log_shape = _log_max1(0.5 * math.log(d) + la + 0.5 * math.log(-la))
    first = agprivcl(d, alpha, beta, epsilon, delta, m_first)
    return {"n": fig(size(_agprivcl_log_logs(d, alpha, beta, delta, log_m_o) + log_shape - math.log(epsilon) - 2 * la),
                     "O()", ref),
            "n_otilde": fig(size(math.log(d) - math.log(epsilon) - 2 * la + _log_max1(0.5 * math.log(d) + la)),
                            "O~()", ref),
            "m_o": fig(m_o if m_o < math.inf else size(log_m_o), "exact",
                       f"{NB20}, Algorithm 4 step 1 (docs/privacy.md, Mechanism 5)"),
            "m_first": fig(m_first, "exact", "min(ceil(m_o), m) queries answered by A_AgPrivCl"),
            "n_exact_first_phase": fig(first["n_exact"]["value"], "exact", "A_AgPrivCl's n_exact at m_first"),
            "uses_sspp": fig(m > m_o, "exact", "queries after m_o are answered by h_priv = A_SSPP"),
            "privacy": fig("(2 eps, delta)", "exact", "A_AgPrivCl and A_SSPP both read S at eps: "
                           "basic composition; run each at eps/2 for (eps, delta)"),
            "error": fig("alpha + gamma", "exact", ref)}


def cover_log_bound(n_pub: float, d: int, alpha: float) -> float:
    """log of 2 (2 e n_pub / d)^{2d} exp(-alpha n_pub / 4): 004 Lemma 3.3, eq. (1), L395-403."""
    return _cover_log_bound_at(math.log(n_pub), d, alpha)


def _cover_log_bound_at(log_n: float, d: int, alpha: float) -> float:
    """:func:`cover_log_bound` at n_pub = e^log_n, without forming n_pub (-inf once alpha n_pub / 4
    is beyond any float: the bound is then far below every beta)."""
    log_decay = math.log(alpha / 4) + log_n
    if log_decay > 700:
        return -math.inf
    return math.log(2) + 2 * d * (math.log(2 * math.e / d) + log_n) - math.exp(log_decay)


def sspp_public_size(d: int, alpha: float, beta: float) -> int | float | str:
    """Smallest integer n_pub >= 8d/alpha with 2 (2 e n_pub/d)^{2d} e^{-alpha n_pub/4} <= beta.

    The log of the bound is concave in n_pub with its maximum at 8d/alpha (where it is
    2d log(16/alpha) + log 2 > 0), so it decreases after it: double, then bisect. Below the
    maximum the expression is also small for tiny n_pub, where Sauer's (e u/d)^d (u >= d) is
    not a bound on the growth function: that branch is meaningless and is not searched.
    The search runs on log n_pub; the answer is exact while below 2^53, else it is the log-space
    solution to a relative 1e-12, shown by :func:`size`.
    """
    target = math.log(beta)
    lo = math.log(8 * d) - math.log(alpha)  # the bound fails at the maximum; keep lo failing
    if _cover_log_bound_at(lo, d, alpha) <= target:
        return whole(lo)
    hi = lo + math.log(2)
    while _cover_log_bound_at(hi, d, alpha) > target:
        lo, hi = hi, hi + math.log(2)
    if hi < _EXACT_INTEGER:  # integers: the exact smallest one
        a, b = math.ceil(math.exp(lo)), math.ceil(math.exp(hi))
        while cover_log_bound(b, d, alpha) > target:  # exp's rounding: keep a failing, b fitting
            b += 1
        while a > 1 and cover_log_bound(a, d, alpha) <= target:
            a -= 1
        while b - a > 1:
            mid = (a + b) // 2
            a, b = (mid, b) if cover_log_bound(mid, d, alpha) > target else (a, mid)
        return b
    while hi - lo > 1e-12 * hi:
        middle = (lo + hi) / 2
        lo, hi = (middle, hi) if _cover_log_bound_at(middle, d, alpha) > target else (lo, middle)
    return size(hi)


def sspp(d: int, alpha: float, beta: float, epsilon: float) -> Algorithm:
    """A_SSPP (004 Algorithm 1, Thm 3.1 L265-293), pure eps-DP: n_priv = O((d log(1/alpha) +
    log(1/beta)) max(1/alpha^2, 1/(eps alpha))); n_pub = O((d log(1/alpha) + log(1/beta))/alpha)
    and, numerically, from Lemma 3.3."""
    ref = f"{ABM19}, Theorem 3.1 (docs/privacy.md, Mechanism 4)"
    la = math.log(alpha)
    log_base = math.log(d * -la - math.log(beta))
    return {"n": fig(size(log_base + max(-2 * la, -math.log(epsilon) - la)), "O()", ref),
            "n_pub": fig(sspp_public_size(d, alpha, beta), "exact", f"{ABM19}, Lemma 3.3 eq. (1), solved"),
            "n_pub_theorem": fig(size(log_base - la), "O()", ref),
            "error": fig("alpha + gamma", "exact", ref)}


def pap(d: int, alpha: float, beta: float, epsilon: float, delta: float) -> Algorithm:
    """A_PAP (003 Algorithm 3, Theorem 10 L427-446 with the dual VC dimension p < 2^{d+1}, Fact 4
    L210): n = O((d log(1/alpha) + log(1/beta))^{3/2} sqrt(p log(1/delta)) / (eps alpha^2));
    n_pub: the cover must be an alpha/4-cover w.p. 1 - beta/2 (Lemma 11 = 004 Lemma 3.3), solved.
    2^{d+1} is never formed: its log, (d + 1) log 2, is."""
    ref = f"{BCMNUW20}, Theorem 10 and Fact 4 (docs/privacy.md, Mechanism 7)"
    la = math.log(alpha)
    log_base = math.log(d * -la - math.log(beta))
    log_n = (1.5 * log_base + 0.5 * ((d + 1) * math.log(2) + math.log(math.log(1 / delta)))
             - math.log(epsilon) - 2 * la)
    return {"n": fig(size(log_n), "O()", ref),
            "n_pub": fig(sspp_public_size(d, alpha / 4, beta / 2), "exact",
                         f"{BCMNUW20}, Lemma 11 ({ABM19}, Lemma 3.3, at alpha/4, beta/2), solved"),
            "n_pub_theorem": fig(size(log_base - la), "O()", ref),
            "error": fig("alpha (every query of the class)", "exact", ref)}


def related_work_factor(m: float, alpha: float) -> float:
    """max(1, min(sqrt(m alpha), 1/alpha)): 001 "Related work" L44 (000 L191-210)."""
    return max(1.0, min(math.sqrt(m * alpha), 1 / alpha))


def btt_to_agprivcl_ratio(m: float, alpha: float) -> float:
    """BTT18's agnostic n over A_AgPrivCl's, both O~() (d/(eps alpha^2) times their shapes):
    max(1, sqrt(m alpha)) / max(1, sqrt(m) alpha^{3/2}), computed in logs. The Related-work
    comparison (001 L44) is of these two O~ bounds: it equals :func:`related_work_factor`."""
    la = math.log(alpha)
    return math.exp(_log_max1(0.5 * (math.log(m) + la)) - _log_max1(0.5 * math.log(m) + 1.5 * la))


def plan(d: int, alpha: float, beta: float, epsilon: float, delta: float, m: int,
         gamma: float = 0.0) -> dict[str, Any]:
    """Every algorithm's figures and the BTT18-to-A_AgPrivCl ratio (checked inputs)."""
    check_inputs(d, alpha, beta, epsilon, delta, m, gamma)
    args = (d, alpha, beta, epsilon, delta, m)
    algorithms = {"subsamp_realizable": subsamp_realizable(*args),
                  "subsamp_agnostic": subsamp_agnostic(*args, gamma=gamma),
                  "agprivcl": agprivcl(*args), "unvprivcl": unvprivcl(*args),
                  "sspp": sspp(d, alpha, beta, epsilon), "pap": pap(d, alpha, beta, epsilon, delta)}
    return {"algorithms": algorithms, "ratio_btt_agnostic_to_agprivcl": btt_to_agprivcl_ratio(m, alpha),
            "ratio_related_work": related_work_factor(m, alpha)}



# --- Which gate and how many labels: pcqr.pipeline.privacy.gate_choice (the rules session_plan applies) ---

def gate_table(rows: int, epsilon: float, delta: float, cutoff: int, m: int, beta: float,
               subsamples: int | None = None, classes: int = 2) -> dict[str, Any]:
    """``pcqr plan --private-rows N``: per gate, its noise, k, rows per model, the margin a query needs
    to be answered correctly CORRECT of the time, what bounds the answers, and the certificate; and the
    recommended gate (:func:`recommend_gate`, the rule ``pcqr train`` uses when --gate is not given).
    Over ``classes`` c > 2: the gates built for c classes (gnmax, stability; the guess gate refused), the
    rules of pcqr.pipeline.privacy.session_plan for c classes."""
    from pcqr.pipeline.privacy.limits import check_classes

    check_classes(classes)
    count_range("--private-rows (n)", rows, 1, MAX_COUNT, "an exact float")
    check_epsilon_delta(epsilon, delta)
    check_queries_max(m)
    check_fraction(beta, "--beta")
    count_range("--cutoff (T)", cutoff, 1, MAX_CUTOFF, "pcqr.pipeline.privacy.limits.MAX_CUTOFF")
    gates: list[dict[str, Any]] = []
    for gate in ("stability", "guess", "gnmax"):
        try:
            p = gate_parameters(gate, epsilon, delta, cutoff, m, beta, subsamples, classes).for_rows(rows)
        except PcqrError as exc:
            gates.append({"gate": gate, "refused": str(exc)})
            continue
        margin = correct_margin(p)
        gates.append({
            "gate": gate, "noise": "sigma" if gate == "gnmax" else "lambda", "scale": p.lam,
            "subsamples": p.subsamples, "rows_per_model": rows // p.subsamples,
            "margin_for_95": margin, "margin_share": None if margin is None else margin / p.subsamples,
            "answers": (f"the first m = {m:,}" if gate == "gnmax" else
                        f"until T = {cutoff} flips" if gate == "guess" else f"until T = {cutoff} abstentions"),
            **p.certificate(),
        })
    if classes == 2:
        gate, why = recommend_gate(rows, epsilon, delta, cutoff, m, beta, subsamples)
    else:
        from pcqr.pipeline.options import TrainingOptions
        from pcqr.pipeline.privacy.session_plan import choose_gate

        gate, why = choose_gate(TrainingOptions(state="", epsilon=epsilon, delta=delta, cutoff=cutoff, queries_max=m,
                                                beta=beta, subsamples=subsamples, classes=classes), rows)
    labels, labels_gate, labels_k, labels_why = recommend_labels(rows, epsilon, delta, cutoff, m, beta, subsamples,
                                                                 classes)
    return {"inputs": {"private_rows": rows, "subsamples": subsamples, "queries_max": m, "epsilon": epsilon,
                       "delta": delta, "cutoff": cutoff, "beta": beta, **({"classes": classes} if classes != 2 else {})},
            "gates": gates, "recommended_gate": gate, "why": why, "labels_recommended": labels,
            "labels_gate": labels_gate, "labels_subsamples": labels_k, "labels_why": labels_why,
            "defaults": default_plan(rows, epsilon, delta, cutoff, m, beta, subsamples, classes)}


def default_plan(rows: int, epsilon: float, delta: float, cutoff: int, m: int, beta: float,
                 subsamples: int | None = None, classes: int = 2) -> dict[str, Any]:
    """What ``pcqr train`` (and the one-shot ``pcqr answer``, and PrivateClassifier) plans when given
    neither --gate nor --labels, with the default --after-halt student: the plan's gate, k, the
    labels M it was planned for (None: all m) and why (pcqr.pipeline.privacy.session_plan)."""
    from pcqr.pipeline.options import TrainingOptions
    from pcqr.pipeline.privacy.session_plan import plan_realizable

    plan = plan_realizable(TrainingOptions(state="", epsilon=epsilon, delta=delta, cutoff=cutoff, queries_max=m,
                                           beta=beta, subsamples=subsamples, classes=classes), rows)
    return {"gate": plan.params.gate, "labels": plan.labels, "subsamples": plan.params.subsamples,
            "why": plan.gate_chosen}
