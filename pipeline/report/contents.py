"""A session report's data: what the public log shows about a session, over the query stream.

Everything here comes from public files: the log's batch files (statuses, sources, released labels,
the provenance in their metadata, from which the certificate is recomputed from public parameters)
and, when given, a truth file of the user's. The private state is read only when the caller passes
it (``--state``), and then only its public summary (the certificate and counts, as ``pcqr train``
prints them). Every file read is listed in ``files_read``.

The x axis of every figure is the position in the query stream (the log's order), cut into at most
``BINS`` bins of equal width (a round number of queries; the last bin may hold fewer): batches are
how the queries were submitted, not what a reader compares.

What the report cannot show: the k models' vote counts (or margins) are private -- only the
released label, the status and the source of each query are in the log -- so there is no
vote-margin histogram; the released labels over the stream are shown instead.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.privacy.session_plan import SessionPlan
from pcqr.pipeline.public_log.batches import DUPLICATE, GATED_SOURCES, SOURCE_NAMES, SPENDING_SOURCES, STUDENT, batch_files
from pcqr.pipeline.public_log.replay import STATUSES, read_answers
from pcqr.pipeline.public_log.replayed import verified
from pcqr.pipeline.report.evaluation import check_one_query_per_id

CERTIFICATE_KEYS = ("mode", "gate", "classes", "class_names", "epsilon", "delta", "proven_epsilon", "proven_delta", "accountant", "cutoff",
                    "queries_max", "labels", "subsamples", "threshold", "privacy")
VOTE_MARGINS_NOTE = ("Vote margins are not shown: the k models' vote counts are private, and the public log holds "
                     "only each query's released label, status and source.")
BINS = 100  # the most bins the stream is cut into
Z95 = 1.959963984540054  # the normal quantile of a two-sided 95% interval


@dataclass(frozen=True)
class Truth:
    """How the answers compare with the user's truth file. Per bin: ``evaluated`` (answered queries
    whose true label is known), ``correct`` (how many of them were right), ``true_ones`` (how many of
    them are labelled 1 in the truth); ``by_source``: (evaluated, correct) over the whole log."""

    evaluated: np.ndarray
    correct: np.ndarray
    true_ones: np.ndarray
    by_source: dict[str, tuple[int, int]]
    confusion: np.ndarray | None = None  # c > 2 classes: (c, c) counts, row the true class, column the answer


@dataclass(frozen=True)
class StateSummary:
    """A state's public summary (its certificate and counts), the file it was read from, and the hash of
    the last batch its session logged ('' before the first), which the log must end at."""

    summary: dict[str, Any]
    file: str
    last_hash: str


@dataclass
class SessionReport:
    """The figures' data. ``edges``: the bins' boundaries in the stream (bin i holds the queries at
    1-based positions ``edges[i] + 1 .. edges[i + 1]``). Per bin: ``statuses`` (answered, abstained,
    refused), ``sources`` (answered queries by the log's source, only the sources present), ``ones``
    (answers released as 1). ``spent_at``: the position of each instance spent (an abstention, a
    flipped or a gnmax answer); ``limit``: the instances allowed (T; m under ``--gate gnmax``);
    ``halt_at``: the position of the first query after the session halted (its first refused or
    student answer), or None; ``tested``: the queries the k models' votes decided (the odometer's
    rate is ``tested / budget_used``)."""

    log: str
    files_read: list[str]
    certificate: dict[str, Any]
    batches: int
    edges: np.ndarray
    statuses: dict[str, np.ndarray]
    sources: dict[str, np.ndarray]
    ones: np.ndarray
    spent_at: np.ndarray
    tested: int
    halt_at: int | None
    truth: Truth | None = None
    state_summary: dict[str, Any] | None = None
    by_class: np.ndarray | None = None  # c > 2 classes: per bin (rows) the answers released as each class
    notes: list[str] = field(default_factory=list)
    log_notes: list[str] = field(default_factory=list)  # the log's verification (pcqr replay's lines)
    last_vouched: bool = False  # the last batch matched the state's last hash

    @property
    def classes(self) -> int:
        """c, the classes the session answers (its certificate's ``classes``; 2 when absent)."""
        return int(self.certificate.get("classes", 2))

    @property
    def total_queries(self) -> int:
        return int(self.edges[-1])

    @property
    def gate(self) -> str:
        return str(self.certificate.get("gate") or "stability")

    @property
    def limit(self) -> int | None:
        cutoff = self.certificate.get("cutoff")
        return None if cutoff is None else int(cutoff)

    @property
    def budget_used(self) -> int:
        """c: the instances spent over the whole log."""
        return int(self.spent_at.size)

    @property
    def bin_width(self) -> int:
        return int(self.edges[1] - self.edges[0])

    @property
    def bin_sizes(self) -> np.ndarray:
        return np.diff(self.edges)

    def centers(self) -> np.ndarray:
        """Each bin's middle position in the stream (1-based)."""
        return (self.edges[:-1] + 1 + self.edges[1:]) / 2

    @property
    def limit_name(self) -> str:
        """What the limit is called: m under ``--gate gnmax`` (one instance per answer), else T."""
        return "m" if self.gate == "gnmax" else "T"

    def halt_reason(self) -> str | None:
        """Why the session halted (None if it did not): its budget, or m queries decided."""
        if self.halt_at is None:
            return None
        if self.limit is not None and self.budget_used >= self.limit:
            return f"{self.limit_name} = {self.limit:,} reached"
        queries_max = self.certificate.get("queries_max")
        if queries_max is not None and self.tested >= int(queries_max):
            return f"m = {int(queries_max):,} queries decided"
        return "the session had halted"

    def forecast_more_queries(self) -> int | None:
        """At the rate so far, how many more queries the rest of the budget should decide (as
        ``pcqr status``'s odometer); None before the first instance, after the halt or without T."""
        if not self.budget_used or self.halt_at is not None or self.limit is None:
            return None
        return math.floor(self.tested / self.budget_used * max(self.limit - self.budget_used, 0))


def share(part: np.ndarray, whole: np.ndarray) -> np.ndarray:
    """part / whole, NaN where whole is 0."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(whole > 0, part / np.maximum(whole, 1), np.nan)


def wilson(correct: np.ndarray, n: np.ndarray, z: float = Z95) -> tuple[np.ndarray, np.ndarray]:
    """The Wilson score interval of a binomial share (NaN where n is 0)."""
    correct, n = np.asarray(correct, dtype=float), np.asarray(n, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = correct / n
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def stream_edges(queries: int, bins: int = BINS) -> np.ndarray:
    """Bin boundaries over ``queries`` positions: a round width (1, 2 or 5 times a power of ten)
    giving at most ``bins`` bins; the last bin holds what is left."""
    width = 1
    while math.ceil(queries / width) > bins:
        width = _next_round(width)
    return np.append(np.arange(0, queries, width), queries).astype(np.int64)


def _next_round(width: int) -> int:
    """The next of 1, 2, 5, 10, 20, 50, ..."""
    magnitude = 10 ** int(math.floor(math.log10(width)))
    step = width // magnitude
    return {1: 2, 2: 5}.get(step, 10) * magnitude


def certificate_of(provenance: dict[str, Any]) -> dict[str, Any]:
    """The session's certificate from the log's provenance: public parameters only (the same
    accountant as the summaries, recomputed; nothing private is needed)."""
    try:
        plan = SessionPlan.from_records(provenance.get("parameters"), provenance.get("agnostic_parameters"),
                                        provenance.get("universal_parameters"))
        proven = {**plan.certificate(), "accountant": plan.params.accountant_name,
                  **({"classes": plan.params.classes} if plan.params.classes != 2 else {})}
    except (KeyError, TypeError, ValueError) as exc:
        raise PcqrError(f"the log's provenance does not describe a pcqr session's parameters ({exc})") from None
    found = {"queries_max": (provenance.get("parameters") or {}).get("queries_max"), **provenance, **proven}
    return {key: found[key] for key in CERTIFICATE_KEYS if found.get(key) is not None}


def session_report(log_dir: str, state: StateSummary | None = None, truth: str | None = None,
                   bins: int = BINS) -> SessionReport:
    """Read a session's public log (and, if given, its truth file; ``state`` is the state's public summary,
    read by the caller: pcqr.pipeline.session.planning.read_state_summary).

    The log is verified as ``pcqr replay`` verifies it, to the state's last hash when ``state`` is given;
    else the report's ``log_notes`` say that its last batch is vouched for by nothing.

    Raises
    ------
    PcqrError
        The log is missing, empty, not a pcqr log or fails verification, or does not end at the state's
        last hash (named in one line, with the first bad batch).
    """
    checked = verified(log_dir, state.last_hash if state else None, f"--log {log_dir}",
                       state.file if state else "--state")
    if checked.provenance is None:
        raise PcqrError(f"--log {log_dir}: its batch files carry no pcqr provenance")
    files = [path for _, path in batch_files(log_dir)]
    answers = read_answers(log_dir)
    if answers.num_rows == 0:
        raise PcqrError(f"--log {log_dir}: its batch files hold no queries")
    report = _over_the_stream(log_dir, answers, certificate_of(checked.provenance), files, bins)
    if truth is not None:
        check_one_query_per_id(log_dir, checked.provenance)
        report.truth = _truth(report, answers, truth)
    if state is not None:
        report.state_summary = state.summary
        report.files_read.append(state.file)
    report.log_notes, report.last_vouched = list(checked.notes), checked.last_vouched
    report.notes.extend([*checked.notes, VOTE_MARGINS_NOTE])
    return report


def _over_the_stream(log_dir: str, answers: Any, certificate: dict[str, Any], files: list[str],
                     bins: int) -> SessionReport:
    status = answers.column("status").to_numpy(zero_copy_only=False)
    source = answers.column("source").to_numpy(zero_copy_only=False)
    label = answers.column("answer").to_numpy(zero_copy_only=False)
    edges = stream_edges(status.size, bins)
    answered = status == "answered"
    tested_abstention = (status == "abstained") & (source != DUPLICATE)  # a copy's repeated abstention: free
    spent = tested_abstention | (answered & np.isin(source, SPENDING_SOURCES))
    after_halt = np.flatnonzero((status == "refused") | (answered & (source == STUDENT)))
    classes = int(certificate.get("classes", 2))
    by_class = None if classes == 2 else np.column_stack(
        [_per_bin(answered & (label == j), edges) for j in range(classes)])
    return SessionReport(
        log=log_dir, files_read=list(files), certificate=certificate,
        batches=int(np.unique(answers.column("batch").to_numpy()).size), edges=edges,
        statuses={name: _per_bin(status == name, edges) for name in STATUSES},
        sources={name: _per_bin(answered & (source == name), edges) for name in _in_order_of_appearance(source[answered])},
        ones=_per_bin(answered & (label == 1), edges), spent_at=np.flatnonzero(spent) + 1,
        tested=int(np.count_nonzero(tested_abstention | (answered & np.isin(source, GATED_SOURCES)))),
        halt_at=int(after_halt[0]) + 1 if after_halt.size else None, by_class=by_class,
    )


def _in_order_of_appearance(sources: np.ndarray) -> list[str]:
    names, first = np.unique(sources, return_index=True)
    return [str(name) for _, name in sorted(zip(first, names)) if name in SOURCE_NAMES]


def _per_bin(mask: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """How many positions of each bin ``mask`` holds."""
    return np.add.reduceat(mask.astype(np.int64), edges[:-1]) if mask.size else np.zeros(0, np.int64)


def _truth(report: SessionReport, answers: Any, truth: str) -> Truth:
    from pcqr.pipeline.data.datasets import scan_dataset
    from pcqr.pipeline.report.evaluation import load_truth

    lookup = load_truth(truth, classes=report.certificate.get("classes", 2), names=report.certificate.get("class_names"))
    expected = lookup(answers.column("query_id").to_numpy())
    status = answers.column("status").to_numpy(zero_copy_only=False)
    source = answers.column("source").to_numpy(zero_copy_only=False)
    released = answers.column("answer").to_numpy(zero_copy_only=False)
    evaluated = (status == "answered") & (expected >= 0)
    right = evaluated & (np.where(evaluated, released, -2) == expected)
    report.files_read.extend(scan_dataset(truth, "truth").files)
    confusion = None
    if report.classes > 2:  # rows: the truth's class; columns: the released one (over the evaluated answers)
        confusion = np.zeros((report.classes, report.classes), dtype=np.int64)
        np.add.at(confusion, (expected[evaluated], released[evaluated].astype(np.int64)), 1)
    return Truth(
        evaluated=_per_bin(evaluated, report.edges), correct=_per_bin(right, report.edges),
        true_ones=_per_bin(evaluated & (expected == 1), report.edges),
        by_source={name: (int(np.count_nonzero(evaluated & (source == name))),
                          int(np.count_nonzero(right & (source == name)))) for name in report.sources},
        confusion=confusion,
    )
