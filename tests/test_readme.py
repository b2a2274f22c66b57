"""The README's commands run as written.

* The set-up commands are the ones CI runs (.ci/run).
* Every ``bash`` block (except those marked ``<!-- not run by tests/test_readme.py: why -->`` on the
  line before) is a list of ``pcqr`` commands; each parses against the real command line (fast), and
  the slow test runs them all, verbatim and in README order, in one fresh folder with its own ledger
  and the default cluster, as a newcomer would.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import click
import pytest

from tests.forked_pcqr import ForkedPcqr

from pcqr.jobs.cli import pcqr

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEST_COMMAND = "pip install '.[test]' && pytest"
DEMO_COMMAND = "pip install . && pcqr demo"
#: The report extra, which the session's `pcqr report` needs (tests/test_fresh_install.py runs it).
REPORT_COMMAND = "pip install '.[report]'"
SKIP = re.compile(r"<!-- not run by tests/test_readme\.py: .+ -->")
#: A block another test runs against the real service it needs (a PostgreSQL server).
ELSEWHERE = re.compile(r"<!-- run by (tests/test_\w+\.py) against .+ -->")
BLOCK = re.compile(r"(?P<before>[^\n]*)\n```(?P<lang>[^\n]*)\n(?P<body>.*?)\n```", re.S)


def _readme() -> str:
    return open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()


def blocks(readme: str) -> list[tuple[str, bool, list[str]]]:
    """Every fenced block: (language, run by this test, its command lines)."""
    found = []
    for match in BLOCK.finditer(readme):
        lines = [line.strip() for line in match["body"].splitlines() if line.strip() and not line.strip().startswith("#")]
        before = match["before"].strip()
        found.append((match["lang"].strip(), not (SKIP.fullmatch(before) or ELSEWHERE.fullmatch(before)), lines))
    return found


def block_run_by(test_file: str) -> list[str]:
    """The command lines of the README block marked as run by ``test_file`` (against its service)."""
    readme = _readme()
    (found,) = [match for match in BLOCK.finditer(readme)
                if (marker := ELSEWHERE.fullmatch(match["before"].strip())) and marker[1] == test_file]
    return [line.strip() for line in found["body"].splitlines() if line.strip() and not line.strip().startswith("#")]


def readme_commands() -> list[str]:
    return [line for lang, run, lines in blocks(_readme()) if lang == "bash" and run for line in lines]


def test_ci_runs_the_readme_test_command() -> None:
    readme = _readme()
    ci = open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8").read()
    assert f"\n{TEST_COMMAND}\n" in readme and f"\n{DEMO_COMMAND}\n" in readme
    commands = [line for line in ci.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert commands[-1].strip() == TEST_COMMAND


def test_every_block_is_bash_and_every_skip_says_why() -> None:
    found = blocks(_readme())
    assert found and all(lang == "bash" for lang, _, _ in found), [lang for lang, _, _ in found]
    skipped = [lines for _, run, lines in found if not run]
    assert skipped == [[DEMO_COMMAND], [REPORT_COMMAND], [TEST_COMMAND], block_run_by("tests/test_object_storage.py"),
                       block_run_by("tests/test_team_ledger.py")]
    assert len(readme_commands()) >= 10


@pytest.mark.parametrize("line", readme_commands())
def test_each_readme_command_parses(line: str) -> None:
    """Each command names a real subcommand with real options and every required one (no run)."""
    argv = shlex.split(line.split(" #")[0])
    assert argv[0] == "pcqr"
    command: click.Command = pcqr
    args = argv[1:]
    while isinstance(command, click.Group):
        sub = command.get_command(click.Context(command), args[0]) if args else None
        assert sub is not None, line
        command, args = sub, args[1:]
    command.make_context(argv[0], list(args))  # raises click's UsageError on anything unknown or missing


@pytest.mark.slow
def test_the_readme_runs_as_written(tmp_path: Path) -> None:
    """The whole README, in order, at its own sizes (the session: 3,000,000 rows, k = 2,500; about half a
    minute on two cores), in a new folder with a new ledger and no cluster.yaml: the default local
    cluster, its workers threads (DASK_PCQR__CLUSTER__PROCESSES=false: 56 s with worker processes,
    which `pcqr demo` (tests/test_one_line_errors.py), the README's object-storage block
    (tests/test_object_storage.py) and tests/test_real_cluster.py run)."""
    work, tools = tmp_path / "work", tmp_path / "bin"
    work.mkdir()
    tools.mkdir()
    env = {**os.environ, "PCQR_LEDGER": str(tmp_path / "ledger.sqlite"), "DASK_PCQR__CLUSTER__PROCESSES": "false"}
    env.pop("DASK_PCQR__CLUSTER__BACKEND", None)
    with ForkedPcqr(tools, env, ROOT) as pcqr_on_path:  # each command forked from one preloaded interpreter
        _run_readme(work, {**env, "PATH": pcqr_on_path.path})
    assert (work / "answers").is_dir() and (work / "model.json").is_file() and (work / "table.parquet").is_file()


def _run_readme(work: Path, env: dict[str, str]) -> None:
    """Every README command under bash in ``work``: exit 0, no traceback, no warning it does not ask for."""
    for line in readme_commands():
        result = subprocess.run(["bash", "-c", line], cwd=work, env=env, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, f"{line}\n{result.stderr[-3000:]}"
        # a warning only where the README asks for one: --allow-private-overlap says what it let through
        warned = [w for w in result.stderr.splitlines() if "warning" in w
                  and not ("--allow-private-overlap" in line and w.endswith("allowed by --allow-private-overlap"))]
        assert "Traceback" not in result.stderr and not warned, f"{line}\n{result.stderr[-3000:]}"
