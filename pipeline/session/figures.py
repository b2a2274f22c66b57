"""The session report's figures, each drawn from a :class:`SessionReport` onto a matplotlib Figure.

Every figure over the stream has the same x axis: the position in the query stream, binned (see
:func:`pcqr.pipeline.session.report.stream_edges`), with the stretch after the halt shaded. Counts
are drawn on integer axes, a log scale where a few events share a bin with thousands (one abstention
among 10^5 answers is a dot at 1); legends sit right of the axes, never on the data. The artists that
plot the report's data carry the gid ``"data"`` (the tests count their points).
"""
from __future__ import annotations

import textwrap
from typing import Any, Callable

import numpy as np

from pcqr.pipeline.session.log import DUPLICATE, FLIPPED, GNMAX, GUESS, STUDENT
from pcqr.pipeline.session.report import SessionReport, share, wilson

DATA = "data"
LEGEND_WIDTH = 36  # characters per legend line
TITLE_WIDTH = 72  # characters per title line
AFTER_HALT = "after the halt"
SOURCE_WORDS = {"sparse_vector": "the gate's majority", "released_model": "h_priv, universal mode",
                "guess": "the public guess, free", "flipped": "1 - guess, one of T", "gnmax": "the noisy majority, one of m",
                "student": "after the halt, free", "duplicate": "an earlier answer, free"}
COLORS = {"sparse_vector": "tab:green", "released_model": "tab:cyan", "guess": "tab:blue", "flipped": "tab:red",
          "gnmax": "tab:purple", "student": "tab:olive", "duplicate": "tab:brown", "abstained": "tab:orange",
          "refused": "tab:gray"}


def _data(artists: Any) -> Any:
    for artist in (artists if isinstance(artists, (list, tuple)) or hasattr(artists, "patches") else [artists]):
        artist.set_gid(DATA)
    return artists


def _count(n: int) -> str:
    return f"{n:,}"


def frame(fig: Any, left: float = 0.085, right: float = 0.68) -> None:
    """The same margins in every figure (in inches at the top and bottom), so that the stream's axes
    of all figures line up one above the other, and the legends have the right-hand 30% to themselves."""
    height = fig.get_figheight()
    rows = len(fig.axes)
    inner = height - 0.45 - 0.6
    gap = 0.75
    fig.subplots_adjust(left=left, right=right, top=1 - 0.45 / height, bottom=0.6 / height,
                        hspace=gap / ((inner - gap * (rows - 1)) / rows) if rows > 1 else 0.2)


def _plural(n: int, one: str, many: str) -> str:
    return f"{_count(n)} {one if n == 1 else many}"


def _legend(ax: Any) -> None:
    """The legend right of the axes, in the margin :func:`frame` leaves (labels wrapped to fit it)."""
    handles, labels = ax.get_legend_handles_labels()
    order = sorted(range(len(labels)), key=lambda i: labels[i].startswith(AFTER_HALT))  # the shading last
    handles, labels = [handles[i] for i in order], [labels[i] for i in order]
    wrapped = ["\n".join(textwrap.fill(line, LEGEND_WIDTH) for line in label.split("\n")) for label in labels]
    ax.legend(handles, wrapped, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, frameon=False,
              fontsize=9)


def _integer_axis(axis: Any) -> None:
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True, steps=[1, 2, 5, 10]))
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))


def _log_count_axis(ax: Any, top: float) -> None:
    """A log y axis of counts: ticks at 1, 2, 5, 10, ... written as integers; 1 sits above the floor."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

    ax.set_yscale("log")
    ax.set_ylim(0.6, max(top, 2.0) * 1.8)
    subs = (1.0, 2.0, 5.0) if top < 1e4 else (1.0,)
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=subs))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))


def _stream(ax: Any, report: SessionReport, ylabel: str) -> None:
    """The stream's x axis, the y label, and the stretch after the halt shaded."""
    n = report.total_queries
    ax.set_xlim(-0.012 * n, 1.012 * n + 0.5)  # a margin, so that a dot in the first or last bin clears the frame
    _integer_axis(ax.xaxis)
    last = int(report.bin_sizes[-1])
    bins = ("one point per query" if report.bin_width == 1 else f"bins of {_count(report.bin_width)} queries"
            + (f", the last {_count(last)}" if last != report.bin_width else ""))
    ax.set_xlabel(f"position in the query stream ({bins})")
    ax.set_ylabel(ylabel)
    if report.halt_at is not None:
        ax.axvspan(report.halt_at - 0.5, 1.012 * n + 0.5, color="0.92", zorder=0,
                   label=f"{AFTER_HALT} (query {report.halt_at:,} on; {report.halt_reason()})")


def _title(ax: Any, text: str) -> None:
    ax.set_title(textwrap.fill(text, TITLE_WIDTH))


def _share_limits(ax: Any, *values: np.ndarray) -> None:
    """A share axis zoomed on the data (at least 0.99 to 1), so that 0.997 and 1.0 do not merge."""
    known = np.concatenate([np.asarray(v, dtype=float).ravel() for v in values])
    known = known[np.isfinite(known)]
    low = float(known.min()) if known.size else 0.0
    span = max(1.0 - low, 0.01)
    ax.set_ylim(max(0.0, 1.0 - 1.12 * span), 1.0 + 0.12 * span)


def _spend_words(report: SessionReport) -> str:
    """What one unit of the budget is."""
    return {"guess": "flipped answers (sparse-vector instances)", "gnmax": "noisy-majority answers"}.get(
        report.gate, "abstentions (sparse-vector instances)")


def budget(report: SessionReport, fig: Any) -> None:
    """The odometer: the budget spent against the stream, up to T (or m)."""
    ax = fig.subplots()
    unit, limit_name = _spend_words(report), report.limit_name
    used, limit, n = report.budget_used, report.limit, report.total_queries
    label = f"{unit} spent: {_count(used)}"
    if used <= 2000:  # every step drawn
        x = np.concatenate([[0], report.spent_at, [n]])
        _data(ax.step(x, np.concatenate([np.arange(used + 1), [used]]), where="post", color="tab:blue", lw=1.8,
                      label=label))
    else:  # the count at each bin's end
        _data(ax.plot(report.edges, np.searchsorted(report.spent_at, report.edges, side="right"), color="tab:blue",
                      lw=1.8, label=label))
    if limit is not None:
        ax.axhline(limit, color="tab:red", linestyle="--", label=f"{limit_name} = {_count(limit)}: the session halts if it gets there")
    more = report.forecast_more_queries()
    if more is not None:
        ax.plot([], [], " ", label=f"at this rate, {limit_name} is reached after about {_count(more)} more queries")
    ax.set_ylim(0, max(limit or 0, used, 1) * 1.1)
    _integer_axis(ax.yaxis)
    _stream(ax, report, f"{unit.split(' (')[0]} spent")
    cert = report.certificate
    certified = (f"; ({cert['proven_epsilon']:.3g}, {cert['proven_delta']:.2g})-DP certified"
                 if "proven_epsilon" in cert and "proven_delta" in cert else "")
    _title(ax, f"Budget odometer: {_count(used)} of {limit_name} = {_count(limit or 0)} spent{certified}")
    _legend(ax)


def outcomes(report: SessionReport, fig: Any) -> None:
    """What each query got, per bin: answered (by source), abstained, refused; counts on a log scale."""
    ax = fig.subplots()
    centers, n = report.centers(), report.total_queries
    rows = [(f"answered by {name}", name, counts) for name, counts in report.sources.items()]
    rows += [(name, name, report.statuses[name]) for name in ("abstained", "refused")]
    for label, key, counts in rows:
        total = int(counts.sum())
        _data(ax.plot(centers, np.where(counts > 0, counts, np.nan), marker="o", markersize=4, lw=1,
                      color=COLORS.get(key), label=f"{label}: {_count(total)} ({total / n:.2%})"))
    _log_count_axis(ax, float(report.bin_sizes.max()))
    _stream(ax, report, "queries per bin (log scale)")
    _title(ax, f"What each of the {_plural(n, 'query', 'queries')} got ({_plural(report.batches, 'batch', 'batches')})")
    _legend(ax)


def gate(report: SessionReport, fig: Any) -> None:
    """The gate in use: flips for guess, the noisy majority then the student for gnmax, else the
    queries between abstentions."""
    ax = fig.subplots()
    {"guess": _guess_gate, "gnmax": _gnmax_gate}.get(report.gate, _stability_gate)(report, ax)
    _legend(ax)


def _stability_gate(report: SessionReport, ax: Any) -> None:
    gaps = np.diff(np.concatenate([[0], report.spent_at]))
    if gaps.size:
        _data(ax.plot(report.spent_at, gaps, "o", color="tab:orange", label="queries up to each abstention"))
        ax.axhline(report.tested / gaps.size, color="tab:blue", linestyle="--",
                   label=f"{report.tested / gaps.size:,.0f} queries decided per instance (the odometer's rate)")
    else:
        ax.text(0.5, 0.5, "no abstention in this log: no instance spent", transform=ax.transAxes, ha="center")
    if gaps.size and gaps.max() > 20 * max(gaps.min(), 1):
        _log_count_axis(ax, float(gaps.max()))
    else:
        ax.set_ylim(0, max(gaps.max() if gaps.size else 1, 1) * 1.15)
        _integer_axis(ax.yaxis)
    _stream(ax, report, "queries since the previous abstention")
    _title(ax, f"{report.gate.capitalize()} gate: queries between abstentions (each spends one of T = "
                 f"{_count(report.limit or 0)})")


def _guess_gate(report: SessionReport, ax: Any) -> None:
    zeros = np.zeros_like(report.bin_sizes)
    flips, free = report.sources.get(FLIPPED, zeros), report.sources.get(GUESS, zeros)
    _data(ax.bar(report.centers(), flips, width=report.bin_sizes * 0.8, color=COLORS[FLIPPED],
                 label=f"flipped (1 - guess): {_count(int(flips.sum()))}, each one of T = {_count(report.limit or 0)}"))
    ax.plot([], [], " ", label=f"the guess, released free: {_count(int(free.sum()))}")
    ax.set_ylim(0, max(int(flips.max()), 1) * 1.15)
    _integer_axis(ax.yaxis)
    _stream(ax, report, "flipped answers per bin")
    _title(ax, f"Guess gate: flips over the stream{_student_words(report)}")


def _gnmax_gate(report: SessionReport, ax: Any) -> None:
    bottom = np.zeros(report.bin_sizes.size)
    for name in (GNMAX, STUDENT, DUPLICATE):
        if name in report.sources:
            part = share(report.sources[name], report.bin_sizes)
            _data(ax.bar(report.centers(), part, bottom=bottom, width=report.bin_sizes, color=COLORS[name],
                         label=f"{name}: {_count(int(report.sources[name].sum()))}"))
            bottom = bottom + part
    ax.set_ylim(0, 1.05)
    _stream(ax, report, "share of the bin's queries")
    answered = int(report.sources.get(GNMAX, np.zeros(1)).sum())
    _title(ax, f"gnmax gate: {_count(answered)} of m = {_count(report.limit or 0)} answered by the noisy majority"
                 f"{_student_words(report)}")


def _student_words(report: SessionReport) -> str:
    if STUDENT not in report.sources:
        return ""
    taught = int(report.sources[STUDENT].sum())
    return f", then the student: {_count(taught)} ({taught / report.total_queries:.0%})"


def labels(report: SessionReport, fig: Any) -> None:
    """The share of answers released as 1, per bin (and the truth's share on the same queries)."""
    ax = fig.subplots()
    _data(ax.plot(report.centers(), share(report.ones, report.statuses["answered"]), marker="o", markersize=5,
                  lw=2.5, alpha=0.6, color="tab:purple", label="released 1 (share of the bin's answers)"))
    if report.truth is not None:  # drawn thin over the released line: where they agree both show
        _data(ax.plot(report.centers(), share(report.truth.true_ones, report.truth.evaluated), marker=".",
                      markersize=3, lw=0.8, color="black", linestyle=":", label="labelled 1 in the truth (same queries)"))
    ax.set_ylim(-0.02, 1.02)
    _stream(ax, report, "share labelled 1")
    _title(ax, "Released labels over the stream (the votes behind them are private)")
    _legend(ax)


def accuracy(report: SessionReport, fig: Any) -> None:
    """The answer rate per bin and, with a truth file, the answers' accuracy per bin (95% band)."""
    axes = fig.subplots(2 if report.truth is not None else 1, 1, squeeze=False)[:, 0]
    answered, sizes = report.statuses["answered"], report.bin_sizes
    rate = share(answered, sizes)
    _data(axes[0].plot(report.centers(), rate, marker=".", color="tab:green",
                       label=f"answered: {_count(int(answered.sum()))} of {_count(report.total_queries)}"))
    _share_limits(axes[0], rate)
    _stream(axes[0], report, "answer rate")
    _title(axes[0], "Answer rate" + (" and accuracy" if report.truth is not None else "") + " over the stream")
    if report.truth is not None:
        truth = report.truth
        correct = share(truth.correct, truth.evaluated)
        low, high = wilson(truth.correct, truth.evaluated)
        axes[1].fill_between(report.centers(), low, high, color="tab:blue", alpha=0.2, lw=0, label="95% interval")
        _data(axes[1].plot(report.centers(), correct, marker=".", color="tab:blue",
                           label=f"right: {_count(int(truth.correct.sum()))} of {_count(int(truth.evaluated.sum()))}"
                           " answers with a truth"))
        _share_limits(axes[1], correct, low)
        _stream(axes[1], report, "accuracy")
    for ax in axes:
        _legend(ax)


def sources(report: SessionReport, fig: Any) -> None:
    """Accuracy by source (with a truth file): each source's share of right answers, 95% interval."""
    ax = fig.subplots()
    assert report.truth is not None
    rows = [("all answers", int(report.truth.evaluated.sum()), int(report.truth.correct.sum()))]
    rows += [(name, n, right) for name, (n, right) in report.truth.by_source.items() if n]
    n = np.array([row[1] for row in rows])
    right = np.array([row[2] for row in rows])
    value = share(right, n)
    low, high = wilson(right, n)
    y = np.arange(len(rows))[::-1]
    _data(ax.errorbar(value, y, xerr=np.maximum([value - low, high - value], 0.0), fmt="o", color="tab:blue", capsize=4).lines[0])
    for at, (name, count, _), v in zip(y, rows, value):
        ax.annotate(f"{v:.4f}", (v, at), textcoords="offset points", xytext=(0, 7), ha="center", fontsize=9)
    ax.set_yticks(y, [f"{name}\n({SOURCE_WORDS[name]})\nn = {_count(count)}" if name in SOURCE_WORDS else
                      f"{name}\nn = {_count(count)}" for name, count, _ in rows])
    ax.set_ylim(-0.7, len(rows) - 0.3)
    low_x = float(np.nanmin(low))
    span = max(1.0 - low_x, 0.01)
    ax.set_xlim(max(0.0, 1.0 - 1.15 * span), 1.0 + 0.1 * span)
    ax.set_xlabel("accuracy against the truth (95% Wilson interval)")
    ax.set_ylabel("answered by (the log's source)")
    _title(ax, "Accuracy by source")


# name: (draw, height in inches, left margin)
DRAW: dict[str, tuple[Callable[[SessionReport, Any], None], float, float]] = {
    "budget": (budget, 3.6, 0.085), "outcomes": (outcomes, 3.8, 0.085), "gate": (gate, 3.6, 0.085),
    "accuracy": (accuracy, 5.4, 0.085), "sources": (sources, 3.4, 0.3), "labels": (labels, 3.4, 0.085),
}
CAPTIONS: dict[str, str | dict[str, str]] = {
    "budget": "The privacy budget against the query stream: each step is one instance spent (an abstention, a "
              "flipped or a noisy-majority answer); the session halts if it reaches the dashed line.",
    "outcomes": "Per bin of the stream, how many queries were answered (by which source), abstained or refused. "
                "The scale is logarithmic so that a single abstention among thousands of answers is a visible dot at 1.",
    "gate": {
        "stability": "The stability gate: each dot is an abstention (one instance spent) at its place in the stream, "
                     "at the height of the queries since the previous one; the dashed line is the rate the odometer "
                     "forecasts with. A falling cloud means the budget burns faster.",
        "guess": "The guess gate: the answers of each bin that were flipped (1 - the public guess, each spending one "
                 "of the T instances); every other gated answer is the guess, released free.",
        "gnmax": "The gnmax gate: the share of each bin's queries answered by the noisy majority (each one of the m "
                 "answers), then, after the halt, by the student (free) or from the log (duplicates).",
    },
    "accuracy": "The share of each bin's queries that were answered and, with --truth, the share of those answers "
                "that match the truth (shaded: 95% Wilson interval). The y axes are zoomed on the data.",
    "sources": "Accuracy of the answers by where they came from (the log's source column), against --truth; "
               "whiskers: 95% Wilson interval.",
    "labels": "The share of answers released as 1 in each bin; with --truth, the share labelled 1 in the truth "
              "on the same queries.",
}


def caption(name: str, report: SessionReport) -> str:
    """The words under a figure on the page."""
    words = CAPTIONS[name]
    return words if isinstance(words, str) else words.get(report.gate, words["stability"])


def figure_names(report: SessionReport) -> list[str]:
    """The figures this report draws, in page order (accuracy by source needs a truth file)."""
    return [name for name in DRAW if name != "sources" or report.truth is not None]
