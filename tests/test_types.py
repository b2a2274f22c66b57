"""The library and the jobs type-check (mypy, configured in pyproject.toml), as the installed package.

mypy cannot follow the editable install's import hook that maps ``pcqr.pipeline`` to ``pipeline/``,
so the test builds the installed layout from links (pcqr/ = src/pcqr, pcqr/pipeline -> pipeline/,
pcqr/jobs -> jobs/) and checks the package ``pcqr``; pyproject.toml refuses a missing ``pcqr.*``
module, so an import that stopped resolving fails here instead of silently becoming ``Any``.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def installed_layout(into: Path) -> Path:
    """``into``/pcqr laid out as the wheel installs it, its files links to the checkout's."""
    package = into / "pcqr"
    shutil.copytree(ROOT / "src" / "pcqr", package)
    os.symlink(ROOT / "pipeline", package / "pipeline", target_is_directory=True)
    os.symlink(ROOT / "jobs", package / "jobs", target_is_directory=True)
    return package


def _mypy(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
         "--cache-dir", str(cwd / ".mypy_cache"), *args],
        cwd=cwd, capture_output=True, text=True,
    )


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One installed layout for both tests, and so one mypy cache: the second run reuses what the
    first analysed (the cache is checked against every source file, so it never hides a change)."""
    pytest.importorskip("mypy")
    folder = tmp_path_factory.mktemp("types")
    installed_layout(folder)
    return folder


@pytest.mark.slow
def test_mypy_is_clean(layout: Path) -> None:
    result = _mypy(layout, "-p", "pcqr")
    assert result.returncode == 0, result.stdout[-3000:]


def test_mypy_sees_the_library_types_not_any(layout: Path) -> None:
    """The check above means something: a wrong call into the library is an error."""
    (layout / "probe.py").write_text("from pcqr.pipeline.errors import PcqrError\nPcqrError(3)\n")
    result = _mypy(layout, "probe.py")
    assert result.returncode == 1 and 'incompatible type "int"' in result.stdout, result.stdout
