"""The README's set-up commands are the ones CI runs."""
from __future__ import annotations

import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEST_COMMAND = "pip install '.[test]' && pytest"
DEMO_COMMAND = "pip install . && pcqr demo"


def test_ci_runs_the_readme_test_command() -> None:
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    ci = open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8").read()
    assert f"\n{TEST_COMMAND}\n" in readme and f"\n{DEMO_COMMAND}\n" in readme
    commands = [line for line in ci.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert commands[-1].strip() == TEST_COMMAND
