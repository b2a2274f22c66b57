"""The conventions every figure of the session report shares, so that the figures read alike.

The x axis of a figure over the stream is the position in the query stream (binned), with the
stretch after the halt shaded; counts sit on integer axes (a log scale where a handful of events
share a bin with thousands); a legend stands right of its axes, in the margin :func:`frame` keeps
free in every figure, never on the data. The artists that plot the report's data carry the gid
``"data"`` (the tests count their points).
"""
from __future__ import annotations

import textwrap
from typing import Any

import numpy as np

from pcqr.pipeline.report.contents import SessionReport

DATA = "data"
LEGEND_WIDTH = 36  # characters per legend line
TITLE_WIDTH = 72  # characters per title line
AFTER_HALT = "after the halt"


def data(artists: Any) -> Any:
    """Mark what plots the report's data (a line, a list of lines, or a bar container: a tuple)."""
    for artist in (artists if isinstance(artists, (list, tuple)) else [artists]):
        artist.set_gid(DATA)
    return artists


def count(n: int) -> str:
    return f"{n:,}"


def frame(fig: Any, left: float = 0.085, right: float = 0.68) -> None:
    """The same margins in every figure (in inches at the top and bottom), so that the stream's axes
    of all figures line up one above the other, and the legends have the right-hand third to themselves."""
    height = fig.get_figheight()
    rows = len(fig.axes)
    inner = height - 0.45 - 0.6
    gap = 0.75
    fig.subplots_adjust(left=left, right=right, top=1 - 0.45 / height, bottom=0.6 / height,
                        hspace=gap / ((inner - gap * (rows - 1)) / rows) if rows > 1 else 0.2)


def plural(n: int, one: str, many: str) -> str:
    return f"{count(n)} {one if n == 1 else many}"


def legend(ax: Any) -> None:
    """The legend right of the axes, in the margin :func:`frame` leaves (labels wrapped to fit it)."""
    handles, labels = ax.get_legend_handles_labels()
    order = sorted(range(len(labels)), key=lambda i: labels[i].startswith(AFTER_HALT))  # the shading last
    handles, labels = [handles[i] for i in order], [labels[i] for i in order]
    wrapped = ["\n".join(textwrap.fill(line, LEGEND_WIDTH) for line in label.split("\n")) for label in labels]
    ax.legend(handles, wrapped, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, frameon=False,
              fontsize=9)


def integer_axis(axis: Any) -> None:
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True, steps=[1, 2, 5, 10]))
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))


def log_count_axis(ax: Any, top: float) -> None:
    """A log y axis of counts: ticks at 1, 2, 5, 10, ... written as integers; 1 sits above the floor."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

    ax.set_yscale("log")
    ax.set_ylim(0.6, max(top, 2.0) * 1.8)
    subs = (1.0, 2.0, 5.0) if top < 1e4 else (1.0,)
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=subs))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))


def stream(ax: Any, report: SessionReport, ylabel: str) -> None:
    """The stream's x axis, the y label, and the stretch after the halt shaded."""
    n = report.total_queries
    end = 1.012 * n + 0.5
    ax.set_xlim(-0.012 * n, end)  # a margin, so that a dot in the first or last bin clears the frame
    integer_axis(ax.xaxis)
    last = int(report.bin_sizes[-1])
    bins = ("one point per query" if report.bin_width == 1 else f"bins of {count(report.bin_width)} queries"
            + (f", the last {count(last)}" if last != report.bin_width else ""))
    ax.set_xlabel(f"position in the query stream ({bins})")
    ax.set_ylabel(ylabel)
    if report.halt_at is not None:
        ax.axvspan(report.halt_at - 0.5, end, color="0.92", zorder=0,
                   label=f"{AFTER_HALT} (query {report.halt_at:,} on; {report.halt_reason()})")


def title(ax: Any, text: str) -> None:
    ax.set_title(textwrap.fill(text, TITLE_WIDTH))


def share_range(*values: np.ndarray) -> tuple[float, float]:
    """Limits of a share axis zoomed on the data (at least 0.99 to 1), so that 0.997 and 1.0 do not
    merge into one line at the top of a 0-to-1 axis."""
    known = np.concatenate([np.asarray(v, dtype=float).ravel() for v in values])
    known = known[np.isfinite(known)]
    low = float(known.min()) if known.size else 0.0
    span = max(1.0 - low, 0.01)
    return max(0.0, 1.0 - 1.12 * span), 1.0 + 0.12 * span
