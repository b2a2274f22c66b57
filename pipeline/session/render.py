"""Draw a session report: PNG figures and one self-contained HTML page (figures inline as data URIs,
inline CSS, no script, nothing fetched). Matplotlib is the optional extra ``pcqr[report]``."""
from __future__ import annotations

import base64
import html
import io
import os
from typing import Any, Callable

import numpy as np

from pcqr.pipeline.data.atomic import write_atomic
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.session.report import SessionReport

FIGURES = ("budget", "statuses", "answers", "accuracy")


def pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise PcqrError("pcqr report needs matplotlib: pip install 'pcqr[report]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _budget(report: SessionReport, ax: Any) -> None:
    cutoff = report.certificate.get("cutoff")
    steps = np.concatenate([[0], report.abstention_at, [report.total_queries]])
    used = np.concatenate([[0], np.arange(1, report.budget_used + 1), [report.budget_used]])
    ax.step(steps, used, where="post", label="instances used (c)")
    if cutoff is not None:
        ax.axhline(cutoff, color="tab:red", linestyle="--", label=f"T = {cutoff}")
    ax.set_xlabel("queries in the stream")
    ax.set_ylabel("sparse-vector instances used")
    eps, proven = report.certificate.get("epsilon"), report.certificate.get("proven_epsilon")
    ax.set_title(f"budget: c = {report.budget_used} of T = {cutoff}; eps {eps:g} (proven {proven:.3g})"
                 if eps is not None and proven is not None else f"budget: c = {report.budget_used} of T = {cutoff}")
    ax.legend()


def _statuses(report: SessionReport, ax: Any) -> None:
    bottom = np.zeros(report.batches.size)
    for name, color in (("answered", "tab:green"), ("abstained", "tab:orange"), ("refused", "tab:gray")):
        values = getattr(report, name)
        ax.bar(report.batches, values, bottom=bottom, color=color, label=name)
        bottom = bottom + values
    ax.set_xlabel("batch")
    ax.set_ylabel("queries")
    ax.set_title("answered / abstained / refused per batch")
    ax.legend()


def _answers(report: SessionReport, ax: Any) -> None:
    ax.bar(report.batches, report.zeros, color="tab:blue", label="released 0")
    ax.bar(report.batches, report.ones, bottom=report.zeros, color="tab:purple", label="released 1")
    ax.set_xlabel("batch")
    ax.set_ylabel("answered queries")
    ax.set_title("released labels per batch (vote margins are private)")
    ax.legend()


def _accuracy(report: SessionReport, ax: Any) -> None:
    ax.plot(report.batches, report.answer_rate(), marker=".", label="answer rate")
    accuracy = report.accuracy()
    if accuracy is not None:
        ax.plot(report.batches, accuracy, marker=".", label="accuracy of the answers (truth)")
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("batch")
    ax.set_title("answer rate" + (" and accuracy" if accuracy is not None else "") + " over the stream")
    ax.legend()


DRAW: dict[str, Callable[[SessionReport, Any], None]] = {
    "budget": _budget, "statuses": _statuses, "answers": _answers, "accuracy": _accuracy,
}


def figures(report: SessionReport) -> dict[str, bytes]:
    """Each figure as PNG bytes."""
    plt = pyplot()
    drawn = {}
    for name in FIGURES:
        fig, ax = plt.subplots(figsize=(7, 3.6), dpi=100)
        DRAW[name](report, ax)
        fig.tight_layout()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png")
        plt.close(fig)
        drawn[name] = buffer.getvalue()
    return drawn


def _table(rows: dict[str, Any]) -> str:
    cells = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(_fmt(v))}</td></tr>" for k, v in rows.items())
    return f"<table>{cells}</table>"


def _fmt(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def page(report: SessionReport, drawn: dict[str, bytes]) -> str:
    """The HTML page: certificate, totals, figures (inline), notes, the files read."""
    totals: dict[str, Any] = {"queries": report.total_queries, "answered": int(report.answered.sum()),
              "abstained": int(report.abstained.sum()), "refused": int(report.refused.sum()),
              "duplicates (no cost)": int(report.duplicates.sum()), "instances used (c)": report.budget_used,
              "batches": int(report.batches.size)}
    if report.evaluated is not None and report.correct is not None and report.evaluated.sum():
        totals["accuracy of the answers"] = float(report.correct.sum() / report.evaluated.sum())
    images = "".join(
        f'<figure><img alt="{name}" src="data:image/png;base64,{base64.b64encode(png).decode()}"></figure>'
        for name, png in drawn.items())
    state = f"<h2>State summary (--state)</h2>{_table(report.state_summary)}" if report.state_summary else ""
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in report.notes)
    files = "".join(f"<li><code>{html.escape(f)}</code></li>" for f in report.files_read)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>pcqr session report</title>
<style>body{{font-family:sans-serif;max-width:60em;margin:2em auto}}table{{border-collapse:collapse}}
th,td{{border:1px solid #ccc;padding:.2em .6em;text-align:left}}img{{max-width:100%}}</style></head>
<body><h1>pcqr session report</h1><p>Log: <code>{html.escape(report.log)}</code></p>
<h2>Certificate</h2>{_table(report.certificate)}<h2>Totals</h2>{_table(totals)}
<h2>Figures</h2>{images}{state}<h2>Notes</h2><ul>{notes}</ul>
<h2>Files read</h2><ul>{files}</ul></body></html>
"""


def write_report(report: SessionReport, out: str) -> list[str]:
    """Write ``out`` (HTML) and, beside it, ``<stem>-<figure>.png``; every file atomically, the
    figures drawn before anything is written. Returns the paths written."""
    drawn = figures(report)
    stem = os.path.splitext(out)[0]
    written = []
    for name, png in drawn.items():
        write_atomic(f"{stem}-{name}.png", png)
        written.append(f"{stem}-{name}.png")
    write_atomic(out, page(report, drawn).encode())
    return [out, *written]
