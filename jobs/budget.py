"""``pcqr budget set`` and ``pcqr budget show``: the privacy budget of a private dataset.

The budget lives in the ledger (:mod:`pcqr.pipeline.budget.ledger`), a SQLite file or a team's server
(``postgresql://``): ``set`` records the total (eps, delta)
that every job reading DATASET may spend together under basic composition; ``show`` lists every
charge (job, time, eps, delta, parameters), the budget and the total spent. DATASET is the
private dataset's path or URI -- known by the identity of its decoded rows (pcqr.pipeline.budget.fingerprint:
independent of file names, splitting, order and compression; hashed once per file and cached in
the ledger) -- or a name given earlier with ``set --name``. ``set`` registers the dataset's row
sketch, so that data overlapping it is charged to it as well (pcqr.pipeline.budget.overlap); ``show`` lists
the registered datasets it overlaps.
"""
from __future__ import annotations

import json
from contextlib import nullcontext
from typing import Any, Callable, TypeVar

import click

from pcqr.jobs.common import emit_summary, json_option, ledger_option, note
from pcqr.pipeline.data.cluster import open_client
from pcqr.pipeline.data.datasets import scan_dataset
from pcqr.pipeline.budget.ledger import Ledger, check_budget, pair, set_budget_hint
from pcqr.pipeline.budget.location import ledger_location
from pcqr.pipeline.budget.fingerprint import Fingerprint
from pcqr.pipeline.budget.overlap import Relation, describe, identify
from pcqr.pipeline.errors import PcqrError

F = TypeVar("F", bound=Callable[..., Any])


def hashing_cluster_option(func: F) -> F:
    """``--cluster PATH``: hash the dataset's rows on that cluster's workers instead of in this process."""
    return click.option(
        "--cluster", "cluster", type=click.Path(dir_okay=False), default=None,
        help="Fingerprint DATASET's rows on this cluster's workers (default: in this process; each file's "
        "result is cached in the ledger, so unchanged files are not read again).",
    )(func)


def resolve(dataset: str, ledger: Ledger, cluster: str | None,
            registering: bool = False) -> tuple[Fingerprint, str, list[Relation]]:
    """(fingerprint, label, registered datasets it overlaps) of DATASET: a name registered with
    ``--name`` (its identity alone), else the dataset at that path/URI (``registering``: with its
    row sketch, which ``set`` stores with the budget)."""
    named = ledger.store.find_name(dataset)
    if named is not None:
        registration = ledger.store.registration(named)
        return Fingerprint(named, 0), str(registration["label"]) if registration else dataset, []
    files = scan_dataset(dataset, "private").files  # metadata only
    with open_client(cluster, echo=note) if cluster is not None else nullcontext() as client:
        found, related = identify(files, ledger, client, registering)
    return found, dataset, related


def overlap_summary(related: list[Relation]) -> list[dict[str, Any]]:
    """The registered datasets DATASET overlaps, with the estimated containments."""
    return [{"dataset": r.label, "identity": r.identity,
             "rows_in_it": r.containment and r.containment.a_in_b, "its_rows_in_this": r.containment and r.containment.b_in_a}
            for r in related]


@click.group("budget")
def command() -> None:
    """Privacy budgets of private datasets: set a total (eps, delta), show every charge.

    \b
    Example (runs as written, in order, in an empty folder):
      pcqr generate --out data                                 # a private dataset to budget
      pcqr budget set data/private --epsilon 3 --delta 3e-6   # jobs together may spend at most this
      pcqr budget show data/private                            # every charge, the total spent
      pcqr budget verify                                       # the ledger's chain and every budget
    """


@command.command("set")
@click.argument("dataset")
@click.option("--epsilon", type=float, required=True, help="Total eps all jobs on DATASET may spend together.")
@click.option("--delta", type=float, required=True, help="Total delta all jobs on DATASET may spend together, in [0, 1).")
@click.option("--name", default=None, help="A name for DATASET, usable in place of its path in pcqr budget set/show.")
@ledger_option
@hashing_cluster_option
@json_option
def set_command(dataset: str, epsilon: float, delta: float, name: str | None, ledger: str | None,
                cluster: str | None, as_json: bool) -> None:
    """Set DATASET's total privacy budget (basic composition: the eps and the deltas of its jobs add up).

    DATASET: a private dataset (Parquet file or directory; only its rows' fingerprint is computed, on
    the workers with --cluster) or its --name. The ledger is private (the operator's record). A budget
    below what DATASET has already spent is refused."""
    check_budget(epsilon, delta, name)
    path = ledger_location(ledger)
    with Ledger(path) as book:
        book.check_may_set_budgets()  # before the rows are hashed
        found, label, related = resolve(dataset, book, cluster, registering=True)
        identity = found.identity
        book.set_budget(identity, label, epsilon, delta, name, found.row_sketch, found.rows)
        spent = book.store.spent(identity)
        registered = book.store.registration(identity) or {}
    if related:
        note(f"ledger: {label} overlaps {describe(related)}: a job on either is charged to both")
    emit_summary({"dataset": label, "name": registered.get("name"), "identity": identity, "epsilon": epsilon,
                  "delta": delta, "spent_epsilon": spent[0], "spent_delta": spent[1], "ledger": book.path}, as_json)


@command.command("show")
@click.argument("dataset")
@ledger_option
@hashing_cluster_option
@json_option
def show_command(dataset: str, ledger: str | None, cluster: str | None, as_json: bool) -> None:
    """List every charge to DATASET (job, time, eps, delta, parameters), its budget and the total spent.

    DATASET: a private dataset (Parquet file or directory; only its rows' fingerprint is computed) or
    its --name. What it prints is the private ledger's: the operator's, not for publication."""
    path = ledger_location(ledger)
    with Ledger(path) as book:
        found, label, related = resolve(dataset, book, cluster)
        identity, store = found.identity, book.store
        registered, charges, spent = store.registration(identity), store.charges(identity), store.spent(identity)
        setter = store.budget_setter()
        earlier = [i for i in store.labelled(label) if i != identity and i not in {r.identity for r in related}]
    budget = None if registered is None else (float(registered["epsilon"]), float(registered["delta"]))
    if as_json:
        emit_summary({"dataset": label, "name": registered and registered["name"], "identity": identity,
                      "ledger": book.path, "budget": budget and {"epsilon": budget[0], "delta": budget[1]},
                      "spent": {"epsilon": spent[0], "delta": spent[1]}, "charges": charges,
                      "earlier_identities": earlier, "overlaps": overlap_summary(related)}, True)
        return
    emit_summary({
        "dataset": label, "name": (registered and registered["name"]) or "-", "identity": identity,
        "budget": pair(*budget) if budget else f"none ({set_budget_hint(label, path, setter)})",
        "spent": pair(*spent), "remaining": pair(max(0.0, budget[0] - spent[0]), max(0.0, budget[1] - spent[1])) if budget else "-",
        "charges": len(charges), "ledger": book.path,
    }, False)
    for c in charges:
        by = f"  role {c['role']}" if c["role"] is not None else ""
        refunded = f"  refunded: {c['refunded']}" if c["refunded"] is not None else ""
        click.echo(f"  #{c['id']}  {c['time']}  {c['job']}{by}  {pair(c['epsilon'], c['delta'])}  "
                   f"{json.dumps(c['parameters'], sort_keys=True, default=str)}{refunded}")
    if related:
        note(f"{label} overlaps {describe(related)}: a job on either is charged to both (listed under each)")
    if earlier:
        note(f"{label}: the ledger also holds {len(earlier)} other identities under this label "
             "(its contents changed since, and do not overlap it): each has its own budget and charges")


@command.command("verify")
@ledger_option
@click.option("--cluster", "cluster", type=click.Path(dir_okay=False), default=None,
              help="A cluster.yaml whose pcqr: ledger: key names the ledger (when --ledger and $PCQR_LEDGER do not).")
@json_option
def verify_command(ledger: str | None, cluster: str | None, as_json: bool) -> None:
    """Check the ledger: the charges' hash chain (a server ledger), and that no dataset has spent
    more than its budget. Exit 0 if it holds, 1 (one line saying where) if not.

    A SQLite ledger has no chain (its owner can rewrite the file); a server ledger's chain shows any
    edit that bypassed the ledger's functions, unless everything after it was rewritten too: keep
    the printed head (id and hash) somewhere else, and a later verify shows whether history changed."""
    from pcqr.pipeline.budget.team_ledger import verify

    found = verify(ledger_location(ledger))
    emit_summary({**found, "problems": len(found["problems"])} if not as_json else found, as_json)
    if found["problems"]:
        raise VerifyFailed(f"ledger {found['ledger']}: {found['problems'][0]}"
                           + (f" (and {len(found['problems']) - 1} more)" if len(found["problems"]) > 1 else ""))


class VerifyFailed(PcqrError):
    """The ledger does not hold: exit 1."""

    exit_code = 1
