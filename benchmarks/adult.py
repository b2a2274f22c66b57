"""UCI Adult for the benchmarks, in two encodings (issue 29, item 5: compare like for like).

Private rows: adult.data (32,561); adult.test (16,281) gives the queries and held-out rows. Every
scale is PUBLIC (a domain bound, not a statistic of the data: anything computed from the private
rows would have to be paid for), and so is every category (listed in adult.names):

* ``wide`` (105 columns, the benchmarks' own since issue 13): the 6 numeric columns divided by
  their bounds (each in [0, 1]) and one-hot columns of the 8 categorical ones (an unknown "?" is
  all zeros). A row's L2 norm is at most sqrt(6 + 8).
* ``usual`` (35 columns, the encoding DP logistic regression is usually shown on): age,
  education-num, capital-gain, capital-loss and hours-per-week divided by their bounds, and one-hot
  marital-status, relationship, sex and occupation (occupation's "?" a category of its own). A
  row's L2 norm is at most sqrt(5 + 4) = 3, the public norm bound given to diffprivlib.

The files are not in the project: ``$PCQR_ADULT``, else ../shared/datasets/adult beside the checkout.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

ADULT = Path(os.environ.get("PCQR_ADULT") or Path(__file__).resolve().parents[2] / "shared" / "datasets" / "adult")
BOUNDS = {"age": 100.0, "fnlwgt": 1.5e6, "education-num": 16.0, "capital-gain": 1e5, "capital-loss": 5e3,
          "hours-per-week": 100.0}  # public bounds: each scaled column lies in [0, 1]
COLUMNS = ["age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation",
           "relationship", "race", "sex", "capital-gain", "capital-loss", "hours-per-week", "native-country", "income"]
#: encoding -> (its numeric columns, its categorical columns, categorical columns whose "?" is a category)
ENCODINGS: dict[str, tuple[list[str], list[str], list[str]]] = {
    "wide": (list(BOUNDS), ["workclass", "education", "marital-status", "occupation", "relationship", "race", "sex",
                            "native-country"], []),
    "usual": (["age", "education-num", "capital-gain", "capital-loss", "hours-per-week"],
              ["marital-status", "relationship", "sex", "occupation"], ["occupation"]),
}

Split = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[str]]


def categories(adult: Path) -> dict[str, list[str]]:
    """Each categorical column's values as adult.names lists them (public)."""
    found: dict[str, list[str]] = {}
    for line in (adult / "adult.names").read_text().splitlines():
        name, sep, values = line.partition(":")
        if sep and name in COLUMNS and "continuous" not in values:
            found[name] = [v.strip().rstrip(".") for v in values.split(",") if v.strip()]
    return found


def norm_bound(encoding: str) -> float:
    """The largest L2 norm of a row in ``encoding`` (every scaled value and one-hot is at most 1)."""
    numeric, categorical, _ = ENCODINGS[encoding]
    return math.sqrt(len(numeric) + len(categorical))


def load_adult(adult: Path = ADULT, encoding: str = "wide", target: str = "income") -> Split:
    """(X_train, y_train, X_test, y_test, feature names) in ``encoding`` (the module docstring). ``target``:
    ``income`` (label 1 iff >50K), or a categorical column (issue 49's multi-class tasks: its category's
    index in adult.names, the column left out of the features; a row whose value is "?" is dropped)."""
    numeric, categorical, unknown_kept = ENCODINGS[encoding]
    known = {name: values + (["?"] if name in unknown_kept else []) for name, values in categories(adult).items()}
    used = [name for name in COLUMNS[:-1] if (name in numeric or name in categorical) and name != target]

    def read(path: Path) -> tuple[np.ndarray, np.ndarray]:
        rows = [r.split(", ") for r in path.read_text().splitlines() if r and not r.startswith("|")]
        rows = [r for r in rows if len(r) == len(COLUMNS)]
        if target != "income":
            rows = [r for r in rows if r[COLUMNS.index(target)].strip() in known[target]]
        columns = []
        for name in used:
            values = [r[COLUMNS.index(name)].strip() for r in rows]
            if name in numeric:
                columns.append(np.array(values, dtype=float)[:, None] / BOUNDS[name])
            else:
                columns.append(np.array([[v == c for c in known[name]] for v in values], dtype=float))
        if target == "income":
            y = np.array([r[-1].strip().rstrip(".") == ">50K" for r in rows], dtype=np.int8)
        else:
            y = np.array([known[target].index(r[COLUMNS.index(target)].strip()) for r in rows], dtype=np.int8)
        return np.hstack(columns), y

    names = [n for name in used for n in ([name] if name in numeric else [f"{name}={c}" for c in known[name]])]
    X_train, y_train = read(adult / "adult.data")
    X_test, y_test = read(adult / "adult.test")
    return X_train, y_train, X_test, y_test, [n.replace(" ", "_").replace("?", "unknown") for n in names]
