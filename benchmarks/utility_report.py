#!/usr/bin/env python
"""Markdown tables of the ``utility`` benchmark's figures, one per task, every cell a min-max range.

    python benchmarks/utility_report.py benchmarks/results.json

Rows: pcqr's cells (accuracy over all 2,000 queries, the queries the gate answered, the distilled
student on held-out rows), then the peers and baselines on the same queries.
"""
from __future__ import annotations

import json
import sys
from typing import Any

TASKS = {"adult_wide": "Adult, 105-column encoding", "adult_usual": "Adult, usual 35-column encoding",
         "corner_1e5": "imbalanced corner task, 10^5 rows", "xor_1e5": "XOR, 10^5 rows", "xor_1e6": "XOR, 10^6 rows",
         "xor_1e7": "XOR, 10^7 rows"}


def _range(cell: Any, digits: int = 3) -> str:
    if not isinstance(cell, dict) or "min" not in cell:
        return "-" if cell in (None, []) or not isinstance(cell, (dict, float, int)) else str(cell)
    low, high = (f"{cell[k]:.{digits}f}" if isinstance(cell[k], float) else f"{cell[k]:,}" for k in ("min", "max"))
    return low if low == high else f"{low}-{high}"


def _pcqr_row(cell: dict[str, Any]) -> str:
    session = cell["session"]
    if cell["gate"] == "defaults":
        name = f"pcqr defaults (chose {session['gate']}, {session['learner'].rsplit('.', 1)[-1]}, k {session['subsamples']:,})"
    else:
        name = f"pcqr {cell['gate']}-{cell['profile']}, {cell['learner']} (k {session['subsamples']:,})"
    return (f"| {name} | {cell['epsilon']:g} | {_range(cell['accuracy_over_all_queries'])} | "
            f"{_range(cell['gate_answered'])} | {_range(cell['distilled_student_accuracy'])} |")


def task_table(name: str, task: dict[str, Any]) -> list[str]:
    if "skipped" in task:
        return [f"**{TASKS.get(name, name)}**: skipped ({task['skipped']})", ""]
    lines = [f"**{TASKS.get(name, name)}** ({task['private_rows']:,} private rows, {task['features']} features, "
             f"{task['positives']:.1%} positives)", "",
             "| | eps | accuracy over all 2,000 queries | answered by the gate | distilled student (held out) |",
             "|---|---|---|---|---|"]
    lines += [_pcqr_row(cell) for cell in task["cells"]]
    for peer, label in (("dp_logistic", "DP logistic regression (diffprivlib 0.6.6)"),
                        ("dp_ebm", "DP-EBM (interpret-core)")):
        cells = task.get(peer)
        if cells is None:
            continue
        if "unavailable" in cells:
            lines.append(f"| {label} | | {cells['unavailable']} | | |")
        lines += [f"| {label} | {float(eps):g} | {_range(c)} | | |" for eps, c in cells.items() if eps != "unavailable"]
    lines.append(f"| majority class | | {task['majority_class']:.3f} | | |")
    lines += [f"| non-private {key.removeprefix('nonprivate_')} | | {value:.3f} | | |"
              for key, value in task.items() if key.startswith("nonprivate_")]
    return [*lines, ""]


def main(path: str) -> None:
    results = json.loads(open(path, encoding="utf-8").read())
    utility = results.get("utility", results)
    for name in TASKS:
        if name in utility:
            print("\n".join(task_table(name, utility[name])))


if __name__ == "__main__":
    main(sys.argv[1])
