"""The privacy-budget ledger: every job that reads a private dataset charges its (eps, delta) first.

Guarantee. For a dataset identity with a budget (E, D) (``pcqr budget set``), the charges in the
ledger never sum to more than (E, D): a job whose charge would pass the budget is refused with a
:class:`~pcqr.pipeline.errors.PcqrError` before it reads a private row, and nothing is recorded for it.
A job charges what it requests, not what it ends up using. Charged only with a result: a job that
fails after its charge BEFORE releasing anything has its charge marked refunded, whatever the
failure (invalid values found while reading its rows, a learner's exception, an interrupt: the
error, seen by the operator, is its only output), and its error ends "charge refunded"
(:func:`pcqr.pipeline.budget.charging.provisional_charge`; a session's charge: pcqr.pipeline.session.book.new_session, which keeps
it once a batch was released and says "charge kept: N batches were released"). A process killed
outright (SIGKILL, out of memory) keeps its charge: the safe side. With no budget set, charges are
still recorded, without a limit.

Composition. Basic composition (Dwork-Roth, *The Algorithmic Foundations of Differential
Privacy*, Thm 3.16): if job i is (eps_i, delta_i)-DP, the k jobs together are
(sum eps_i, sum delta_i)-DP; it also holds when each job is chosen after seeing the earlier
outputs (adaptive composition, Dwork-Roth section 3.5.2). The ledger adds the epsilons, adds the
deltas and compares each sum with the budget within a relative tolerance of 1e-9 (three charges of
1e-6 fit a budget of 3e-6 despite rounding). No tighter accountant: advanced composition
(Thm 3.20) needs its slack delta fixed in advance and only wins over many small jobs.

Concurrency. A charge is ONE transaction that holds the ledger's write lock before it reads the
spent sums (:meth:`LedgerStore.transaction`): across processes the read-compare-insert sequences
are serialised and each sees every earlier committed charge, so ten jobs started together against
a budget that admits three leave exactly three charges.

Storage (:mod:`pcqr.pipeline.budget.store`). The policy does not know where its rows live: a SQLite
file (the default; WAL journal, synchronous FULL, busy timeout 60 s; WAL needs every process on one
host, so keep it on a local disk of the machine the drivers run on) or a PostgreSQL server (a
``postgresql://`` URL: a team's shared budget, whose schema re-checks this policy's rule in the
functions analysts must go through, pcqr.pipeline.budget.postgres_schema).

Identity (:mod:`pcqr.pipeline.budget.fingerprint`). An order-independent hash of the DECODED rows: each row
encoded canonically (columns by name, values by type) and hashed, the hashes added mod 2**128 with
the row count: the same rows re-written with another compression, encoding, row order, file split
or file names are the same identity, hence the same budget. The rows are hashed on the Dask workers
(the driver never reads a row), with a per-file cache keyed by (file, size, mtime_ns). A
dataset's bottom-k sketches (table ``sketches``) are stored at its registration (first charge, or
``pcqr budget set``): a job on a dataset that largely overlaps a registered one (rows appended or
removed) is charged to that identity as well, in the same transaction, and the misuse guard
refuses public inputs holding private rows (:mod:`pcqr.pipeline.budget.overlap`, which states what the
sketches detect). The identity and the sketches are deterministic functions of the private data,
NOT private releases: keep them with the private data (the ledger, the data owner's terminal),
never in a public output such as the answer log.
"""
from __future__ import annotations

import json
import math
import os
import re
from typing import Any, Sequence

from pcqr.pipeline.budget.sketch import Sketch
from pcqr.pipeline.budget.bounds import (
    JOB, charge_problem, exceeds, json_problem, refuse, sketch_problem, text_problem,
)
from pcqr.pipeline.budget.location import budget_command, is_server
from pcqr.pipeline.budget.store import LedgerStore, Receipt, now
from pcqr.pipeline.errors import PcqrError

def pair(epsilon: float, delta: float) -> str:
    """``(eps, delta)`` as the ledger's messages print it: ``(1, 1e-06)``."""
    return f"({epsilon:.6g}, {delta:.6g})"


def check_budget(epsilon: float, delta: float, name: str | None) -> None:
    """Refuse an impossible budget or an empty name, naming the option."""
    from pcqr.pipeline.privacy.subsamp import check_epsilon

    check_epsilon(epsilon)
    if not (math.isfinite(delta) and 0 <= delta < 1):
        raise PcqrError(f"--delta must be in [0, 1), got {delta}")
    if name is not None and not name.strip():
        raise PcqrError("--name must not be empty")


#: The kinds of sketch the ledger keeps for a dataset identity (pcqr.pipeline.budget.overlap): of its
#: rows, of its feature columns, and a link to an identity of earlier pcqr versions.
ROWS, FEATURES, LEGACY = "rows", "features", "legacy"


def sketch_key(columns: Sequence[str] | None) -> str:
    """How a feature sketch's columns are keyed in the ledger (order-free); "" for the row sketch."""
    return "" if not columns else json.dumps(sorted(columns))


class Ledger:
    """The ledger's policy over its storage (:mod:`pcqr.pipeline.budget.store`, either backend): budgets,
    charges under basic composition, refunds. Reads go to ``store``. Use it as a context manager,
    or call :meth:`close`."""

    def __init__(self, location: str) -> None:
        self.store: LedgerStore = open_store(location)
        self.location, self.path = location, self.store.name  # path: how messages name it

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self.store.close()

    def load_sketch(self, identity: str, columns: Sequence[str] | None) -> Sketch | None:
        """The row sketch (``columns`` None) or the feature sketch over ``columns`` stored for ``identity``."""
        stored = self.store.sketch(identity, FEATURES if columns else ROWS, sketch_key(columns))
        return None if stored is None else stored_sketch(stored[1], self.path, identity)

    def check_may_set_budgets(self) -> None:
        """Refuse, in one line and before any work, a caller the store refuses budgets to (an analyst
        of a server ledger)."""
        setter = self.store.budget_setter()
        if setter is not None:
            raise PcqrError(f"ledger {self.path}: only the budget owner (role {setter}) sets budgets, and role "
                            f"{self.store.role} is an analyst; the owner runs pcqr budget set with the owner's URL")

    def set_budget(self, identity: str, label: str, epsilon: float, delta: float, name: str | None = None,
                   row_sketch: Sketch | None = None, rows: int = 0) -> None:
        """Record the total budget (eps, delta) of a dataset identity (replacing an earlier one), and
        its ``row_sketch`` (of its ``rows``) as the budget owner's: on a server ledger, the sketch
        every job's data is compared with (pcqr.pipeline.budget.overlap), which no analyst can replace.

        Refused when it is below what the identity has already spent, or when ``name``
        already names another dataset.
        """
        self.check_may_set_budgets()
        sketch = None if row_sketch is None else (rows, row_sketch.to_bytes())
        with self.store.transaction():
            spent = self.store.spent(identity)
            if exceeds(spent, (epsilon, delta)):
                raise PcqrError(f"--epsilon/--delta {pair(epsilon, delta)} is below what {label} has already "
                                f"spent {pair(*spent)}; see {budget_command('show', label, self.path)}")
            if name is not None:
                owner = self.store.find_name(name)
                if owner is not None and owner != identity:
                    raise PcqrError(f"--name {name}: already names another dataset ({owner})")
            self.store.write_budget(identity, label, epsilon, delta, name, sketch)

    def charge(self, identity: str, label: str, job: str, epsilon: float, delta: float,
               parameters: dict[str, Any], also: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
        """Charge one job's (eps, delta) to ``identity``, or refuse it (nothing recorded).

        One ``BEGIN IMMEDIATE`` transaction sums the earlier charges (basic composition),
        compares with the budget and inserts the charge, so concurrent jobs in other
        processes are serialised. ``also``: (identity, label) of registered datasets the data
        overlaps (:mod:`pcqr.pipeline.budget.overlap`), charged the same in the same transaction (all or
        none). Returns the charge with the new totals and ``"limited"`` (whether a budget was set).
        """
        refuse(charge_problem(epsilon, delta), f"{job}: cannot charge {pair(epsilon, delta)} to {label}")
        refuse(text_problem("the dataset's label", label), f"{job}: cannot charge {label!r}")
        refuse(None if re.fullmatch(JOB, job) else "not a job's name", f"cannot charge job {job!r}")
        refuse(json_problem("its parameters", parameters), f"{job}: cannot charge {label}")
        record = {"identity": identity, "label": label, "job": job, "time": now(), "epsilon": epsilon,
                  "delta": delta, "parameters": parameters, "pid": os.getpid()}
        with self.store.transaction():
            overlapping = {**record, "parameters": {**parameters, "overlapping": label}}
            also_receipts = [self._insert_charge(other, other_label, overlapping) for other, other_label in also]
            receipt = self._insert_charge(identity, label, record)
            spent, budget = self.store.spent(identity), self.store.budget(identity)
        return {**record, "id": receipt.id, "also_ids": [r.id for r in also_receipts],
                "receipts": [receipt, *also_receipts], "spent_epsilon": spent[0], "spent_delta": spent[1],
                "budget_epsilon": None if budget is None else budget[0],
                "budget_delta": None if budget is None else budget[1], "limited": budget is not None,
                "budget_setter": self.store.budget_setter()}

    def _insert_charge(self, identity: str, label: str, record: dict[str, Any]) -> Receipt:
        """Inside a transaction: refuse the charge if ``identity``'s budget does not admit it, else insert it."""
        epsilon, delta = record["epsilon"], record["delta"]
        spent, budget = self.store.spent(identity), self.store.budget(identity)
        total = (spent[0] + epsilon, spent[1] + delta)
        if budget is not None and exceeds(total, budget):
            raise PcqrError(f"privacy budget of {label} exceeded: spent {pair(*spent)} + this job "
                            f"{pair(epsilon, delta)} > budget {pair(*budget)}; "
                            f"see {budget_command('show', label, self.path)}")
        return self.store.insert_charge(identity, label, record)

    def refund(self, receipt: Receipt, failure: BaseException) -> None:
        """Mark a charge refunded: its job failed (on invalid input, for a PcqrError) before releasing
        anything (the failure message is the only output, and it is not counted as a release)."""
        self.store.mark_refunded(receipt, isinstance(failure, PcqrError))


def stored_sketch(data: bytes, ledger: str, identity: str) -> Sketch:
    """A sketch read from the ledger, or a one-line error: one not of the documented form (a file
    edited by hand, a server ledger written before version 2) is refused, never half-read."""
    refuse(sketch_problem(data), f"ledger {ledger}: the sketch stored for {identity}")
    return Sketch.from_bytes(data)


def failed_after_charge(failure: BaseException, job: str, outcome: str) -> BaseException:
    """The error to raise for a job that failed after its charge, saying what became of the charge
    (``outcome``): a PcqrError's one line gets it appended, any other exception a note."""
    if isinstance(failure, PcqrError):
        return PcqrError(f"{failure}; {outcome}")
    failure.add_note(f"pcqr: {job} failed; {outcome}")
    return failure


def refund_charge(charged: dict[str, Any], failure: BaseException) -> None:
    """Undo a charge returned by :func:`charge_private_use`: its job released nothing, and
    ``failure`` is why."""
    with Ledger(charged["ledger"]) as ledger:
        for receipt in charged["receipts"]:
            ledger.refund(receipt, failure)


def overlap_budgets_note(budgets: Sequence[dict[str, Any]]) -> str:
    """'rows: spent (8, 8e-06) of (40, 0.0001)', for each budgeted dataset a charge also went to."""
    return "; ".join(f"{b['dataset']}: spent {pair(b['spent_epsilon'], b['spent_delta'])} of "
                     f"{pair(b['budget_epsilon'], b['budget_delta'])}" for b in budgets)


def set_budget_hint(label: str, ledger: str | None, setter: str | None) -> str:
    """How a budget for ``label`` gets set: the command to run, or, for an analyst of a server ledger
    (whom the server refuses it), who runs it."""
    if setter is not None:
        return f"its budget owner, role {setter}, sets one with pcqr budget set"
    return budget_command("set", label, ledger, "--epsilon", "E", "--delta", "D")


def charge_note(charged: dict[str, Any]) -> str:
    """The one status line for a charge."""
    label = charged["label"]
    head = (f"ledger: charged {pair(charged['epsilon'], charged['delta'])} to {label}: "
            f"spent {pair(charged['spent_epsilon'], charged['spent_delta'])}")
    if charged["limited"]:
        head = f"{head} of {pair(charged['budget_epsilon'], charged['budget_delta'])}"
    else:
        hint = set_budget_hint(label, charged.get("ledger"), charged.get("budget_setter"))
        head = f"{head}; no budget set for {label} ({hint})"
    if charged.get("overlap_budgets"):
        head = f"{head}; {charged['overlaps']}; their budgets: {overlap_budgets_note(charged['overlap_budgets'])}"
    elif charged.get("overlaps"):
        head = f"{head}; {charged['overlaps']}"
    return head


def open_store(location: str) -> LedgerStore:
    """The store at ``location``: a PostgreSQL server for a ``postgresql://`` URL, else a SQLite file."""
    if is_server(location):
        from pcqr.pipeline.budget.postgres_store import PostgresStore

        return PostgresStore(location)
    from pcqr.pipeline.budget.sqlite_store import SQLiteStore

    return SQLiteStore(location)
