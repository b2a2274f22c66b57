"""The generic label-private learner (Beimel-Nissim-Stemmer 2013, papers/002 section 6.1, Figure 13;
ALGORITHMS.md section 8): ``pcqr learn --algorithm label-private``.

Figure 13, on a labelled database S of m rows taken in dataset order (the order of the files and
row groups, :meth:`pcqr.pipeline.data.datasets.Dataset.parts`):

1-2. S1 = the first n rows, S2 = rows n .. m-1 (n public: ``--first-rows``, or the figure's
     n = ceil(32/alpha (VC ln(64/alpha) + ln(8/beta))), :func:`paper_first_rows`).
3.   B = the distinct feature vectors of S1. S1's labels are never read.
4.   H = one hypothesis of the class per dichotomy of the class on B.
5.   h = the exponential mechanism with eps over H, quality q(S2, h) = |{i in S2 : h(x_i) = y_i}|.

It is A_SSPP (:mod:`pcqr.pipeline.mechanisms.sspp`) with T_pub = S1's feature vectors and S = S2:
the same dichotomy enumeration (on a worker) and the same sharded exact sampler
(:func:`pcqr.pipeline.mechanisms.exponential.select_hypothesis`). The workers read the rows; S1's
feature matrix comes back to the driver, as A_SSPP's public points are there, only because the user
has stated the feature columns public.

*Releases*: h, one member of H, as the model file ``pcqr predict`` serves. H is a function of S1's
feature values, and h reveals them in part (a threshold's cut is a midpoint between two of them).

*Sensitivity*: q(S2, h) counts S2's rows. Changing one label y_i, the features fixed, changes q(S2, h)
by exactly 1 for every h (h(x_i) is the old label or the new one). The weight exp(eps q / 2) =
exp(eps (|S2| - mistakes) / 2) is proportional to exp(-eps mistakes / 2): pcqr's sampler with
sensitivity one mistake.

*Guarantee* (Definition 6.1; the privacy paragraph of Theorem 6.2's proof: steps 1-4 read no label,
and the exponential mechanism is eps-DP, Lemma 3.2 of papers/004, McSherry-Talwar): for every fixed
feature matrix Sx, the map from the labels Sy to h is eps-DP in the labels (label privacy). pcqr's
sampler is within total variation TV(m - n) of the exact mechanism, so it is (eps, delta_EM), with
delta_EM = (1 + e^eps) TV(m - n) reported as ``delta_sampler`` (:func:`certificate`, as A_SSPP's).

*Record-level privacy only under a statement.* Changing the features of one S1 row changes B, so H,
and an output possible on one database can be impossible on the other (tests/test_label_private.py
shows one): no epsilon holds for S1's feature values. pcqr's ledger certifies replace-one DP of whole
records, so the job refuses unless the user states that the feature columns of the dataset are public
knowledge (``--features-are-public``; the paper's model: "the identity of individuals in a population
are known publicly but not their labels"). Under that statement an adversary knows Sx already,
neighbouring databases differ in one label, and the label guarantee is the record-level one: the
charge of (eps, delta_EM) is then sound. The statement is recorded in the model, in the ledger
charge's parameters and in the summary (:data:`GUARANTEE`). (S2's rows are private as whole records
anyway: replacing one moves every q by at most 1, section 6.2's remark; only S1's features need the
statement.)

*Utility* (Theorem 6.2's proof): with that n and m >= 768/(alpha^2 eps) (VC ln(64/alpha) + 2 ln(8/beta))
(:func:`paper_rows`), h has error at most alpha with probability 1 - beta when the rows are i.i.d.:
S1, the FIRST rows, must be a random sample (a dataset sorted by a feature or by the label is not);
privacy does not depend on it.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from pcqr.pipeline.data.datasets import Dataset, Part, load_rows
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.mechanisms import sspp

MECHANISM = "generic label-private learner (Beimel-Nissim-Stemmer 2013, Fig. 13)"
#: What the released model, the ledger charge and the summary say the guarantee is.
GUARANTEE = "label privacy: the feature columns are stated public"
#: The refusal without ``--features-are-public``.
REFUSAL = ("--algorithm label-private reveals the feature values of the first n rows of --private (its "
           "candidates are built from them) and protects only the labels: pass --features-are-public to state "
           "that the dataset's feature columns are public knowledge, or use --algorithm sspp with a --public sample")


def _size(log_value: float) -> int | str:
    """A size from its natural logarithm: an int, or a string when it is beyond a float."""
    if log_value < 700:
        return math.ceil(math.exp(log_value))
    return f"{10 ** (log_value / math.log(10) % 1):.2f}e+{int(log_value / math.log(10))}"


def paper_first_rows(vc: int, alpha: float, beta: float) -> int | str:
    """Fig. 13's n = ceil(32/alpha (VC ln(64/alpha) + ln(8/beta)))."""
    return _size(math.log(32) - math.log(alpha) + math.log(vc * math.log(64 / alpha) + math.log(8 / beta)))


def paper_rows(vc: int, alpha: float, beta: float, epsilon: float) -> int | str:
    """Fig. 13's m >= 768/(alpha^2 eps) (VC ln(64/alpha) + 2 ln(8/beta)) (Theorem 6.2's proof)."""
    return _size(math.log(768) - 2 * math.log(alpha) - math.log(epsilon)
                 + math.log(vc * math.log(64 / alpha) + 2 * math.log(8 / beta)))


def check_first_rows(first_rows: int | str, rows: int, source: str) -> int:
    """n, refused in one line unless 1 <= n < m (S2 must hold a row); ``source`` names where n came from."""
    if isinstance(first_rows, str):  # paper_first_rows beyond a float: more than any dataset
        raise PcqrError(_too_few_rows(source, first_rows, rows))
    if isinstance(first_rows, bool) or not isinstance(first_rows, (int, np.integer)) or first_rows < 1:
        raise PcqrError(f"--first-rows must be a positive integer (the rows whose features build the candidates), "
                        f"got {first_rows!r}")
    if first_rows >= rows:
        raise PcqrError(_too_few_rows(source, f"{first_rows:,}", rows))
    return int(first_rows)


def _too_few_rows(source: str, first_rows: str, rows: int) -> str:
    return (f"{source} = {first_rows} rows, but --private has {rows:,}: label-private scores the labels of the rows "
            "after the first n, so it needs more rows than n (give a smaller --first-rows)")


def certificate(epsilon: float, first_rows: int, rows: int) -> dict[str, float]:
    """What the learner proves on ``rows`` rows of which ``first_rows`` build H: A_SSPP's certificate
    with the exponential mechanism scoring the m - n rows of S2 (label privacy; module docstring)."""
    return sspp.certificate(epsilon, rows - first_rows)


def parts_between(dataset: Dataset, lo: int, hi: int, part_rows: int) -> list[Part]:
    """Driver (metadata only): the dataset's parts that hold a row of the global range [lo, hi)."""
    return [p for p in dataset.parts(part_rows) if p.start < hi and p.start + p.rows > lo]


def release_label_private(
    client: Any, hypothesis_name: str, dataset: Dataset, first_rows: int, epsilon: float, beta: float, noise: Any,
    **provenance: Any,
) -> tuple[Any, dict[str, Any]]:
    """Fig. 13 on the cluster: (h, its record in the released-model format, with |H| as ``candidates``
    and the distinct S1 points as ``public_points``). The workers read S1's features (never its
    labels) and S2's rows; S1's feature matrix comes to the driver (stated public)."""
    from pcqr.pipeline.models.subsample import PART_ROWS

    features, n, m = dataset.features, first_rows, dataset.rows
    first = [client.submit(load_rows, p, features, None, 0, n, pure=False)
             for p in parts_between(dataset, 0, n, PART_ROWS)]
    second = [client.submit(load_rows, p, features, dataset.label, n, m, pure=False)
              for p in parts_between(dataset, n, m, PART_ROWS)]
    points = np.concatenate(client.gather(first))
    return sspp.release_classifier(client, hypothesis_name, dataset, points, epsilon, beta, noise,
                                   mechanism=MECHANISM, scored=(second, m - n), first_rows=n, dataset_rows=m,
                                   **provenance)


def candidate_mistakes(hypothesis_class: Any, first: np.ndarray, X: np.ndarray, y: np.ndarray,
                       shard_size: int = 1 << 20) -> tuple[Any, np.ndarray]:
    """Without Dask (the audit surface, tests): H built from S1's feature matrix ``first`` (steps 3-4, by
    the enumeration the cluster runs) and every candidate's mistakes on S2 = (``X``, ``y``) (step 5's
    score: q = |S2| - mistakes), in the enumeration's order."""
    enumeration = sspp.enumerate_public(hypothesis_class, first)
    mistakes = [enumeration.mistakes(s, X, y) for s in enumeration.shards(shard_size)]
    return enumeration, np.concatenate(mistakes).astype(np.int64)
