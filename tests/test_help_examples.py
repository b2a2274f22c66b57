"""The examples in ``pcqr --help`` and in each command's ``--help`` run as written (issue 47, item 8).

An example is a line of help text that starts with ``pcqr `` (a trailing ``\\`` joins the next line);
a line naming a placeholder in capitals (``SPEC.yaml``, ``CLUSTER.yaml``) is a usage pattern, not an
example: only ``pcqr run`` and ``pcqr submit`` have one, which the test checks. Each help's examples
run in order under bash, in an empty folder of their own with a ledger of their own (``PCQR_LEDGER``)
and the default local cluster, its workers threads, each command forked from one preloaded
interpreter (tests/forked_pcqr.py). ``pcqr ledger --help``'s examples need a PostgreSQL server and
name placeholders' hosts: the README's team-ledger block, which tests/test_team_ledger.py runs against
a real server, is the same walk-through.

Substituted, and only these, to keep the test fast: size options appended to ``pcqr generate --out
data`` in ``pcqr --help`` (10,000 rows and 500 queries instead of 200,000 and 10,000) and to ``pcqr
demo`` (100,000 rows and 500 queries instead of 3,000,000 and 10,000). On two cores, ``pcqr --help``'s
17 examples then took 18 s (load average 2; 33 s at load average 7, beside other tests' runs), sanitize's
3 s and budget's 1.5 s (8 s and 4 s at load average 7).
"""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import click
import pytest

from pcqr.jobs.cli import COMMANDS, pcqr
from tests.forked_pcqr import ForkedPcqr
from tests.test_readme import ROOT

#: A word in capitals (SPEC.yaml, CLUSTER.yaml): a line naming one is a usage pattern.
PLACEHOLDER = re.compile(r"\b[A-Z][A-Z_]+\b(\.yaml)?")
#: The commands whose help holds usage patterns, not examples, and why.
NOT_RUN = {"ledger": "a PostgreSQL server (tests/test_team_ledger.py runs the README's team-ledger block)"}
#: Size options appended to an example (the module docstring says which and why).
SIZES = {"pcqr generate --out data": "--rows 10000 --queries 500", "pcqr demo": "--rows 100000 --queries 500"}


def help_text(path: list[str]) -> str:
    """The help ``pcqr PATH --help`` prints."""
    command: click.Command = pcqr
    ctx = click.Context(pcqr, info_name="pcqr", max_content_width=100)
    for name in path:
        assert isinstance(command, click.Group)
        sub = command.get_command(ctx, name)
        assert sub is not None, name
        ctx, command = click.Context(sub, info_name=name, parent=ctx), sub
    return command.get_help(ctx)


def examples(text: str) -> list[str]:
    """The lines of the help's description (above its options and commands) that start with ``pcqr ``,
    each with its continuation lines (ending ``\\``)."""
    found: list[str] = []
    description = re.split(r"^(?:Options|Commands):$", text, maxsplit=1, flags=re.M)[0]
    lines = iter(description.splitlines())
    for line in lines:
        if not line.strip().startswith("pcqr "):
            continue
        command = line.strip()
        while command.endswith("\\"):
            command = command[:-1] + next(lines).strip()
        found.append(command)
    return found


def runnable(path: list[str]) -> list[str]:
    return [line for line in examples(help_text(path)) if not PLACEHOLDER.search(line.split(" #")[0])]


def with_sizes(line: str) -> str:
    command, _, comment = line.partition(" #")
    extra = SIZES.get(" ".join(command.split()))
    return f"{command.rstrip()} {extra}" if extra else line


def helps_with_examples() -> list[list[str]]:
    """Every help that shows examples: ``pcqr``, each command, each subcommand of a group."""
    paths: list[list[str]] = [[]]
    for name in COMMANDS:
        paths.append([name])
        command = pcqr.get_command(click.Context(pcqr), name)
        if isinstance(command, click.Group):
            paths.extend([name, sub] for sub in command.list_commands(click.Context(command)))
    return [path for path in paths if examples(help_text(path))]


def test_every_example_is_run_or_says_why_not() -> None:
    """The helps with examples are known: each is run below, or NOT_RUN says why; a usage pattern
    (a placeholder in capitals) is only pcqr run's and pcqr submit's, in pcqr --help."""
    shown = {" ".join(path) for path in helps_with_examples()}
    assert shown == {"", "sanitize", "budget", *NOT_RUN}, shown
    patterns = [line for path in helps_with_examples() if not path or path[0] not in NOT_RUN
                for line in examples(help_text(path)) if PLACEHOLDER.search(line.split(" #")[0])]
    assert [line.split()[1] for line in patterns] == ["run", "submit"], patterns
    assert len(runnable([])) >= 15


@pytest.mark.slow
@pytest.mark.parametrize("path", [[], ["sanitize"], ["budget"]], ids=["pcqr", "sanitize", "budget"])
def test_the_help_examples_run_as_written(path: list[str], tmp_path: Path) -> None:
    work, tools = tmp_path / "work", tmp_path / "bin"
    work.mkdir()
    tools.mkdir()
    env = {**os.environ, "PCQR_LEDGER": str(tmp_path / "ledger.sqlite"), "DASK_PCQR__CLUSTER__PROCESSES": "false"}
    env.pop("DASK_PCQR__CLUSTER__BACKEND", None)
    lines = runnable(path)
    assert lines
    with ForkedPcqr(tools, env, ROOT) as forked:
        for line in lines:
            result = subprocess.run(["bash", "-c", with_sizes(line)], cwd=work, env={**env, "PATH": forked.path},
                                    capture_output=True, text=True, timeout=300)
            assert result.returncode == 0, f"{line}\n{result.stderr[-3000:]}"
            assert "Traceback" not in result.stderr, f"{line}\n{result.stderr[-3000:]}"
