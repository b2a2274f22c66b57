"""The student distilled from a public log (ALGORITHMS.md section 10; BTT18 Theorem 4.3; PATE's student).

A learner fitted on the queries a session answered and the labels it released is a function of
the public log only: post-processing of the session's (eps, delta)-DP output, so it costs no
privacy and may answer any number of further queries. pcqr uses it twice:

* ``pcqr answer --after-halt student``: once the session has spent its T instances, the queries it
  would refuse are answered by the student (log source ``student``). The student is fitted, when the
  first such query comes, on every answer the teacher released before it (log sources
  ``sparse_vector``, ``guess`` and ``flipped``: the k models' answers through a gate; not
  ``duplicate`` -- a repeat -- nor ``released_model`` or ``student`` answers), in log order, the
  first STUDENT_ROWS of them. After the halt the teacher releases nothing more, so every run of the
  session -- interrupted, resumed, in any batch size -- fits the same student on the same rows
  (deterministically: pcqr.pipeline.gates.public_guess.fit_student) and gives the same answers.
* ``pcqr distill --log LOG``: the same student written as a public model file
  (pcqr.pipeline.models.portable) that ``pcqr predict`` serves.

Nothing here reads private data; the log is verified (its hash chain, and with a state's last batch hash
its end: the only thing read of the state) before it is learnt from.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.public_log.batches import GATED_SOURCES, released_rows
from pcqr.pipeline.gates.public_guess import STUDENT_ROWS, fit_student
from pcqr.pipeline.session.progress import LOGGING, Reporter

#: The log sources whose answers the teacher (the k models through a gate) released.
TEACHER_SOURCES = GATED_SOURCES
#: ``--after-halt``: what happens to the queries after the T-th instance (refused, or the student).
AFTER_HALT = ("refuse", "student")


@dataclass(frozen=True)
class TeacherAnswers:
    """The teacher's released answers of a log, in log order (at most STUDENT_ROWS)."""

    X: np.ndarray
    y: np.ndarray
    total: int  # all teacher answers in the log (more than len(y) past STUDENT_ROWS)


def teacher_answers(log_dir: str, features: Sequence[str], batches: int | None = None) -> TeacherAnswers:
    """The answered queries of the first ``batches`` batch files (all if None) whose source is the
    teacher, and their released labels. The caller has verified the log."""
    pieces_X: list[np.ndarray] = []
    pieces_y: list[np.ndarray] = []
    kept = total = 0
    for X, y, _ in released_rows(log_dir, list(features), TEACHER_SOURCES, batches):
        room = STUDENT_ROWS - kept
        if room > 0:
            pieces_X.append(X[:room])
            pieces_y.append(y[:room])
            kept += min(room, y.size)
        total += y.size
    if not pieces_y:
        return TeacherAnswers(np.zeros((0, len(features))), np.zeros(0, dtype=np.int8), total)
    return TeacherAnswers(np.concatenate(pieces_X), np.concatenate(pieces_y), total)


def fit_on_teacher(answers: TeacherAnswers, learner: dict[str, Any], modules: tuple[str, ...] = (),
                   reporter: Reporter = LOGGING) -> tuple[dict[str, Any], Any]:
    """The student: the learner ``learner`` names ({"name", "params"}; 'cross-validated': the one
    pcqr.pipeline.models.student_selection picks from the same answers) and it fitted on the
    teacher's answers (deterministic), shown as a phase of ``reporter``."""
    from pcqr.pipeline.models.student_selection import select_student

    if answers.y.size == 0:
        raise PcqrError("the log holds no answer released by the session's models: nothing to distil a student from")
    with reporter.phase(f"fitting the student on {answers.y.size:,} answers"):
        chosen, _ = select_student(learner, answers.X, answers.y, modules)
        return chosen, fit_student(chosen, answers.X, answers.y, modules)


def student_learner(session_learner: dict[str, Any], guess: dict[str, Any] | None,
                    name: str | None, params: dict[str, Any]) -> dict[str, Any]:
    """The learner of a session's after-halt student: ``name`` when given, else the student the
    session recorded (an auto session's: 'cross-validated', pcqr.pipeline.models.student_selection;
    older auto sessions recorded 'auto', the rule's tree at the answers' count), else the guess
    gate's student learner, else the session's own learner as it was given."""
    if name is not None:
        return {"name": name, "params": dict(params)}
    given = session_learner.get("student")
    if isinstance(given, dict) and isinstance(given.get("name"), str):
        return {"name": given["name"], "params": dict(given.get("params") or {})}
    if guess is not None and isinstance(guess.get("learner"), dict):
        return dict(guess["learner"])
    return {"name": session_learner["name"], "params": dict(session_learner.get("params") or {})}


def distill_log(log_dir: str, out: str, learner: str | None = None, learner_params: dict[str, Any] | None = None,
                modules: tuple[str, ...] = (), reporter: Reporter = LOGGING,
                state: str | None = None) -> dict[str, Any]:
    """``pcqr distill``: verify the public log, fit the student on its teacher answers, write it to
    ``out`` as a released model file (pcqr.pipeline.models.portable). Returns the summary.

    The log is verified as ``pcqr replay`` verifies it (pcqr.pipeline.public_log.replayed.verified): with
    ``state``, the session's state directory, to its last batch hash (the state is only read); without,
    against itself only, which ``reporter`` notes in replay's line.

    ``learner`` None: the session's after-halt default (the guess gate's student learner, else the
    session's learner, both from the log's provenance). The file's privacy is the session's: a
    post-processing of its log, it is covered by the session's (eps, delta) certificate and by nothing
    more, and a log of seeded noise gives a model marked NOT PRIVATE.
    """
    from pcqr.pipeline.data.atomic import check_writable_file
    from pcqr.pipeline.models.portable import portable
    from pcqr.pipeline.models.student_selection import student_specs
    from pcqr.pipeline.models.released import model_record, write_model
    from pcqr.pipeline.public_log.replay import class_names_of, classes_of
    from pcqr.pipeline.public_log.replayed import verified
    from pcqr.pipeline.session.planning import read_state_summary

    check_writable_file(out, "--out")
    last_hash = None if state is None else read_state_summary(state).last_hash
    with reporter.phase("verifying the log"):
        report = verified(log_dir, last_hash, f"--log {log_dir}", f"--state {state}")
    provenance = report.provenance or {}
    classes, names = classes_of(provenance), class_names_of(provenance)
    features = provenance.get("features")
    if not (isinstance(features, list) and features and all(isinstance(f, str) for f in features)):
        raise PcqrError(f"--log {log_dir}: its provenance names no feature columns")
    session_learner = provenance.get("learner")
    if learner is None and not (isinstance(session_learner, dict) and isinstance(session_learner.get("name"), str)):
        raise PcqrError(f"--log {log_dir}: its provenance names no learner; give --learner")
    guess = provenance.get("guess") if isinstance(provenance.get("guess"), dict) else None
    named = student_learner(session_learner if isinstance(session_learner, dict) else {},
                            guess if learner is None else None, learner, learner_params or {})
    for spec in student_specs(named, modules):  # 'auto': a tree, whatever depth the answers give it
        portable(spec.check(len(features), 64, classes), spec.name, classes)  # one with no portable form is refused before the log is read
    with reporter.phase("reading the teacher's answers"):
        answers = teacher_answers(log_dir, features)
    chosen, model = fit_on_teacher(answers, named, modules, reporter)
    hypothesis = portable(model, chosen["name"], classes)
    private = provenance.get("seeded") is False
    record = model_record(
        hypothesis, features, private,
        mechanism="student distilled from a public log (post-processing: BTT18 Theorem 4.3)",
        learner=chosen, teacher_answers=int(answers.y.size), log_sha256=report.last_sha256,
        session_id=provenance.get("session_id"), epsilon=provenance.get("epsilon"), delta=provenance.get("delta"),
        **({"classes": classes} if classes != 2 else {}), **({"class_names": list(names)} if names else {}),
    )
    write_model(out, record)
    for remark in report.notes:  # after the model is written: a refused command prints its error alone
        reporter.note(remark)
    return {"out": out, "learner": named["name"],
            **({"chosen": chosen["name"]} if chosen != named else {}), "form": hypothesis.to_dict()["class"],
            **({"classes": classes} if classes != 2 else {}), **({"class_names": ",".join(names)} if names else {}),
            "teacher_answers": int(answers.y.size), "teacher_answers_in_log": answers.total,
            "log": log_dir, "log_sha256": report.last_sha256, "last_batch_vouched": report.last_vouched,
            "session_id": provenance.get("session_id"),
            "epsilon": provenance.get("epsilon"), "delta": provenance.get("delta"), "privacy": record["privacy"]}


def distill(log: str, out: str, learner: str | None = None, learner_params: dict[str, Any] | None = None,
            cluster: str | None = None, state: str | None = None) -> dict[str, Any]:
    """Fit a student on the answers a session released and write it as a model file (``pcqr distill``).

    Post-processing of the public log: no private data is read and no budget is spent; the model
    is covered by the session's (eps, delta) certificate. ``pcqr predict`` (or
    :func:`pcqr.pipeline.models.released.load_model`) serves it.

    Parameters
    ----------
    log : str
        The session's public log directory (its hash chain is verified first).
    out : str
        The model file to write (JSON, ``pcqr.released-classifier/1``).
    learner : str, optional
        'stump', 'threshold' or a scikit-learn classifier's dotted path with a plain public form
        (linear models, trees, forests, gradient boosting: pcqr.pipeline.models.portable). Default:
        the session's student learner.
    learner_params : dict, optional
        The learner's parameters.
    cluster : str, optional
        A cluster.yaml whose allowed learner modules apply (the fit runs here).
    state : str, optional
        The session's state directory: the log must end at the last batch it records (only that hash is
        read). Without it the log's last batch is vouched for by nothing, and the ``pcqr`` logger says so.

    Returns
    -------
    dict
        The summary ``pcqr distill --json`` prints: out, learner, form, teacher_answers, log_sha256,
        last_batch_vouched, epsilon, delta, privacy.

    Examples
    --------
    >>> import pcqr                                                        # doctest: +SKIP
    >>> pcqr.distill("answers", "student.json", "sklearn.linear_model.LogisticRegression")  # doctest: +SKIP
    """
    from pcqr.pipeline.data.cluster import learner_modules
    from pcqr.pipeline.data.outputs import Output, check_outputs

    check_outputs([Output("out", out)], [("log", log), ("cluster", cluster), ("state", state)],
                  overwrite=True)  # never an input
    return distill_log(log, out, learner, learner_params, learner_modules(cluster), state=state)
