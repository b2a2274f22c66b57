"""The session report's figures, each drawn from a :class:`SessionReport` onto a matplotlib Figure
with the conventions of :mod:`pcqr.pipeline.report.axes` (the stream's x axis, integer counts,
legends outside the data, the halt shaded): the budget odometer, what each query got, the gate's
own figure, the answer rate and accuracy, accuracy by source, the labels released.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np

from pcqr.pipeline.report.axes import (
    count, data, integer_axis, legend, log_count_axis, plural, share_range, stream, title,
)
from pcqr.pipeline.public_log.batches import DUPLICATE, FLIPPED, GNMAX, GUESS, STUDENT
from pcqr.pipeline.report.contents import SessionReport, share, wilson

SOURCE_WORDS = {"sparse_vector": "the gate's majority", "released_model": "h_priv, universal mode",
                "guess": "the public guess, free", "flipped": "1 - guess, one of T", "gnmax": "the noisy majority, one of m",
                "student": "after the halt, free", "duplicate": "an earlier answer, free"}
COLORS = {"sparse_vector": "tab:green", "released_model": "tab:cyan", "guess": "tab:blue", "flipped": "tab:red",
          "gnmax": "tab:purple", "student": "tab:olive", "duplicate": "tab:brown", "abstained": "tab:orange",
          "refused": "tab:gray"}


def _spend_words(report: SessionReport) -> str:
    """What one unit of the budget is."""
    return {"guess": "flipped answers (sparse-vector instances)", "gnmax": "noisy-majority answers"}.get(
        report.gate, "abstentions (sparse-vector instances)")


def budget(report: SessionReport, fig: Any) -> None:
    """The odometer: the budget spent against the stream, up to T (or m)."""
    ax = fig.subplots()
    unit, limit_name = _spend_words(report), report.limit_name
    used, limit, n = report.budget_used, report.limit, report.total_queries
    label = f"{unit} spent: {count(used)}"
    if used <= 2000:  # every step drawn
        x = np.concatenate([[0], report.spent_at, [n]])
        data(ax.step(x, np.concatenate([np.arange(used + 1), [used]]), where="post", color="tab:blue", lw=1.8,
                      label=label))
    else:  # the count at each bin's end
        data(ax.plot(report.edges, np.searchsorted(report.spent_at, report.edges, side="right"), color="tab:blue",
                      lw=1.8, label=label))
    if limit is not None:
        ax.axhline(limit, color="tab:red", linestyle="--",
                   label=f"{limit_name} = {count(limit)}: the session halts if it gets there")
    more = report.forecast_more_queries()
    if more is not None:
        ax.plot([], [], " ", label=f"at this rate, {limit_name} is reached after about {count(more)} more queries")
    ax.set_ylim(0, max(limit or 0, used, 1) * 1.1)
    integer_axis(ax.yaxis)
    stream(ax, report, f"{unit.split(' (')[0]} spent")
    cert = report.certificate
    certified = (f"; ({cert['proven_epsilon']:.3g}, {cert['proven_delta']:.2g})-DP certified"
                 if "proven_epsilon" in cert and "proven_delta" in cert else "")
    title(ax, f"Budget odometer: {count(used)} of {limit_name} = {count(limit or 0)} spent{certified}")
    legend(ax)


def outcomes(report: SessionReport, fig: Any) -> None:
    """What each query got, per bin: answered (by source), abstained, refused; counts on a log scale."""
    ax = fig.subplots()
    centers, n = report.centers(), report.total_queries
    rows = [(f"answered by {name}", name, counts) for name, counts in report.sources.items()]
    rows += [(name, name, report.statuses[name]) for name in ("abstained", "refused")]
    for label, key, counts in rows:
        total = int(counts.sum())
        data(ax.plot(centers, np.where(counts > 0, counts, np.nan), marker="o", markersize=4, lw=1,
                      color=COLORS.get(key), label=f"{label}: {count(total)} ({total / n:.2%})"))
    log_count_axis(ax, float(report.bin_sizes.max()))
    stream(ax, report, "queries per bin (log scale)")
    title(ax, f"What each of the {plural(n, 'query', 'queries')} got ({plural(report.batches, 'batch', 'batches')})")
    legend(ax)


def gate(report: SessionReport, fig: Any) -> None:
    """The gate in use: flips for guess, the noisy majority then the student for gnmax, else the
    queries between abstentions."""
    ax = fig.subplots()
    {"guess": _guess_gate, "gnmax": _gnmax_gate}.get(report.gate, _stability_gate)(report, ax)
    legend(ax)


def _stability_gate(report: SessionReport, ax: Any) -> None:
    gaps = np.diff(np.concatenate([[0], report.spent_at]))
    if gaps.size:
        data(ax.plot(report.spent_at, gaps, "o", color="tab:orange", label="queries up to each abstention"))
        ax.axhline(report.tested / gaps.size, color="tab:blue", linestyle="--",
                   label=f"{report.tested / gaps.size:,.0f} queries decided per instance (the odometer's rate)")
    else:
        ax.text(0.5, 0.5, "no abstention in this log: no instance spent", transform=ax.transAxes, ha="center")
    if gaps.size and gaps.max() > 20 * max(gaps.min(), 1):
        log_count_axis(ax, float(gaps.max()))
    else:
        ax.set_ylim(0, max(gaps.max() if gaps.size else 1, 1) * 1.15)
        integer_axis(ax.yaxis)
    stream(ax, report, "queries since the previous abstention")
    title(ax, f"{report.gate.capitalize()} gate: queries between abstentions (each spends one of T = "
                 f"{count(report.limit or 0)})")


def _guess_gate(report: SessionReport, ax: Any) -> None:
    zeros = np.zeros_like(report.bin_sizes)
    flips, free = report.sources.get(FLIPPED, zeros), report.sources.get(GUESS, zeros)
    data(ax.bar(report.centers(), flips, width=report.bin_sizes * 0.8, color=COLORS[FLIPPED],
                 label=f"flipped (1 - guess): {count(int(flips.sum()))}, each one of T = {count(report.limit or 0)}"))
    ax.plot([], [], " ", label=f"the guess, released free: {count(int(free.sum()))}")
    ax.set_ylim(0, max(int(flips.max()), 1) * 1.15)
    integer_axis(ax.yaxis)
    stream(ax, report, "flipped answers per bin")
    title(ax, f"Guess gate: flips over the stream{_student_words(report)}")


def _gnmax_gate(report: SessionReport, ax: Any) -> None:
    bottom = np.zeros(report.bin_sizes.size)
    for name in (GNMAX, STUDENT, DUPLICATE):
        if name in report.sources:
            part = share(report.sources[name], report.bin_sizes)
            data(ax.bar(report.centers(), part, bottom=bottom, width=report.bin_sizes, color=COLORS[name],
                         label=f"{name}: {count(int(report.sources[name].sum()))}"))
            bottom = bottom + part
    ax.set_ylim(0, 1.05)
    stream(ax, report, "share of the bin's queries")
    answered = int(report.sources.get(GNMAX, np.zeros(1)).sum())
    title(ax, f"gnmax gate: {count(answered)} of m = {count(report.limit or 0)} answered by the noisy majority"
                 f"{_student_words(report)}")


def _student_words(report: SessionReport) -> str:
    if STUDENT not in report.sources:
        return ""
    taught = int(report.sources[STUDENT].sum())
    return f", then the student: {count(taught)} ({taught / report.total_queries:.0%})"


def labels(report: SessionReport, fig: Any) -> None:
    """The share of answers released as 1, per bin (and the truth's share on the same queries); over c > 2
    classes, the share released as each class."""
    ax = fig.subplots()
    if report.by_class is not None:
        for j in range(report.by_class.shape[1]):
            data(ax.plot(report.centers(), share(report.by_class[:, j], report.statuses["answered"]), marker=".",
                         lw=1.5, label=_class_name(report, j)))
        ax.set_ylim(-0.02, 1.02)
        stream(ax, report, "share of the bin's answers")
        title(ax, "Released classes over the stream (the votes behind them are private)")
        legend(ax)
        return
    data(ax.plot(report.centers(), share(report.ones, report.statuses["answered"]), marker="o", markersize=5,
                  lw=2.5, alpha=0.6, color="tab:purple", label="released 1 (share of the bin's answers)"))
    if report.truth is not None:  # drawn thin over the released line: where they agree both show
        data(ax.plot(report.centers(), share(report.truth.true_ones, report.truth.evaluated), marker=".",
                      markersize=3, lw=0.8, color="black", linestyle=":", label="labelled 1 in the truth (same queries)"))
    ax.set_ylim(-0.02, 1.02)
    stream(ax, report, "share labelled 1")
    title(ax, "Released labels over the stream (the votes behind them are private)")
    legend(ax)


def accuracy(report: SessionReport, fig: Any) -> None:
    """The answer rate per bin and, with a truth file, the answers' accuracy per bin (95% band)."""
    axes = fig.subplots(2 if report.truth is not None else 1, 1, squeeze=False)[:, 0]
    answered, sizes = report.statuses["answered"], report.bin_sizes
    rate = share(answered, sizes)
    data(axes[0].plot(report.centers(), rate, marker=".", color="tab:green",
                       label=f"answered: {count(int(answered.sum()))} of {count(report.total_queries)}"))
    axes[0].set_ylim(*share_range(rate))
    stream(axes[0], report, "answer rate")
    title(axes[0], "Answer rate" + (" and accuracy" if report.truth is not None else "") + " over the stream")
    if report.truth is not None:
        truth = report.truth
        correct = share(truth.correct, truth.evaluated)
        low, high = wilson(truth.correct, truth.evaluated)
        axes[1].fill_between(report.centers(), low, high, color="tab:blue", alpha=0.2, lw=0, label="95% interval")
        data(axes[1].plot(report.centers(), correct, marker=".", color="tab:blue",
                           label=f"right: {count(int(truth.correct.sum()))} of {count(int(truth.evaluated.sum()))}"
                           " answers with a truth"))
        axes[1].set_ylim(*share_range(correct, low))
        stream(axes[1], report, "accuracy")
    for ax in axes:
        legend(ax)


def sources(report: SessionReport, fig: Any) -> None:
    """Accuracy by source (with a truth file): each source's share of right answers, 95% interval."""
    ax = fig.subplots()
    assert report.truth is not None
    rows = [("all answers", int(report.truth.evaluated.sum()), int(report.truth.correct.sum()))]
    rows += [(name, n, right) for name, (n, right) in report.truth.by_source.items() if n]
    names = [row[0] for row in rows]
    n, right = np.array([row[1] for row in rows]), np.array([row[2] for row in rows])
    value = share(right, n)
    low, high = wilson(right, n)
    y = np.arange(len(rows))[::-1]
    whiskers = np.maximum([value - low, high - value], 0.0)
    data(ax.errorbar(value, y, xerr=whiskers, fmt="o", color="tab:blue", capsize=4).lines[0])
    for at, v in zip(y, value):
        ax.annotate(f"{v:.4f}", (v, at), textcoords="offset points", xytext=(0, 7), ha="center", fontsize=9)
    ax.set_yticks(y, [f"{name}\n({SOURCE_WORDS[name]})\nn = {count(size)}" if name in SOURCE_WORDS else
                      f"{name}\nn = {count(size)}" for name, size in zip(names, n.tolist())])
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_xlim(*share_range(value, low))
    ax.set_xlabel("accuracy against the truth (95% Wilson interval)")
    ax.set_ylabel("answered by (the log's source)")
    title(ax, "Accuracy by source")


def _class_name(report: SessionReport, j: int) -> str:
    """Class j as the session names it (--classes low,mid,high), else "class j"."""
    names = report.certificate.get("class_names")
    return str(names[j]) if isinstance(names, list) and j < len(names) else f"class {j}"


def confusion(report: SessionReport, fig: Any) -> None:
    """c > 2 classes, with a truth file: the answers' confusion matrix (each row, a true class, as shares)."""
    assert report.truth is not None and report.truth.confusion is not None
    counts = report.truth.confusion
    rows = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
    ax = fig.subplots()
    data(ax.imshow(rows, cmap="Blues", vmin=0.0, vmax=1.0))
    for (i, j), value in np.ndenumerate(counts):
        ax.text(j, i, f"{value:,}", ha="center", va="center", fontsize=8,
                color="white" if rows[i, j] > 0.6 else "black")
    ax.set_xticks(range(counts.shape[1]), [_class_name(report, j) for j in range(counts.shape[1])], rotation=30)
    ax.set_yticks(range(counts.shape[0]), [_class_name(report, j) for j in range(counts.shape[0])])
    ax.set_xlabel("released class")
    ax.set_ylabel("true class (--truth)")
    title(ax, "Answers against the truth (shaded: the shares of each true class)")


class Drawing(NamedTuple):
    """How one figure is drawn: the function, its height in inches, its margins (:func:`frame`)."""

    draw: Callable[[SessionReport, Any], None]
    height: float
    left: float = 0.085
    right: float = 0.68


DRAW = {"budget": Drawing(budget, 3.6), "outcomes": Drawing(outcomes, 3.8), "gate": Drawing(gate, 3.6),
        "accuracy": Drawing(accuracy, 5.4), "sources": Drawing(sources, 3.4, left=0.3, right=0.9),
        "labels": Drawing(labels, 3.4), "confusion": Drawing(confusion, 4.2, left=0.2, right=0.8)}
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
              "on the same queries (over more than two classes: the share released as each class).",
    "confusion": "More than two classes: how the answers (columns) meet the truth (rows) over the answered queries "
                 "the truth covers; the table beside gives each true class's accuracy.",
}


def caption(name: str, report: SessionReport) -> str:
    """The words under a figure on the page."""
    words = CAPTIONS[name]
    return words if isinstance(words, str) else words.get(report.gate, words["stability"])


def figure_names(report: SessionReport) -> list[str]:
    """The figures this report draws, in page order (accuracy by source needs a truth file; the confusion
    matrix, a truth file and c > 2 classes)."""
    return [name for name in DRAW if (name != "sources" or report.truth is not None)
            and (name != "confusion" or (report.truth is not None and report.truth.confusion is not None))]
