"""``pcqr demo``'s session: its fixed choices, the check of its options, and where a kept demo's files are.

The demo generates synthetic data (a threshold on one of :data:`FEATURES` features, seed 0; label noise
makes it agnostic) and answers its queries in a one-shot session with delta :data:`DELTA`. Its options
are checked here as ``pcqr generate`` and ``pcqr answer`` would check them, before its folder is made or
anything runs: a bad one is one line, with nothing generated and no budget charged.
"""
from __future__ import annotations

import os
import shlex

from pcqr.pipeline.data.synthetic import make_spec
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.privacy.subsamp import SubSampParameters

DELTA = 1e-6  # the demo's delta
FEATURES = 5  # feature columns of the generated data


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
    SubSampParameters.create("paper" if noise > 0 else "tight", epsilon, DELTA, cutoff, queries, 0.05, subsamples,
                             threshold)  # the profile the demo's train will use
    if subsamples > rows:
        raise PcqrError(f"--subsamples {subsamples}: needs at least one of the --rows per model, got {rows} rows")


def kept_note(work: str) -> str:
    """Where a kept demo's files are, and commands to look at them, every path shell-quoted."""
    def path(*parts: str) -> str:
        return shlex.quote(os.path.join(work, *parts))
    return (f"demo: the data, state, log and ledger are in {shlex.quote(work)}; look with: "
            f"pcqr status --state {path('state')}; pcqr replay {path('log')} --out {path('replayed.parquet')}; "
            f"pcqr budget show {path('data', 'private')} --ledger {path('ledger.sqlite')}")
