"""docs/api.md's examples run as written: every ```python block, in order, in one namespace, in a
temporary directory, on the default local cluster with its workers as threads (a fresh subprocess, as a
user would run them; 18 s instead of 23 s: a cluster of processes is tests/test_readme.py's)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parent.parent / "docs" / "api.md"


def blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)


def test_the_page_has_examples_of_every_exported_name() -> None:
    import pcqr

    code = "\n".join(blocks())
    assert len(blocks()) >= 5
    for name in ("Session.create", "Session.open", ".answer(", ".status()", "PrivateClassifier", "PcqrError",
                 "cross_val_score(", "GridSearchCV(", "privacy_cost(", "set_budget(", 'learner="auto"'):
        assert name in code, name
    assert set(pcqr.__all__) - {"__version__"} <= set(re.findall(r"`pcqr\.(\w+)`", DOC.read_text()))


@pytest.mark.slow
def test_the_examples_run(tmp_path) -> None:
    script = "\n\n".join(blocks())
    env = {**os.environ, "PCQR_LEDGER": str(tmp_path / "ledger.sqlite"), "DASK_PCQR__CLUSTER__PROCESSES": "false"}
    # As typed into an interpreter or a notebook (a script file would need Dask's
    # ``if __name__ == "__main__":`` guard: the local cluster's worker processes re-import it).
    ran = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, env=env,
                         timeout=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    out = ran.stdout
    assert "'query_id'" in out and "'status'" in out and "used " in out
    page = (tmp_path / "report.html").read_text()
    assert "data:image/png;base64," in page and "State summary" in page
    assert re.search(r"--threshold", out)  # the refused parameter is named
    accuracy = re.search(r"answered ([\d.]+)%, accuracy of the answers ([\d.]+)%", out)
    assert accuracy and float(accuracy.group(1)) > 80 and float(accuracy.group(2)) > 95, out
    assert "3 fits: (epsilon=3, delta=3e-06) in all" in out, out
    folds = re.search(r"cross-validation: \[([\d. ]+)\]", out)  # every fold scored: a real number
    assert folds and len(folds.group(1).split()) == 3 and min(map(float, folds.group(1).split())) > 0.9, out
    # numpy pads the shorter of two scores to the longer's width: [0.996 0.99 ]
    assert re.search(r"search: \{'cutoff': (20|50)\} \[0\.9\d* +0\.9\d* *\]", out), out
    assert "refused: privacy budget of rows-in-memory exceeded" in out, out
    auto = re.search(r"auto: ([\d.]+)", out)
    assert auto and float(auto.group(1)) > 0.9, out
    gnmax = re.search(r"gnmax: NaN (\d+), accuracy ([\d.]+)%", out)
    assert gnmax and int(gnmax.group(1)) == 0 and float(gnmax.group(2)) > 95, out
    assert "learnt: threshold 1.0" in out, out
    assert "refused: --algorithm label-private reveals the feature values" in out, out
    assert re.search(r"label-private: label privacy: the feature columns are stated public \d+ \d", out), out
    sanitized = re.search(r"sanitized: (\d+) \{(.*)\}", out)
    assert sanitized and int(sanitized.group(1)) == 4 and "11: 0.3" in sanitized.group(2), out
    thresholds = re.search(r"thresholds: 5 levels, share <= 60000 ([\d.]+), true ([\d.]+)", out)
    assert thresholds and abs(float(thresholds.group(1)) - float(thresholds.group(2))) <= 0.01, out
