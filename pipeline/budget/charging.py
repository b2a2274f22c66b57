"""The charge of a private use: fingerprint the dataset, find the registered data it overlaps, charge
them all in the ledger before a row is read, and register the dataset's sketches.

It composes the three lower modules of the budget package -- :mod:`pcqr.pipeline.budget.fingerprint`
(the content identity and sketches), :mod:`pcqr.pipeline.budget.overlap` (the relations between
datasets) and :mod:`pcqr.pipeline.budget.ledger` (budgets, charges and refunds) -- and is the only
module that imports all three, so none of them imports another back.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

from pcqr.pipeline.budget.fingerprint import fingerprint_dataset
from pcqr.pipeline.budget.ledger import Ledger, charge_note, failed_after_charge, refund_charge
from pcqr.pipeline.budget.location import budget_command, ledger_location
from pcqr.pipeline.budget.overlap import register, related_identities, relation_note


def charge_private_use(
    files: Sequence[str], uri: str, job: str, epsilon: float, delta: float, parameters: dict[str, Any],
    ledger_option: str | None = None, client: Any = None, echo: Callable[[str], None] | None = None,
    features: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Charge a job's (eps, delta) to the private dataset ``uri`` (whose ``files`` it reads) BEFORE
    it reads a row; raises PcqrError when the budget would be exceeded (nothing is charged).

    ``files``/``uri`` are ``Dataset.files``/``Dataset.uri`` (``uri`` labels the charge); ``job``
    the command's name; (``epsilon``, ``delta``) what the whole run requests; ``parameters`` its
    public options (recorded as JSON); ``ledger_option`` is ``--ledger``; ``client`` hashes the
    files on its workers; ``echo`` gets one status line; ``features``, the job's feature columns,
    get a feature sketch (:mod:`pcqr.pipeline.budget.overlap`). The charge also goes to every registered
    dataset the data overlaps (``overlaps``: the line saying so). Returns the charge, its new
    totals, ``limited`` and ``ledger`` (the path).
    """
    path = ledger_location(ledger_option)
    with Ledger(path) as ledger:
        found = fingerprint_dataset(files, client, ledger, features)
        related = related_identities(ledger, found, files, client)
        charged = ledger.charge(found.identity, uri, job, epsilon, delta, parameters,
                                [(r.identity, r.label) for r in related])
        register(ledger, found, uri)
        earlier = [i for i in ledger.store.labelled(uri)
                   if i != found.identity and i not in {r.identity for r in related}]
        budgets = [_totals(ledger, r.identity, r.label) for r in related if ledger.store.budget(r.identity) is not None]
    charged = {**charged, "ledger": path, "earlier_identities": earlier,
               "overlaps": relation_note(related) if related else None, "overlap_budgets": budgets}
    if echo is not None:
        echo(charge_note(charged))
        if earlier and not charged["limited"]:
            echo(f"ledger: warning: {uri} has other contents on record ({len(earlier)} earlier identities): "
                 "a changed dataset that does not overlap them gets a new identity with no budget; "
                 f"see {budget_command('show', uri, path)}")
    return charged


@contextmanager
def provisional_charge(
    files: Sequence[str], uri: str, job: str, epsilon: float, delta: float, parameters: dict[str, Any],
    ledger_option: str | None = None, client: Any = None, features: Sequence[str] | None = None,
) -> Iterator[dict[str, Any]]:
    """Charge (see :func:`charge_private_use`) for a block that releases nothing itself: if it fails,
    the charge is refunded and the error goes on, saying so (:func:`failed_after_charge`)."""
    charged = charge_private_use(files, uri, job, epsilon, delta, parameters, ledger_option, client,
                                 features=features)
    try:
        yield charged
    except (Exception, KeyboardInterrupt) as exc:
        refund_charge(charged, exc)
        raise failed_after_charge(exc, job, "charge refunded") from None




def _totals(ledger: Ledger, identity: str, label: str) -> dict[str, Any]:
    """A budgeted dataset's label, spent and budget (after a charge that also went to it)."""
    spent, budget = ledger.store.spent(identity), ledger.store.budget(identity)
    assert budget is not None
    return {"dataset": label, "spent_epsilon": spent[0], "spent_delta": spent[1], "budget_epsilon": budget[0],
            "budget_delta": budget[1]}
