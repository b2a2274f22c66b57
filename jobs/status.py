"""``pcqr status``: where a session stands -- its privacy odometer -- read-only, at no privacy cost."""
from __future__ import annotations

import dataclasses

import click

from pcqr.jobs.common import emit_summary, json_option


@click.command("status")
@click.option("--state", required=True, help="Private: the session's state directory (read, never written).")
@json_option
def command(state: str, as_json: bool) -> None:
    """Show a session's privacy odometer: instances used (c of T), the (eps, delta) certified and how,
    the queries answered, abstained and refused, the queries tested per instance spent so far and,
    at that rate, how many more the rest of the budget should test. Reads the state directory only
    (not the private data, not the log); it takes no lock, so it works while the session answers."""
    from pcqr.pipeline.session.session import session_status

    status = session_status(state)
    summary = {"state": state, **dataclasses.asdict(status)}
    if not as_json:
        rate = status.queries_per_instance
        click.echo(f"instances used: {status.used} of T = {status.cutoff}" + (" (halted)" if status.halted else ""))
        click.echo(f"certified: ({status.proven_epsilon:.4g}, {status.proven_delta:.3g})-DP within "
                   f"({status.epsilon:g}, {status.delta:g}), profile {status.profile}")
        if status.classes != 2:
            click.echo(f"classes: {status.classes}" + (f" ({', '.join(status.class_names)})" if status.class_names else ""))
        click.echo(f"queries: {status.answered:,} answered ({status.student_answers:,} by the student), "
                   f"{status.abstained:,} abstained, {status.refused:,} refused")
        if status.labels is not None:  # planned for M answers: the student answers every later query
            click.echo(f"labels: M = {status.labels:,}: the models answer the first {status.labels:,} queries "
                       f"({status.queries_seen:,} so far), the student every later one at no privacy cost")
        elif rate is None:
            click.echo("forecast: no abstention yet, no rate to forecast from")
        else:
            click.echo(f"forecast: {rate:,.1f} queries per instance so far; about {status.forecast_more_queries:,} "
                       "more at that rate")
        if status.one_label_warning:
            click.echo(f"warning: {status.one_label_warning}", err=True)
        return
    emit_summary(summary, as_json=True)
