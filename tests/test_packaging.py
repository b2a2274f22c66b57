"""The installed package is one namespace, ``pcqr``, holding every subpackage (a wheel built from
pyproject.toml, installed into a fresh virtual environment, not the source tree)."""
from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

import pcqr

ROOT = Path(__file__).resolve().parent.parent


def test_subpackages_import_outside_the_source_tree(tmp_path) -> None:
    code = ("import pcqr, pcqr.pipeline.hypotheses, pcqr.pipeline.mechanisms.relabel, pcqr.pipeline.session.state, "
            "pcqr.pipeline.privacy.subsamp, pcqr.pipeline.budget.ledger, pcqr.pipeline.models.votes, "
            "pcqr.pipeline.data.datasets, pcqr.jobs.plan, pcqr.jobs.cli")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_the_version_is_the_distributions() -> None:
    from importlib.metadata import version
    assert pcqr.__version__ == version("pcqr")


@pytest.mark.slow
def test_the_wheel_installs_pcqr_and_nothing_else_at_the_top_level(tmp_path) -> None:
    """`pip install .` must not put `pipeline` or `jobs` (names other projects use) into site-packages."""
    wheels = tmp_path / "wheels"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(ROOT)],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = wheels.glob("pcqr-*.whl")
    env_dir = tmp_path / "venv"
    venv.create(env_dir)  # without pip of its own: this pip installs into it (--python)
    python = env_dir / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())
    before = set(os.listdir(site))
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                                "--no-index", str(wheel)], capture_output=True, text=True)
    assert installed.returncode == 0, installed.stderr[-2000:]
    added = set(os.listdir(site)) - before
    assert added == {"pcqr", f"pcqr-{pcqr.__version__}.dist-info"}, sorted(added)
    package = site / "pcqr"
    for sub in ("pipeline/session/state.py", "pipeline/data/cluster-defaults.yaml", "pipeline/py.typed",
                "jobs/cli.py", "jobs/examples", "py.typed"):
        assert (package / sub).exists(), sub
