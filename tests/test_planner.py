"""``pcqr plan`` (pcqr.pipeline.privacy.planner, pcqr.jobs.plan): the papers' sample sizes and parameters."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from pcqr.jobs import plan as plan_job
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.privacy.planner import (
    agprivcl, cover_log_bound, plan, related_work_factor, sspp_public_size, stump_vc,
)
from pcqr.pipeline.privacy.limits import MAX_SUBSAMPLES, largest_lambda
from pcqr.pipeline.privacy.subsamp import SubSampParameters

KINDS = {"exact", "O()", "O~()"}
ALGORITHMS = {"subsamp_realizable", "subsamp_agnostic", "agprivcl", "unvprivcl", "sspp", "pap"}
M_GRID = [10 ** (e / 2) for e in range(2, 17)]  # 10 .. 1e8, half decades
ALPHA_GRID = [0.01, 0.02, 0.05, 0.1, 0.2, 0.3]
# The ratio must stay within [C_LO, C_HI] times the Related-work factor. Both bounds are
# O~() with the same convention (constant 1, logs dropped), so the identity is exact and
# any other shape (the sqrt(m) alpha variant, a swapped max/min) leaves this band.
C_LO, C_HI = 0.5, 2.0


def _ratio(m: float, alpha: float, d: int = 3) -> float:
    return plan(d, alpha, 0.05, 1.0, 1e-6, math.ceil(m))["ratio_btt_agnostic_to_agprivcl"]


def test_ratio_tracks_the_related_work_factor_in_every_regime() -> None:
    regimes = set()
    for alpha in ALPHA_GRID:
        for m in M_GRID:
            m = math.ceil(m)
            factor = related_work_factor(m, alpha)
            assert C_LO <= _ratio(m, alpha) / factor <= C_HI, (m, alpha)
            root = math.sqrt(m * alpha)
            regimes.add("flat" if root <= 1 else "sqrt(m alpha)" if root < 1 / alpha else "1/alpha")
    assert regimes == {"flat", "sqrt(m alpha)", "1/alpha"}  # the grid visits all three
    # Middle regime: grows like sqrt(m); top regime: saturates at 1/alpha, whatever m.
    assert _ratio(10**6, 0.01) / _ratio(10**4, 0.01) == pytest.approx(10, rel=1e-3)
    assert _ratio(10**8, 0.1) == pytest.approx(10, rel=1e-9) == _ratio(10**6, 0.1)
    assert _ratio(10, 0.05) == pytest.approx(1)


def test_the_check_would_catch_the_wrong_shape() -> None:
    """max(1, min(sqrt(m) alpha, 1/alpha)) (sqrt(m) alpha instead of sqrt(m alpha)) misses by
    1/sqrt(alpha) in the middle regime: the band above rejects it on this grid."""
    worst = max(_ratio(math.ceil(m), a) / max(1.0, min(math.sqrt(m) * a, 1 / a))
                for a in ALPHA_GRID for m in M_GRID)
    assert worst > 3 * C_HI


def test_ratio_is_computed_from_the_two_bounds() -> None:
    d, alpha, eps, m = 4, 0.03, 0.5, 200_000
    algorithms = plan(d, alpha, 0.1, eps, 1e-5, m)["algorithms"]
    btt = algorithms["subsamp_agnostic"]["n"]["value"]
    ours = algorithms["agprivcl"]["n_otilde"]["value"]
    assert btt == pytest.approx(d / (eps * alpha**2) * max(1, math.sqrt(m * alpha)))
    assert ours == pytest.approx(d / (eps * alpha**2) * max(1, math.sqrt(m) * alpha**1.5))
    assert plan(d, alpha, 0.1, eps, 1e-5, m)["ratio_btt_agnostic_to_agprivcl"] == pytest.approx(btt / ours)


@pytest.mark.parametrize("d, alpha, beta, eps, delta, m", [
    (1, 0.1, 0.05, 1.0, 1e-6, 1000),      # eps' = 1 exactly
    (3, 0.01, 0.01, 0.5, 1e-8, 100),      # eps' = alpha < 1, T = 1
    (2, 0.3, 0.1, 2.0, 1e-4, 10_000),     # eps' > 1: min(1, eps') = 1
    (10, 0.05, 0.2, 0.1, 1e-3, 5_000_000),
])
def test_agprivcl_parameters_are_algorithm_3s(d: int, alpha: float, beta: float, eps: float,
                                              delta: float, m: int) -> None:
    figures = agprivcl(d, alpha, beta, eps, delta, m)
    got = {key: f["value"] for key, f in figures.items()}
    got_refs = {key: f["ref"] for key, f in figures.items()}
    t = max(1, m * alpha / 8 + 0.25 * math.sqrt(3 * m * alpha * math.log(m / beta)))
    eps_prime = alpha * max(1, math.sqrt(m * alpha))
    eps_hat = min(1, eps_prime) / math.log(2 / delta)
    delta_hat = delta / (2 * math.exp(min(1, eps_prime)) * math.log(2 / delta))
    assert got["T"] == pytest.approx(t, rel=1e-12) and got["cutoff"] == math.ceil(t)
    assert got["eps_prime"] == pytest.approx(eps_prime, rel=1e-12)
    assert got["eps_hat"] == pytest.approx(eps_hat, rel=1e-12)
    assert got["delta_hat"] == pytest.approx(delta_hat, rel=1e-12)
    # the plan reports Algorithm 5's values even where pcqr would refuse to run them (pcqr.pipeline.privacy.limits)
    sub = SubSampParameters.paper(eps_hat, delta_hat, math.ceil(t), m, beta, enforce_limits=False)
    assert (got["lambda"], got["k"], got["w"]) == pytest.approx((sub.lam, sub.subsamples, sub.threshold))
    runs = sub.lam <= largest_lambda() and sub.subsamples <= MAX_SUBSAMPLES
    assert got["runs"] == runs and (runs or "beyond pcqr.pipeline.privacy.limits" in got_refs["runs"])
    # n' from the proof of Lemma 3.5 / 9 (8000, 7200 and Lemma 6's 256 at alpha/4, beta/4).
    logs = ((d * math.log(1 / alpha) + math.log(m / beta)) * math.log(2 / delta) ** 1.5
            * max(1, math.log(m * alpha / min(delta, beta / 2))))
    n8000 = 8000 * logs / alpha**2 * max(1, math.sqrt(m) * alpha**1.5)
    n7200 = 7200 * (d * math.log(1 / alpha) + math.log(8 * sub.subsamples / beta)) / alpha**2
    n256 = 256 * (d + math.log(3 / (beta / 4))) / (alpha / 4) ** 2
    n_prime = math.ceil(max(n8000, n7200, n256))
    assert got["n_prime"] == n_prime and got["n_exact"] == math.ceil(56 * n_prime / eps)
    assert eps * got["n_exact"] / 56 >= n_prime  # Algorithm 3's n' = eps n / 56 is enough
    assert got["m_condition_met"] == (m >= 8 * math.log(1 / (alpha * beta)) / alpha)


@pytest.mark.parametrize("d, alpha, beta", [
    (1, 0.05, 0.05), (2, 0.1, 1e-6), (4, 0.01, 0.1), (10, 0.3, 0.5), (1, 0.9, 0.9), (50, 0.02, 1e-3),
])
def test_n_pub_is_the_smallest_size_the_cover_bound_allows(d: int, alpha: float, beta: float) -> None:
    n = sspp_public_size(d, alpha, beta)

    def bound(k: int) -> float:  # 004 Lemma 3.3, without logs
        return 2 * (2 * math.e * k / d) ** (2 * d) * math.exp(-alpha * k / 4)

    assert cover_log_bound(n, d, alpha) <= math.log(beta) < cover_log_bound(n - 1, d, alpha)
    if d <= 4:
        assert bound(n) <= beta < bound(n - 1)
    assert all(cover_log_bound(k, d, alpha) <= math.log(beta) for k in range(n, 5 * n, max(1, n // 50)))
    theorem = (d * math.log(1 / alpha) + math.log(1 / beta)) / alpha  # O() of Thm 3.1
    if alpha <= 0.3:  # (near alpha = 1, log(1/alpha) -> 0 and the O() figure degenerates)
        assert 1 <= n / theorem <= 100
    sspp = plan(d, alpha, beta, 1.0, 1e-6, 100)["algorithms"]["sspp"]
    assert sspp["n_pub"] == {"value": n, "kind": "exact", "ref": sspp["n_pub"]["ref"]}


def test_uncertifiable_subsamp_parameters_are_reported_not_fatal() -> None:
    """At eps = 100 and T = 1e6 pcqr's composition check refuses Algorithm 5's lambda."""
    realizable = plan(1, 0.01, 0.01, 100.0, 1e-9, 10**8)["algorithms"]["subsamp_realizable"]
    assert realizable["lambda"]["value"] is None and "refused" in realizable["lambda"]["ref"]
    assert realizable["n"]["value"] > 0


def test_stump_vc_bounds_the_dichotomy_count() -> None:
    assert stump_vc(1) == 2  # two-sided thresholds on one feature: VC 2 exactly
    assert [stump_vc(p) for p in (1, 2, 10, 1000)] == sorted(stump_vc(p) for p in (1, 2, 10, 1000))
    rng = np.random.default_rng(0)
    for p, u in ((1, 5), (3, 6), (5, 8)):
        x = rng.standard_normal((u, p))
        labellings = set()
        for j in range(p):
            for t in [-np.inf, *x[:, j]]:
                above = tuple(x[:, j] > t)
                labellings.update({above, tuple(not a for a in above)})
        assert len(labellings) <= 2 + 2 * p * (u - 1)


def _invoke(*args: str):
    return CliRunner().invoke(plan_job.command, list(args))


BASE = ["--alpha", "0.05", "--beta", "0.05", "--epsilon", "1", "--delta", "1e-6", "--queries-max", "10000"]


def test_json_last_line_has_every_algorithm_and_kind() -> None:
    result = _invoke("--hypothesis", "interval", *BASE, "--json")
    assert result.exit_code == 0, (result.output, result.exception)
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert {"inputs", "algorithms", "ratio_btt_agnostic_to_agprivcl"} <= set(summary)
    assert set(summary["algorithms"]) == ALGORITHMS
    assert summary["inputs"]["vc"] == 2 and summary["inputs"]["queries_max"] == 10000
    for figures in summary["algorithms"].values():
        assert {"n", "error"} <= set(figures)
        assert all(f["kind"] in KINDS and f["ref"] for f in figures.values())
    assert summary["ratio_btt_agnostic_to_agprivcl"] == pytest.approx(related_work_factor(10000, 0.05))


def test_human_output_is_a_table() -> None:
    result = _invoke("--hypothesis", "stump", "--features", "10", *BASE)
    assert result.exit_code == 0, (result.output, result.exception)
    assert "d=6 (stump)" in result.output and "A_AgPrivCl (Algorithm 3)" in result.output
    assert any(line.split()[:1] == ["n_pub"] and "exact" in line for line in result.output.splitlines())
    assert "ratio BTT18 agnostic" in result.output


@pytest.mark.parametrize("args, option", [
    (["--vc", "1", "--alpha", "0", *BASE[2:]], "--alpha"),
    (["--vc", "1", "--alpha", "1", *BASE[2:]], "--alpha"),
    (["--vc", "1", *BASE[:2], "--beta", "1.5", *BASE[4:]], "--beta"),
    (["--vc", "1", *BASE[:6], "--delta", "0", *BASE[8:]], "--delta"),
    (["--vc", "1", *BASE[:4], "--epsilon", "-1", *BASE[6:]], "--epsilon"),
    (["--vc", "1", *BASE[:4], "--epsilon", "nan", *BASE[6:]], "--epsilon"),
    (["--vc", "1", *BASE[:8], "--queries-max", "0"], "--queries-max"),
    (["--vc", "0", *BASE], "--vc"),
    (["--vc", "2", "--hypothesis", "point", *BASE], "--vc"),
    (BASE, "--hypothesis"),
    (["--hypothesis", "stump", *BASE], "--features"),
    (["--hypothesis", "circle", *BASE], "--hypothesis"),
    (["--hypothesis", "point", "--features", "3", *BASE], "--features"),
    (["--vc", "1", *BASE[2:]], "--alpha"),
    (["--vc", "1", *BASE, "--gamma", "-0.1"], "--gamma"),
    (["--rows-per-model", "0"], "--rows-per-model"),
    (["--rows-per-model", "200", "--cutoff", "0"], "--cutoff"),
    (["--rows-per-model", "200", "--delta", "2"], "--delta"),
    (["--rows-per-model", "200", "--epsilon", "-1"], "--epsilon"),
    (["--rows-per-model", "200", "--queries-max", "0"], "--queries-max"),
    (["--rows-per-model", "200", "--beta", "1.5"], "--beta"),
])
def test_bad_input_is_one_line_naming_the_option(args: list[str], option: str) -> None:
    result = _invoke(*args)
    assert result.exit_code != 0
    assert isinstance(result.exception, PcqrError), (result.output, result.exception)
    message = str(result.exception)
    assert "\n" not in message and option in message
    assert result.stdout == ""


def test_rows_table_gives_the_smallest_useful_k_per_epsilon() -> None:
    result = _invoke("--rows-per-model", "200", "--epsilon", "3", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output.strip().splitlines()[-1])
    rows = summary["rows_needed"]
    assert [r["epsilon"] for r in rows] == sorted(r["epsilon"] for r in rows) and 3.0 in [r["epsilon"] for r in rows]
    for row in rows:
        assert row["private_rows"] == 200 * row["k"] and row["proven_delta"] <= 1e-6
        p = SubSampParameters.paper(row["epsilon"], 1e-6, 50, 10_000, 0.05, subsamples=row["k"])
        assert p.unanimous_abstention() <= 50 / 10_000
        fewer = SubSampParameters.paper(row["epsilon"], 1e-6, 50, 10_000, 0.05, subsamples=row["k"] - 1)
        assert fewer.unanimous_abstention() > 50 / 10_000
    ks = [r["k"] for r in rows]
    assert ks == sorted(ks, reverse=True)  # more eps, fewer models


def test_rows_table_says_when_a_given_k_is_too_few() -> None:
    result = _invoke("--rows-per-model", "200", "--epsilon", "3", "--subsamples", "2000", "--json")
    summary = json.loads(result.output.strip().splitlines()[-1])
    assert "k >= 4657" in summary["warning"]
