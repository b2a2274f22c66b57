"""The pcqr command: bad input is one line and a non-zero exit, with no log and no budget spent;
train + answer continue one session; a YAML spec runs the same job."""
from __future__ import annotations

import json
import math
import os

import numpy as np
import pyarrow.parquet as pq
import pytest

from pcqr.jobs.cli import main
from pcqr.pipeline.public_log.batches import PROVENANCE_KEY
from pcqr.pipeline.privacy.subsamp import SubSampParameters
from tests.conftest import MECHANICS, MECHANICS_PRIVACY, threshold_data, write_parquet

PARAMS = [*MECHANICS_PRIVACY, "--queries-max", "100000"]
# no --threshold: the session takes the smallest certifiable w
SESSION = SubSampParameters.tight(MECHANICS["epsilon"], MECHANICS["delta"], int(MECHANICS["cutoff"]), 100_000, 0.05,
                                  subsamples=int(MECHANICS["subsamples"]))


@pytest.fixture
def data(tmp_path):
    """Private rows (threshold on x0), 2000 queries with ids, and their truth."""
    private = threshold_data(20_000, seed=1)
    write_parquet(str(tmp_path / "private/part-0.parquet"), private, row_group_size=5000)
    q = threshold_data(2000, seed=2)
    queries = {"query_id": np.arange(2000), **{k: v for k, v in q.items() if k != "label"}}
    write_parquet(str(tmp_path / "queries/part-0.parquet"), queries, row_group_size=700)
    write_parquet(str(tmp_path / "truth/part-0.parquet"), {"query_id": np.arange(2000), "label": q["label"]})
    return tmp_path


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def answer_args(data, cluster: str, *extra: str) -> list[str]:
    return ["answer", "--private", str(data / "private"), "--queries", str(data / "queries"),
            "--state", str(data / "state"), "--log", str(data / "log"), "--cluster", cluster,
            "--json", *PARAMS, *extra]


def assert_refused_cleanly(code: int, err: str, data, *needles: str) -> None:
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pcqr: error: "), err
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert not (data / "log").exists() or os.listdir(data / "log") == []
    assert not (data / "state" / "session.json").exists()  # no session: no budget spent


def test_one_shot_answer_then_continue_the_session(data, capsys, thread_cluster_yaml) -> None:
    code, out, err = run(capsys, *answer_args(data, thread_cluster_yaml, "--truth", str(data / "truth"),
                                             "--batch-size", "300"))
    assert code == 0, err
    first = last_json(out)
    for key in ("answered", "abstained", "refused", "budget_used", "cutoff", "epsilon", "delta",
                "subsamples", "threshold", "accuracy"):
        assert key in first
    assert first["answered"] + first["abstained"] + first["refused"] == 2000
    assert first["subsamples"] == 50 and first["threshold"] == SESSION.threshold and first["privacy"] == "private"
    assert first["proven_epsilon"] <= MECHANICS["epsilon"] and first["proven_delta"] <= MECHANICS["delta"]
    terms = [first[k] for k in ("delta_composition", "delta_stability", "delta_sampler")]  # the issue's keys
    assert first["delta_stability"] > 0 and math.fsum(terms) <= first["proven_delta"]
    assert first["proven_delta"] == SESSION.certificate()["proven_delta"]
    assert first["profile"] == "tight" and first["lambda"] == SESSION.lam  # the default profile, named
    assert first["accuracy"] > 0.95 and first["answered"] > 1900  # w certifiable and still answering
    # row groups of 700, 700, 600 queries in log batches of at most 300: 3 + 3 + 2 files
    sizes = [pq.read_metadata(str(data / "log" / f)).num_rows for f in sorted(os.listdir(data / "log"))
             if f.startswith("batch-")]
    assert sizes == [300, 300, 100, 300, 300, 100, 300, 300]
    # the same command again: the queries were answered in full, nothing is asked, the log stays
    code, out, err = run(capsys, *answer_args(data, thread_cluster_yaml, "--truth", str(data / "truth"),
                                             "--batch-size", "300"))
    assert code == 0, err
    again = last_json(out)
    assert (again["already_answered"], again["already_answered_batches"], again["batches"]) == (2000, [0, 7], 0)
    assert again["answered"] == again["abstained"] == again["refused"] == 0
    assert again["budget_used"] == first["budget_used"] and again["session_totals"] == first["session_totals"]
    assert f"all 2,000 queries of {data / 'queries'} were already answered in {data / 'log'} (batches 0-7); " \
        "nothing asked" in err
    assert "continuing the session" in err  # --private and the training options are not used
    assert sorted(os.listdir(data / "log")) == ["_session.json", *(f"batch-{i:08d}.parquet" for i in range(8))]
    # continue with a new query file (the same rows, reversed): same state, no training, the log
    # grows, repeats of answered queries get their logged answers and the budget carries over
    reverse = pq.read_table(str(data / "queries")).take(np.arange(1999, -1, -1))
    write_parquet(str(data / "queries2/part-0.parquet"), {c: reverse.column(c) for c in reverse.column_names})
    code, out, err = run(capsys, "answer", "--state", str(data / "state"), "--queries",
                         str(data / "queries2"), "--cluster", thread_cluster_yaml, "--json")
    assert code == 0, err
    second = last_json(out)
    assert second["resumed_after"] == 0 and "already_answered" not in second  # another input: asked from its start
    # repeats of answered or abstained queries: their logged outcomes, free (issue 47: abstentions too)
    assert second["duplicates"] == first["answered"] + first["abstained"]
    assert second["budget_used"] - first["budget_used"] <= first["abstained"] + first["refused"]
    assert second["session_totals"]["answered"] == first["answered"] + second["answered"]
    meter = second["odometer"]  # repeats spend nothing: only the first run's queries were tested
    assert meter["instances_used"] == second["budget_used"] and meter["instances_allowed"] == second["cutoff"]
    assert meter["queries_tested"] == first["answered"] + first["abstained"] + second["answered"] - second["duplicates"] \
        + second["abstained"]
    code, out, err = run(capsys, "status", "--state", str(data / "state"), "--json")  # read-only, no cluster
    assert code == 0, err
    status = last_json(out)
    assert (status["used"], status["cutoff"], status["profile"]) == (meter["instances_used"], int(MECHANICS["cutoff"]), "tight")
    assert status["queries_per_instance"] == meter["queries_per_instance"]
    assert status["forecast_more_queries"] == meter["forecast_more_queries"]
    assert status["answered"] == second["session_totals"]["answered"]
    code, out, err = run(capsys, "status", "--state", str(data / "nowhere"))
    assert code == 2 and "no session here" in err
    files = sorted(f for f in os.listdir(data / "log") if f.startswith("batch-"))  # not the claim
    assert len(files) == 9  # one more batch: the default batch size holds all 2000
    log = pq.read_table(str(data / "log"))
    assert log.num_rows == 4000 and set(log.column("status").to_pylist()) <= {"answered", "abstained", "refused"}
    assert not any(name.endswith(".pkl") for name in os.listdir(data / "log"))


def test_train_then_answer_and_seeded_runs(data, capsys, thread_cluster_yaml) -> None:
    seeded = ["--seed", "3", "--insecure-seed"]
    code, out, err = run(capsys, "train", "--private", str(data / "private"), "--state",
                         str(data / "st"), "--cluster", thread_cluster_yaml, "--json", *PARAMS, *seeded)
    assert code == 0, err
    assert last_json(out)["models"] == 50 and last_json(out)["privacy"].startswith("NOT PRIVATE")
    code, out, err = run(capsys, "answer", "--state", str(data / "st"), "--queries", str(data / "queries"),
                         "--log", str(data / "log1"), "--cluster", thread_cluster_yaml, "--json")
    assert code == 0, err
    provenance = json.loads(pq.read_schema(str(data / "log1" / "batch-00000000.parquet")).metadata[PROVENANCE_KEY])
    assert provenance["seeded"] is True and "NOT PRIVATE" in provenance["privacy"]
    # the one-shot form with the same seed gives the same answers
    code, out, err = run(capsys, "answer", "--private", str(data / "private"), "--state", str(data / "st2"),
                         "--queries", str(data / "queries"), "--log", str(data / "log2"),
                         "--cluster", thread_cluster_yaml, *PARAMS, *seeded)
    assert code == 0, err
    a = pq.read_table(str(data / "log1")).column("answer").to_pylist()
    b = pq.read_table(str(data / "log2")).column("answer").to_pylist()
    assert a == b


def test_spec_runs_the_same_job(data, capsys, thread_cluster_yaml, tmp_path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(
        f"job: answer\nprivate: {data / 'private'}\nqueries: {data / 'queries'}\nstate: {data / 'state'}\n"
        f"log: {data / 'log'}\nepsilon: {MECHANICS['epsilon']}\ndelta: {MECHANICS['delta']}\n"
        f"cutoff: {MECHANICS['cutoff']}\nqueries_max: 100000\nsubsamples: {MECHANICS['subsamples']}\n"
    )
    code, out, err = run(capsys, "run", str(spec), "--json", "--cluster", thread_cluster_yaml)
    assert code == 0, err
    assert last_json(out)["answered"] > 0
    spec.write_text("job: answer\nno_such_option: 1\n")
    code, out, err = run(capsys, "run", str(spec))
    assert code != 0 and "unknown key 'no_such_option'" in err
    spec.write_text("job: fly\n")
    code, out, err = run(capsys, "run", str(spec))
    assert code != 0 and "key 'job' must be one of" in err


def test_example_spec_is_valid() -> None:
    from pcqr.jobs.answer import command
    from pcqr.jobs.run import load_spec, spec_arguments

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = load_spec(os.path.join(here, "jobs", "examples", "answer.yaml"))
    assert spec.pop("job") == "answer"
    assert "--epsilon" in spec_arguments(spec, command, "answer.yaml")


def _rewrite(data, name: str, columns: dict) -> None:
    path = data / name / "part-0.parquet"
    os.remove(path)
    write_parquet(str(path), columns)


@pytest.mark.parametrize(
    "case,needles",
    [
        ("missing_label", ["part-0.parquet", "no column 'label'"]),
        ("label_2", ["part-0.parquet", "label column 'label' has values outside"]),
        ("nan_feature", ["part-0.parquet", "feature column 'x1'", "NaN"]),
        ("inf_feature", ["part-0.parquet", "feature column 'x0'", "infinite"]),
        ("empty", ["no rows"]),
        ("query_columns", ["query columns do not match", "x2"]),
        ("nan_query", ["queries", "feature column 'x0'"]),
        ("epsilon_zero", ["--epsilon"]),
        ("epsilon_negative", ["--epsilon"]),
        ("delta_one", ["--delta"]),
        ("k_too_large", ["--subsamples", "needs at least 50000 private rows"]),
        ("unknown_backend", ["pcqr.cluster.backend", "unknown backend"]),
        ("seed_without_flag", ["--insecure-seed"]),
        ("threshold_uncertifiable", ["--threshold 1:", "smallest --threshold that fits is 11.5"]),
    ],
)
def test_bad_input_is_one_line_with_nothing_written(case, needles, data, capsys, thread_cluster_yaml, tmp_path) -> None:
    cluster, extra = thread_cluster_yaml, []
    private = threshold_data(20_000, seed=1)
    if case == "missing_label":
        private.pop("label")
        _rewrite(data, "private", private)
    elif case == "label_2":
        private["label"][17] = 2
        _rewrite(data, "private", private)
    elif case in ("nan_feature", "inf_feature"):
        private["x1" if case == "nan_feature" else "x0"][5] = np.nan if case == "nan_feature" else np.inf
        _rewrite(data, "private", private)
    elif case == "empty":
        _rewrite(data, "private", threshold_data(0))
    elif case == "query_columns":
        _rewrite(data, "queries", {"query_id": np.arange(3), "x0": np.zeros(3), "x1": np.zeros(3)})
    elif case == "nan_query":
        q = {"query_id": np.arange(3), "x0": np.array([0.0, np.nan, 1.0]), "x1": np.zeros(3), "x2": np.zeros(3)}
        _rewrite(data, "queries", q)
    elif case == "unknown_backend":
        cluster = str(tmp_path / "bad-cluster.yaml")
        with open(cluster, "w") as handle:
            handle.write("pcqr:\n  cluster:\n    backend: moon\n")
    args = answer_args(data, cluster)
    replace = {"epsilon_zero": ("--epsilon", "0"), "epsilon_negative": ("--epsilon", "-1"),
               "delta_one": ("--delta", "1"), "k_too_large": ("--subsamples", "50000")}
    if case in replace:
        option, value = replace[case]
        args[args.index(option, args.index("--json")) + 1] = value
    if case == "seed_without_flag":
        extra = ["--seed", "1"]
    if case == "threshold_uncertifiable":
        extra = ["--threshold", "1"]
    code, out, err = run(capsys, *args, *extra)
    assert_refused_cleanly(code, err, data, *needles)


def test_train_says_in_one_line_when_k_is_too_few(data, capsys, thread_cluster_yaml) -> None:
    few = ["--epsilon", "4", "--delta", "1e-6", "--cutoff", "20", "--subsamples", "50", "--gate", "stability"]
    code, out, err = run(capsys, "train", "--private", str(data / "private"), "--state", str(data / "st"),
                         "--cluster", thread_cluster_yaml, "--json", *few)
    assert code == 0, err
    warnings = [line for line in err.splitlines() if line.startswith("warning: ")]
    expected = SubSampParameters.tight(4.0, 1e-6, 20, 10_000, 0.05, subsamples=50).useful_subsamples()
    assert len(warnings) == 1 and "k = 50 models is too few" in warnings[0]
    assert f"k >= {expected} " in warnings[0], warnings[0]
    code, out, err = run(capsys, "train", "--private", str(data / "private"), "--state", str(data / "st2"),
                         "--cluster", thread_cluster_yaml, "--json", *PARAMS)
    # MECHANICS: k = 50 is enough there (its delta 1e-3, above 1/n, is warned of: tests/test_delta_rule.py)
    assert code == 0 and not [line for line in err.splitlines() if line.startswith("warning: ") and "1/n" not in line], err


@pytest.mark.parametrize(
    "case,needle",
    [
        ("thresholds_missing", "thresholds.npy: missing"),
        ("thresholds_truncated", "thresholds.npy: corrupt"),
        ("thresholds_pickled", "thresholds.npy: corrupt"),
        ("thresholds_float", "expected (20,) int64"),
        ("thresholds_short", "expected (20,) int64"),
        ("key_not_hex", "corrupt session file"),
        ("key_short", "session key"),
        ("threshold_edited", "cannot be certified"),
        ("profile_unknown", "--profile must be one of tight, paper"),
    ],
)
def test_a_tampered_state_is_refused_in_one_line(case, needle, data, capsys, thread_cluster_yaml) -> None:
    """The files issue 10 added to the state (thresholds.npy, the session key) and the certified w:
    edited, each is refused with one line, exit 2, nothing published."""
    state = data / "st"
    code, _, err = run(capsys, "train", "--private", str(data / "private"), "--state", str(state),
                       "--cluster", thread_cluster_yaml, "--json", *PARAMS)
    assert code == 0, err
    thresholds, session_file = state / "thresholds.npy", state / "session.json"
    stored = np.load(thresholds)
    session = json.loads(session_file.read_text())
    if case == "thresholds_missing":
        thresholds.unlink()
    elif case == "thresholds_truncated":
        thresholds.write_bytes(thresholds.read_bytes()[:40])
    elif case == "thresholds_pickled":
        np.save(thresholds, np.array([object()] * stored.size, dtype=object), allow_pickle=True)
    elif case == "thresholds_float":
        np.save(thresholds, stored.astype(np.float64))
    elif case == "thresholds_short":
        np.save(thresholds, stored[:5])
    elif case == "key_not_hex":
        session["sparse_vector"]["key"] = "zz" * 32
    elif case == "key_short":
        session["sparse_vector"]["key"] = "ab" * 16
    elif case == "threshold_edited":
        session["params"]["threshold"] = 1.0
    elif case == "profile_unknown":
        session["params"]["profile"] = "fast"
    if case.startswith(("key", "threshold_", "profile_")):
        session_file.write_text(json.dumps(session))
    code, out, err = run(capsys, "answer", "--state", str(state), "--queries", str(data / "queries"),
                         "--log", str(data / "log"), "--cluster", thread_cluster_yaml, "--json")
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pcqr: error: ") and needle in lines[0], err
    assert not (data / "log").exists() or os.listdir(data / "log") == []


def test_profile_tight_is_refused_in_agnostic_mode(data, capsys, thread_cluster_yaml) -> None:
    """Agnostic and universal modes certify Algorithm 3's chain with Algorithm 5's parameters only."""
    code, out, err = run(capsys, "train", "--private", str(data / "private"), "--state", str(data / "ag"),
                         "--cluster", thread_cluster_yaml, "--mode", "agnostic", "--hypothesis", "threshold",
                         "--profile", "tight")
    assert code == 2 and err.count("\n") == 1 and "--profile tight: --mode agnostic" in err and "--profile paper" in err
    assert not (data / "ag").exists() or not any((data / "ag").iterdir())


#: Each data option's help starts by saying what its data is (issue 26, item 5).
DATA_OPTIONS = {"--private": "Private:", "--state": "Private:", "--into": "Private:", "--queries": "Public:",
                "--public": "Public:", "--log": "Public:", "--out": "Public:", "--truth": "Public input:"}


def _commands():
    import click

    from pcqr.jobs.cli import COMMANDS, pcqr

    ctx = click.Context(pcqr)
    for name in COMMANDS:
        command = pcqr.get_command(ctx, name)
        subcommands = getattr(command, "commands", None)
        yield from ((f"{name} {sub}", c) for sub, c in subcommands.items()) if subcommands else [(name, command)]


def test_every_data_option_says_whether_it_is_public_or_private() -> None:
    import click

    checked = 0
    for name, command in _commands():
        for param in command.params:
            if not isinstance(param, click.Option) or isinstance(param.type, click.types.IntParamType):
                continue  # generate/demo --queries N: a count, not data
            text = " ".join((param.help or "").split())
            if "--ledger" in param.opts:
                assert "private" in text and "empty $PCQR_LEDGER is an error" in text, (name, text)
            for opt in set(param.opts) & set(DATA_OPTIONS):
                mixed = "private" in text.lower() and "public" in text.lower() and opt == "--out"
                assert text.startswith(DATA_OPTIONS[opt]) or (mixed and name in ("generate", "demo")), (name, opt, text)
                checked += 1
        if isinstance(command, click.Command) and any(isinstance(p, click.Argument) for p in command.params):
            doc = " ".join((command.help or "").split())
            for argument in (p for p in command.params if isinstance(p, click.Argument)):
                shown = argument.metavar or argument.name.upper()
                assert f"{shown}:" in doc and ("public" in doc or "private" in doc), (name, shown)
    assert checked >= 25
    assert "private features" not in _help("answer", "--queries")  # public queries, with the private data's columns


def _help(command: str, option: str) -> str:
    from pcqr.jobs.cli import pcqr
    import click

    found = pcqr.get_command(click.Context(pcqr), command)
    return next(p.help for p in found.params if option in getattr(p, "opts", ()))


FINISH = """
import atexit, sys, threading, time
from pcqr.jobs.cli import finish
print("printed", end="")
atexit.register(lambda: print(" then atexit", end=""))
if sys.argv[1] == "thread":  # a non-daemon thread still running: the normal exit waits for it
    threading.Thread(target=lambda: (time.sleep(0.3), print(" then the thread", end=""))).start()
finish(int(sys.argv[2]))
"""


@pytest.mark.parametrize("thread, expected", [("none", "printed then atexit"),
                                              ("thread", "printed then the thread then atexit")])
def test_the_pcqr_script_exits_with_its_code_after_atexit_and_flushed_streams(thread, expected) -> None:
    """pcqr.jobs.cli.finish (the script's exit, which skips the interpreter's module teardown) keeps what
    a normal exit guarantees: the code, the atexit functions, buffered output, a running thread awaited."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", FINISH, thread, "3"], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (3, expected, "")
