"""Bounded work (issue 11, Deliver 4): every numeric parameter of plan, train, one-shot answer,
learn and release is checked against what can run (pcqr.pipeline.privacy.limits) before anything is charged,
read or built: one line naming the option, exit 2, nothing written, the ledger unchanged."""
from __future__ import annotations

import json
import math
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pcqr.jobs.cli import main
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.hypotheses import check_enumerable, make_class
from pcqr.pipeline.privacy.limits import (
    MAX_CUTOFF, MAX_DICHOTOMIES, MAX_SUBSAMPLES, MAX_TAIL_ENTRIES, largest_lambda, paper_lambda, tail_entries,
)
from pcqr.pipeline.privacy.agnostic_parameters import AgnosticParameters
from pcqr.pipeline.privacy.noise import DiscreteLaplaceTail
from pcqr.pipeline.privacy.tail_window import tail_span
from pcqr.pipeline.privacy.subsamp import SubSampParameters
from tests.conftest import write_session_data

BIG = str(10**20)  # an integer beyond every count limit (and beyond int64)
PLAN = ["plan", "--vc", "2", "--alpha", "0.1", "--epsilon", "1", "--queries-max", "1000"]
SECONDS = 3.0  # a refusal builds nothing: it takes milliseconds (this leaves room for a loaded machine)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return write_session_data(tmp_path_factory.mktemp("limits"))


def _ledger(path: Path) -> list[tuple] | None:
    """Every row of every table of a ledger (None if there is none)."""
    if not path.exists():
        return None
    with sqlite3.connect(path) as db:
        tables = [name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        return [(t, *row) for t in tables for row in db.execute(f"SELECT * FROM {t}")]


def _with(args: list[str], option: str, value: str) -> list[str]:
    """``args`` with ``option`` set to ``value`` (replaced if present, else appended)."""
    if option in args:
        at = args.index(option)
        return [*args[: at + 1], value, *args[at + 2 :]]
    return [*args, option, value]


def _command(kind: str, data: Path, work: Path) -> list[str]:
    """A valid command of each kind (realizable defaults; MECHANICS-like k so training would be cheap)."""
    private, queries = str(data / "private"), str(data / "queries")
    ledger = ["--ledger", str(work / "ledger.sqlite")]
    if kind == "plan":
        return list(PLAN)
    if kind == "train":
        return ["train", "--private", private, "--state", str(work / "state"), "--subsamples", "50", *ledger]
    if kind == "answer":
        return ["answer", "--private", private, "--queries", queries, "--state", str(work / "state"),
                "--log", str(work / "log"), "--subsamples", "50", *ledger]
    if kind == "learn":
        return ["learn", "--private", private, "--public", queries, "--hypothesis", "threshold", "--features", "x0",
                "--out", str(work / "model.json"), *ledger]
    assert kind == "release"
    return ["release", "--private", private, "--public", queries, "--hypothesis", "threshold", "--features", "x0",
            "--out", str(work / "table.parquet"), *ledger]


# (command, options set, words the one line must hold)
CASES: list[tuple[str, dict[str, str | None], list[str]]] = [
    ("plan", {"--vc": BIG}, ["--vc", "9,007,199,254,740,992"]),
    ("plan", {"--vc": "0"}, ["--vc"]),
    ("plan", {"--alpha": "1e-320"}, ["--alpha", "1e-300"]),
    ("plan", {"--alpha": "nan"}, ["--alpha"]),
    ("plan", {"--beta": "1"}, ["--beta"]),
    ("plan", {"--epsilon": "inf"}, ["--epsilon", "700"]),
    ("plan", {"--epsilon": "1e300"}, ["--epsilon", "700"]),
    ("plan", {"--delta": "1e-320"}, ["--delta"]),
    ("plan", {"--queries-max": BIG}, ["--queries-max"]),
    ("plan", {"--gamma": "inf"}, ["--gamma"]),
    ("plan", {"--vc": None, "--hypothesis": "stump", "--features": BIG}, ["--features"]),
    ("plan", {"--rows-per-model": BIG}, ["--rows-per-model"]),
    ("plan", {"--rows-per-model": "100", "--cutoff": str(MAX_CUTOFF + 1)}, ["--cutoff", "1,000,000"]),
    ("plan", {"--rows-per-model": "100", "--subsamples": BIG}, ["--subsamples", "1,000,000"]),
    ("train", {"--epsilon": "1e-300"}, ["--epsilon 1e-300", "noise table", "the smallest --epsilon that fits is 0.00655"]),
    ("train", {"--epsilon": "1e-6"}, ["--epsilon 1e-06", "MAX_TAIL_ENTRIES", "the smallest --epsilon that fits"]),
    ("train", {"--epsilon": "0.01", "--cutoff": "1000000"}, ["--epsilon 0.01", "(or --cutoff at most"]),
    ("train", {"--epsilon": "1e300"}, ["--epsilon", "700"]),
    ("train", {"--epsilon": "nan"}, ["--epsilon"]),
    ("train", {"--epsilon": "-inf"}, ["--epsilon"]),
    ("train", {"--delta": "1e-320"}, ["--delta", "1e-300"]),
    ("train", {"--delta": "0"}, ["--delta"]),
    ("train", {"--cutoff": BIG}, ["--cutoff", "1,000,000"]),
    ("train", {"--cutoff": str(10**7)}, ["--cutoff", "1,000,000"]),
    ("train", {"--queries-max": BIG}, ["--queries-max"]),
    ("train", {"--beta": "5e-324"}, ["--beta"]),
    ("train", {"--subsamples": str(10**12)}, ["--subsamples", "1,000,000"]),
    ("train", {"--threshold": "1e300"}, ["--threshold"]),
    ("train", {"--threshold": "inf"}, ["--threshold"]),
    ("train", {"--threshold": "nan"}, ["--threshold"]),
    ("train", {"--mode": "agnostic", "--hypothesis": "threshold", "--features": "x0", "--alpha": "1e-300",
               "--subsamples": "10"}, ["--alpha 1e-300", "noise table", "use a larger --alpha"]),
    ("train", {"--mode": "agnostic", "--hypothesis": "threshold", "--features": "x0", "--queries-max": str(10**8),
               "--subsamples": "10"}, ["--queries-max 100,000,000", "the largest --queries-max that fits is"]),
    ("train", {"--mode": "agnostic", "--hypothesis": "rectangle", "--features": "x0,x1", "--epsilon": "4",
               "--subsamples": "10"}, ["--hypothesis rectangle", "A_Relabel's sample", "at most 723 rows fit"]),
    ("train", {"--mode": "universal", "--hypothesis": "halfspace", "--features": "x0,x1", "--alpha": "0.01",
               "--queries-max": "100000", "--subsamples": "10"}, ["--hypothesis halfspace", "m_o queries"]),
    ("train", {"--mode": "agnostic", "--hypothesis": "threshold", "--features": "x0", "--alpha": "1.5"}, ["--alpha"]),
    ("answer", {"--epsilon": "1e-300"}, ["--epsilon 1e-300", "the smallest --epsilon that fits"]),
    ("answer", {"--cutoff": BIG}, ["--cutoff"]),
    ("answer", {"--threshold": "1e300"}, ["--threshold"]),
    ("answer", {"--subsamples": str(10**12)}, ["--subsamples"]),
    ("answer", {"--delta": "1e-320"}, ["--delta"]),
    ("answer", {"--queries-max": BIG}, ["--queries-max"]),
    ("answer", {"--beta": "0"}, ["--beta"]),
    ("learn", {"--epsilon": "1e-300"}, ["--epsilon", "1e-15"]),
    ("learn", {"--epsilon": "700"}, ["--epsilon 700", "proves nothing"]),
    ("learn", {"--epsilon": "nan"}, ["--epsilon"]),
    ("learn", {"--beta": "0"}, ["--beta"]),
    ("learn", {"--hypothesis": "rectangle", "--features": "x0,x1"}, ["--hypothesis rectangle", "--public",
                                                                      "at most 723 rows fit"]),
    ("release", {"--epsilon": "700"}, ["PMW's composition only certifies"]),
    ("release", {"--epsilon": "0"}, ["--epsilon"]),
    ("release", {"--alpha": "1e-300"}, ["--alpha", "2e-150"]),
    ("release", {"--beta": "1e-300"}, ["--beta", "2e-300"]),
    ("release", {"--delta": "1e-320"}, ["--delta"]),
]


@pytest.mark.parametrize("kind, options, needles", CASES,
                         ids=[f"{k}-{'-'.join(f'{o}={v}' for o, v in opts.items())}" for k, opts, _ in CASES])
def test_extreme_values_are_refused_in_one_line_before_anything(kind, options, needles, data, tmp_path, capsys) -> None:
    args = _command(kind, data, tmp_path)
    for option, value in options.items():
        if value is None:  # drop the option and its value
            at = args.index(option)
            args = [*args[:at], *args[at + 2 :]]
        else:
            args = _with(args, option, value)
    before = _ledger(tmp_path / "ledger.sqlite")
    start = time.perf_counter()
    code = main(args)
    elapsed = time.perf_counter() - start
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2, (code, err)
    assert len(lines) == 1 and lines[0].startswith("pcqr: error: "), err
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert out == ""
    assert elapsed < SECONDS, f"{elapsed:.2f} s: was something built?"
    assert sorted(os.listdir(tmp_path)) in ([], ["ledger.sqlite"]), os.listdir(tmp_path)  # no state, log, model
    assert _ledger(tmp_path / "ledger.sqlite") == before


def test_plan_of_a_huge_class_is_quick_and_small() -> None:
    """pcqr plan --vc 1e11 grew to 23.5 GB (2^(d+1) as an integer): now logarithms, in a subprocess
    capped at 4 GB, with its peak memory measured."""
    script = (
        "import resource, time, json, io, contextlib\n"
        "resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))\n"
        "from pcqr.jobs.cli import main\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "start = time.perf_counter()\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        "    code = main(['plan', '--vc', '100000000000', '--alpha', '0.1', '--epsilon', '1', '--queries-max',"
        " '1000', '--json'])\n"
        "grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before\n"
        "print(json.dumps({'code': code, 'seconds': time.perf_counter() - start, 'grown_kb': grown,"
        " 'summary': json.loads(out.getvalue().splitlines()[-1])}))\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=root, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    import json

    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["code"] == 0 and result["grown_kb"] < 200 * 1024 and result["seconds"] < 10, result
    pap = result["summary"]["algorithms"]["pap"]["n"]["value"]  # (.)^1.5 sqrt(2^(d+1) log(1/delta)) / (eps alpha^2)
    d, alpha, delta = 10**11, 0.1, 1e-6
    log10 = (1.5 * math.log(d * math.log(1 / alpha) + math.log(20)) + 0.5 * ((d + 1) * math.log(2)
             + math.log(math.log(1 / delta))) - 2 * math.log(alpha)) / math.log(10)
    mantissa, exponent = pap.split("e+")
    assert int(exponent) == math.floor(log10) and float(mantissa) == pytest.approx(10 ** (log10 % 1), rel=1e-2)


def test_sizes_beyond_a_float_are_strings_never_inf(capsys) -> None:
    code = main([*PLAN[:4], "1e-300", "--epsilon", "1e-300", "--queries-max", str(2**53), "--delta", "1e-300",
                 "--beta", "1e-300", "--json"])
    out, _ = capsys.readouterr()
    assert code == 0
    values = []  # every value of the JSON (its words, like "Nandi-Bassily" in a citation, are not values)

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key != "ref":
                    walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
        else:
            values.append(node)

    walk(json.loads(out.strip().splitlines()[-1], parse_constant=lambda name: name))
    assert not [v for v in values if str(v).lower() in ("inf", "-inf", "infinity", "-infinity", "nan")], values
    assert '"1e+300"' in out or "e+3" in out  # the O~() n of A_SubSamp at alpha = eps = 1e-300


@pytest.mark.parametrize("name, features", [("threshold", 1), ("interval", 1), ("point", 1), ("stump", 3),
                                             ("rectangle", 2), ("halfspace", 2)])
def test_enumeration_cost_bounds_the_real_enumeration(name: str, features: int) -> None:
    """The public cost bound (from the row count alone) is at least what enumerating gives."""
    hclass = make_class(name, features)
    rng = np.random.default_rng(7)
    for rows in (1, 2, 9, 30):
        sample = np.round(rng.normal(size=(rows, features)), 1)  # ties included
        assert hclass.enumerate(sample).size() <= hclass.enumeration_cost(rows).dichotomies
    check_enumerable(hclass, 30, "a sample")  # small samples fit


def test_check_enumerable_names_the_most_rows_that_fit() -> None:
    interval = make_class("interval", 1)
    with pytest.raises(PcqrError, match="at most 370,727 rows fit") as refused:
        check_enumerable(interval, 10**6, "S'")
    assert "--hypothesis interval" in str(refused.value) and "\n" not in str(refused.value)
    assert interval.enumeration_cost(370_727).dichotomies <= MAX_DICHOTOMIES < interval.enumeration_cost(370_728).dichotomies
    check_enumerable(interval, 370_727, "S'")


def test_advice_is_true() -> None:
    """The smallest --epsilon the message offers fits; a little less does not. So does its --cutoff."""
    with pytest.raises(PcqrError) as refused:
        SubSampParameters.paper(1e-6, 1e-6, 50, 10_000, 0.05, subsamples=50)
    smallest = float(str(refused.value).rsplit(" ", 1)[-1])
    SubSampParameters.paper(smallest, 1e-6, 50, 10_000, 0.05, subsamples=50)
    assert paper_lambda(smallest * 0.999, 1e-6, 50) > largest_lambda()
    with pytest.raises(PcqrError, match=r"--cutoff at most ([\d,]+)") as refused:
        SubSampParameters.paper(0.01, 1e-6, 10**6, 10_000, 0.05, subsamples=50)
    most = int(str(refused.value).rsplit("at most ", 1)[-1].rstrip(")").replace(",", ""))
    assert paper_lambda(0.01, 1e-6, most) <= largest_lambda() < paper_lambda(0.01, 1e-6, most + 1)
    with pytest.raises(PcqrError, match="the largest --queries-max that fits is") as refused:
        AgnosticParameters.algorithm3(1.0, 1e-6, 0.1, 0.05, 10**8, 10**9, subsamples=10)
    fits = int(str(refused.value).rsplit(" ", 1)[-1].replace(",", ""))
    AgnosticParameters.algorithm3(1.0, 1e-6, 0.1, 0.05, fits, 10**9, subsamples=10)


def test_the_tail_table_is_never_built_beyond_its_bound() -> None:
    """noise.py refuses a table above MAX_TAIL_ENTRIES at once (no allocation), whatever calls it."""
    lam = largest_lambda()
    assert tail_entries(lam) <= MAX_TAIL_ENTRIES < tail_entries(lam * (1 + 1e-6))
    start = time.perf_counter()
    with pytest.raises(ValueError, match="MAX_TAIL_ENTRIES"):
        DiscreteLaplaceTail(4 * lam * 1.01)
    assert time.perf_counter() - start < 0.5
    assert tail_span(4 * lam) + 2 == tail_entries(lam)


def test_a_loaded_session_outside_the_limits_is_refused() -> None:
    """certify() (run on every loaded state) checks the limits first: an edited T or w is refused."""
    good = SubSampParameters.paper(100.0, 1e-3, 20, 100_000, 0.05, subsamples=50)
    for edit, word in (({"cutoff": 10**7}, "cutoff T"), ({"threshold": 1e300}, "threshold w"),
                       ({"lam": 1e6}, "noise table"), ({"delta": 1e-320}, "--delta")):
        edited = SubSampParameters(**{**good.to_dict(), **edit})
        with pytest.raises(PcqrError, match=word):
            edited.certify()


def _mostly(valid: st.SearchStrategy, extreme: st.SearchStrategy) -> st.SearchStrategy:
    """``valid`` values, and about one draw in five from ``extreme`` (shrinking goes to valid)."""
    return st.integers(0, 4).flatmap(lambda i: extreme if i == 4 else valid)


_WILD = st.floats(allow_nan=True, allow_infinity=True)
EPSILONS = _mostly(st.floats(min_value=0.05, max_value=100),
                   st.one_of(st.sampled_from([0.0, 5e-324, 1e-300, 1e-6, 0.01, 700.0, 701.0, 1e300]), _WILD))
PROBABILITIES = _mostly(st.floats(min_value=1e-12, max_value=0.1),
                        st.one_of(st.sampled_from([0.0, 5e-324, 1e-300, 0.5, 0.999999, 1.0]), _WILD))
COUNTS = _mostly(st.integers(min_value=1, max_value=10**4),
                 st.sampled_from([-1, 0, 10**7, MAX_CUTOFF, MAX_CUTOFF + 1, 2**53, 2**53 + 1, 10**20]))
SUBSAMPLES = _mostly(st.none(), st.one_of(COUNTS, st.just(MAX_SUBSAMPLES + 1)))
THRESHOLDS = _mostly(st.none(), st.one_of(st.floats(min_value=0, max_value=1e5), _WILD))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(epsilon=EPSILONS, delta=PROBABILITIES, cutoff=COUNTS, queries_max=COUNTS, beta=PROBABILITIES,
       subsamples=SUBSAMPLES, threshold=THRESHOLDS)
def test_paper_either_refuses_in_one_line_or_certifies_within_the_request(
        epsilon, delta, cutoff, queries_max, beta, subsamples, threshold) -> None:
    try:
        p = SubSampParameters.paper(epsilon, delta, cutoff, queries_max, beta, subsamples, threshold)
    except PcqrError as exc:
        assert "\n" not in str(exc) and "--" in str(exc), str(exc)  # one line naming an option
        return
    certificate = p.certificate()
    assert all(math.isfinite(v) for v in certificate.values())
    assert certificate["proven_epsilon"] <= epsilon and certificate["proven_delta"] <= delta
    assert p.lam <= largest_lambda() and 1 <= p.cutoff <= MAX_CUTOFF and tail_entries(p.lam) <= MAX_TAIL_ENTRIES
