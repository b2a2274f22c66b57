"""``pcqr answer``: answer a stream of classification queries privately, into a public log.

With ``--state DIR`` holding a session (from ``pcqr train`` or an earlier answer), continues it:
same models, same budget. With ``--private`` and a new ``--state``, trains first (the one-shot
form ``pcqr run`` uses). The work is the library's (pcqr.pipeline.session.answering.answer_stream);
this module parses, locks and prints.
"""
from __future__ import annotations

from typing import Any

import click

from pcqr.jobs.common import (
    CLI_REPORTER, TRUTH_HELP, allow_overlap_option, cluster_option, connect_to, emit_summary, json_option,
    ledger_option, wait_option,
)
from pcqr.jobs.options import check_labels_alone, class_values, privacy_options
from pcqr.pipeline.data.outputs import check_session_paths
from pcqr.pipeline.privacy.limits import MAX_CLASSES
from pcqr.pipeline.session.answering import answer_stream
from pcqr.pipeline.options import AnswerOptions, TrainingOptions
from pcqr.pipeline.session.state_lock import lock_state


@click.command("answer")
@click.option("--state", required=True, type=click.Path(file_okay=False),
              help="Private: the session's state directory (its models, budget state and key); keep it with the "
              "private data, never under a public folder.")
@click.option("--queries", required=True,
              help="Public: the queries (Parquet file or directory): the session's feature columns (the private "
              "dataset's column names), optionally a query_id column; each row is copied into the public log. "
              "Queries answered in full before are not asked again.")
@click.option("--log", "log_dir", default=None, type=click.Path(file_okay=False),
              help="Public: the directory of the answered-query log (the queries, their answers, the provenance); "
              "required on a session's first answer, then its own.")
@click.option("--private", default=None,
              help="Private: a labelled dataset to train a new session in --state first (the one-shot form); read "
              "by the workers only, charged to the ledger.")
@click.option("--id-column", default=None, help="Query id column (integers). Default: query_id if the queries have it, "
              "else row positions; a column given here must exist.")
@click.option("--batch-size", type=int, default=AnswerOptions.batch_size, show_default=True, help="Queries per batch (one log file each).")
@click.option("--fallback-label", type=click.IntRange(0, MAX_CLASSES - 1), default=None,
              help="Fill abstained/refused answers with this label (post-processing): 0 or 1, or a class index "
              "below the session's --classes.")
@click.option("--truth", default=None, help=TRUTH_HELP.format(what="the accuracy of the answered queries"))
@click.option("--after-halt", type=click.Choice(["refuse", "student"]), default=AnswerOptions.after_halt, show_default=True,
              help="After the T-th instance: refuse every later query, or answer it with a student fitted on the "
              "answers the session released (post-processing of the public log: no budget; log source 'student').")
@click.option("--student-learner", default=None, help="The after-halt student's learner (a name as --learner takes). "
              "Default: the guess gate's student learner, else the session's --learner.")
@click.option("--student-learner-param", multiple=True, help="key=value parameter of --student-learner (repeatable).")
@allow_overlap_option
@privacy_options
@ledger_option
@cluster_option
@wait_option
@json_option
def command(**options: Any) -> None:
    """Answer queries with the session's k models through the sparse-vector coordinator."""
    check_labels_alone(click.get_current_context())
    emit_summary(answer_session(options), options["as_json"])


def answer_session(options: dict[str, Any]) -> dict[str, Any]:
    """The command's work, with the state directory locked before its session is read
    (``pcqr replay --into`` answers through it too). Returns the summary."""
    training, answering = TrainingOptions.from_values(class_values(options)), AnswerOptions.from_values(options)
    creates = training.private is not None  # the one-shot form may create the session
    # outputs on inputs: refused before the lock (which may make --state)
    check_session_paths(training.state, answering.log_dir, private=training.private, queries=answering.queries,
                        truth=answering.truth, ledger=training.ledger, cluster=training.cluster)
    with lock_state(training.state, options["wait"], create=creates, command="pcqr answer"):
        return answer_stream(training, answering, connect_to(training.cluster), CLI_REPORTER)
