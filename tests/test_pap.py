"""A_PAP (``pcqr release``): the representative domain, PMW's noise on a small case, the error
falling with n, X_tilde's independence from private rows, the CLI and bad input.

Statistical assertions fail by chance with probability at most P_FAIL = 1e-6.
"""
from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy import stats

from pcqr.jobs.cli import main
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.report.evaluation import max_threshold_error
from pcqr.pipeline.hypotheses import make_class
from pcqr.pipeline.hypotheses.representatives import representative_domain
from pcqr.pipeline.mechanisms.pap import public_cells, public_key, release_queries
from pcqr.pipeline.mechanisms.pmw import DenseQueries, PMWParameters, private_multiplicative_weights
from pcqr.pipeline.privacy.noise import SeededNoise, discrete_laplace_pmf
from tests.conftest import P_FAIL, write_parquet


@pytest.mark.parametrize("name,features", [("threshold", 1), ("interval", 1), ("point", 1), ("stump", 3)])
def test_every_member_is_constant_on_each_representative_class(name, features) -> None:
    rng = np.random.default_rng(3)
    public = rng.integers(0, 6, size=(40, features)).astype(float)
    hclass = make_class(name, features)
    domain = representative_domain(hclass, public)
    points = domain.points()
    X = np.concatenate([rng.integers(-1, 8, size=(300, features)).astype(float),
                        rng.normal(2.5, 3, size=(300, features))])
    cls = domain.index(X)
    assert cls.min() >= 0 and cls.max() < domain.size()
    enumeration = hclass.enumerate(public)
    for i in range(enumeration.size()):
        h = enumeration.hypothesis(i)
        assert (h.predict(X) == h.predict(points[cls])).all(), h
    # every public point is the representative of its class
    assert (points[domain.index(public)] == public).all()
    assert (public_cells(domain, public) == np.unique(domain.index(public))).all()  # sorted, each class once
    assert public_cells(domain, public[:0]).size == 0


def test_threshold_domain_is_one_cell_per_public_value() -> None:
    public = np.array([[0.0], [1.0], [1.0], [3.0]])
    domain = representative_domain(make_class("threshold", 1), public)
    assert domain.size() == 3 and list(domain.points()[:, 0]) == [0.0, 1.0, 3.0]
    assert list(domain.index(np.array([[-9.0], [0.5], [0.6], [2.0], [9.0]]))) == [0, 0, 1, 1, 2]


def test_unsupported_class_and_huge_domain_are_refused() -> None:
    with pytest.raises(PcqrError, match="representative domain for threshold, interval, point, stump"):
        representative_domain(make_class("rectangle", 2), np.zeros((3, 2)))
    public = np.tile(np.arange(50.0), (5, 1)).T  # 5 features x 50 values: 50^5 cells
    with pytest.raises(PcqrError, match="representative domain would have"):
        representative_domain(make_class("stump", 5), public)


def _small_pmw(n: int, sparse: float, release: float, shift: float) -> PMWParameters:
    """Hand-set parameters for the exact small case (not certified: a noise test, not a run)."""
    return PMWParameters(1.0, 1e-6, 0.1, 0.1, n, 2, 1, 5, 0.05, shift / n, sparse, release)


def _tail(scale: float, a: np.ndarray) -> np.ndarray:
    """P(Z >= a) for Z ~ DLap(scale), elementwise (closed form)."""
    q = math.exp(-1 / scale)
    a = np.asarray(a, dtype=float)
    return np.where(a >= 1, q**a / (1 + q), 1 - q ** (1 - a) / (1 + q))


def test_pmw_noise_on_one_query_matches_the_exact_distribution() -> None:
    """One query, count 40 of n = 100 on a 2-point domain, A^0 uniform so est = 50 counts: the
    probability of a measurement is sum_z P(Z=z) [P(nu1 >= a1(z)) + P(nu1 < a1(z)) P(nu2 >= a2(z))]
    (binomial test), and a measurement is count + DLap(sigma2) (chi-square)."""
    n, count, sparse, release, shift = 100, 40, 2.0, 1.5, 6.0
    params = _small_pmw(n, sparse, release, shift)
    queries = DenseQueries(np.array([[1, 0]], dtype=np.uint8), np.array([count, n - count]))
    est = 0.5 * n
    z = np.arange(-80, 81)
    a1 = z - count + math.ceil(shift + est)
    a2 = z + count + math.ceil(shift - est)
    p1, p2 = _tail(2 * sparse, a1), _tail(2 * sparse, a2)
    expected = float(np.sum(discrete_laplace_pmf(z, sparse) * (p1 + (1 - p1) * p2)))
    runs, measured = 20_000, []
    updates = 0
    for seed in range(runs):
        result = private_multiplicative_weights(queries, params, SeededNoise(seed))
        if result.updated[0]:
            updates += 1
            measured.append(round(result.answers[0] * n) - count)
        else:
            assert result.answers[0] == pytest.approx(0.5)  # f(A^0): the uniform synthetic data
    assert stats.binomtest(updates, runs, expected).pvalue > P_FAIL
    draws = np.array(measured)
    support = np.arange(-8, 9)
    pmf = discrete_laplace_pmf(support, release)
    observed = np.bincount(np.clip(draws, -9, 9) + 9, minlength=19)
    tail = (1 - pmf.sum()) / 2
    assert stats.chisquare(observed, np.concatenate(([tail], pmf, [tail])) * draws.size).pvalue > P_FAIL


def test_pmw_parameters_follow_dwork_roth_and_certify() -> None:
    p = PMWParameters.dwork_roth(1.0, 1e-6, 0.05, 0.025, 10**6, 4000, 8000)
    assert p.updates == math.ceil(4 * math.log(4000) / 0.05**2) and p.eta == 0.025
    sigma = math.sqrt(32 * p.updates * math.log(2e6))
    assert p.sparse_scale == pytest.approx(sigma * (math.sqrt(512) + 1) / math.sqrt(512))
    assert p.release_scale == pytest.approx(sigma * (math.sqrt(512) + 1) / 2)
    eps, delta = p.guarantee()
    assert eps <= 1.0 and delta <= 1e-6 and p.accountant == "optimal_composition"
    # the optimal composition of both families is tighter than advanced composition per family (issue 29)
    advanced = replace(p, accountant="advanced")
    assert eps < 0.75 * advanced.guarantee()[0] < 0.75
    assert p.calibrated().noise_factor < 0.8 * advanced.calibrated().noise_factor
    with pytest.raises(PcqrError, match="accountant"):
        replace(p, accountant="rdp").guarantee()
    with pytest.raises(PcqrError, match="--alpha"):
        PMWParameters.dwork_roth(1.0, 1e-6, 1.5, 0.05, 100, 10, 10)
    # calibrated: one factor on every noise scale and T, spending the whole eps (and no more)
    tuned = p.calibrated()
    f = tuned.noise_factor
    assert 0.3 < f < 0.9 and tuned.constants == "calibrated"
    assert tuned.sparse_scale == pytest.approx(f * p.sparse_scale) and tuned.threshold == pytest.approx(f * p.threshold)
    assert tuned.release_scale == pytest.approx(f * p.release_scale)
    assert 0.999 < tuned.guarantee()[0] <= 1.0 and tuned.guarantee()[1] <= 1e-6
    assert tuned.accuracy()["rows_needed"] == pytest.approx(f * p.accuracy()["rows_needed"], rel=1e-6)


def test_max_threshold_error_equals_brute_force() -> None:
    rng = np.random.default_rng(11)
    public, data = rng.integers(0, 20, 15).astype(float), rng.integers(-3, 25, 200).astype(float)
    v = np.unique(public)
    table = {public_key(labels): rng.random() for labels in
             [np.r_[np.zeros(c), np.ones(v.size - c)] for c in range(v.size + 1)]
             + [np.r_[np.ones(c), np.zeros(v.size - c)] for c in range(v.size + 1)]}
    exact = max_threshold_error(lambda labels: table[public_key(labels)], public, data)
    brute = 0.0
    for t in np.arange(-5, 27, 0.125):  # every gap of the integer data and public values is sampled
        up = (v > t).astype(np.uint8)
        for labels, truth in ((up, np.mean(data > t)), (1 - up, np.mean(data <= t))):
            brute = max(brute, abs(table[public_key(labels)] - truth))
    assert exact == pytest.approx(brute)


def test_max_error_over_thresholds_falls_with_n(client) -> None:
    """Public N(0, 1) (100 points), private N(0.7, 1): the public prior is off by ~0.27; as n grows
    PMW corrects it (eps = 2, delta = 1e-6, alpha = 0.2, beta = 0.1)."""
    rng = np.random.default_rng(0)
    public = rng.normal(size=(100, 1))
    hclass = make_class("threshold", 1)
    errors, domains = [], []
    for n in (10_000, 100_000, 1_000_000):
        private = rng.normal(0.7, 1, size=(n, 1))
        release = release_queries(client, hclass, public, [client.scatter(private)], n, 2.0, 1e-6, 0.2, 0.1,
                                  SeededNoise(n))
        answer = dict(zip(release.keys, release.result.answers))
        errors.append(max_threshold_error(lambda labels: answer[public_key(labels)], public[:, 0], private[:, 0]))
        domains.append(release.domain)
        assert release.pmw.guarantee()[0] <= 2.0
    assert errors[2] < errors[1] <= errors[0] + 0.02 and errors[2] < 0.5 * errors[0], errors
    # X_tilde came from the public points alone: three different private datasets, one domain
    assert all(all((a == b).all() for a, b in zip(d.values, domains[0].values)) for d in domains)


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(7)
    pub = write_parquet(str(tmp_path / "public" / "p.parquet"),
                        {"x0": rng.normal(size=300), "b1": rng.integers(0, 2, 300).astype(float)})
    priv = write_parquet(str(tmp_path / "private" / "p.parquet"),
                         {"x0": rng.normal(0.3, 1, 50_000), "b1": rng.integers(0, 2, 50_000).astype(float),
                          "label": rng.integers(0, 2, 50_000)})
    return tmp_path, pub, priv


def _release(tmp, private, cluster, *extra: str) -> list[str]:
    return ["release", "--private", str(private), "--public", str(tmp / "public"), "--hypothesis", "threshold",
            "--features", "x0", "--epsilon", "4", "--alpha", "0.3", "--out", str(tmp / "table.parquet"),
            "--cluster", cluster, "--json", *extra]


def test_release_then_answer(files, capsys, thread_cluster_yaml) -> None:
    tmp, _, _ = files
    assert main(_release(tmp, tmp / "private", thread_cluster_yaml)) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["queries"] == 600 and summary["public_points"] == 300 and summary["representatives"] == 300
    assert summary["proven_epsilon"] <= 4 and summary["proven_delta"] <= 1e-6
    table = pq.read_table(tmp / "table.parquet")
    assert table.num_rows == 600 and set(table.column("class").to_pylist()) == {"threshold"}
    answers = np.asarray(table.column("answer"))
    assert ((answers >= 0) & (answers <= 1)).all()
    assert main(["release-answer", str(tmp / "table.parquet"), "--query", "threshold=0.1",
                 "--query", "feature=x0,threshold=0.1,direction=down", "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["answers"]
    up, down = out
    public = np.sort(pq.read_table(tmp / "public").column("x0").to_numpy())
    member = table.slice(up["member"], 1).to_pylist()[0]
    # the member labels the public points as the query does, and its answer is what was returned
    assert ((public > member["threshold"]) == (public > 0.1)).all() and member["direction"] == "up"
    assert up["answer"] == member["answer"]
    assert table.slice(down["member"], 1).to_pylist()[0]["direction"] == "down"


def test_calibrated_constants_spend_the_whole_budget(files, capsys, thread_cluster_yaml) -> None:
    tmp, _, _ = files
    assert main(_release(tmp, tmp / "private", thread_cluster_yaml, "--pmw-constants", "calibrated")) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["pmw_constants"] == "calibrated" and 3.99 < summary["proven_epsilon"] <= 4.0
    assert summary["accountant"] == "optimal_composition" and summary["proven_delta"] <= 1e-6
    meta = json.loads(pq.read_schema(tmp / "table.parquet").metadata[b"pcqr.release"])
    assert meta["pmw"]["constants"] == "calibrated" and meta["pmw"]["noise_factor"] < 1


def test_stumps_over_binary_and_real_features(files, capsys, thread_cluster_yaml) -> None:
    tmp, _, _ = files
    args = _release(tmp, tmp / "private", thread_cluster_yaml)
    args[args.index("threshold")] = "stump"
    args[args.index("--features") + 1] = "x0,b1"
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["representatives"] == 300 * 2
    assert main(["release-answer", str(tmp / "table.parquet"), "--query", "feature=b1,threshold=0.5", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["answers"]
    member = pq.read_table(tmp / "table.parquet").slice(row["member"], 1).to_pylist()[0]
    assert member["feature"] == "b1" and 0 <= member["threshold"] < 1


def test_table_does_not_depend_on_private_rows_except_answers(files, capsys, thread_cluster_yaml) -> None:
    tmp, _, _ = files
    other = write_parquet(str(tmp / "other" / "p.parquet"), {"x0": np.full(1000, 5.0), "b1": np.zeros(1000)})
    assert main(_release(tmp, tmp / "private", thread_cluster_yaml)) == 0
    first = pq.read_table(tmp / "table.parquet")
    assert main(_release(tmp, tmp / "other", thread_cluster_yaml, "--overwrite")) == 0
    second = pq.read_table(tmp / "table.parquet")
    capsys.readouterr()
    meta = [json.loads(t.schema.metadata[b"pcqr.release"]) for t in (first, second)]
    assert meta[0]["public_fingerprint"] == meta[1]["public_fingerprint"] and other
    for column in ("class", "feature", "threshold", "direction", "public_labelling"):
        assert first.column(column).equals(second.column(column))


@pytest.mark.parametrize(
    "case,needle",
    [("columns", "columns do not match the public features"), ("empty", "no rows"),
     ("rectangle", "representative domain for"), ("finite", "--hypothesis finite needs"),
     ("delta", "--delta must be in (0, 1)")],
)
def test_release_bad_input(case, needle, files, capsys, thread_cluster_yaml) -> None:
    tmp, _, _ = files
    args = _release(tmp, tmp / "private", thread_cluster_yaml)
    if case == "columns":
        write_parquet(str(tmp / "wrong" / "p.parquet"), {"y": [1.0, 2.0]})
        args[args.index("--public") + 1] = str(tmp / "wrong")
        args[args.index("--features"): args.index("--features") + 2] = []
        args[args.index("--private") + 1] = str(tmp / "private")
    elif case == "empty":
        write_parquet(str(tmp / "empty" / "p.parquet"), {"x0": pa.array([], pa.float64())})
        args[args.index("--public") + 1] = str(tmp / "empty")
    elif case in ("rectangle", "finite"):
        args[args.index("threshold")] = case
        args[args.index("--features") + 1] = "x0,b1"
    else:
        args += ["--delta", "1.5"]
    code = main(args)
    _, err = capsys.readouterr()
    assert code != 0 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp / "table.parquet").exists()


def test_release_answer_bad_input(files, capsys, thread_cluster_yaml) -> None:
    tmp, _, _ = files
    assert main(_release(tmp, tmp / "private", thread_cluster_yaml)) == 0
    write_parquet(str(tmp / "public2" / "p.parquet"), {"x0": np.arange(10.0), "b1": np.zeros(10)})
    cases = [
        (["--query", "threshold=0.1", "--public", str(tmp / "public2")], "fingerprint differs"),
        (["--query", "feature=b1,threshold=0.1"], "not one of the class's features"),
        (["--query", "threshold=abc"], "threshold must be a number"),
        (["--query", "class=interval,low=0,high=1"], "a threshold table answers threshold queries"),
    ]
    for extra, needle in cases:
        capsys.readouterr()
        code = main(["release-answer", str(tmp / "table.parquet"), *extra])
        _, err = capsys.readouterr()
        assert code != 0 and needle in err, (extra, err)
    code = main(["release-answer", str(tmp / "public" / "p.parquet"), "--query", "threshold=0"])
    assert code != 0 and "not a pcqr release table" in capsys.readouterr().err
