"""A session report's data: what the public log shows about a session, batch by batch.

Everything here comes from public files: the log's batch files (statuses, released labels, the
provenance in their metadata, from which the certificate is recomputed from public parameters) and,
when given, a truth file of the user's. The private state is read only when the caller passes it
(``--state``), and then only its public summary (the certificate and counts, as ``pcqr train``
prints them). Every file read is listed in ``files_read``.

What the report cannot show: the k models' vote counts (or margins) are private -- only the
released label and the status of each query are in the log -- so there is no vote-margin
histogram; the released labels per batch are shown instead.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.mechanisms.relabel import AgnosticParameters
from pcqr.pipeline.mechanisms.universal import UniversalParameters
from pcqr.pipeline.privacy.subsamp import SubSampParameters
from pcqr.pipeline.session.log import batch_files
from pcqr.pipeline.session.replay import read_answers, verify_log

CERTIFICATE_KEYS = ("mode", "epsilon", "delta", "proven_epsilon", "proven_delta", "cutoff", "subsamples", "threshold",
                    "privacy")
VOTE_MARGINS_NOTE = ("Vote margins are not shown: the k models' vote counts are private, and the public log holds "
                     "only each query's released label and status.")


@dataclass
class SessionReport:
    """The figures' data. Per batch (in log order): ``batches`` (numbers), ``queries``, ``answered``,
    ``abstained``, ``refused``, ``duplicates`` (answered from the log at no cost), ``ones`` and
    ``zeros`` (released labels), and with a truth file ``evaluated`` and ``correct`` (answered
    queries whose true label is known, and how many of them were right). ``abstention_at``: the
    position in the stream (1-based) of each abstention, i.e. of each spent sparse-vector instance."""

    log: str
    files_read: list[str]
    certificate: dict[str, Any]
    batches: np.ndarray
    queries: np.ndarray
    answered: np.ndarray
    abstained: np.ndarray
    refused: np.ndarray
    duplicates: np.ndarray
    ones: np.ndarray
    zeros: np.ndarray
    abstention_at: np.ndarray
    evaluated: np.ndarray | None = None
    correct: np.ndarray | None = None
    state_summary: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def total_queries(self) -> int:
        return int(self.queries.sum())

    @property
    def budget_used(self) -> int:
        """c: the sparse-vector instances spent over the whole log."""
        return int(self.abstention_at.size)

    def answer_rate(self) -> np.ndarray:
        """Answered share of each batch."""
        return self.answered / np.maximum(self.queries, 1)

    def accuracy(self) -> np.ndarray | None:
        """Share of each batch's evaluated answers that were right (NaN where none were evaluated)."""
        if self.evaluated is None or self.correct is None:
            return None
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.evaluated > 0, self.correct / self.evaluated, np.nan)


def certificate_of(provenance: dict[str, Any]) -> dict[str, Any]:
    """The session's certificate from the log's provenance: public parameters only (the same
    accountant as the summaries, recomputed; nothing private is needed)."""
    try:
        if provenance.get("universal_parameters"):
            parameters: Any = UniversalParameters.from_dict(provenance["universal_parameters"])
        elif provenance.get("agnostic_parameters"):
            parameters = AgnosticParameters.from_dict(provenance["agnostic_parameters"])
        else:
            parameters = SubSampParameters.from_dict(provenance["parameters"])
        proven = parameters.certificate()
    except (KeyError, TypeError, ValueError) as exc:
        raise PcqrError(f"the log's provenance does not describe a pcqr session's parameters ({exc})") from None
    found = {**provenance, **proven}
    return {key: found[key] for key in CERTIFICATE_KEYS if key in found}


def session_report(log_dir: str, state: str | None = None, truth: str | None = None) -> SessionReport:
    """Read a session's public log (and, if given, its truth file and its state's summary).

    Raises
    ------
    PcqrError
        The log is missing, empty, not a pcqr log or fails verification (named in one line).
    """
    checked = verify_log(log_dir)
    if checked.batches == 0:
        raise PcqrError(f"--log {log_dir}: holds no batch files of a pcqr log")
    if not checked.ok:
        raise PcqrError(f"--log {log_dir}: {checked.problem}")
    if checked.provenance is None:
        raise PcqrError(f"--log {log_dir}: its batch files carry no pcqr provenance")
    files = [path for _, path in batch_files(log_dir)]
    answers = read_answers(log_dir)
    report = _per_batch(log_dir, answers, certificate_of(checked.provenance), files)
    if truth is not None:
        _add_truth(report, answers, truth)
    if state is not None:
        report.state_summary = _state_summary(state)
        report.files_read.append(_state_file(state))
    report.notes.append(VOTE_MARGINS_NOTE)
    return report


def _per_batch(log_dir: str, answers: Any, certificate: dict[str, Any], files: list[str]) -> SessionReport:
    status = answers.column("status").to_numpy(zero_copy_only=False)
    source = answers.column("source").to_numpy(zero_copy_only=False)
    label = answers.column("answer").to_numpy(zero_copy_only=False)
    batch = answers.column("batch").to_numpy()
    numbers, index = np.unique(batch, return_inverse=True)

    def count(mask: np.ndarray) -> np.ndarray:
        return np.bincount(index, weights=mask.astype(np.float64), minlength=numbers.size).astype(np.int64)

    answered = status == "answered"
    return SessionReport(
        log=log_dir, files_read=list(files), certificate=certificate, batches=numbers,
        queries=np.bincount(index, minlength=numbers.size).astype(np.int64),
        answered=count(answered), abstained=count(status == "abstained"), refused=count(status == "refused"),
        duplicates=count(source == "duplicate"), ones=count(answered & (label == 1)),
        zeros=count(answered & (label == 0)), abstention_at=np.flatnonzero(status == "abstained") + 1,
    )


def _add_truth(report: SessionReport, answers: Any, truth: str) -> None:
    from pcqr.pipeline.data.datasets import open_dataset
    from pcqr.pipeline.session.evaluation import load_truth

    lookup = load_truth(truth)
    expected = lookup(answers.column("query_id").to_numpy())
    status = answers.column("status").to_numpy(zero_copy_only=False)
    released = answers.column("answer").to_numpy(zero_copy_only=False)
    evaluated = (status == "answered") & (expected >= 0)
    right = evaluated & (np.where(evaluated, released, -2) == expected)
    _, index = np.unique(answers.column("batch").to_numpy(), return_inverse=True)
    size = report.batches.size
    report.evaluated = np.bincount(index, weights=evaluated.astype(float), minlength=size).astype(np.int64)
    report.correct = np.bincount(index, weights=right.astype(float), minlength=size).astype(np.int64)
    report.files_read.extend(open_dataset(truth, "truth").files)


def _state_file(state: str) -> str:
    from pcqr.pipeline.session.state import SESSION_FILE

    return os.path.join(state, SESSION_FILE)


def _state_summary(state: str) -> dict[str, Any]:
    """The state's public summary (its certificate and counts); the state is only read."""
    from pcqr.pipeline.session.planning import session_summary
    from pcqr.pipeline.session.state import has_session, load_session

    if not has_session(state):
        raise PcqrError(f"--state {state}: no session here")
    session = load_session(state)
    return {**session_summary(session), "budget_used": session.sparse_vector.bottoms, "totals": dict(session.totals)}
