"""``pcqr train``: split the private data into k subsample models of a new session.

Creates a session in the private state directory; ``pcqr answer --state DIR`` then answers
queries with it. The work is the library's (pcqr.pipeline.session.planning.train_new_session);
this module parses, locks and prints.
"""
from __future__ import annotations

from typing import Any

import click

from pcqr.jobs.common import (
    CLI_REPORTER, cluster_option, connect_to, emit_summary, json_option, ledger_option, wait_option,
)
from pcqr.jobs.options import check_labels_alone, class_values, privacy_options
from pcqr.pipeline.data.outputs import check_session_paths
from pcqr.pipeline.options import TrainingOptions
from pcqr.pipeline.session.planning import train_new_session
from pcqr.pipeline.session.state_lock import lock_state


@click.command("train")
@click.option("--private", required=True,
              help="Private: the labelled dataset (Parquet file or directory, path or URI) the models are trained "
              "on; read by the workers only, charged to the ledger.")
@click.option("--state", required=True, type=click.Path(file_okay=False),
              help="Private: a new state directory for the session (its models, budget state and key); keep it "
              "with the private data, never under a public folder.")
@privacy_options
@ledger_option
@cluster_option
@wait_option
@json_option
def command(**options: Any) -> None:
    """Train the k subsample models of a new private session (A_SubSamp steps 1-5)."""
    check_labels_alone(click.get_current_context())
    training = TrainingOptions.from_values(class_values(options))
    check_session_paths(training.state, None, private=training.private, ledger=training.ledger,
                        cluster=training.cluster)  # before the lock, which makes --state
    with lock_state(training.state, options["wait"], create=True, command="pcqr train"):
        summary = train_new_session(training, connect_to(training.cluster), CLI_REPORTER)
    emit_summary(summary, options["as_json"])
