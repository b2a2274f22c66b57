"""``pcqr ledger init`` and ``pcqr ledger migrate``: the budget owner's commands for a team ledger
on a PostgreSQL server (pcqr.pipeline.budget.team_ledger; README "Team ledger")."""
from __future__ import annotations

import click

from pcqr.jobs.common import emit_summary, json_option, note
from pcqr.pipeline.budget.team_ledger import init_ledger, migrate


@click.group("ledger")
def command() -> None:
    """A team's privacy-budget ledger on a PostgreSQL server (the budget owner's commands).

    \b
    pcqr ledger init --admin-url postgresql://owner@db/pcqr --analyst alice   # once, then per analyst
    pcqr ledger migrate --from ~/.local/share/pcqr/ledger.sqlite --to postgresql://owner@db/pcqr
    PCQR_LEDGER=postgresql://alice@db/pcqr pcqr train ...                   # every analyst
    """


@command.command("init")
@click.option("--admin-url", required=True, metavar="URL",
              help="The budget owner's postgresql:// URL: the role that owns the ledger and sets budgets.")
@click.option("--analyst", required=True, metavar="ROLE",
              help="An existing role to grant an analyst's rights: read budgets and charges; charge, refund and "
              "advance sessions only through the ledger's functions. Run again for each analyst role.")
@json_option
def init_command(admin_url: str, analyst: str, as_json: bool) -> None:
    """Create the ledger in the database of --admin-url (once) and grant --analyst an analyst's rights.

    The owner of --admin-url owns every table and function; analysts can neither update, delete or
    truncate a table nor set a budget: the server refuses it. The database's superuser is outside
    this protection."""
    done = init_ledger(admin_url, analyst)
    where = "created in" if done["created"] else "upgraded in" if done["upgraded_from"] else "already in"
    note(f"ledger: {where} {done['ledger']}; role {analyst} may charge, refund and advance its own sessions through "
         f"its functions; budgets are set by {done['owner']}")
    for removed in done.get("malformed_sketches_removed", []):
        note(f"ledger: removed a {removed} not of the documented form (stored before version 2)")
    if done.get("budgets_to_set_again"):
        note(f"ledger: run pcqr budget set DATASET --epsilon E --delta D again, with the dataset's path, for "
             f"{', '.join(done['budgets_to_set_again'])}: their row sketches were stored before version 2 checked "
             "who wrote them, so the budget owner stores them again")
    emit_summary(done, as_json)


@command.command("migrate")
@click.option("--from", "source", required=True, metavar="FILE", help="The SQLite ledger file to move.")
@click.option("--to", "url", required=True, metavar="URL",
              help="The server ledger (its owner's postgresql:// URL), created by pcqr ledger init and still empty.")
@click.option("--analyst", default=None, metavar="ROLE",
              help="The analyst role whose sessions the file holds (a SQLite ledger is one person's): they continue "
              "under it. Needed when a session is still open: a server commits a session's batches for the role that "
              "registered it alone.")
@json_option
def migrate_command(source: str, url: str, analyst: str | None, as_json: bool) -> None:
    """Move a SQLite ledger into an empty server ledger, checked before it commits.

    Every budget, charge, refund, dataset sketch and session moves in one transaction, which reads
    everything back and compares it with the file before it commits. The file is then marked moved:
    pcqr refuses it from then on, naming the server, and a second migration is refused."""
    done = migrate(source, url, analyst)
    note(f"ledger: moved {done['charges']} charges, {done['refunds']} refunds, {done['budgets']} budgets and "
         f"{done['sessions']} sessions to {done['to']}; checked; {source} is now refused: set PCQR_LEDGER to the URL")
    emit_summary(done, as_json)
