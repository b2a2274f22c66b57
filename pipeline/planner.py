"""Private sample sizes the papers' results require (``pcqr plan``).

Pure functions. "001"/"000" are papers/001 (HTML) and 000 (PDF) of Nandi-Bassily (ALT 2020;
001 Lemma 2.3/2.4, Thm 3.3, Lemma 3.5, Claim 3.6, Thm 4.1 = 000 Lemma 3/4, Thm 7, Lemma 9,
Claim 10, Thm 11), "004" is Alon-Bassily-Moran; ``L<n>`` are line numbers in those files.
Every figure is ``{"value", "kind", "ref"}``; kind ``exact`` = an explicit formula of a paper,
constants included; ``O()`` = a big-O bound with constant 1 (log factors kept); ``O~()`` =
a soft-O bound with constant 1 and its hidden log factors dropped. log is natural. The
factor log(m alpha / min(delta, beta/2)) of Thm 3.3 / 4.1 is floored at 1: it is below 1
only outside their regime m >= 8 log(1/(alpha beta)) / alpha (000 L848).
"""
from __future__ import annotations

import math
from typing import Any

from pipeline.errors import PcqrError
from pipeline.privacy import SubSampParameters, check_epsilon_delta, check_fraction, check_queries_max

Figure = dict[str, Any]
Algorithm = dict[str, Figure]

def fig(value: Any, kind: str, ref: str) -> Figure:
    """One figure of the plan: its value, how exact it is and where the formula is."""
    return {"value": value, "kind": kind, "ref": ref}


def stump_vc(features: int) -> int:
    """An upper bound on the VC dimension of decision stumps over ``features`` = P features.

    On u points, stumps of one feature (x_j > t -> 1, or -> 0) induce at most 2u labellings,
    all-0 and all-1 shared by every feature, so at most 2 + 2P(u - 1) in all (cf. the count
    2p(u+1) of ALGORITHMS.md section 9). Shattering d points needs 2^d of them: the VC
    dimension is at most the largest d with 2^d <= 2 + 2P(d - 1), about log2 P + log2 log2 P
    (P = 1 gives 2, exactly the VC dimension of two-sided thresholds).
    """
    if features < 1:
        raise PcqrError(f"--features must be at least 1, got {features}")
    d = 1
    while 2 ** (d + 1) <= 2 + 2 * features * d:
        d += 1
    return d


def check_inputs(d: int, alpha: float, beta: float, epsilon: float, delta: float, m: int,
                 gamma: float) -> None:
    """Refuse inputs outside the theorems' range, one line naming the option."""
    for name, value in (("--alpha", alpha), ("--beta", beta), ("--delta", delta)):
        if not 0 < value < 1:
            raise PcqrError(f"{name} must be in (0, 1), got {value}")
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise PcqrError(f"--epsilon must be a positive number, got {epsilon}")
    if m < 1:
        raise PcqrError(f"--queries-max must be at least 1, got {m}")
    if d < 1:
        raise PcqrError(f"--vc must be at least 1, got {d}")
    if not 0 <= gamma < 1:
        raise PcqrError(f"--gamma must be in [0, 1), got {gamma}")


def _subsamp(epsilon: float, delta: float, cutoff: float, m: int, beta: float) -> Algorithm:
    """Algorithm 5's lambda, k, w (001 L376-377) at the integer cutoff ceil(T); all None when
    pcqr's composition check (SubSampParameters.certify) refuses them (eps >> 1)."""
    t = max(1, math.ceil(cutoff))
    src = "Algorithm 5, 001 L376-377 (SubSampParameters.paper)"
    out = {"cutoff": fig(t, "exact", "ceil(T): c <= T allows the same bottoms")}
    try:
        p = SubSampParameters.paper(epsilon, delta, t, m, beta)
    except PcqrError as exc:
        why = str(exc).split(":", 1)[-1].split(";")[0]
        none = fig(None, "exact", "refused by SubSampParameters.certify:" + why)
        return {**out, "lambda": none, "k": none, "w": none, "delta_stability": none, "k_useful": none}
    stab = "ALGORITHMS.md section 2: smallest w (a multiple of 1/2) with T p1 within delta (pipeline.stability)"
    return {**out, "lambda": fig(p.lam, "exact", src), "k": fig(p.subsamples, "exact", src),
            "w": fig(p.threshold, "exact", stab),
            "delta_stability": fig(p.delta_terms().stability, "exact", "T p1 at that w"),
            "k_useful": fig(p.useful_subsamples(), "exact", USEFUL)}


USEFUL = "smallest k at which a unanimous query abstains w.p. <= min(1/2, T/m) (SubSampParameters.useful_subsamples)"
TABLE_EPSILONS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)


def rows_needed(epsilons: list[float], delta: float, cutoff: int, m: int, beta: float,
                rows_per_model: int) -> list[dict[str, Any]]:
    """Per eps: A_SubSamp's lambda, smallest certifiable w, the smallest useful k, and the private
    rows that k needs at ``rows_per_model`` rows per model (k x rows_per_model); a refused eps
    gets its one-line reason instead."""
    if rows_per_model < 1:
        raise PcqrError(f"--rows-per-model must be at least 1, got {rows_per_model}")
    for eps in epsilons:  # the table's own grid is valid; a user's --epsilon may not be
        check_epsilon_delta(eps, delta)
    if cutoff < 1:
        raise PcqrError(f"--cutoff (T) must be at least 1, got {cutoff}")
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
                      "private_rows": k * rows_per_model,
                      **{key: v for key, v in p.certificate().items() if key != "proven_epsilon"}})
    return table


def _with_subsamp(n: float, t: float, error: float, ref: str, epsilon: float, delta: float,
                  m: int, beta: float) -> Algorithm:
    """A_SubSamp's O~() n and T, its error, and Algorithm 5 at that T (rows_per_model = n/k:
    below 1, the O~() constants and logs are what decide n)."""
    sub = _subsamp(epsilon, delta, t, m, beta)
    k = sub["k"]["value"]
    return {"n": fig(n, "O~()", ref), "T": fig(t, "O~()", ref), "error": fig(error, "exact", ref),
            "rows_per_model": fig(n / k if k else None, "O~()", "n/k"), **sub}


def subsamp_realizable(d: int, alpha: float, beta: float, epsilon: float, delta: float, m: int) -> Algorithm:
    """A_SubSamp realizable (001 Lemma 2.3 L120-122 = 000 Lemma 3 L420; BTT18 Thms 3.2, 3.4):
    n = O~(d/(eps alpha) max(1, sqrt(m alpha))), T = max(1, O~(m alpha)); error alpha."""
    ref = "001 Lemma 2.3 L122 (000 Lemma 3 L420)"
    n = d / (epsilon * alpha) * max(1.0, math.sqrt(m * alpha))
    return _with_subsamp(n, max(1.0, m * alpha), alpha, ref, epsilon, delta, m, beta)


def subsamp_agnostic(d: int, alpha: float, beta: float, epsilon: float, delta: float, m: int,
                     gamma: float = 0.0) -> Algorithm:
    """A_SubSamp agnostic (001 Lemma 2.4 L126-128 = 000 Lemma 4 L451; BTT18 Thms 3.2, 3.5):
    n = O~(d/(eps alpha^2) max(1, sqrt(m alpha))), T = max(1, O~(m (alpha + gamma)));
    error alpha + 3 gamma (gamma: the best error in the class)."""
    ref = "001 Lemma 2.4 L128 (000 Lemma 4 L451)"
    n = d / (epsilon * alpha**2) * max(1.0, math.sqrt(m * alpha))
    return _with_subsamp(n, max(1.0, m * (alpha + gamma)), alpha + 3 * gamma, ref, epsilon, delta, m, beta)


def agprivcl_step1(alpha: float, beta: float, delta: float, m: int) -> dict[str, float]:
    """Algorithm 3 step 1 (001 L177, 000 L671-676), all but n' = eps n / 56:
    T = max(1, m alpha/8 + sqrt(3 m alpha log(m/beta))/4); eps' = alpha max(1, sqrt(m alpha));
    eps_hat = min(1, eps')/log(2/delta); delta_hat = delta/(2 e^{min(1, eps')} log(2/delta)).
    """
    t = max(1.0, m * alpha / 8 + math.sqrt(3 * m * alpha * math.log(m / beta)) / 4)
    eps_prime = alpha * max(1.0, math.sqrt(m * alpha))
    eps_star = min(1.0, eps_prime)
    log2d = math.log(2 / delta)
    return {"T": t, "eps_prime": eps_prime, "eps_hat": eps_star / log2d,
            "delta_hat": delta / (2 * math.exp(eps_star) * log2d)}


def _agprivcl_logs(d: int, alpha: float, beta: float, delta: float, m: float) -> float:
    """(d log(1/alpha) + log(m/beta)) log^{3/2}(2/delta) log(m alpha / min(delta, beta/2))."""
    return ((d * math.log(1 / alpha) + math.log(m / beta)) * math.log(2 / delta) ** 1.5
            * max(1.0, math.log(m * alpha / min(delta, beta / 2))))


def agprivcl(d: int, alpha: float, beta: float, epsilon: float, delta: float, m: int) -> Algorithm:
    """A_AgPrivCl (Algorithm 3; 001 Theorem 3.3 L185-189 = 000 Theorem 7 L706); error alpha + gamma.

    n (O()) = logs * max(1, sqrt(m) alpha^{3/2}) / (eps alpha^2), logs = _agprivcl_logs.
    n_exact = 56 n'/eps (step 1) with n' the largest of what the proof of 001 Lemma 3.5
    (000 Lemma 9) asks of |S''|: n' = 8000 logs max(1, sqrt(m) alpha^{3/2}) / alpha^2 (001 L235,
    000 L944); n' >= 7200 (d log(1/alpha) + log(8k/beta))/alpha^2 (001 L248, 000 L1103: Claim
    3.6/10, n_o >= 50 (d log(1/a) + log(1/b'))/a^2, at a = alpha/12, b' = beta/8k); and
    Lemma 3.2/6 (n' >= 256 (d + log(3/b))/a^2, 001 L165, 000 L619) at a = alpha/4, b = beta/4
    (000 L1156): 4096 (d + log(12/beta))/alpha^2. k is Algorithm 5's at (eps_hat, delta_hat, T).
    """
    ref = "001 Thm 3.3 L189 (000 Thm 7 L706)"
    s1 = agprivcl_step1(alpha, beta, delta, m)
    sub = _subsamp(s1["eps_hat"], s1["delta_hat"], s1["T"], m, beta)
    k = sub["k"]["value"]
    shape = max(1.0, math.sqrt(m) * alpha**1.5)
    logs = _agprivcl_logs(d, alpha, beta, delta, m)
    n8000 = 8000 * logs * shape / alpha**2
    n7200 = 7200 * (d * math.log(1 / alpha) + math.log(8 * k / beta)) / alpha**2
    n4096 = 4096 * (d + math.log(12 / beta)) / alpha**2
    n_prime = math.ceil(max(n8000, n7200, n4096))
    alg3 = "Algorithm 3 step 1, 001 L177 (000 L671)"
    m_min = 8 * math.log(1 / (alpha * beta)) / alpha
    return {"n": fig(logs * shape / (epsilon * alpha**2), "O()", ref),
            "n_otilde": fig(d / (epsilon * alpha**2) * shape, "O~()", ref + ", logs dropped"),
            "n_exact": fig(math.ceil(56 * n_prime / epsilon), "exact", "n = 56 n'/eps, " + alg3),
            "n_prime": fig(n_prime, "exact", "max of the three n' below"),
            "n_prime_8000": fig(n8000, "exact", "proof of 001 Lemma 3.5, L235 (000 Lemma 9, L944)"),
            "n_prime_7200": fig(n7200, "exact", "001 L248 (000 L1103), Claim 3.6/10"),
            "n_prime_4096": fig(n4096, "exact", "Lemma 3.2/6 at (alpha/4, beta/4), 000 L1156"),
            "subsample_size": fig(n_prime / k, "exact", "n'/k rows per model"),
            "m_min": fig(m_min, "exact", "001 Lemma 3.5 L215 (000 L848): m >= 8 log(1/(alpha beta))/alpha"),
            "m_condition_met": fig(m >= m_min, "exact", "m >= m_min"),
            "error": fig("alpha + gamma", "exact", ref),
            **{key: fig(value, "exact", alg3) for key, value in s1.items()},
            **{key: value for key, value in sub.items() if key != "T"}}


def unvprivcl(d: int, alpha: float, beta: float, epsilon: float, delta: float, m: int) -> Algorithm:
    """A_UnvPrivCl (Algorithm 4; 001 Theorem 4.1 L302-308 = 000 Theorem 11 L1400):
    m_o = 32 (d log(1/alpha) + log(1/beta))/alpha (step 1, 001 L292, 000 L1383);
    n (O()) = Theorem 4.1 with m_o for m and max(1, sqrt(d) alpha log^{1/2}(1/alpha));
    n_otilde = d/(eps alpha^2) max(1, sqrt(d) alpha), independent of m.
    """
    ref = "001 Thm 4.1 L306 (000 Thm 11 L1400)"
    m_o = 32 * (d * math.log(1 / alpha) + math.log(1 / beta)) / alpha
    m_first = min(math.ceil(m_o), m)
    shape = max(1.0, math.sqrt(d) * alpha * math.sqrt(math.log(1 / alpha)))
    first = agprivcl(d, alpha, beta, epsilon, delta, m_first)
    return {"n": fig(_agprivcl_logs(d, alpha, beta, delta, m_o) * shape / (epsilon * alpha**2), "O()", ref),
            "n_otilde": fig(d / (epsilon * alpha**2) * max(1.0, math.sqrt(d) * alpha), "O~()", ref),
            "m_o": fig(m_o, "exact", "Algorithm 4 step 1, 001 L292 (000 L1383)"),
            "m_first": fig(m_first, "exact", "min(ceil(m_o), m) queries answered by A_AgPrivCl"),
            "n_exact_first_phase": fig(first["n_exact"]["value"], "exact", "A_AgPrivCl's n_exact at m_first"),
            "uses_sspp": fig(m > m_o, "exact", "queries after m_o are answered by h_priv = A_SSPP"),
            "privacy": fig("(2 eps, delta)", "exact", "A_AgPrivCl and A_SSPP both read S at eps: "
                           "basic composition; run each at eps/2 for (eps, delta)"),
            "error": fig("alpha + gamma", "exact", ref)}


def cover_log_bound(n_pub: int, d: int, alpha: float) -> float:
    """log of 2 (2 e n_pub / d)^{2d} exp(-alpha n_pub / 4): 004 Lemma 3.3, eq. (1), L395-403."""
    return math.log(2) + 2 * d * math.log(2 * math.e * n_pub / d) - alpha * n_pub / 4


def sspp_public_size(d: int, alpha: float, beta: float) -> int:
    """Smallest integer n_pub >= 8d/alpha with 2 (2 e n_pub/d)^{2d} e^{-alpha n_pub/4} <= beta.

    The log of the bound is concave in n_pub with its maximum at 8d/alpha (where it is
    2d log(16/alpha) + log 2 > 0), so it decreases after it: double, then bisect. Below the
    maximum the expression is also small for tiny n_pub, where Sauer's (e u/d)^d (u >= d) is
    not a bound on the growth function: that branch is meaningless and is not searched.
    """
    target = math.log(beta)
    lo = math.ceil(8 * d / alpha)  # the bound fails at the maximum; keep lo failing
    if cover_log_bound(lo, d, alpha) <= target:
        return lo
    hi = 2 * lo
    while cover_log_bound(hi, d, alpha) > target:
        lo, hi = hi, 2 * hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if cover_log_bound(mid, d, alpha) > target else (lo, mid)
    return hi


def sspp(d: int, alpha: float, beta: float, epsilon: float) -> Algorithm:
    """A_SSPP (004 Algorithm 1, Thm 3.1 L265-293), pure eps-DP: n_priv = O((d log(1/alpha) +
    log(1/beta)) max(1/alpha^2, 1/(eps alpha))); n_pub = O((d log(1/alpha) + log(1/beta))/alpha)
    and, numerically, from Lemma 3.3."""
    ref = "004 Thm 3.1 L265-293"
    base = d * math.log(1 / alpha) + math.log(1 / beta)
    return {"n": fig(base * max(1 / alpha**2, 1 / (epsilon * alpha)), "O()", ref),
            "n_pub": fig(sspp_public_size(d, alpha, beta), "exact", "004 Lemma 3.3 eq. (1) L395-403, solved"),
            "n_pub_theorem": fig(base / alpha, "O()", ref),
            "error": fig("alpha + gamma", "exact", ref)}


def pap(d: int, alpha: float, beta: float, epsilon: float, delta: float) -> Algorithm:
    """A_PAP (003 Algorithm 3, Theorem 10 L427-446 with the dual VC dimension p < 2^{d+1}, Fact 4
    L210): n = O((d log(1/alpha) + log(1/beta))^{3/2} sqrt(p log(1/delta)) / (eps alpha^2));
    n_pub: the cover must be an alpha/4-cover w.p. 1 - beta/2 (Lemma 11 = 004 Lemma 3.3), solved."""
    ref = "003 Theorem 10 L427-446, Fact 4 L210"
    base = d * math.log(1 / alpha) + math.log(1 / beta)
    return {"n": fig(base**1.5 * math.sqrt(2 ** (d + 1) * math.log(1 / delta)) / (epsilon * alpha**2), "O()", ref),
            "n_pub": fig(sspp_public_size(d, alpha / 4, beta / 2), "exact",
                         "003 Lemma 11 (004 Lemma 3.3 at alpha/4, beta/2), solved"),
            "n_pub_theorem": fig(base / alpha, "O()", ref),
            "error": fig("alpha (every query of the class)", "exact", ref)}


def related_work_factor(m: float, alpha: float) -> float:
    """max(1, min(sqrt(m alpha), 1/alpha)): 001 "Related work" L44 (000 L191-210)."""
    return max(1.0, min(math.sqrt(m * alpha), 1 / alpha))


def btt_to_agprivcl_ratio(agnostic: Algorithm, ours: Algorithm) -> float:
    """BTT18's agnostic n over A_AgPrivCl's, both O~() (d/(eps alpha^2) times their shapes).

    The Related-work comparison (001 L44) is of these two O~ bounds: the ratio is
    max(1, sqrt(m alpha)) / max(1, sqrt(m) alpha^{3/2}) = :func:`related_work_factor`.
    """
    return float(agnostic["n"]["value"] / ours["n_otilde"]["value"])


def plan(d: int, alpha: float, beta: float, epsilon: float, delta: float, m: int,
         gamma: float = 0.0) -> dict[str, Any]:
    """Every algorithm's figures and the BTT18-to-A_AgPrivCl ratio (checked inputs)."""
    check_inputs(d, alpha, beta, epsilon, delta, m, gamma)
    args = (d, alpha, beta, epsilon, delta, m)
    algorithms = {"subsamp_realizable": subsamp_realizable(*args),
                  "subsamp_agnostic": subsamp_agnostic(*args, gamma=gamma),
                  "agprivcl": agprivcl(*args), "unvprivcl": unvprivcl(*args),
                  "sspp": sspp(d, alpha, beta, epsilon), "pap": pap(d, alpha, beta, epsilon, delta)}
    ratio = btt_to_agprivcl_ratio(algorithms["subsamp_agnostic"], algorithms["agprivcl"])
    return {"algorithms": algorithms, "ratio_btt_agnostic_to_agprivcl": ratio,
            "ratio_related_work": related_work_factor(m, alpha)}
