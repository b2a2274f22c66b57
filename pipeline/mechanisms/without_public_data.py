"""The jobs on a private dataset without public data: Beimel-Nissim-Stemmer's POINT_d, THRESH_d, box
and generic label-private learners (:func:`learn_without_public_data`; ``pcqr learn --algorithm
point|learn-thresholds|rectangle|label-private``, ``pcqr.learn_without_public_data``), and the
sanitizers (:func:`sanitize`; ``pcqr sanitize``, ``pcqr.sanitize``): the stable histogram and the
hierarchical CDF (issue 31), SanPoints and SanThresholds.

Every job runs in the certificate's order: every check that needs no private row (the options, the
public --domain, the output path, the dataset's metadata: one feature column, its row count) and
the mechanism's parameters (refused with the nearest certified value) first; then the ledger's
charge of the proven (eps, delta) before any row is read; then the workers' exact counts of their
parts (:mod:`pcqr.pipeline.mechanisms.integer_domain`), summed on the driver (the histogram: by a
worker a shard at a time; the CDF: level by level), and the mechanism,
inside the charge (a failure refunds it); then the released file, written atomically. The driver
never reads a private row: only the counts (the label-private learner: S1's feature matrix, which the
user has stated public, and the exponential mechanism's histograms; :mod:`.label_private`).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from pcqr.pipeline.budget.charging import provisional_charge
from pcqr.pipeline.budget.ledger import charge_note
from pcqr.pipeline.budget.location import ledger_setting
from pcqr.pipeline.data.outputs import Output, check_outputs
from pcqr.pipeline.data.cluster import load_cluster_config, open_client
from pcqr.pipeline.data.datasets import Dataset, load_features, open_dataset, split_features
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.mechanisms.integer_domain import Domain
from pcqr.pipeline.privacy.limits import check_delta, warn_large_delta
from pcqr.pipeline.privacy.noise import NoiseSource, noise_source
from pcqr.pipeline.privacy.subsamp import check_epsilon_delta, check_fraction

#: The learners :func:`learn_without_public_data` runs, and the sanitizers :func:`sanitize` runs.
LEARNERS = ("point", "learn-thresholds", "rectangle", "label-private")
SANITIZERS = ("san-points", "san-thresholds", "cdf", "histogram")
#: The sanitizers whose --alpha and --beta set a guarantee (cdf's error is reported, not set).
_ALPHA_SANITIZERS = ("san-points", "san-thresholds", "histogram")


def learn_without_public_data(
    private: str, out: str, *, algorithm: str, domain: str | None = None,
    features: str | Sequence[str] | None = None, label: str = "label", epsilon: float = 1.0, delta: float = 1e-6,
    alpha: float = 0.1, beta: float = 0.05, direction: str = "up", hypothesis: str | None = None,
    first_rows: int | None = None, features_are_public: bool = False, cluster: str | None = None,
    ledger: str | None = None, seed: int | None = None, insecure_seed: bool = False,
    note: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Release a point, threshold or box classifier learnt from private labelled rows alone, or any
    enumerable class's classifier by the label-private learner.

    Parameters
    ----------
    private : str
        The private labelled dataset (Parquet file or directory); read by the Dask workers only.
    out : str
        Where to write the released model (JSON; ``pcqr predict`` and
        :func:`pcqr.pipeline.models.released.load_model` read it).
    algorithm : {"point", "learn-thresholds", "rectangle", "label-private"}
        ``"point"``: the point function [x = j] via A_dist (Lemma 3.2). ``"learn-thresholds"``: the
        threshold 'x > theta' ('x <= theta' with ``direction="down"``) via RecConcave (Theorem 3.18).
        ``"rectangle"``: the axis-aligned box 'lo_i < x_i <= hi_i' on every feature via 2d runs of
        RecConcave (Theorem 3.22; docs/privacy.md Mechanism 13). ``"label-private"``: Fig. 13's
        generic label-private learner: the candidates from the feature values of the first
        ``first_rows`` rows, the exponential mechanism on the labels of the others (pure eps in the
        LABELS; needs ``features_are_public=True``; docs/privacy.md Mechanism 15).
    domain : str
        The features' PUBLIC integer domain ``"LO:HI"``, never read from the rows (not for
        ``"label-private"``).
    features : str or sequence of str, optional
        The feature column (point, learn-thresholds: ONE; rectangle: one or more; default: every
        column besides ``label``, each of a type pcqr reads as a number).
    epsilon, delta : float
        The privacy parameters; the job's proven (eps, delta) is charged to the ledger. A delta of
        0.01 or more is refused; one at or above 1/n of the rows is warned of (a
        :class:`~pcqr.pipeline.privacy.limits.LargeDeltaWarning`, or ``note`` on the command line).
    alpha, beta : float
        Target error and failure probability (``"learn-thresholds"``: RecConcave's approximation is
        alpha/2; ``"label-private"``: Fig. 13's n when ``first_rows`` is not given; all: the reported
        sample sizes).
    hypothesis : str, optional
        ``"label-private"`` only, and required there: the class (threshold, interval, point, stump,
        rectangle, halfspace).
    first_rows : int, optional
        ``"label-private"``: n, how many of the first rows (in dataset order) build the candidates from
        their features; their labels are never read. Default: Fig. 13's n from ``alpha`` and ``beta``.
    features_are_public : bool
        ``"label-private"``: your statement that the dataset's feature columns are public knowledge.
        The learner reveals the first n rows' feature values and protects only the labels; only under
        this statement is its label guarantee the record-level one the ledger charges. Refused without.
    cluster, ledger : str, optional
        The cluster.yaml and the ledger file (defaults as on the command line).
    seed, insecure_seed : optional
        Tests only: seeded noise, marking the output NOT private.
    note : callable, optional
        Receives one-line notes (the dashboard's address).

    Returns
    -------
    dict
        The summary: the model's public record (``released``, ``epsilon``, ``proven_delta`` and its
        terms, sample sizes...), ``model`` (the path) and ``ledger`` (the charge).
    """
    ledger_setting(ledger)  # an empty ledger setting: refused before anything is read
    check_delta(delta)  # 0.01 or more certifies nothing: refused before anything is read
    if algorithm not in LEARNERS:
        raise PcqrError(f"--algorithm must be one of {', '.join(LEARNERS)} here, got {algorithm!r}")
    if direction not in ("up", "down"):
        raise PcqrError(f"--direction must be 'up' or 'down', got {direction!r}")
    if algorithm == "label-private":
        model, charged = _learn_label_private(
            private, out, domain, hypothesis, first_rows, features_are_public, features, label, epsilon, alpha, beta,
            cluster, ledger, seed, insecure_seed, note)
        return _written(out, model, charged)
    for option, value in (("--hypothesis", hypothesis), ("--first-rows", first_rows),
                          ("--features-are-public", features_are_public or None)):
        if value is not None:
            raise PcqrError(f"{option} is for --algorithm label-private, not {algorithm}")
    parsed, dataset, noise = _checked_inputs(private, out, algorithm, domain, features, label, alpha, beta,
                                             seed, insecure_seed, one_feature=algorithm != "rectangle")
    if algorithm == "rectangle":
        from pcqr.pipeline.mechanisms.learn_rectangle import (
            box_record, cut_size, learn_rectangle, merge_axis_counts, positive_axis_counts,
        )
        from pcqr.pipeline.mechanisms.rec_concave import RecConcaveParameters

        dimensions = len(dataset.features)
        cut_size(dataset.rows, dimensions, alpha)  # refused before the charge when alpha m / 4d < 1
        rec = RecConcaveParameters.create(epsilon, delta, parsed.size, dataset.rows, runs=2 * dimensions)
        parameters = {"algorithm": algorithm, "epsilon": epsilon, "delta": delta, "alpha": alpha,
                      "domain": parsed.describe(), "out": out}
        (learnt, edges), charged = _count_and_release(
            dataset, cluster, ledger, note, "learn", (epsilon, rec.certificate()["proven_delta"]), parameters,
            positive_axis_counts, merge_axis_counts, parsed,
            lambda c: learn_rectangle(c, parsed, rec, alpha, noise), labelled=True)
        model = box_record(learnt, edges, list(dataset.features), parsed, rec, alpha, beta, noise.private)
    elif algorithm == "point":
        from pcqr.pipeline.mechanisms.adist import AdistParameters
        from pcqr.pipeline.mechanisms.integer_domain import merge_counts
        from pcqr.pipeline.mechanisms.learn_point import learn_point, point_record, positive_counts

        adist = AdistParameters.create(epsilon, delta)
        parameters = {"algorithm": algorithm, "epsilon": epsilon, "delta": delta, "domain": parsed.describe(),
                      "out": out}
        (learnt, released), charged = _count_and_release(
            dataset, cluster, ledger, note, "learn", (epsilon, adist.certificate()["proven_delta"]), parameters,
            positive_counts, merge_counts, parsed, lambda c: learn_point(c, parsed, adist, noise), labelled=True,
            points=True)
        model = point_record(learnt, released, list(dataset.features), dataset.rows, parsed, adist, alpha, beta,
                             noise.private)
    else:
        from pcqr.pipeline.mechanisms.learn_thresholds import (
            learn_thresholds, merge_threshold_counts, threshold_counts, threshold_record,
        )
        from pcqr.pipeline.mechanisms.rec_concave import RecConcaveParameters

        rec = RecConcaveParameters.create(epsilon, delta, parsed.size, dataset.rows)
        up = direction == "up"
        parameters = {"algorithm": algorithm, "epsilon": epsilon, "delta": delta, "alpha": alpha,
                      "domain": parsed.describe(), "direction": direction, "out": out}
        (learnt, released), charged = _count_and_release(
            dataset, cluster, ledger, note, "learn", (epsilon, rec.certificate()["proven_delta"]), parameters,
            threshold_counts, merge_threshold_counts, parsed,
            lambda c: learn_thresholds(c, parsed, rec, alpha, noise, up), labelled=True)
        model = threshold_record(learnt, released, list(dataset.features), parsed, rec, alpha, beta,
                                 noise.private)
    written = _written(out, model, charged)
    warn_large_delta(delta, dataset.rows, note)  # once it has succeeded: a refusal stays one line
    return written


def _written(out: str, model: dict[str, Any], charged: dict[str, Any]) -> dict[str, Any]:
    """Write the released model; the summary: its public record (not the hypothesis) and the charge."""
    from pcqr.pipeline.models.released import write_released

    return {**write_released(out, model), "ledger": charge_note(charged)}


def _learn_label_private(
    private: str, out: str, domain: str | None, hypothesis: str | None, first_rows: int | None,
    features_are_public: bool, features: str | Sequence[str] | None, label: str, epsilon: float, alpha: float,
    beta: float, cluster: str | None, ledger: str | None, seed: int | None, insecure_seed: bool,
    note: Callable[[str], None] | None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Fig. 13 (:mod:`.label_private`), in the certificate's order: the statement, every check on
    options and metadata (n < m, the candidates enumerable), the charge, then the workers' reads and
    the release inside it: (the model record, the charge)."""
    from pcqr.pipeline.hypotheses import CLASSES, check_enumerable, make_class
    from pcqr.pipeline.mechanisms import label_private as lp
    from pcqr.pipeline.privacy.limits import MIN_EM_EPSILON
    from pcqr.pipeline.privacy.subsamp import check_epsilon

    if not features_are_public:
        raise PcqrError(lp.REFUSAL)
    if domain is not None:
        raise PcqrError("--domain is for --algorithm point, learn-thresholds or rectangle; label-private's "
                        "candidates come from the first rows' feature values")
    if hypothesis is None:
        raise PcqrError(f"--algorithm label-private needs --hypothesis (one of {', '.join(CLASSES[:-1])})")
    check_epsilon(epsilon, lowest=MIN_EM_EPSILON)
    dataset, noise = _dataset_and_noise(private, out, features, label, alpha, beta, seed, insecure_seed)
    hclass = make_class(hypothesis, len(dataset.features))
    vc = hclass.vc_dimension()
    sizes = {"paper_first_rows": lp.paper_first_rows(vc, alpha, beta), "paper_rows": lp.paper_rows(vc, alpha, beta,
                                                                                                   epsilon)}
    n = lp.check_first_rows(
        first_rows if first_rows is not None else sizes["paper_first_rows"], dataset.rows,
        "--first-rows" if first_rows is not None else f"Fig. 13's n at --alpha {alpha:g} --beta {beta:g} (VC {vc})")
    check_enumerable(hclass, n, f"the first {n:,} rows of --private (--first-rows)")  # before the charge
    proven = lp.certificate(epsilon, n, dataset.rows)
    if proven["proven_delta"] >= 1:  # the ledger could not charge it
        raise PcqrError(f"--epsilon {epsilon:g}: at {dataset.rows - n} scored rows the sampled exponential mechanism "
                        "proves nothing (delta_EM = (1 + e^eps) TV >= 1); use a smaller --epsilon")
    statement = {"features_are_public": True, "guarantee": lp.GUARANTEE}
    parameters = {"algorithm": "label-private", "hypothesis": hypothesis, "epsilon": epsilon, "first_rows": n,
                  **statement, "out": out}
    load_cluster_config(cluster)
    with open_client(cluster, echo=note) as client:  # the enumeration and scoring, as A_SSPP's
        with provisional_charge(dataset.files, dataset.uri, "learn", epsilon, proven["proven_delta"], parameters,
                                ledger, client, dataset.features) as charged:
            _, model = lp.release_label_private(client, hypothesis, dataset, n, epsilon, beta, noise,
                                                algorithm="label-private", alpha=alpha, **statement, **sizes)
    return model, charged


def sanitize(
    private: str, out: str, *, domain: str, algorithm: str = "histogram",
    features: str | Sequence[str] | None = None, epsilon: float = 1.0, delta: float = 1e-6,
    alpha: float | None = None, beta: float | None = None, cluster: str | None = None, ledger: str | None = None,
    seed: int | None = None, insecure_seed: bool = False, note: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Release a synthetic database that answers every point query (SanPoints, the stable histogram)
    or every threshold query (SanThresholds, the hierarchical CDF) of one integer feature.

    Parameters
    ----------
    private : str
        The private dataset (Parquet file or directory); labels are not used; read by the workers only.
    out : str
        Where to write the synthetic database: one Parquet file, the feature column (int64) and
        ``weight`` (the value's share of the private rows); its schema metadata ``pcqr.sanitized``
        holds the parameters and the certificate. A point query's answer is the weight of its value;
        a threshold query 'x <= theta' (``threshold=theta,direction=down``; the paper's 'x < j' at
        theta = j - 1 for integer rows) the weights of the values up to theta summed.
    domain : str
        The feature's PUBLIC integer domain ``"LO:HI"``, never read from the rows.
    algorithm : {"san-points", "san-thresholds", "cdf", "histogram"}
        SanPoints (Beimel-Nissim-Stemmer Fig. 9, Theorem 4.6) or SanThresholds (Fig. 11, Lemma 4.8:
        ceil(77/alpha) recursive calls), the paper's; or the practitioner's: ``"cdf"``, noisy counts
        on a pruned 16-ary tree over the domain (pure eps-DP; :mod:`.hierarchical_cdf`) for threshold
        queries, and ``"histogram"``, the stability-based histogram of the values seen (OpenDP's
        ``make_laplace_threshold``; :mod:`.stable_histogram`) for point queries. The threshold
        sanitizers take rows at ceil(x) clipped to the domain, so 'x <= theta' is exact for every
        integer theta of [lo, hi - 1].
    features : str or sequence of str, optional
        The ONE feature column (default: the dataset's only column).
    epsilon, delta : float
        Privacy (``"cdf"`` is pure: it proves delta 0 and ignores ``delta``). A delta of 0.01 or more is
        refused; one at or above 1/n of the rows is warned of, as :func:`learn_without_public_data` does.
    alpha, beta : float, optional
        Every query of the class within alpha with probability 1 - beta (default 0.1 and 0.05;
        SanThresholds: 1 - 3 c beta, Claim 4.11). Fewer rows than certified are refused, before
        anything is read, with the least number that is; so is an alpha whose mechanisms are beyond
        the exact composition (with the smallest alpha that fits). Not for ``"cdf"``, whose error
        is reported (``threshold_noise_sd``) rather than set.
    cluster, ledger, seed, insecure_seed, note
        As for :func:`learn_without_public_data`.

    Returns
    -------
    dict
        The summary: ``epsilon``, ``proven_delta`` and its terms, ``released_points``, ``ledger``, and
        each algorithm's own figures (``rows_certified``, ``paper_rows``, ``rounds``, ``calls``,
        ``levels``, ``threshold``...).
    """
    from pcqr.pipeline.models.synthetic import WEIGHT_COLUMN, write_synthetic

    ledger_setting(ledger)  # an empty ledger setting: refused before anything is read
    check_delta(delta)  # 0.01 or more certifies nothing (cdf's delta is unused: a mistake all the same)
    if algorithm not in SANITIZERS:
        raise PcqrError(f"--algorithm must be one of {', '.join(SANITIZERS)}, got {algorithm!r}")
    if algorithm not in _ALPHA_SANITIZERS:
        for option, value in (("--alpha", alpha), ("--beta", beta)):
            if value is not None:
                raise PcqrError(f"{option} is not used by --algorithm {algorithm}: its error is not set in advance "
                                "(the summary reports threshold_noise_sd, the noise in one answer)")
    else:
        alpha, beta = 0.1 if alpha is None else alpha, 0.05 if beta is None else beta
    parsed, dataset, noise = _checked_inputs(private, out, algorithm, domain, features, None, alpha, beta, seed,
                                             insecure_seed)
    feature = dataset.features[0]
    if feature == WEIGHT_COLUMN:
        raise PcqrError(f"--features {feature}: the synthetic database's own column is called {WEIGHT_COLUMN!r}; "
                        "rename the feature")
    plan = _sanitizer(algorithm, epsilon, delta, alpha, beta, dataset.rows, parsed, noise)
    proven = plan["params"].certificate()
    guarantee = {"alpha": alpha, "beta": beta} if algorithm in _ALPHA_SANITIZERS else {}
    parameters = {"algorithm": algorithm, "epsilon": epsilon, "delta": delta, **guarantee,
                  "domain": parsed.describe(), "out": out}
    released, charged = _count_and_release(
        dataset, cluster, ledger, note, "sanitize", (epsilon, proven["proven_delta"]), parameters, plan["count"],
        plan["merge"], parsed, plan["release"], labelled=False, points=plan["class"] == "point")
    summary: dict[str, Any] = {
        "out": out, "algorithm": algorithm, "class": plan["class"], "feature": feature, "mechanism": plan["mechanism"],
        "domain": parsed.describe(), "domain_size": parsed.size, "private_rows": dataset.rows,
        "released_points": len(released), "epsilon": epsilon, "delta": delta, **guarantee,
        **proven, **plan["params"].to_dict(), **plan["figures"], "answer": plan["answer"],
        "privacy": "private" if noise.private else "NOT PRIVATE (seeded noise)",
    }
    write_synthetic(out, feature, [v for v, _ in released], [w for _, w in released], noise.private,
                    **{k: v for k, v in summary.items() if k not in ("out", "feature", "privacy")})
    if proven["proven_delta"] > 0:  # cdf is pure eps-DP: no delta spent, none to warn of
        warn_large_delta(delta, dataset.rows, note)
    return {**summary, "ledger": charge_note(charged)}


_POINT_ANSWER = "a point query's answer is the weight of its value (0 if absent): a share of the private rows"
_THRESHOLD_ANSWER = ("a threshold query 'x <= theta' (release-answer's threshold=theta,direction=down; for integer "
                     "rows the paper's c_j(x) = [x < j] at theta = j - 1) is the weights of the values <= theta "
                     "summed, 'x > theta' (direction=up) those above; rows are taken at ceil(x) clipped to the domain")


def _sanitizer(algorithm: str, epsilon: float, delta: float, alpha: float | None, beta: float | None, rows: int,
               domain: Domain, noise: NoiseSource) -> dict[str, Any]:
    """The sanitizer's certified parameters (refused in one line otherwise: nothing is read yet),
    the workers' count and merge (merge None: the release works on the cluster, given the client and
    the parts' counts), the release and the summary's own lines."""
    from pcqr.pipeline.mechanisms.integer_domain import ceiling_counts, merge_counts, value_counts

    if algorithm == "cdf":
        from pcqr.pipeline.mechanisms import hierarchical_cdf as tree

        check_epsilon_delta(epsilon, delta)  # delta is not spent, but a request outside (0, 1) is a mistake
        cdf = tree.CdfParameters.create(epsilon, rows, domain)
        return {"params": cdf, "count": tree.offset_counts, "merge": None, "class": "threshold",
                "release": lambda client, parts: tree.synthetic_cdf(
                    tree.hierarchical_cdf(tree.cluster_counter(client, parts, cdf), cdf, noise)),
                "mechanism": "noisy counts on a pruned 16-ary tree over the domain, consistent top-down (Hay et "
                             "al. 2010), pure eps-DP (OpenDP's Laplace mechanism a level)",
                "figures": {"threshold_noise_sd_share": cdf.noise_sd() / rows}, "answer": _THRESHOLD_ANSWER}
    assert alpha is not None and beta is not None  # resolved by sanitize() for every other algorithm
    if algorithm == "histogram":
        from functools import partial

        from pcqr.pipeline.mechanisms import stable_histogram as hist

        histogram = hist.HistogramParameters.create(epsilon, delta, alpha, beta, rows)
        shards = hist.shard_number(rows)
        return {"params": histogram, "count": partial(hist.shard_counts, shards=shards), "merge": None,
                "class": "point",
                "release": lambda client, parts: hist.release_on_cluster(client, parts, histogram, noise, shards),
                "mechanism": "the stability-based histogram of the values seen (the law of OpenDP's make_count_by "
                             "and make_laplace_threshold; delta certified by pcqr, not OpenDP's map: issue #2922)",
                "figures": {"rows_certified": histogram.least_rows()}, "answer": _POINT_ANSWER}
    if algorithm == "san-points":
        from pcqr.pipeline.mechanisms.san_points import SanPointsParameters, san_points
        from pcqr.pipeline.mechanisms.san_points import paper_rows as points_paper_rows

        points = SanPointsParameters.create(epsilon, delta, alpha, beta, rows)
        return {"params": points, "count": value_counts, "merge": merge_counts, "class": "point",
                "release": lambda c: san_points(c[0], c[1], points, noise),
                "mechanism": "SanPoints (Beimel-Nissim-Stemmer, Fig. 9, Theorem 4.6) with KOV's composition",
                "figures": {"rows_certified": SanPointsParameters.least_rows(epsilon, delta, alpha, beta),
                            "rows_for_utility": points.utility_rows(),
                            "paper_rows": points_paper_rows(epsilon, delta, alpha, beta)},
                "answer": _POINT_ANSWER}
    from pcqr.pipeline.mechanisms.san_thresholds import SanThresholdsParameters, san_thresholds
    from pcqr.pipeline.mechanisms.san_thresholds import paper_rows as thresholds_paper_rows

    thresholds = SanThresholdsParameters.create(epsilon, delta, alpha, beta, rows, domain)
    return {"params": thresholds, "count": ceiling_counts, "merge": merge_counts, "class": "threshold",
            "release": lambda c: san_thresholds(c[0], c[1], thresholds, noise),
            "mechanism": "SanThresholds (Beimel-Nissim-Stemmer, Fig. 11, Lemma 4.8) with KOV's composition",
            "figures": {"rows_certified": SanThresholdsParameters.least_rows(epsilon, delta, alpha, beta, domain),
                        "paper_rows": thresholds_paper_rows(epsilon, delta, alpha, beta, domain)},
            "answer": _THRESHOLD_ANSWER}


def _dataset_and_noise(private: str, out: str, features: str | Sequence[str] | None, label: str | None,
                       alpha: float | None, beta: float | None, seed: int | None,
                       insecure_seed: bool) -> tuple[Dataset, NoiseSource]:
    """The checks every job here makes before any private row (--alpha, --beta when used, --out, the
    seed, the dataset's metadata and columns): (the dataset, the noise source)."""
    for value, option in ((alpha, "--alpha"), (beta, "--beta")):
        if value is not None:
            check_fraction(value, option)
    check_outputs([Output("--out", out)], [("--private", private)], overwrite=True)  # existing: the command said
    noise = noise_source(seed, insecure_seed)
    columns = split_features(features) if isinstance(features, str) or features is None else list(features)
    return open_dataset(private, "private", label=label, features=columns), noise


def _checked_inputs(private: str, out: str, algorithm: str, domain: str | None,
                    features: str | Sequence[str] | None, label: str | None, alpha: float | None, beta: float | None,
                    seed: int | None, insecure_seed: bool, one_feature: bool = True) -> tuple[Domain, Dataset, NoiseSource]:
    """Every check that needs no private row: (the public domain, the dataset (metadata), the noise)."""
    if domain is None:
        raise PcqrError(f"--domain LO:HI is required by --algorithm {algorithm} (the feature's public integer "
                        "domain)")
    parsed = Domain.parse(domain)
    dataset, noise = _dataset_and_noise(private, out, features, label, alpha, beta, seed, insecure_seed)
    if one_feature and len(dataset.features) != 1:
        raise PcqrError(f"--private {dataset.uri}: --algorithm {algorithm} works on ONE feature column, found "
                        f"{len(dataset.features)} ({', '.join(dataset.features[:4])}...); pass --features COLUMN")
    return parsed, dataset, noise


def _count_and_release(dataset: Dataset, cluster: str | None, ledger: str | None,
                       note: Callable[[str], None] | None, job: str, epsilon_delta: tuple[float, float],
                       parameters: dict[str, Any], count: Any, merge: Any, domain: Domain, release: Any,
                       labelled: bool, points: bool = False) -> tuple[Any, dict[str, Any]]:
    """The charge, then the workers' ``count`` of their parts, the driver's ``merge`` and ``release``
    (the mechanism on the merged counts; with ``merge`` None, ``release(client, the parts' count
    futures)``, for a mechanism that counts in rounds or by shards), all inside the charge: (what
    ``release`` returned, the charge). ``points``: ``count`` counts integer points only, so a feature whose type may hold
    other values has them checked on the workers first, before the charge."""
    from pcqr.pipeline.data.arrow_types import integer_by_type
    from pcqr.pipeline.mechanisms.integer_domain import check_integer_values
    from pcqr.pipeline.models.subsample import PART_ROWS, load_part

    load_cluster_config(cluster)
    with open_client(cluster, echo=note, array_work=True) as client:  # reading and counting: numpy only
        feature = dataset.features[0]
        if points and not integer_by_type(dataset.schema.field(feature).type):
            client.gather(client.map(check_integer_values, dataset.parts(PART_ROWS), feature=feature, pure=False))
        with provisional_charge(dataset.files, dataset.uri, job, *epsilon_delta, parameters, ledger, client,
                                dataset.features) as charged:
            parts: list[Any]
            if labelled:
                parts = [client.submit(load_part, p, dataset.features, dataset.label, pure=False)
                         for p in dataset.parts(PART_ROWS)]
            else:
                parts = [client.submit(load_features, p, dataset.features, pure=False)
                         for p in dataset.parts(PART_ROWS)]
            counted = [client.submit(count, part, domain, pure=False) for part in parts]
            if merge is None:  # the mechanism works on the cluster: the client and the parts' counts
                released = release(client, counted)
            else:
                released = release(client.submit(merge, *counted, pure=False).result())
    return released, charged
