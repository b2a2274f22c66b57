"""``pcqr demo``'s session: its fixed choices, the check of its options, and where a kept demo's files are.

The demo generates synthetic data (a threshold on one of :data:`FEATURES` features, seed 0; label noise
makes it agnostic) and answers its queries in a one-shot session with delta :func:`delta_for` its rows.
Its options are checked here as ``pcqr generate`` and ``pcqr answer`` would check them, before its folder
is made or anything runs: a bad one is one line, with nothing generated and no budget charged.
"""
from __future__ import annotations

import os
import shlex
from typing import Any

from pcqr.pipeline.data.synthetic import make_spec
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.privacy.limits import suggested_delta
from pcqr.pipeline.privacy.subsamp import SubSampParameters

FEATURES = 5  # feature columns of the generated data
#: The demo's last note when its temporary folder is gone: nothing it held can be looked at any more.
REMOVED_NOTE = ("demo: its folder was removed, with the data, state, log and ledger; pass --out DIR (or --keep) "
                "to keep them and look at them afterwards")


def delta_for(rows: int) -> float:
    """The demo's delta on ``rows`` private rows: the largest power of ten below 1/n (1e-7 at its default
    3,000,000 rows), so the demo never asks a delta that allows publishing a row (issue 47, item 7)."""
    return suggested_delta(rows)


def data_kind(noise: float) -> str:
    """The generated data's kind: realizable without label noise, agnostic with it."""
    return "agnostic" if noise > 0 else "realizable"


def check_options(rows: int, queries: int, noise: float, epsilon: float, subsamples: int, cutoff: int,
                  threshold: float | None) -> None:
    """What generate and answer would refuse, refused before the folder is made or anything runs."""
    if queries < 1:
        raise PcqrError(f"--queries: must be at least 1, got {queries}")
    make_spec(data_kind(noise), "threshold", rows, FEATURES, queries, 0, noise if noise > 0 else None)
    if noise < 0:
        raise PcqrError(f"--noise: must be in [0, 0.5), got {noise}")
    SubSampParameters.create("paper" if noise > 0 else "tight", epsilon, delta_for(rows), cutoff, queries, 0.05,
                             subsamples, threshold)  # the profile the demo's train will use
    if subsamples > rows:
        raise PcqrError(f"--subsamples {subsamples}: needs at least one of the --rows per model, got {rows} rows")


def own_ledger(summary: dict[str, Any]) -> str:
    """The summary's ledger entry: the demo's charge went to its own ledger, never the user's (and no advice
    to set a budget on a folder of the demo's)."""
    return f"charged {summary['epsilon']:g}, {summary['delta']:g} to the demo's own ledger, not yours"


def removed_summary(summary: dict[str, Any], work: str) -> dict[str, Any]:
    """The summary of a demo whose folder ``work`` was removed: no entry names a path in it (its log and
    state are gone; :data:`REMOVED_NOTE` says how to keep them), and the ledger's says whose was charged."""
    left = {key: value for key, value in summary.items() if not (isinstance(value, str) and work in value)}
    if "ledger" in summary:
        left["ledger"] = own_ledger(summary)
    return left


def kept_note(work: str) -> str:
    """Where a kept demo's files are, and commands to look at them, every path shell-quoted."""
    def path(*parts: str) -> str:
        return shlex.quote(os.path.join(work, *parts))
    return (f"demo: the data, state, log and ledger are in {shlex.quote(work)}; look with: "
            f"pcqr status --state {path('state')}; pcqr replay {path('log')} --out {path('replayed.parquet')}; "
            f"pcqr budget show {path('data', 'private')} --ledger {path('ledger.sqlite')}")
