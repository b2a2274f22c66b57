"""One rule for outputs (issue 47, item 1; pipeline/data/outputs.py): every command's outputs go through
one check before anything is read, charged or computed.

* The table: every command with its output aimed at each of its inputs (the input itself, a file in it, a
  new file in it, a folder holding it), with and without ``--overwrite``: exit 2, one line naming both
  options, every byte under the sandbox (inputs, outputs, the ``--ledger`` file) the same after.
* An existing output is refused without ``--overwrite`` and replaced with it; a command without the flag
  (demo) refuses it always.
* Symlinks (an output that is a link to an input, or reached through a linked folder), ``s3://`` keys
  (the moto server of tests/conftest.py) and the Python API (pcqr.distill, pcqr.sanitize, Session).

One module-scoped world: a private dataset, public points, queries, truth, a one-shot session (state and
log) and a student distilled from its log, on one in-process cluster of threads (``backend: address``).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from distributed import LocalCluster

from pcqr.jobs.cli import main
from pcqr.pipeline.data.outputs import Output, check_outputs, check_session_paths, overlap
from pcqr.pipeline.errors import PcqrError
from tests.conftest import MECHANICS_PRIVACY, threshold_data, write_parquet

PRIVACY = " ".join([*MECHANICS_PRIVACY, "--queries-max", "100000"])


@dataclass
class World:
    root: Path
    paths: dict[str, str]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("outputs")
    private = threshold_data(5000, features=2, seed=1)
    private["n"] = np.floor(private["x0"] * 5).astype(np.int64)  # an integer column for sanitize
    write_parquet(str(root / "data/private/p.parquet"), private)
    queries = threshold_data(300, features=2, seed=2)
    write_parquet(str(root / "data/queries/p.parquet"), {"query_id": np.arange(300), "x0": queries["x0"],
                                                          "x1": queries["x1"]})
    write_parquet(str(root / "data/truth/p.parquet"), {"query_id": np.arange(300), "label": queries["label"]})
    write_parquet(str(root / "data/public/p.parquet"), {"x0": threshold_data(300, features=2, seed=3)["x0"]})
    with contextlib.ExitStack() as stack:
        patch = stack.enter_context(pytest.MonkeyPatch.context())
        patch.setenv("PCQR_LEDGER", str(root / "other-ledger.sqlite"))  # a command that ignores --ledger shows
        cluster = stack.enter_context(LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                                   host="127.0.0.1", protocol="tcp://", dashboard_address=":0"))
        (root / "conf").mkdir()
        (root / "conf/cluster.yaml").write_text(
            f"pcqr:\n  cluster:\n    backend: address\n    address: {cluster.scheduler_address}\n")
        paths = {name: str(root / rel) for name, rel in [
            ("root", "."), ("private", "data/private"), ("queries", "data/queries"), ("truth", "data/truth"),
            ("public", "data/public"), ("state", "out/state"), ("log", "out/log"), ("model", "out/model.json"),
            ("cluster", "conf/cluster.yaml"), ("ledger", "ledger.sqlite"), ("new", "new")]}
        p = paths
        assert main(shlex.split(
            f"answer --private {p['private']} --features x0,x1 --state {p['state']} --queries {p['queries']} "
            f"--log {p['log']} --batch-size 100 --ledger {p['ledger']} --cluster {p['cluster']} {PRIVACY}")) == 0
        assert main(shlex.split(f"distill --log {p['log']} --out {p['model']}")) == 0
        yield World(root, paths)


def snapshot(root: Path) -> dict[str, str]:
    """Every folder and file under the sandbox, files by their bytes' SHA-256 (the ledger's too)."""
    found = {}
    for folder, folders, names in os.walk(root):
        for name in folders:
            found[os.path.relpath(os.path.join(folder, name), root)] = "folder"
        for name in names:
            path = os.path.join(folder, name)
            with open(path, "rb") as handle:
                found[os.path.relpath(path, root)] = hashlib.sha256(handle.read()).hexdigest()
    return found


def refused(world: World, capsys: pytest.CaptureFixture[str], argv: str, *needles: str) -> str:
    """Run ``argv`` (``{name}``: the world's paths); assert it exits 2 with one line holding every needle,
    and that nothing under the sandbox changed. Returns the line."""
    before = snapshot(world.root)
    capsys.readouterr()
    code = main(shlex.split(argv.format(**world.paths)))
    out, err = capsys.readouterr()
    lines = [line for line in err.strip().splitlines() if not line.startswith("dashboard:")]
    assert code == 2, (code, err)
    assert len(lines) == 1 and lines[0].startswith("pcqr: error: "), err
    for needle in needles:
        assert needle.format(**world.paths) in lines[0], lines[0]
    after = snapshot(world.root)
    assert after == before, sorted(set(after.items()) ^ set(before.items()))
    return lines[0]


# --- the table: every command's output on each of its inputs ----------------------------------------

WITH = "--ledger {ledger} --cluster {cluster}"
SANITIZE = "sanitize --algorithm histogram --private {private} --features n --domain 0:100 --out OUT " + WITH
LEARN = "learn --private {private} --public {public} --features x0 --hypothesis threshold --out OUT " + WITH
RELEASE = ("release --private {private} --public {public} --features x0 --hypothesis threshold --alpha 0.3 "
           "--out OUT " + WITH)
DISTILL = "distill --log {log} --out OUT --cluster {cluster}"
REPLAY = "replay {log} --truth {truth} --out OUT " + WITH
REPLAY_INTO = "replay {log} --into {state} --out OUT " + WITH
REPORT = "report --log {log} --state {state} --truth {truth} --out OUT"
PREDICT = "predict {model} {queries} --out OUT " + WITH
TRAIN = "train --private {private} --features x0,x1 --state OUT " + WITH + " " + PRIVACY
ONE_SHOT_LOG = ("answer --private {private} --features x0,x1 --state {new}/st --queries {queries} --truth {truth} "
                "--log OUT " + WITH + " " + PRIVACY)
ONE_SHOT_STATE = ONE_SHOT_LOG.replace("--state {new}/st", "--state OUT").replace("--log OUT", "--log {new}/log")
ANSWER = "answer --state {state} --queries {queries} --truth {truth} --log OUT " + WITH

# (command line, the output's option, the inputs it is aimed at: (their option, world name), has --overwrite)
COMMANDS = [
    ("sanitize", SANITIZE, "--out", [("--private", "private"), ("--ledger", "ledger"), ("--cluster", "cluster")], True),
    ("learn", LEARN, "--out", [("--private", "private"), ("--public", "public"), ("--ledger", "ledger")], True),
    ("release", RELEASE, "--out", [("--private", "private"), ("--public", "public"), ("--cluster", "cluster")], True),
    ("distill", DISTILL, "--out", [("--log", "log"), ("--cluster", "cluster")], True),
    ("replay", REPLAY, "--out", [("the log", "log"), ("--truth", "truth"), ("--ledger", "ledger")], True),
    ("replay-into", REPLAY_INTO, "--out", [("the log", "log"), ("--into", "state")], True),
    ("report", REPORT, "--out", [("--log", "log"), ("--state", "state"), ("--truth", "truth")], True),
    ("predict", PREDICT, "--out", [("the model", "model"), ("the queries", "queries"), ("--cluster", "cluster")],
     True),
    ("train", TRAIN, "--state", [("--private", "private"), ("--ledger", "ledger")], False),
    ("answer-log", ONE_SHOT_LOG, "--log", [("--private", "private"), ("--queries", "queries"), ("--truth", "truth")],
     False),
    ("answer-state", ONE_SHOT_STATE, "--state", [("--private", "private"), ("--queries", "queries"),
                                                 ("--cluster", "cluster")], False),
    ("answer-session", ANSWER, "--log", [("--queries", "queries"), ("--truth", "truth")], False),
]

FOLDERS = {"private", "public", "queries", "truth", "log", "state"}


@dataclass(frozen=True)
class Aim:
    id: str
    argv: str
    needles: tuple[str, ...]


def first_folder(inputs: list[tuple[str, str]]) -> str | None:
    """The command's first folder input (its parent holds no earlier input of the command)."""
    return next((key for _, key in inputs if key in FOLDERS), None)


def aims() -> list[Aim]:
    """Each command's output at each of its inputs: the input itself, and for a folder a file in it and a
    new file in it; a folder output at the folder holding its first folder input (with --overwrite, where
    an existing output is otherwise refused first). Every command with --overwrite once more with it."""
    found = []
    for name, argv, option, inputs, has_flag in COMMANDS:
        folder_output = option != "--out" or name == "predict"
        for label, key in inputs:
            targets = [("is", "{%s}" % key, "is")]
            if (key in FOLDERS) != folder_output:  # a file for a folder, or the reverse: click's Path type says so
                targets = [("is", "{%s}" % key, "click")]
            if key in FOLDERS:
                first = "batch-00000000.parquet" if key == "log" else "session.json" if key == "state" else "p.parquet"
                targets += [("file-in", "{%s}/%s" % (key, first), "click" if folder_output else "lies inside"),
                            ("new-in", "{%s}/new/x.html" % key, "lies inside")]
            for flags in ([""] + ([" --overwrite"] if has_flag else [])):
                for kind, target, relation in targets:
                    needles = ((f"Invalid value for '{option}'", target, "is a") if relation == "click" else
                               (f"{option} {target}: {relation} {label} {{{key}}}", "nothing was read or charged"))
                    found.append(Aim(f"{name}-{kind}-{key}{flags.replace(' --', '-')}",
                                     argv.replace("OUT", target) + flags, needles))
            if key == first_folder(inputs) and folder_output and option != "--state":  # the state may hold one
                target = "{%s}/.." % key
                found.append(Aim(f"{name}-holds-{key}", argv.replace("OUT", target) + " --overwrite" * has_flag,
                                 (f"{option} {target}: holds {label} {{{key}}}",)))
    return found


AIMS = aims()


def test_the_table_covers_every_command_that_writes() -> None:
    commands = {a.argv.split()[0] for a in AIMS}
    assert commands == {"sanitize", "learn", "release", "distill", "replay", "report", "predict", "train", "answer"}
    assert len(AIMS) >= 100 and len({a.id for a in AIMS}) == len(AIMS)


@pytest.mark.parametrize("aim", AIMS, ids=[a.id for a in AIMS])
def test_an_output_on_an_input_is_refused(aim: Aim, world: World, capsys: pytest.CaptureFixture[str]) -> None:
    refused(world, capsys, aim.argv, *aim.needles)


def test_a_session_continued_into_its_own_queries_is_refused(world: World, capsys) -> None:
    """``pcqr answer --queries LOG`` with no --log: the session's recorded log is the queries."""
    refused(world, capsys, "answer --state {state} --queries {log} " + WITH,
            "--log {log}: is --queries {log}")


# --- symlinks, hard links, s3 keys ------------------------------------------------------------------


def test_links_to_an_input_count(world: World, capsys, tmp_path: Path) -> None:
    data = world.root / "data"
    (tmp_path / "to-part").symlink_to(data / "private" / "p.parquet")
    (tmp_path / "to-folder").symlink_to(data / "private", target_is_directory=True)
    os.link(world.paths["cluster"], tmp_path / "hard.yaml")
    for out, needle in [(tmp_path / "to-part", "lies inside --private"),
                        (tmp_path / "to-folder" / "x.parquet", "lies inside --private"),
                        (tmp_path / "hard.yaml", "is --cluster")]:
        refused(world, capsys, RELEASE.replace("OUT", str(out)) + " --overwrite", f"--out {out}: {needle}")
    assert os.path.samefile(tmp_path / "hard.yaml", world.paths["cluster"])


def test_overlap_compares_paths_and_keys() -> None:
    assert overlap("s3://b/data/private/p.parquet", "s3://b/data/private/") == "lies inside"
    assert overlap("s3://b//data", "s3://b/data/private") == "holds"
    assert overlap("s3://b/data", "S3://b/data") == "is"
    assert overlap("s3://b/data-2", "s3://b/data") is None  # a key prefix, not a folder
    assert overlap("s3://c/data", "s3://b/data") is None
    assert overlap("s3://k:secret@b/data", "s3://b/data") is None  # refused by its writer, never printed
    assert overlap("/x/data", "s3://x/data") is None
    assert overlap("/x/data-2", "/x/data") is None
    assert overlap("/x/data/../data/p", "/x/data") == "lies inside"


def test_s3_keys_follow_the_same_rule(world: World, capsys, s3, tmp_path: Path) -> None:
    from pcqr.pipeline.data import object_store

    object_store.configure(None)  # the fixture's endpoint and keys
    part = world.root / "data/private/p.parquet"
    object_store.put(s3.uri("data/private/p.parquet"), part.read_bytes())
    object_store.put(s3.uri("replayed.parquet"), b"kept")
    line = refused(world, capsys, SANITIZE.replace("{private}", s3.uri("data/private")).replace(
        "OUT", s3.uri("data/private/p.parquet")) + " --overwrite", "lies inside --private")
    assert s3.uri("data/private/p.parquet") in line
    refused(world, capsys, REPLAY.replace("OUT", s3.uri("replayed.parquet")), "exists; pass --overwrite")
    assert s3.read("data/private/p.parquet") == part.read_bytes() and s3.read("replayed.parquet") == b"kept"
    capsys.readouterr()
    assert main(shlex.split(REPLAY.replace("OUT", s3.uri("replayed.parquet")).format(**world.paths))
                + ["--overwrite"]) == 0, capsys.readouterr().err
    assert s3.read("replayed.parquet")[:4] == b"PAR1"


# --- existing outputs ---------------------------------------------------------------------------------

EXISTING = [
    ("sanitize", SANITIZE), ("learn", LEARN), ("release", RELEASE), ("distill", DISTILL), ("replay", REPLAY),
    ("report", REPORT.replace("--state {state} ", "")),
]


@pytest.mark.parametrize("argv", [a for _, a in EXISTING], ids=[n for n, _ in EXISTING])
def test_an_existing_output_file_needs_overwrite(argv: str, world: World, capsys, tmp_path: Path) -> None:
    kept = tmp_path / "kept.html"
    kept.write_text("mine")
    refused(world, capsys, argv.replace("OUT", str(kept)), f"--out {kept}: exists; pass --overwrite to replace it")
    assert kept.read_text() == "mine"


def test_an_existing_output_folder_needs_overwrite(world: World, capsys, tmp_path: Path) -> None:
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "mine.txt").write_text("mine")
    (tmp_path / "g" / "queries").mkdir(parents=True)
    (tmp_path / "g" / "queries" / "mine.parquet").write_text("mine")
    refused(world, capsys, PREDICT.replace("OUT", str(tmp_path / "p")),
            f"--out {tmp_path / 'p'}: is not empty; pass --overwrite to replace its files")
    refused(world, capsys, f"generate --rows 10 --queries 1 --out {tmp_path / 'g'}",
            f"--out {tmp_path / 'g' / 'queries'}: is not empty; pass --overwrite")
    refused(world, capsys, f"demo --out {tmp_path / 'p'}",
            f"--out {tmp_path / 'p'}: is not empty; give a new or empty folder")
    assert (tmp_path / "p" / "mine.txt").read_text() == "mine"


def test_overwrite_replaces_an_output(world: World, capsys, tmp_path: Path) -> None:
    """--overwrite replaces: a file (distill, replay, sanitize: charged once, for the run that wrote) and a
    folder of predictions (an earlier run's extra part removed, other files kept)."""
    paths = world.paths
    model, replayed, table = tmp_path / "m.json", tmp_path / "r.parquet", tmp_path / "t.parquet"
    for path in (model, replayed, table):
        path.write_text("old")
    folder = tmp_path / "pred"
    folder.mkdir()
    (folder / "part-00007.parquet").write_text("an earlier run's")
    (folder / "notes.txt").write_text("mine")
    for argv in (DISTILL.replace("OUT", str(model)), REPLAY.replace("OUT", str(replayed)),
                 SANITIZE.replace("OUT", str(table)), PREDICT.replace("OUT", str(folder))):
        capsys.readouterr()
        assert main(shlex.split(argv.format(**paths)) + ["--overwrite"]) == 0, capsys.readouterr().err
    assert json.loads(model.read_text())["format"].startswith("pcqr.released-classifier")
    assert pq.read_table(replayed).num_rows == 300 and pq.read_table(table).num_rows > 0
    assert sorted(os.listdir(folder)) == ["notes.txt", "part-00000.parquet"]
    assert pq.read_table(folder / "part-00000.parquet").num_rows == 300


# --- the Python API -----------------------------------------------------------------------------------


def test_the_python_api_refuses_an_output_on_an_input(world: World, tmp_path: Path) -> None:
    import pcqr

    p = world.paths
    before = snapshot(world.root)
    with pytest.raises(PcqrError, match=r"^out .*batch-00000000\.parquet: lies inside log "):
        pcqr.distill(p["log"], os.path.join(p["log"], "batch-00000000.parquet"))
    with pytest.raises(PcqrError, match=r"^--out .*p\.parquet: lies inside --private "):
        pcqr.sanitize(p["private"], os.path.join(p["private"], "p.parquet"), domain="0:100", features="n",
                      ledger=p["ledger"], cluster=p["cluster"])
    with pytest.raises(PcqrError, match=r"^--state .*: lies inside --private "):
        pcqr.Session.create(os.path.join(p["private"], "st"), p["private"], ledger=p["ledger"], cluster=p["cluster"])
    after = snapshot(world.root)
    assert after == before, sorted(set(after.items()) ^ set(before.items()))
    with pcqr.Session.open(p["state"], ledger=p["ledger"], cluster=p["cluster"]) as session:
        before = snapshot(world.root)  # opened: the state's lock file names this process
        with pytest.raises(PcqrError, match=r"^out .*: lies inside log "):
            session.report(os.path.join(p["log"], "report.html"))
        with pytest.raises(PcqrError, match=r"^--log .*: is --queries "):
            session.answer(p["queries"], log=p["queries"])
        with pytest.raises(PcqrError, match=r"^--log .*/out/log: is --queries .*/out/log;"):  # the log it records
            session.answer(p["log"])
        after = snapshot(world.root)
    assert after == before, sorted(set(after.items()) ^ set(before.items()))


def test_check_outputs_alone(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "f").write_text("x")
    check_outputs([Output("--out", str(tmp_path / "g"))], [("--private", str(tmp_path / "d"))], overwrite=False)
    check_outputs([Output("--out", str(tmp_path / "f"))], [], overwrite=True)
    with pytest.raises(PcqrError, match="give a new path"):
        check_outputs([Output("--out", str(tmp_path / "f"))], [], overwrite=None)
    with pytest.raises(PcqrError, match=r"--log .*/d/l: lies inside --state .*/d;"):  # two outputs
        check_outputs([Output("--state", str(tmp_path / "d"), folder=True, appended=True),
                       Output("--log", str(tmp_path / "d" / "l"), folder=True, appended=True)], [], overwrite=None)
    # a session's state may hold its private rows (PrivateClassifier's, while it trains), its log may not
    check_session_paths(str(tmp_path / "d"), str(tmp_path / "l"), private=str(tmp_path / "d" / "rows.parquet"))
    with pytest.raises(PcqrError, match=r"^--log .*/d: holds --queries .*/d/q;"):
        check_session_paths(str(tmp_path / "s"), str(tmp_path / "d"), queries=str(tmp_path / "d" / "q"))
    with pytest.raises(PcqrError, match=r"^--log .*/d: holds --state .*/d/s;"):
        check_session_paths(str(tmp_path / "d" / "s"), str(tmp_path / "d"))
