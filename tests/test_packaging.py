"""The installed package holds every subpackage (a wheel built from pyproject.toml, not the tree)."""
from __future__ import annotations

import subprocess
import sys


def test_subpackages_import_outside_the_source_tree(tmp_path) -> None:
    code = "import pipeline.hypotheses, pipeline.mechanisms.relabel, jobs.plan, jobs.cli"
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
