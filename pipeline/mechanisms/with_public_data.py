"""The jobs that use public data beside the private rows: A_SSPP (:func:`learn_with_public_data`;
``pcqr learn --algorithm sspp``, Alon-Bassily-Moran 2019) and A_PAP (:func:`release_with_public_data`;
``pcqr release``, Bassily et al. 2020). Beimel-Nissim-Stemmer's jobs without public data are
:mod:`.without_public_data`'s.

Each job runs in the certificate's order: every check that needs no private row (the options, the
output path, both datasets' metadata, the public points and what they make enumerable, the
mechanism's certificate, refused when it proves nothing) first; then, on the cluster, the misuse
guard on the public input (uncharged) and the ledger's charge of the proven (eps, delta) before any
private row is read; the mechanism inside the charge (a failure refunds it); then the released file,
written atomically. The driver reads the public points only; the private rows stay on the workers.
"""
from __future__ import annotations

from contextlib import ExitStack, nullcontext
from types import SimpleNamespace
from typing import Any, Callable, ContextManager

from pcqr.pipeline import __version__
from pcqr.pipeline.budget.charging import provisional_charge
from pcqr.pipeline.budget.ledger import charge_note
from pcqr.pipeline.data.atomic import check_writable_file
from pcqr.pipeline.data.cluster import load_cluster_config, open_client
from pcqr.pipeline.data.datasets import load_features, open_dataset, open_matching, read_public_features, split_features
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.mechanisms.pmw import PMWParameters
from pcqr.pipeline.privacy.limits import MIN_EM_EPSILON, MIN_PMW_ALPHA, MIN_PROBABILITY, check_delta, warn_large_delta
from pcqr.pipeline.privacy.subsamp import check_epsilon, check_epsilon_delta, check_fraction

Note = Callable[[str], None]
Progress = Callable[[int, str], ContextManager[Any]]


def _no_bar(length: int, label: str) -> ContextManager[Any]:
    """No progress shown: a bar whose ``update`` does nothing."""
    return nullcontext(SimpleNamespace(update=lambda steps: None))


def learn_with_public_data(
    private: str, public: str, out: str, *, hypothesis: str, features: str | None = None, label: str = "label",
    epsilon: float = 1.0, beta: float = 0.05, allow_private_overlap: bool = False, cluster: str | None = None,
    ledger: str | None = None, seed: int | None = None, insecure_seed: bool = False, note: Note | None = None,
) -> dict[str, Any]:
    """h_priv = A_SSPP(private, public), written as a released model file (JSON) at ``out``:
    the cover from the ``public`` points, the exponential mechanism on the ``private`` labelled rows,
    (eps, delta_EM)-DP (:mod:`.sspp`). Returns the summary: the model's public record and the charge."""
    from pcqr.pipeline.budget.overlap import guard_public_inputs
    from pcqr.pipeline.hypotheses import check_enumerable, make_class
    from pcqr.pipeline.mechanisms.sspp import certificate, release_classifier
    from pcqr.pipeline.models.released import write_released
    from pcqr.pipeline.privacy.noise import noise_source

    check_epsilon(epsilon, lowest=MIN_EM_EPSILON)  # pcqr.pipeline.privacy.limits
    check_fraction(beta, "--beta")
    check_writable_file(out, "--out")  # before the charge, not after the release
    noise = noise_source(seed, insecure_seed)
    dataset = open_dataset(private, "private", label=label, features=split_features(features))
    public_data = open_matching(public, "public", list(dataset.features), "the private features")
    hclass = make_class(hypothesis, len(dataset.features))  # refuses a bad class before the cluster starts
    points = read_public_features(public_data)
    check_enumerable(hclass, points.shape[0], f"--public {public_data.uri}")  # before the charge
    if certificate(epsilon, dataset.rows)["proven_delta"] >= 1:  # the ledger could not charge it
        raise PcqrError(f"--epsilon {epsilon:g}: at n = {dataset.rows} rows A_SSPP's sampled exponential "
                        "mechanism proves nothing (delta_EM = (1 + e^eps) TV(n) >= 1); use a smaller --epsilon")
    load_cluster_config(cluster)
    allowed: dict[str, Any] = {"allow_private_overlap": True} if allow_private_overlap else {}
    with open_client(cluster, echo=note) as client:
        guard_public_inputs([("--public", public_data)], bool(allowed), ledger, dataset, client, note)  # uncharged
        proven = certificate(epsilon, dataset.rows)
        with provisional_charge(dataset.files, dataset.uri, "learn", epsilon, proven["proven_delta"],
                                {"hypothesis": hypothesis, "epsilon": epsilon, "public": public_data.uri,
                                 "out": out, **allowed}, ledger, client, dataset.features) as charged:
            _, model = release_classifier(client, hypothesis, dataset, points, epsilon, beta, noise, **allowed)
    return {**write_released(out, model), "ledger": charge_note(charged)}


def release_with_public_data(
    private: str, public: str, out: str, *, hypothesis: str, features: str | None = None, epsilon: float = 1.0,
    delta: float = 1e-6, alpha: float = 0.1, beta: float = 0.05, pmw_constants: str = "dwork-roth",
    allow_private_overlap: bool = False, cluster: str | None = None, ledger: str | None = None,
    seed: int | None = None, insecure_seed: bool = False, note: Note | None = None, progress: Progress | None = None,
) -> dict[str, Any]:
    """A_PAP's answers to every counting query of the ``hypothesis`` class, written as an answer
    table (:mod:`pcqr.pipeline.models.answer_table`) at ``out``: the cover and the representative
    domain from the ``public`` points, private multiplicative weights (Dwork-Roth 4.2, at alpha/2 and
    beta/2; ``pmw_constants`` "dwork-roth" or "calibrated") on the private rows mapped to
    representatives. (eps, delta)-DP (:mod:`.pap`). ``progress(length, label)`` opens a bar over
    PMW's queries. Returns the summary: the certificate, PMW's figures, the error bound, the charge."""
    from pcqr.pipeline.budget.overlap import guard_public_inputs
    from pcqr.pipeline.hypotheses import check_enumerable, make_class
    from pcqr.pipeline.hypotheses.representatives import representative_domain
    from pcqr.pipeline.mechanisms.pap import release_queries
    from pcqr.pipeline.mechanisms.sspp import cover_radius
    from pcqr.pipeline.models.answer_table import answer_table, public_fingerprint, write_answer_table
    from pcqr.pipeline.privacy.noise import noise_source

    check_delta(delta)  # 0.01 or more certifies nothing: refused before anything is read
    check_epsilon_delta(epsilon, delta)
    check_fraction(alpha, "--alpha", MIN_PMW_ALPHA)  # PMW runs at alpha/2 and beta/2 (pcqr.pipeline.privacy.limits)
    check_fraction(beta, "--beta", 2 * MIN_PROBABILITY)
    check_writable_file(out, "--out")  # before the charge, not after the release
    noise = noise_source(seed, insecure_seed)
    public_data = open_dataset(public, "public", features=split_features(features))
    columns = list(public_data.features)
    dataset = open_matching(private, "private", columns, "the public features")
    hclass = make_class(hypothesis, len(columns))
    points = read_public_features(public_data)
    check_enumerable(hclass, points.shape[0], f"--public {public_data.uri}")  # before the charge
    domain = representative_domain(hclass, points)  # public only; refuses unsupported classes
    # PMW's certificate depends on (eps, delta, alpha, |X~|) only, not on the cover: refused before the charge
    PMWParameters.dwork_roth(epsilon, delta, alpha / 2, beta / 2, max(dataset.rows, 1), domain.size(), 1)
    load_cluster_config(cluster)
    allowed: dict[str, Any] = {"allow_private_overlap": True} if allow_private_overlap else {}
    parameters = {"hypothesis": hypothesis, "epsilon": epsilon, "delta": delta, "alpha": alpha, "beta": beta,
                  "out": out, "public": public_data.uri, "features": columns, **allowed}
    with open_client(cluster, echo=note) as client:
        guard_public_inputs([("--public", public_data)], bool(allowed), ledger, dataset, client, note)  # uncharged
        charge = provisional_charge(dataset.files, dataset.uri, "release", epsilon, delta, parameters, ledger, client,
                                    dataset.features)
        opener: Progress = progress or _no_bar
        opened: list[Any] = []
        with charge as charged, ExitStack() as bars:
            parts = [client.submit(load_features, p, columns, pure=False) for p in dataset.parts(500_000)]

            def plan(params: PMWParameters) -> None:  # PMW's bar, opened once its number of queries is known
                opened.append(bars.enter_context(opener(params.queries, "private multiplicative weights")))

            release = release_queries(client, hclass, points, parts, dataset.rows, epsilon, delta, alpha, beta, noise,
                                      on_progress=lambda steps: opened[0].update(steps), on_plan=plan,
                                      constants=pmw_constants)
    pmw = release.pmw
    proven_epsilon, proven_delta = pmw.guarantee()
    accuracy = pmw.accuracy()
    radius = cover_radius(release.public_points, hclass.vc_dimension(), beta / 2)
    summary: dict[str, Any] = {
        "out": out, "class": hypothesis, "features": columns, "queries": pmw.queries,
        "public_points": release.public_points, "representatives": domain.size(),
        "private_rows": dataset.rows, "epsilon": epsilon, "delta": delta,
        "proven_epsilon": proven_epsilon, "proven_delta": proven_delta, "accountant": pmw.accountant,
        "alpha": alpha, "beta": beta,
        "pmw_updates": release.result.updates, "pmw_updates_max": pmw.updates, "pmw_halted": release.result.halted,
        "pmw_constants": pmw.constants, "pmw_threshold": pmw.threshold, "pmw_error_bound": accuracy["error_bound"],
        "pmw_rows_needed": accuracy["rows_needed"], "cover_radius_bound": radius,
        "error_bound": None if accuracy["error_bound"] is None else accuracy["error_bound"] + radius,
        "privacy": "private" if noise.private else "NOT PRIVATE (seeded noise)",
        **allowed,
        "ledger": charge_note(charged),
    }
    if accuracy["error_bound"] is None and note is not None:
        note(f"at n = {dataset.rows} Theorem 4.15 of Dwork-Roth gives no accuracy guarantee for PMW "
             f"(it needs n >= {accuracy['rows_needed']} at alpha/2 = {alpha / 2}); the answers are still private")
    metadata = {
        "version": __version__, "mechanism": "A_PAP (Bassily et al. 2020, Algorithm 3) "
        "with private multiplicative weights (Dwork-Roth 2014, Section 4.2)",
        "class": hypothesis, "class_features": [columns[i] for i in domain.features], "features": columns,
        "public": public_data.uri, "public_fingerprint": public_fingerprint(domain), "pmw": pmw.to_dict(),
        "answer": "fraction of private rows the query labels 1 (E[h] in the +-1 convention is 2 answer - 1)",
        **{k: v for k, v in summary.items() if k not in ("out", "features", "class", "ledger")},
    }
    table = answer_table(release.params, columns, release.result.answers, release.result.updated, release.keys)
    write_answer_table(out, table, metadata)
    warn_large_delta(delta, dataset.rows, note)  # once it has succeeded: a refusal stays one line
    return summary
