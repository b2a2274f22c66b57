"""A delta that means something (issue 47, item 7): a mechanism that publishes each row with probability
delta is (0, delta)-DP, so a delta of 0.01 or more certifies nothing and is refused, in one line and
before anything is read or charged, by every command and the Python API; a delta at or above 1/n (n the
private rows: publishing one row drawn at random is (0, 1/n)-DP) is run, with one warning naming 1/n
(a ``pcqr.LargeDeltaWarning`` in Python). The README's and the example specs' deltas are below 1/n of
their data. And ``pcqr plan`` cites what a user has: docs/privacy.md and the papers by name and number,
never ALGORITHMS.md or a line of an extracted text.

Each test here was seen failing on the code before the change."""
from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import sqlite3
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

import pcqr
from pcqr.jobs.cli import main
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.privacy import limits
from tests.conftest import threshold_data, write_parquet
from tests.test_readme import ROOT, blocks

ROWS = 2_000  # 1/n = 5e-4
ABOVE, BELOW = "0.001", "1e-05"  # above 1/n, below it
REFUSED = "0.01"  # the least delta refused
SESSION = ["--epsilon", "100", "--cutoff", "20", "--subsamples", "50", "--gate", "stability", "--learner", "stump",
           "--queries-max", "100000"]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ROWS labelled rows (a threshold on x0), 100 queries, 400 public points, and ROWS rows of one small
    integer feature (labelled: a point at 7) for the mechanisms over a --domain."""
    root = tmp_path_factory.mktemp("delta")
    write_parquet(str(root / "private/p.parquet"), threshold_data(ROWS, seed=1))
    queries = threshold_data(100, seed=2)
    write_parquet(str(root / "queries/p.parquet"), {"query_id": np.arange(100),
                                                    **{k: v for k, v in queries.items() if k != "label"}})
    write_parquet(str(root / "public/p.parquet"), {k: v for k, v in threshold_data(400, seed=3).items()
                                                   if k != "label"})
    values = np.random.default_rng(4).integers(0, 21, ROWS)
    write_parquet(str(root / "points/p.parquet"), {"x0": values, "label": (values == 7).astype(np.int8)})
    return root


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    path = str(tmp_path / "ledger.sqlite")
    monkeypatch.setenv("PCQR_LEDGER", path)
    return path


def _charges(path: str) -> int:
    """Every charge the ledger holds, refunded or not (0 when there is no ledger yet)."""
    if not os.path.exists(path):
        return 0
    with contextlib.closing(sqlite3.connect(path)) as db:
        if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'charges'").fetchall():
            return 0
        return int(db.execute("SELECT COUNT(*) FROM charges").fetchone()[0])


def _commands(data: Path, out: Path, cluster: str) -> dict[str, list[str]]:
    """Every command that takes --delta from a user, with a fresh output; --delta is appended."""
    c = ["--cluster", cluster]
    return {
        "train": ["train", "--private", f"{data}/private", "--state", f"{out}/st", *SESSION, *c],
        "answer": ["answer", "--private", f"{data}/private", "--state", f"{out}/st", "--queries", f"{data}/queries",
                   "--log", f"{out}/log", *SESSION, *c],
        "learn": ["learn", "--algorithm", "point", "--private", f"{data}/points", "--features", "x0", "--domain",
                  "0:20", "--out", f"{out}/point.json", *c],
        "release": ["release", "--private", f"{data}/private", "--public", f"{data}/public", "--features", "x0",
                    "--hypothesis", "threshold", "--alpha", "0.3", "--out", f"{out}/table.parquet", *c],
        "sanitize": ["sanitize", "--private", f"{data}/points", "--features", "x0", "--domain", "0:20",
                     "--out", f"{out}/points.parquet", *c],
        "plan": ["plan", "--private-rows", str(ROWS), "--epsilon", "1", "--queries-max", "1000"],
    }


COMMANDS = ("train", "answer", "learn", "release", "sanitize", "plan")


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, list[str]]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, [line for line in err.splitlines() if not line.startswith("dashboard:")]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_delta_of_one_percent_is_refused_in_one_line_before_anything(command, data, tmp_path, capsys, ledger,
                                                                       thread_cluster_yaml) -> None:
    out = tmp_path / "out"
    code, stdout, err = _run(capsys, [*_commands(data, out, thread_cluster_yaml)[command], "--delta", REFUSED])
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("pcqr: error: --delta 0.01: at or above 0.01 ") and "(0, delta)-DP" in err[0], err
    assert "below 1/n" in err[0] and stdout == ""
    assert _charges(ledger) == 0 and not out.exists()  # nothing charged, nothing written


@pytest.mark.parametrize("command", COMMANDS)
def test_a_delta_above_one_over_n_is_warned_of_once_and_one_below_is_not(command, data, tmp_path, capsys, ledger,
                                                                         thread_cluster_yaml) -> None:
    code, _, err = _run(capsys, [*_commands(data, tmp_path / "above", thread_cluster_yaml)[command], "--delta", ABOVE])
    assert code == 0, err
    said = [line for line in err if "1/n" in line]
    assert said == [line for line in err if line.startswith("warning: --delta ")], err
    assert len(said) == 1 and said[0].startswith("warning: --delta 0.001 is above 1/n = 1/2,000 (n the private "
                                                 "rows)"), err
    assert "publishes one whole row" in said[0] and "choose a delta below 1/n (e.g. 1e-04)" in said[0], said
    code, _, err = _run(capsys, [*_commands(data, tmp_path / "below", thread_cluster_yaml)[command], "--delta", BELOW])
    assert code == 0 and not [line for line in err if "1/n" in line], err


def test_plan_json_carries_the_warning_and_every_plan_refuses_a_large_delta(capsys) -> None:
    code, out, _ = _run(capsys, ["plan", "--private-rows", str(ROWS), "--epsilon", "1", "--queries-max", "1000",
                                 "--delta", ABOVE, "--json"])
    assert code == 0 and "1/n = 1/2,000" in json.loads(out)["warning"]
    for plan in (["--vc", "2", "--alpha", "0.1", "--epsilon", "1", "--queries-max", "1000"],
                 ["--rows-per-model", "200"], ["--without-public-data", "--epsilon", "1", "--alpha", "0.1"]):
        code, out, err = _run(capsys, ["plan", *plan, "--delta", "0.5"])
        assert code == 2 and err == [err[0]] and err[0].startswith("pcqr: error: --delta 0.5: at or above 0.01"), err


def test_a_pure_mechanism_is_not_warned_of_its_unused_delta(data, tmp_path, capsys, ledger,
                                                            thread_cluster_yaml) -> None:
    """sanitize --algorithm cdf proves delta 0: no delta is spent, none is warned of (0.01 is still refused)."""
    cdf = ["sanitize", "--algorithm", "cdf", "--private", f"{data}/points", "--features", "x0", "--domain", "0:20",
           "--out", str(tmp_path / "cdf.parquet"), "--cluster", thread_cluster_yaml]
    code, out, err = _run(capsys, [*cdf, "--delta", ABOVE])
    assert code == 0 and not [line for line in err if "1/n" in line], err


def test_a_budget_delta_is_a_cap_not_a_guarantee(data, capsys, ledger, thread_cluster_yaml) -> None:
    """``budget set`` may cap the jobs' summed delta at 0.01 or more: each job's own delta is checked."""
    code, _, err = _run(capsys, ["budget", "set", f"{data}/private", "--epsilon", "10", "--delta", "0.05",
                                 "--cluster", thread_cluster_yaml])
    assert code == 0 and not [line for line in err if "1/n" in line or "error" in line], err


# --- the Python API ------------------------------------------------------------------------------------

SEED = {"seed": 3, "insecure_seed": True}  # tests only: reproducible, marked NOT private
QUICK = {"epsilon": 100.0, "cutoff": 5, "subsamples": 20, "learner": "stump", "gate": "stability", **SEED}


def _rows(n: int) -> tuple[np.ndarray, np.ndarray]:
    X = np.random.default_rng(5).normal(size=(n, 3))
    return X, (X[:, 0] > 0.1).astype(int)


def _large_delta(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, pcqr.LargeDeltaWarning)]


def test_a_session_warns_with_a_large_delta_warning_and_refuses_one_percent(data, tmp_path, ledger,
                                                                           thread_cluster_yaml) -> None:
    assert issubclass(pcqr.LargeDeltaWarning, UserWarning) and "LargeDeltaWarning" in pcqr.__all__
    private, common = f"{data}/private", {"cluster": thread_cluster_yaml, **QUICK}
    with pytest.warns(pcqr.LargeDeltaWarning, match=r"^delta=0\.001 is above 1/n = 1/2,000 \(n the private") as caught:
        pcqr.Session.create(str(tmp_path / "above"), private, delta=1e-3, **common).close()
    assert len(_large_delta(caught)) == 1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pcqr.Session.create(str(tmp_path / "below"), private, delta=1e-5, **common).close()
    assert _large_delta(caught) == [] and _charges(ledger) == 2
    with pytest.raises(PcqrError, match=r"delta=0\.01: at or above 0\.01 "):
        pcqr.Session.create(str(tmp_path / "st"), private, delta=0.01, **common)
    with pytest.raises(PcqrError, match=r"delta=0\.5: at or above 0\.01 "):
        pcqr.privacy_cost(pcqr.PrivateClassifier(delta=0.5), cv=3)
    assert _charges(ledger) == 2  # the refusals charged nothing


def test_private_classifier_warns_with_a_large_delta_warning_and_refuses_one_percent(ledger,
                                                                                    thread_cluster_yaml) -> None:
    X, y = _rows(ROWS)
    with pytest.warns(pcqr.LargeDeltaWarning, match=r"^delta=0\.001 is above 1/n = 1/2,000 \(n the private") as caught:
        pcqr.PrivateClassifier(delta=1e-3, cluster=thread_cluster_yaml, **QUICK).fit(X, y).close()
    assert len(_large_delta(caught)) == 1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pcqr.PrivateClassifier(delta=1e-5, cluster=thread_cluster_yaml, **QUICK).fit(X, y).close()
    assert _large_delta(caught) == [] and _charges(ledger) == 2
    with pytest.raises(PcqrError, match=r"delta=0\.05: at or above 0\.01 "):
        pcqr.PrivateClassifier(delta=0.05, cluster=thread_cluster_yaml, **QUICK).fit(X, y)
    assert _charges(ledger) == 2


def test_the_api_sanitize_and_learner_warn_and_refuse_alike(data, tmp_path, ledger, thread_cluster_yaml) -> None:
    points = f"{data}/points"
    common = {"domain": "0:20", "features": "x0", "cluster": thread_cluster_yaml}
    with pytest.warns(pcqr.LargeDeltaWarning, match=r"1/n = 1/2,000") as caught:
        pcqr.sanitize(points, str(tmp_path / "s.parquet"), delta=1e-3, **common)
    assert len(_large_delta(caught)) == 1
    with pytest.warns(pcqr.LargeDeltaWarning, match=r"1/n = 1/2,000"):
        pcqr.learn_without_public_data(points, str(tmp_path / "p.json"), algorithm="point", delta=1e-3, **common)
    before = _charges(ledger)
    for call in (lambda: pcqr.sanitize(points, str(tmp_path / "t.parquet"), delta=0.02, **common),
                 lambda: pcqr.learn_without_public_data(points, str(tmp_path / "q.json"), algorithm="point",
                                                        delta=0.02, **common)):
        with pytest.raises(PcqrError, match=r"^delta=0\.02: at or above 0\.01 "):
            call()
    assert _charges(ledger) == before and not (tmp_path / "t.parquet").exists()


# --- the rule itself -------------------------------------------------------------------------------------

@pytest.mark.parametrize("rows", [1, 7, 10, 500, 2_000, 999_999, 1_000_000, 3_000_000, 10**12])
def test_the_suggested_delta_is_a_power_of_ten_below_one_over_n(rows: int) -> None:
    suggested = limits.suggested_delta(rows)
    assert suggested * rows < 1 and suggested < limits.MAX_DELTA and f"{suggested:.0e}".startswith("1e-")
    assert rows < 1_000 or suggested * rows * 10 >= 1 - 1e-9  # the largest power of ten below 1/n (at most 1e-3)
    assert limits.delta_note(suggested, rows) is None and limits.delta_note(2 / rows, rows) is not None


def test_the_demo_asks_a_delta_below_one_over_n_of_the_rows_it_generates() -> None:
    from pcqr.pipeline.session import demo

    for rows in (20_000, 3_000_000, 10**8):
        assert demo.delta_for(rows) * rows < 1


#: The README's commands that spend a delta: the option after which the algorithm's name follows, and
#: the algorithms that take one (None: every run of the command).
SPENDS_DELTA = {"train": None, "answer": None, "release": None, "sanitize": ("histogram", "san-points", "san-thresholds"),
                "learn": ("point", "learn-thresholds", "rectangle")}
DEFAULT_ALGORITHM = {"sanitize": "histogram", "learn": "sspp"}


def _options(argv: list[str]) -> dict[str, str]:
    """Each option of a command line with the word after it."""
    return {word: value for word, value in zip(argv, argv[1:]) if word.startswith("--")}


def test_the_readme_examples_ask_a_delta_below_one_over_n_of_their_data() -> None:
    """Every README command that spends a delta (its --delta, or the default 1e-6) on rows a README
    block generated asks a delta below 1/n of them; so does every example spec of its data. The blocks
    tests/test_readme.py runs share one folder, in order; a block run elsewhere has its own."""
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    shared: dict[str, int] = {}
    checked = 0
    for _, run, lines in blocks(readme):
        rows = shared if run else {}
        for line in lines:
            argv = shlex.split(line.split(" #")[0])
            if argv[:1] != ["pcqr"] or len(argv) < 2:
                continue
            given = _options(argv)
            if argv[1] == "generate":
                rows[f"{given['--out']}/private"] = int(given.get("--rows", 200_000))
                continue
            takes = SPENDS_DELTA.get(argv[1], ())
            algorithm = given.get("--algorithm", DEFAULT_ALGORITHM.get(argv[1]))
            if given.get("--private") not in rows or (takes is not None and algorithm not in takes):
                continue
            assert float(given.get("--delta", 1e-6)) * rows[given["--private"]] < 1, line
            checked += 1
    assert checked >= 7
    for path in sorted(Path(ROOT, "jobs", "examples").glob("*.yaml")):
        text = path.read_text()
        generated = re.search(r"pcqr generate .*--rows (\d+)", text)
        assert generated, path
        assert float(yaml.safe_load(text).get("delta", 1e-6)) * int(generated.group(1)) < 1, path


# --- pcqr plan cites what a user has -----------------------------------------------------------------------

PLANS = [["--hypothesis", "interval", "--alpha", "0.05", "--epsilon", "1", "--queries-max", "10000"],
         ["--private-rows", "100000", "--epsilon", "1", "--queries-max", "2000"],
         ["--rows-per-model", "200", "--epsilon", "1", "--subsamples", "50"],
         ["--without-public-data", "--epsilon", "1", "--alpha", "0.1"]]


@pytest.mark.parametrize("plan", PLANS, ids=["papers", "gates", "rows", "without-public-data"])
def test_plan_cites_docs_and_papers_by_name_not_algorithms_md_or_lines(plan, capsys) -> None:
    for extra in ([], ["--json"]):
        code, out, err = _run(capsys, ["plan", *plan, *extra])
        text = out + "\n".join(err)
        assert code == 0 and text
        assert "ALGORITHMS.md" not in text and not re.search(r"\blines?\b", text, re.I), text
        assert not re.search(r"\bL\d+", text), re.findall(r".{30}\bL\d+.{10}", text)
        assert not re.search(r"(?<![\d,.])00[0-4]\b", text), re.findall(r".{30}(?<![\d,.])00[0-4]\b.{10}", text)
    if plan[0] == "--hypothesis":
        assert "Nandi-Bassily 2020, Lemma 2.3" in out and "docs/privacy.md" in out
