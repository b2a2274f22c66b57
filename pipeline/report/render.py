"""Draw a session report: PNG figures and one self-contained HTML page (figures inline as data URIs,
inline CSS, no script, nothing fetched). Matplotlib is the optional extra ``pcqr[report]``."""
from __future__ import annotations

import base64
import html
import io
import os
from typing import Any

from pcqr.pipeline.data import locations
from pcqr.pipeline.data.atomic import write_atomic
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.report.axes import frame
from pcqr.pipeline.report.figures import DRAW, caption, figure_names
from pcqr.pipeline.report.contents import SessionReport


def pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise PcqrError("pcqr report needs matplotlib: pip install 'pcqr[report]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def draw(report: SessionReport) -> dict[str, Any]:
    """Each figure of the report as a matplotlib Figure (the caller closes them)."""
    plt = pyplot()
    drawn = {}
    for name in figure_names(report):
        spec = DRAW[name]
        fig = plt.figure(figsize=(10, spec.height), dpi=100)
        spec.draw(report, fig)
        frame(fig, left=spec.left, right=spec.right)
        drawn[name] = fig
    return drawn


def figures(report: SessionReport) -> dict[str, bytes]:
    """Each figure as PNG bytes."""
    plt = pyplot()
    pngs = {}
    for name, fig in draw(report).items():
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png")
        plt.close(fig)
        pngs[name] = buffer.getvalue()
    return pngs


def _table(rows: dict[str, Any]) -> str:
    cells = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(_fmt(v))}</td></tr>" for k, v in rows.items())
    return f"<table>{cells}</table>"


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return str(value)
    return f"{value:.6g}" if isinstance(value, float) else f"{value:,}" if isinstance(value, int) else str(value)


def totals(report: SessionReport) -> dict[str, Any]:
    """The session's counts over the whole log, as the page's table shows them."""
    rows: dict[str, Any] = {"queries": report.total_queries, "batches": report.batches}
    rows.update({name: int(counts.sum()) for name, counts in report.statuses.items()})
    rows.update({f"answered by {name}": int(counts.sum()) for name, counts in report.sources.items()})
    rows["instances spent (c)"] = (f"{report.budget_used:,} of {report.limit_name} = {report.limit:,}"
                                   if report.limit is not None else f"{report.budget_used:,}")
    rows["halted"] = "no" if report.halt_at is None else f"before query {report.halt_at:,} ({report.halt_reason()})"
    if report.truth is not None and report.truth.evaluated.sum():
        rows["accuracy of the answers"] = float(report.truth.correct.sum() / report.truth.evaluated.sum())
        rows.update({f"accuracy of {name} answers": right / n for name, (n, right) in report.truth.by_source.items() if n})
    if report.truth is not None and report.truth.confusion is not None:  # c > 2: each class's recall
        confusion = report.truth.confusion
        names = report.certificate.get("class_names")
        rows.update({f"accuracy on true class {names[j] if isinstance(names, list) else j}":
                     float(confusion[j, j] / confusion[j].sum()) for j in range(confusion.shape[0]) if confusion[j].sum()})
    return rows


def _shortened(files: list[str], keep: int = 3) -> list[str]:
    """The files read, a long run of one log's batch files shortened to its ends and its count."""
    batches = [f for f in files if os.path.basename(f).startswith("batch-")]
    if len(batches) <= 2 * keep + 1:
        return files
    others = [f for f in files if not os.path.basename(f).startswith("batch-")]
    return [*batches[:keep], f"... {len(batches) - 2 * keep:,} more batch files ...", *batches[-keep:], *others]


def page(report: SessionReport, drawn: dict[str, bytes]) -> str:
    """The HTML page: certificate, totals, figures (inline, each with a caption), notes, the files read."""
    images = "".join(
        f'<figure id="{name}"><img alt="{name}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'
        f"<figcaption>{html.escape(caption(name, report))}</figcaption></figure>"
        for name, png in drawn.items())
    state = f"<h2>State summary (--state)</h2>{_table(report.state_summary)}" if report.state_summary else ""
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in report.notes)
    files = "".join(f"<li><code>{html.escape(f)}</code></li>" for f in _shortened(report.files_read))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>pcqr session report</title>
<style>body{{font-family:sans-serif;max-width:64em;margin:2em auto;padding:0 1em}}table{{border-collapse:collapse}}
th,td{{border:1px solid #ccc;padding:.2em .6em;text-align:left}}img{{max-width:100%}}figure{{margin:1.5em 0}}
figcaption{{color:#444;font-size:.9em;max-width:56em}}.tables{{display:flex;gap:2em;flex-wrap:wrap}}</style></head>
<body><h1>pcqr session report</h1><p>Log: <code>{html.escape(report.log)}</code></p>
<div class="tables"><div><h2>Certificate</h2>{_table(report.certificate)}</div>
<div><h2>Totals</h2>{_table(totals(report))}</div></div>
<h2>Figures</h2>{images}{state}<h2>Notes</h2><ul>{notes}</ul>
<h2>Files read</h2><ul>{files}</ul></body></html>
"""


def figure_path(out: str, name: str) -> str:
    """Where the report ``out``'s figure ``name`` goes: beside it, ``<stem>-<name>.png``."""
    return f"{os.path.splitext(out)[0]}-{name}.png"


def report_files(out: str) -> list[str]:
    """Every file a report at ``out`` may write: the page, then each figure (:data:`DRAW`)."""
    return [out, *(figure_path(out, name) for name in DRAW)]


def write_report(report: SessionReport, out: str) -> list[str]:
    """Write ``out`` (HTML) and, beside it, ``<stem>-<figure>.png``; every file atomically, the
    figures drawn before anything is written. A figure of an earlier report at ``out`` that this one
    does not draw (``sources`` without ``--truth``) is removed: the command replaces an existing
    report only with ``--overwrite`` (pcqr.pipeline.data.outputs), and a stale figure beside the new
    page would show another report's data. Returns the paths written."""
    drawn = figures(report)
    written = []
    for name, png in drawn.items():
        write_atomic(figure_path(out, name), png)
        written.append(figure_path(out, name))
    write_atomic(out, page(report, drawn).encode())
    for name in DRAW:
        if name not in drawn and locations.exists(figure_path(out, name)):
            locations.remove(figure_path(out, name))
    return [out, *written]
