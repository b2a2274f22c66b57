"""Answering a stream of queries through a session: the steps of ``pcqr answer`` in the
certificate's order, with the state's lock held by the caller (pcqr.jobs.answer, pcqr.Session).

Resuming: an interrupted stream continues after its last committed batch, and an input answered in
full is not asked again (session/inputs.py); the ledger vouches for the state before anything is
served (session/book.py), a half-written commit is recovered (session/commit.py), and the whole
log's hash chain is verified before it answers repeats.
"""
from __future__ import annotations

import contextlib
import secrets
from typing import Any

from pcqr.pipeline.data.private_folder import remove_leftovers
from pcqr.pipeline.data import locations
from pcqr.pipeline.budget.ledger import charge_note
from pcqr.pipeline.budget.overlap import check_public_overlap, guard_ledger, overlap_check, own_fingerprint
from pcqr.pipeline.data.atomic import check_writable_directory
from pcqr.pipeline.data.cluster import Connect, learner_modules
from pcqr.pipeline.data.datasets import Dataset, open_dataset, open_matching, scan_dataset
from pcqr.pipeline.data.outputs import check_session_paths
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.mechanisms.universal import check_private_fingerprint
from pcqr.pipeline.privacy.limits import MAX_BATCH_SIZE
from pcqr.pipeline.spelling import spelled_with
from pcqr.pipeline.privacy.noise import noise_source
from pcqr.pipeline.public_log.answered import index_from_log
from pcqr.pipeline.session.book import SessionBook
from pcqr.pipeline.session.commit import recover
from pcqr.pipeline.report.evaluation import load_truth
from pcqr.pipeline.session.inputs import Answered, answered_before, begin_input, start_point
from pcqr.pipeline.public_log.batches import batch_files
from pcqr.pipeline.public_log.owner import check_owner, claim, claimed
from pcqr.pipeline.options import AnswerOptions, TrainingOptions
from pcqr.pipeline.session.planning import (
    gate_chosen, odometer, one_label_warning, plan_training, say_gate_chosen, say_large_delta, session_charge,
    session_summary, train_session, trains_by_arrays,
)
from pcqr.pipeline.session.query_release import (
    ReleaseCounts, release_answers, session_gate, validate_queries,
)
from pcqr.pipeline.session.progress import LOGGING, Reporter
from pcqr.pipeline.session.state import (
    SessionState,
    check_private_location,
    has_session,
    load_models,
    load_session,
    save_models,
    save_session,
)

"""Opens (or lends) the Dask client for one command: ``with connect() as client``."""


def check_log_dir(log_dir: str | None, session: SessionState | None) -> str:
    """The log directory this run appends to: a new session's must be empty, an old one's its own;
    never one another session has claimed or written (public_log/owner.py). A session that has
    written no batch yet may be given another --log than the one it recorded."""
    stored = session.log_dir if session is not None else None
    written = session.next_batch if session is not None else 0
    if log_dir is None:
        if stored is None:
            raise PcqrError("--log is required: the public directory for the answered-query log")
        log_dir = stored
    elif stored is not None and written and locations.absolute(log_dir) != locations.absolute(stored):
        raise PcqrError(f"--log {log_dir}: this session writes its log to {stored}")
    check_owner(log_dir, session.session_id if session is not None else None)
    existing = batch_files(log_dir)
    if len(existing) != written:
        raise PcqrError(
            f"--log {log_dir}: holds {len(existing)} batch files but the session has written "
            f"{written}; use an empty directory for a new session"
        )
    return log_dir


def reopen_private(session: SessionState) -> Dataset | None:
    """Universal mode before its switch: the private dataset A_SSPP will read (metadata only here;
    its contents are checked against the session's fingerprint once the cluster is up)."""
    if session.universal is None or session.released is not None:
        return None
    if session.label is None:
        raise PcqrError("this session's state predates universal mode's label record; start a new session")
    private = open_dataset(session.private_uri, "private", label=session.label, features=session.features)
    if private.rows != session.private_rows:
        raise PcqrError(
            f"{session.private_uri}: has {private.rows} rows, the session was trained on {session.private_rows}; "
            "A_SSPP must run on the same private dataset"
        )
    return private


def after_halt_learner(answering: AnswerOptions, guess: dict[str, Any] | None, learner: dict[str, Any],
                       features: list[str], modules: tuple[str, ...], checked_now: bool = True) -> dict[str, Any] | None:
    """``--after-halt``: None (refuse) or the student's learner, checked now (before any charge or
    answer) on a small public sample, as ``--learner`` is, when ``checked_now``. Otherwise (a
    continuing session's default student, which the user did not name) it is checked where it is
    first fitted, at the session's halt, which few runs reach: checking it imports scikit-learn,
    about a second of a run whose linear votes need none of it. A learner that fails there stops the
    run in one line before that batch is committed, and --after-halt refuse answers on."""
    from pcqr.pipeline.session.distillation import AFTER_HALT, student_learner

    if answering.after_halt not in AFTER_HALT:
        raise PcqrError(f"--after-halt {answering.after_halt!r}: expected one of {', '.join(AFTER_HALT)}")
    if answering.after_halt == "refuse":
        if answering.student_learner is not None or answering.student_learner_param:
            raise PcqrError("--student-learner applies only with --after-halt student")
        return None
    if answering.student_learner_param and answering.student_learner is None:
        raise PcqrError("--student-learner-param needs --student-learner")
    if not checked_now:
        return student_learner(learner, guess, None, {})
    from pcqr.pipeline.models.learners import parse_learner_params
    from pcqr.pipeline.models.student_selection import student_specs

    named = student_learner(learner, guess, answering.student_learner,
                            parse_learner_params(answering.student_learner_param))
    for spec in student_specs(named, modules):
        spec.check(len(features), 64)
    return named


def answer_stream(training: TrainingOptions, answering: AnswerOptions, connect: Connect,
                  reporter: Reporter = LOGGING) -> dict[str, Any]:
    """Answer one stream of queries through the session in ``training.state`` (creating it first
    from ``training.private`` when the directory holds none: the one-shot form), the state's lock
    held by the caller. Returns the summary ``pcqr answer --json`` prints.

    Order (the certificate's): every parameter and input checked, the ledger's vouching for the
    state and crash recovery, the queries validated and the misuse guard, then the charge of a new
    session, training, and the answer loop; a new session's charge is refunded if this fails
    before a batch is committed.
    """
    with contextlib.ExitStack() as held:  # the session's ledger row; a new session's charge
        return _answer(training, answering, connect, reporter, held)


def _answer(training: TrainingOptions, answering: AnswerOptions, connect: Connect, reporter: Reporter,
            held: contextlib.ExitStack) -> dict[str, Any]:
    note = reporter.note
    state = training.state
    if not 1 <= answering.batch_size <= MAX_BATCH_SIZE:
        raise PcqrError(f"--batch-size must be in [1, {MAX_BATCH_SIZE:,}] (pcqr.pipeline.privacy.limits: the memory of one batch), "
                        f"got {answering.batch_size:,}")
    check_private_location(state, [answering.log_dir])
    new_session = not has_session(state)
    if new_session and training.private is None:
        raise PcqrError(f"--state {state}: no session here (run 'pcqr train' first, or pass --private)")
    plan = plan_training(training, reporter) if new_session else None
    session = None if new_session else load_session(state)
    check_session_paths(state, answering.log_dir or (session.log_dir if session else None), private=training.private,
                        queries=answering.queries, truth=answering.truth)  # the log it records, before the ledger
    if session is not None and training.private is not None:
        note(f"continuing the session in {state}: --private and the training options are not used")
    book: SessionBook | None = None
    if session is not None:  # the ledger is the authority: a state it does not vouch for answers nothing
        book, rolled = SessionBook.open(training.ledger, session, state)
        held.enter_context(book)
        for repaired in (rolled, recover(state, session.log_dir, session.pending_batch, session.last_hash)):
            if repaired:
                note(repaired)
    log_dir = check_log_dir(answering.log_dir, session)
    check_writable_directory(log_dir, "--log")  # before any charge or answer, not at the first batch
    answered = None
    if session is not None:  # verified before served: the log's whole hash chain, before anything else
        remove_leftovers(state)  # a killed run's spilled index (this process holds the state's lock)
        answered = index_from_log(log_dir, session.features, session.dedupe_seed, session.next_batch, session.last_hash,
                                  spill=state, classes=session.params.classes)
    features = list(plan.private.features) if plan else session.features  # type: ignore[union-attr]
    if plan is not None:  # the new session's guess and learner, as session.json will hold them
        guess = plan.guess.to_dict() if plan.guess is not None else None
        learner = plan.learner_record()
    else:
        assert session is not None
        guess, learner = session.guess, session.learner
    labels = plan.privacy.labels if plan is not None else session.labels  # type: ignore[union-attr]
    classes = plan.params.classes if plan is not None else session.params.classes  # type: ignore[union-attr]
    if answering.fallback_label is not None and answering.fallback_label >= classes:
        raise PcqrError(f"{spelled_with('--fallback-label', answering.fallback_label)}: the session answers "
                        f"{'0 or 1' if classes == 2 else f'the class indices 0 .. {classes - 1}'}")
    if labels is not None and answering.after_halt == "refuse":
        raise PcqrError(f"--after-halt refuse: the session was planned with --labels {labels:,}, whose student "
                        "answers every query after the first M; leave --after-halt out (a session trained with "
                        "--gate plans its teacher for all --queries-max queries)")
    modules = learner_modules(training.cluster)  # read once: the run's allowed learner modules
    student = after_halt_learner(answering, guess, learner, features, modules,
                                 checked_now=plan is not None or answering.student_learner is not None)
    queries = open_matching(answering.queries, "queries", features, "the session's feature columns", answering.id_column)
    names = plan.class_names if plan is not None else session.class_names  # type: ignore[union-attr]
    truth = load_truth(answering.truth, classes=classes, names=names) if answering.truth else None
    if session is not None and (finished := answered_before(session, queries, answering.batch_size)) is not None:
        # a re-run of an input answered in full, recognised in the driver: no cluster, no model loaded
        return _nothing_asked(session, finished, queries, log_dir, state, answering, student, reporter)
    private = plan.private if plan else reopen_private(session)  # type: ignore[arg-type]
    charged = None
    ensemble = None if session is None else load_models(state, session, modules)
    # array work only (training by pcqr's own learners, no A_SSPP, votes by array operations): a
    # local cluster's workers may be threads (cluster.yaml processes: auto)
    array_work = (trains_by_arrays(plan) if plan is not None else  # the one-shot form trains first
                  ensemble is not None and ensemble.array_counted and session.universal is None)  # type: ignore[union-attr]
    with connect(array_work=array_work) as client:
        # the misuse guard (no private row into a public log) reads --queries on the validation's own read
        own, own_label, guard = None, plan.private.uri if plan else None, None
        if not answering.private_log:
            own = own_fingerprint(training.ledger, plan.private if plan else None, client)
            guard = overlap_check(queries, "--queries", guard_ledger(training.ledger), own, own_label)
        # the session's row-key seed (a new session's drawn now, kept by it): the pass's read checks use it
        row_seed = session.dedupe_seed if session is not None else secrets.randbits(64)
        parts = queries.parts(answering.batch_size)
        with reporter.progress(len(parts), "checking queries") as bar:
            validated = validate_queries(client, queries, parts, answering.batch_size, row_seed,
                                         guard.reach if guard is not None else None, on_part=bar.update)
        start = start_point(session, queries, validated.identity, reporter)  # before any charge
        if start.answered is not None:  # answered in full before: nothing is asked again
            assert session is not None
            return _nothing_asked(session, start.answered, queries, log_dir, state, answering, student, reporter)
        skip = start.skip
        if guard is not None:  # the guard's verdicts, before any charge
            guard.verdict(validated.found or [], answering.allow_private_overlap, note)
        if answering.truth and not answering.private_log:
            check_public_overlap(scan_dataset(answering.truth, "truth"), "--truth", answering.allow_private_overlap,
                                 guard_ledger(training.ledger), own, own_label, note, client)
        if plan is None and private is not None:  # the same S as at training, before A_SSPP reads it
            check_private_fingerprint(client, private, session.private_fingerprint)  # type: ignore[union-attr]
        if plan is not None:  # refunded if this command fails before a batch is committed
            charge = held.enter_context(session_charge(client, plan, training, "answer", reporter))
            session, ensemble = train_session(client, plan, reporter)
            session.dedupe_seed = row_seed  # before the ledger records it
            book, charged = charge.register(session), charge.charged
            noise = plan.noise
        else:
            assert session is not None and ensemble is not None
            noise = noise_source(session.seed, session.seed is not None, session.noise_state)
        if plan is not None:
            save_models(state, ensemble)
        claim(log_dir, session.session_id)  # before any query is asked: one session per log
        held.enter_context(claimed(log_dir, session.session_id))  # given back if no batch is logged
        session.log_dir = locations.absolute(log_dir)  # the state works from any directory
        if skip == 0:
            begin_input(session, queries, validated.identity)
        save_session(state, session)
        assert book is not None  # the ledger row every commit of this run advances
        with reporter.progress(queries.rows - skip, "answering queries") as bar:
            counts = release_answers(
                client, session, state, ensemble, queries, answering.batch_size, noise,
                fallback_label=answering.fallback_label, truth=truth, on_batch=bar.update, private=private,
                extra_provenance={"allow_private_overlap": True} if answering.allow_private_overlap else None,
                skip=skip, book=book, validated=validated, index=answered, modules=modules,
                after_halt=student, reporter=reporter,
            )
    spent = (f"m = {session.params.cutoff} noisy-majority answers" if session.params.gate == "gnmax" else
             f"{session.params.cutoff} abstentions reached the cutoff T")
    if counts.halted and student is None:
        note(
            f"privacy budget spent: {spent}; "
            "every later query of this session is refused (or answered by a student: --after-halt student)"
        )
    elif counts.halted:
        note(f"privacy budget spent: {spent}; later queries are answered by the student "
             f"distilled from {counts.student_taught or 0} released answers (post-processing, no budget)")
    say_gate_chosen(plan, reporter)
    say_large_delta(plan, reporter)
    summary = _summary(session, counts, skip=skip, log_dir=log_dir, state=state, plan=plan, answering=answering,
                       student=student)
    if "one_label_warning" in summary:
        note(f"warning: {summary['one_label_warning']}")
    if charged is not None:
        summary["ledger"] = charge_note(charged)
    if truth is not None:
        summary["accuracy"] = counts.correct / counts.evaluated if counts.evaluated else None
        summary["evaluated"] = counts.evaluated
        if counts.truth_missing:
            summary["truth_missing"] = counts.truth_missing
    return summary


def _nothing_asked(session: SessionState, answered: Answered, queries: Dataset, log_dir: str, state: str,
                   answering: AnswerOptions, student: dict[str, Any] | None, reporter: Reporter) -> dict[str, Any]:
    """The run of an input answered in full before: one note, and a summary of no new answers."""
    reporter.note(answered.describe(queries, log_dir))
    halted = session_gate(session).halted and session.released is None
    return _summary(session, ReleaseCounts(halted=halted), skip=0, log_dir=log_dir, state=state, plan=None,
                    answering=answering, student=student, answered=answered)


def _summary(session: SessionState, counts: ReleaseCounts, *, skip: int, log_dir: str, state: str,
             plan: Any, answering: AnswerOptions, student: dict[str, Any] | None,
             answered: Answered | None = None) -> dict[str, Any]:
    """What ``pcqr answer --json`` prints for a run (``answered``: of an input answered in full
    before, which this run did not ask again)."""
    summary: dict[str, Any] = {
        "answered": counts.answered,
        "abstained": counts.abstained,
        "refused": counts.refused,
        "released_model_answers": counts.released_model,
        "duplicates": counts.duplicates,
        **({"flipped": counts.flipped} if session.params.gate == "guess" else {}),
        **({"student_answers": counts.student, "student_taught": counts.student_taught} if student else {}),
        "resumed_after": skip,
        **({"already_answered": answered.rows, "already_answered_batches": [answered.first_batch, answered.last_batch]}
           if answered is not None else {}),
        "budget_used": session.sparse_vector.bottoms,
        "budget_spent": counts.halted,
        "batches": counts.batches,
        "log": log_dir,
        "state": state,
        "session_totals": session.totals,
        **session_summary(session),
        **gate_chosen(plan),
        "odometer": odometer(session),
    }
    one_label = one_label_warning(session)
    if one_label is not None:
        summary["one_label_warning"] = one_label
    if answering.allow_private_overlap:
        summary["allow_private_overlap"] = True
    if session.released is not None:
        from pcqr.pipeline.mechanisms.universal import RELEASED_MODEL_FILE

        summary["released_model"] = locations.join(log_dir, RELEASED_MODEL_FILE)
    if answering.truth is not None and answered is not None:
        summary["accuracy"], summary["evaluated"] = None, 0  # nothing answered by this run
    return summary
