"""The representative domain X_tilde of a cover (Definition 2 of papers/003; ALGORITHMS.md section 7).

Two points are equivalent when every member of the cover H_tilde labels them alike;
X_tilde holds one concrete point per class and :meth:`RepresentativeDomain.index`
maps any row to its class. Everything here is computed from the PUBLIC points only
(the cut points of the cover are those of the public sample), so X_tilde cannot
depend on private data.

Per class (cuts at midpoints of consecutive distinct public values, "above t" is
``x > t``, as in :mod:`pcqr.pipeline.hypotheses.base`):

* threshold, interval (one feature, u distinct public values): the u cells between
  consecutive cuts; cell j holds public value v[j], its representative.
* point: the u public values, each its own class, plus one class for every other
  value (represented by a value no public point has).
* stump over p features: the product of the per-feature cells (prod u_j classes).
  Every stump of the cover is constant on a product cell, so this partition refines
  Definition 2's (it can be finer when the cover's deduplication dropped a cut that
  coincides on the public sample with a cut of another feature); a refinement keeps
  every query's answer and only enlarges |X_tilde| (PMW's error grows with log |X_tilde|).

Every public point is the representative of its own class, so a hypothesis's
labelling of the public points is read off its labelling of X_tilde.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.hypotheses.base import HypothesisClass
from pcqr.pipeline.hypotheses.common import cut_at, sample_columns

#: Classes with a representative domain (``pcqr release``).
SUPPORTED = ("threshold", "interval", "point", "stump")
#: The largest |X_tilde| we build (PMW keeps a weight per representative).
MAX_DOMAIN = 1 << 22


@dataclass(frozen=True)
class RepresentativeDomain:
    """X_tilde: per chosen feature its sorted distinct public values and inner cuts."""

    features: tuple[int, ...]
    values: tuple[np.ndarray, ...]  # per feature: sorted distinct public values
    cuts: tuple[np.ndarray, ...]  # per feature: the u - 1 cuts between them
    n_features: int  # columns of the data
    points_only: bool = False  # the point class: exact values plus "other"

    @property
    def radices(self) -> list[int]:
        return [v.shape[0] + (1 if self.points_only else 0) for v in self.values]

    def size(self) -> int:
        """|X_tilde|."""
        return int(np.prod(self.radices, dtype=object))

    def index(self, X: np.ndarray) -> np.ndarray:
        """The class (0 .. size - 1) of each row of ``X`` (rows, all features): mixed radix
        over the chosen features, the first feature most significant."""
        X = np.asarray(X, dtype=np.float64)
        out = np.zeros(X.shape[0], dtype=np.int64)
        for column, values, cuts, radix in zip(self.features, self.values, self.cuts, self.radices):
            x = X[:, column]
            if self.points_only:
                at = np.searchsorted(values, x)
                hit = (at < values.shape[0]) & (values[np.minimum(at, values.shape[0] - 1)] == x)
                cell = np.where(hit, at, values.shape[0])
            else:
                cell = np.searchsorted(cuts, x, side="left")
            out = out * radix + cell
        return out

    def points(self) -> np.ndarray:
        """One representative row per class, in class order (size x n_features; unused columns 0)."""
        grids = []
        for values in self.values:
            if self.points_only:
                other = values[-1] + max(1.0, abs(values[-1])) if values.shape[0] else 0.0
                values = np.append(values, other)
            grids.append(values)
        mesh = np.meshgrid(*grids, indexing="ij") if grids else []
        out = np.zeros((self.size(), self.n_features), dtype=np.float64)
        for column, grid in zip(self.features, mesh):
            out[:, column] = grid.reshape(-1)
        return out


def representative_domain(hypothesis_class: HypothesisClass, public: np.ndarray) -> RepresentativeDomain:
    """X_tilde of the cover of ``hypothesis_class`` built on ``public`` (rows, all features)."""
    name = hypothesis_class.name
    if name not in SUPPORTED:
        raise PcqrError(
            f"--hypothesis {name}: pcqr release has a representative domain for {', '.join(SUPPORTED)} only"
        )
    features: Sequence[int] = (
        hypothesis_class.features if name == "stump" else (hypothesis_class.feature,)  # type: ignore[attr-defined]
    )
    public = np.asarray(public, dtype=np.float64)
    columns = sample_columns(public, list(features))
    values = tuple(np.unique(columns[:, k]) for k in range(columns.shape[1]))
    if any(v.shape[0] == 0 for v in values):
        raise PcqrError("the public dataset is empty: A_PAP needs public points to build its cover")
    cuts = tuple(cut_at(v, np.arange(1, v.shape[0])) for v in values)
    domain = RepresentativeDomain(tuple(int(f) for f in features), values, cuts, public.shape[1], name == "point")
    if domain.size() > MAX_DOMAIN:
        raise PcqrError(
            f"--hypothesis {name}: the representative domain would have {domain.size()} points "
            f"(the product of the distinct public values per feature); at most {MAX_DOMAIN} are supported. "
            "Bin the features more coarsely or choose fewer with --features"
        )
    return domain
