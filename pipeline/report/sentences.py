"""An answer session's summary in plain sentences, and its table led by what a reader looks for first.

Post-processing of the public summary ``pcqr answer --json`` prints (its counts, the certificate and the
odometer): nothing private is read. ``pcqr demo`` opens with these sentences, then the table.
"""
from __future__ import annotations

import math
from typing import Any

#: The keys that lead the summary table (the --json line is sorted by key); the rest follow in key order.
TABLE_ORDER = ("answered", "abstained", "refused", "duplicates", "accuracy", "evaluated", "budget_used", "cutoff",
               "budget_spent", "epsilon", "delta", "proven_epsilon", "proven_delta", "delta_composition",
               "delta_stability", "delta_sampler", "lambda", "subsamples", "threshold", "threshold_source")


def count(value: int) -> str:
    """A count with thousands separators (``3,000,000``)."""
    return f"{value:,}"


def percent(part: float, whole: float) -> str:
    """A share rounded down to 0.1% (99.95% is "99.9%": "100%" only when it is all)."""
    share = 100 * part / whole if whole else 0.0
    return f"{int(share)}%" if share == int(share) else f"{math.floor(share * 10) / 10:.1f}%"


def plain_sentences(summary: dict[str, Any], queries: int) -> list[str]:
    """What the answer summary says, in words: answers, accuracy, the proven guarantee, the budget."""
    answered, cutoff, used = summary["answered"], summary["cutoff"], summary["budget_used"]
    lines = [f"answered {count(answered)} of {count(queries)} queries ({percent(answered, queries)}); "
             f"{count(summary['abstained'])} abstained, {count(summary['refused'])} refused."]
    if summary.get("accuracy") is not None:
        lines.append(f"accuracy of the answers {percent(summary['accuracy'], 1)} "
                     f"(checked against the generated truth for all {count(summary['evaluated'])} answers).")
    eps, delta = summary["proven_epsilon"], summary["proven_delta"]
    lines.append(
        f"privacy proven: (eps, delta) = ({eps:.3g}, {delta:.2g}) for the whole session, requested "
        f"({summary['epsilon']:g}, {summary['delta']:g}). " + how_proven(summary) +
        " proven_delta adds the composition, stability and sampler terms listed below."
    )
    halted = " the budget is spent: every later query of this session is refused." if summary["budget_spent"] else ""
    lines.append(
        f"abstentions used {count(used)} of {count(cutoff)} (budget_used of the cutoff T): privacy is spent "
        f"only when a query abstains (its vote was too close to call); after T abstentions the session "
        f"halts.{halted}"
    )
    return lines


def how_proven(summary: dict[str, Any]) -> str:
    """One sentence on where the session's noise scale lambda came from, per profile."""
    if summary.get("profile") == "tight":
        return (f"The noise scale lambda = {summary['lambda']:.3g} is the smallest whose T sparse-vector instances "
                "compose, exactly (Kairouz-Oh-Viswanath; --profile tight), to the requested eps with a share of "
                "delta: the whole eps buys less noise.")
    return (f"proven_epsilon is what pcqr's accountant proves for the noise Algorithm 5 chose from the requested eps "
            f"(lambda = {summary['lambda']:.3g}); the paper's formula for lambda is conservative, so the proof "
            "usually gives a smaller eps, never a larger one.")


def summary_table(summary: dict[str, Any]) -> dict[str, Any]:
    """The summary's items, TABLE_ORDER's first, then the rest by key."""
    first = [key for key in TABLE_ORDER if key in summary]
    return {key: summary[key] for key in [*first, *sorted(summary.keys() - set(first))]}
