"""A new virtual environment made with the README's install commands alone runs the README's session
walkthrough and docs/api.md's first example (issue 47, item 8).

tests/test_readme.py and tests/test_api_docs.py run the same commands in the test environment, where
``.[test]`` installed every extra (matplotlib, pandas, ...); this test catches what they cannot: a
command or an example that needs a package the README never has you install.

What it runs, in order:

* in a copy of this checkout (so that ``pip install .``'s build folders stay out of the working tree),
  each ``pip install`` of the README's "Set up" section but the test one (``pip install '.[test]'``): the
  demo's, without ``pcqr demo`` itself (tests/test_one_line_errors.py runs the demo), and the report
  extra's, with pip configured as the machine configures it (its index, its wheel folder);
* in an empty folder, with a ledger of its own and the default local cluster (its workers threads, as
  tests/test_readme.py runs it), the first two ``bash`` blocks of the README's "A session" section, as
  written (3,000,000 rows, k = 2,500): generate, train, answer, report, replay, budget set and show;
* the ``python`` blocks of docs/api.md's "A session" section, in one interpreter of the new environment.

Measured on two cores shared with other test runs (load average about 3): 73 s under pytest (the venv
3 s, ``pip install .`` 23-31 s, the report extra 8-10 s, the walkthrough 17 s of which train 9 s, the API
example 3 s). It runs under CI=true only (it needs the package index pip is configured with), and is
skipped with the reason elsewhere.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_readme import ROOT, TEST_COMMAND, blocks

DOC = Path(ROOT) / "docs" / "api.md"
#: The README's walkthrough: the first blocks of its "A session" section (the session, then its checks).
WALKTHROUGH_BLOCKS = 2
#: Not copied with the checkout: version control, caches, build output.
NOT_COPIED = shutil.ignore_patterns(".git", ".hypothesis", ".mypy_cache", ".pytest_cache", "__pycache__",
                                    "*.egg-info", "build", "dist")


def section(text: str, title: str) -> str:
    """The text under the heading ``## title`` (or ``### title``), up to the next heading of its level."""
    match = re.search(rf"^(#+) {re.escape(title)}\n(.*?)(?=^\1 |\Z)", text, flags=re.M | re.S)
    assert match, title
    return match.group(2)


def install_commands(readme: str) -> list[str]:
    """The "Set up" section's ``pip install`` commands, but the test one's, without what follows ``&&``."""
    lines = [line for _, _, block in blocks(section(readme, "Set up")) for line in block]
    commands = [line.split(" && ")[0] for line in lines if line.startswith("pip install") and line != TEST_COMMAND]
    assert commands and commands[0] == "pip install .", commands
    return commands


def walkthrough(readme: str) -> list[str]:
    found = [block for lang, run, block in blocks(section(readme, "A session")) if lang == "bash" and run]
    return [line for block in found[:WALKTHROUGH_BLOCKS] for line in block]


def api_example() -> str:
    return "\n\n".join(re.findall(r"```python\n(.*?)```", section(DOC.read_text(), "A session"), flags=re.S))


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{argv[-1][:500]}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    assert "Traceback" not in result.stderr, f"{argv[-1][:500]}\n{result.stderr[-3000:]}"
    return result


def test_what_it_runs_is_the_readmes_and_the_pages() -> None:
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    assert install_commands(readme) == ["pip install .", "pip install '.[report]'"]
    steps = walkthrough(readme)
    assert steps[0].startswith("pcqr generate ") and any(s.startswith("pcqr report ") for s in steps), steps
    assert "pcqr.Session.create(" in api_example() and "session.report(" in api_example()


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("CI") != "true",
                    reason="a fresh install: about a minute and pip's package index; runs under CI=true")
def test_a_fresh_install_runs_the_walkthrough_and_the_api_example(tmp_path: Path) -> None:
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    source, venv, work, api = tmp_path / "pcqr", tmp_path / "venv", tmp_path / "work", tmp_path / "api"
    shutil.copytree(ROOT, source, ignore=NOT_COPIED)
    work.mkdir()
    api.mkdir()
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path, dict(os.environ))
    env = {key: value for key, value in os.environ.items() if key not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env.update({"PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", "VIRTUAL_ENV": str(venv),
                "PCQR_LEDGER": str(tmp_path / "ledger.sqlite"), "DASK_PCQR__CLUSTER__PROCESSES": "false"})
    env.pop("DASK_PCQR__CLUSTER__BACKEND", None)
    for command in install_commands(readme):
        _run(["bash", "-c", command], source, env)
    for line in walkthrough(readme):
        _run(["bash", "-c", line], work, env)
    assert (work / "report.html").is_file() and (work / "replayed.parquet").is_file()
    python = str(venv / "bin" / "python")
    missing = _run([python, "-c", "import importlib.util as u; print(u.find_spec('pandas') is None)"], api, env)
    assert missing.stdout.strip() == "True"  # the example runs without pandas, which the README never installs
    ran = _run([python, "-c", api_example()], api, env)
    assert "'status'" in ran.stdout and (api / "report.html").is_file(), ran.stdout[-2000:]
