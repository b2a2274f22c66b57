"""``pcqr answer``: answer a stream of classification queries privately, into a public log.

With ``--state DIR`` holding a session (from ``pcqr train`` or an earlier
answer), continues it: same models, same budget. With ``--private`` and a new
``--state``, trains first (the one-shot form ``pcqr run`` uses).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
from typing import Any

import click

from pcqr.jobs.common import (
    allow_overlap_option, check_writable_directory, cluster_option, emit_summary, json_option, ledger_option, note,
    privacy_options, progress, wait_option,
)
from pcqr.jobs.train import plan_training, session_charge, session_summary, train_session
from pcqr.pipeline.data.cluster import learner_modules, load_cluster_config, open_client
from pcqr.pipeline.session.answered import index_from_log
from pcqr.pipeline.session.commit import recover
from pcqr.pipeline.budget.ledger import charge_note
from pcqr.pipeline.data.datasets import Dataset, open_dataset, open_matching
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.session.evaluation import load_truth
from pcqr.pipeline.privacy.limits import MAX_BATCH_SIZE
from pcqr.pipeline.session.log import batch_files
from pcqr.pipeline.mechanisms.universal import check_private_fingerprint
from pcqr.pipeline.privacy.noise import noise_source
from pcqr.pipeline.budget.overlap import guard_public_inputs
from pcqr.pipeline.session.query_release import release_answers, validate_queries
from pcqr.pipeline.session.book import SessionBook
from pcqr.pipeline.session.state_lock import lock_state
from pcqr.pipeline.session.state import (
    SessionState,
    check_private_location,
    has_session,
    load_models,
    load_session,
    save_models,
    save_session,
)


def check_log_dir(log_dir: str | None, session: SessionState | None) -> str:
    """The log directory this run appends to: a new session's must be empty, an old one's its own."""
    stored = session.log_dir if session is not None else None
    written = session.next_batch if session is not None else 0
    if log_dir is None:
        if stored is None:
            raise PcqrError("--log is required: the public directory for the answered-query log")
        return stored
    if stored is not None and os.path.abspath(log_dir) != os.path.abspath(stored):
        raise PcqrError(f"--log {log_dir}: this session writes its log to {stored}")
    existing = batch_files(log_dir)
    if len(existing) != written:
        raise PcqrError(
            f"--log {log_dir}: holds {len(existing)} batch files but the session has written "
            f"{written}; use an empty directory for a new session"
        )
    return log_dir


def input_fingerprint(queries: Dataset) -> str:
    """Identifies a query dataset from its metadata (files, row groups, schema): public data."""
    described = json.dumps([list(queries.files), [list(g) for g in queries.row_groups], str(queries.schema)])
    return hashlib.sha256(described.encode()).hexdigest()


def resume_point(session: SessionState | None, queries: Dataset) -> int:
    """Rows of ``queries`` an earlier run of this session already committed (0 for a new input).

    Re-running a command that was interrupted continues after its last committed batch, so no
    released answer is ever answered again. An input answered in full is asked again from the
    start: repeats of answered queries get their logged answers (no budget); the others are
    tested again.
    """
    if session is None or session.input is None or session.input["fingerprint"] != input_fingerprint(queries):
        return 0
    done, rows = int(session.input["done"]), int(session.input["rows"])
    if done >= rows:
        note(f"{queries.uri}: all {rows} queries were answered before; asking them again (answered ones "
             "get their logged answers at no cost, the others are tested again)")
        return 0
    if done:
        note(f"resuming {queries.uri}: {done} of {rows} queries were committed by an earlier run")
    return done


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


@click.command("answer")
@click.option("--state", required=True, type=click.Path(file_okay=False), help="Private state directory of the session.")
@click.option("--queries", required=True, help="Query dataset (Parquet): the private features, plus query_id.")
@click.option("--log", "log_dir", default=None, type=click.Path(file_okay=False), help="Public directory of the answered-query log.")
@click.option("--private", default=None, help="Private labelled dataset: train a new session in --state first.")
@click.option("--id-column", default=None, help="Query id column (integers). Default: query_id if the queries have it, "
              "else row positions; a column given here must exist.")
@click.option("--batch-size", type=int, default=100_000, show_default=True, help="Queries per batch (one log file each).")
@click.option("--fallback-label", type=click.IntRange(0, 1), default=None, help="Fill abstained/refused answers with this label (post-processing).")
@click.option("--truth", default=None, help="Parquet of query_id + label: report accuracy of the answered queries.")
@allow_overlap_option
@privacy_options
@ledger_option
@cluster_option
@wait_option
@json_option
def command(**options: Any) -> None:
    """Answer queries with the session's k models through the sparse-vector coordinator."""
    creates = options["private"] is not None  # the one-shot form may create the session
    with lock_state(options["state"], options["wait"], create=creates, command="pcqr answer"):
        answer_session(options)


def answer_session(options: dict[str, Any]) -> None:
    """The command's work, with the state directory locked (before its session is read)."""
    with contextlib.ExitStack() as held:  # the session's ledger row; a new session's charge
        _answer(options, held)


def _answer(options: dict[str, Any], held: contextlib.ExitStack) -> None:
    state = options["state"]
    if not 1 <= options["batch_size"] <= MAX_BATCH_SIZE:
        raise PcqrError(f"--batch-size must be in [1, {MAX_BATCH_SIZE:,}] (pcqr.pipeline.privacy.limits: the memory of one batch), "
                        f"got {options['batch_size']:,}")
    check_private_location(state, [options["log_dir"]])
    new_session = not has_session(state)
    if new_session and options["private"] is None:
        raise PcqrError(f"--state {state}: no session here (run 'pcqr train' first, or pass --private)")
    plan = plan_training(options) if new_session else None
    session = None if new_session else load_session(state)
    if session is not None and options["private"] is not None:
        note(f"continuing the session in {state}: --private and the training options are not used")
    book: SessionBook | None = None
    if session is not None:  # the ledger is the authority: a state it does not vouch for answers nothing
        book, rolled = SessionBook.open(options["ledger"], session, state)
        held.enter_context(book)
        for repaired in (rolled, recover(state, session.log_dir, session.pending_batch, session.last_hash)):
            if repaired:
                note(repaired)
    log_dir = check_log_dir(options["log_dir"], session)
    check_writable_directory(log_dir, "--log")  # before any charge or answer, not at the first batch
    answered = None
    if session is not None:  # verified before served: the log's whole hash chain, before anything else
        answered = index_from_log(log_dir, session.features, session.dedupe_seed, session.next_batch, session.last_hash)
    features = list(plan.private.features) if plan else session.features  # type: ignore[union-attr]
    queries = open_matching(options["queries"], "queries", features, "the private features", options["id_column"])
    skip = resume_point(session, queries)
    truth = load_truth(options["truth"]) if options["truth"] else None
    private = plan.private if plan else reopen_private(session)  # type: ignore[arg-type]
    load_cluster_config(options["cluster"])
    charged = None
    with open_client(options["cluster"], echo=note) as client:
        validate_queries(client, queries, queries.parts(options["batch_size"]))  # before any charge
        guard_public_inputs([("--queries", queries), ("--truth", open_dataset(options["truth"], "truth")
                                                      if options["truth"] else None)],
                            options["allow_private_overlap"], options["ledger"], plan.private if plan else None,
                            client, note)  # misuse guard, before any charge
        if plan is None and private is not None:  # the same S as at training, before A_SSPP reads it
            check_private_fingerprint(client, private, session.private_fingerprint)  # type: ignore[union-attr]
        if plan is not None:  # refunded if this command fails before a batch is committed
            charge = held.enter_context(session_charge(client, plan, options, "answer"))
            session, ensemble = train_session(client, plan)
            book, charged = charge.register(session), charge.charged
            noise = plan.noise
        else:
            assert session is not None
            ensemble = load_models(state, session, learner_modules(options["cluster"]))
            noise = noise_source(session.seed, session.seed is not None, session.noise_state)
        if plan is not None:
            save_models(state, ensemble)
        session.log_dir = os.path.abspath(log_dir)  # the state works from any directory
        if skip == 0:
            session.input = {"uri": queries.uri, "fingerprint": input_fingerprint(queries), "rows": queries.rows, "done": 0}
        save_session(state, session)
        assert book is not None  # the ledger row every commit of this run advances
        with progress(queries.rows - skip, "answering queries") as bar:
            counts = release_answers(
                client, session, state, ensemble, queries, options["batch_size"], noise,
                fallback_label=options["fallback_label"], truth=truth, on_batch=bar.update, private=private,
                extra_provenance={"allow_private_overlap": True} if options["allow_private_overlap"] else None,
                skip=skip, book=book, index=answered,
            )
    if counts.halted:
        note(
            f"privacy budget spent: {session.params.cutoff} abstentions reached the cutoff T; "
            "every later query of this session is refused"
        )
    summary: dict[str, Any] = {
        "answered": counts.answered,
        "abstained": counts.abstained,
        "refused": counts.refused,
        "released_model_answers": counts.released_model,
        "duplicates": counts.duplicates,
        "resumed_after": skip,
        "budget_used": session.sparse_vector.bottoms,
        "budget_spent": counts.halted,
        "batches": counts.batches,
        "log": log_dir,
        "state": state,
        "session_totals": session.totals,
        **session_summary(session),
    }
    if charged is not None:
        summary["ledger"] = charge_note(charged)
    if options["allow_private_overlap"]:
        summary["allow_private_overlap"] = True
    if session.released is not None:
        from pcqr.pipeline.mechanisms.universal import RELEASED_MODEL_FILE

        summary["released_model"] = os.path.join(log_dir, RELEASED_MODEL_FILE)
    if truth is not None:
        summary["accuracy"] = counts.correct / counts.evaluated if counts.evaluated else None
        summary["evaluated"] = counts.evaluated
        if counts.truth_missing:
            summary["truth_missing"] = counts.truth_missing
    emit_summary(summary, options["as_json"])
