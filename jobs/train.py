"""``pcqr train``: split the private data into k subsamples and train one model on each.

Creates a session in the private state directory; ``pcqr answer --state DIR``
then answers queries with it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import click

from jobs.common import (
    cluster_option,
    emit_summary,
    json_option,
    note,
    privacy_options,
    progress,
    split_features,
)
from pipeline.cluster import load_cluster_config, open_client
from pipeline.data import Dataset, open_dataset
from pipeline.errors import PcqrError
from pipeline.learners import LearnerSpec, parse_learner_params
from pipeline.noise import NoiseSource, noise_source
from pipeline.privacy import SubSampParameters
from pipeline.sparse_vector import SparseVector
from pipeline.state import Session, has_session
from pipeline.subsample import check_subsamples, train_models
from pipeline.votes import Ensemble


@dataclass
class TrainingPlan:
    """Everything checked before any private row is read."""

    params: SubSampParameters
    learner: LearnerSpec
    private: Dataset
    noise: NoiseSource
    seed: int | None


def plan_training(options: dict[str, Any]) -> TrainingPlan:
    """Validate parameters, learner and the private dataset's metadata; read no row."""
    if options["state"] and has_session(options["state"]):
        raise PcqrError(f"--state {options['state']} already holds a session; use a new directory")
    noise = noise_source(options["seed"], options["insecure_seed"])
    params = SubSampParameters.paper(
        options["epsilon"], options["delta"], options["cutoff"], options["queries_max"],
        options["beta"], options["subsamples"], options["threshold"],
    )
    learner = LearnerSpec(options["learner"], parse_learner_params(options["learner_param"]))
    learner.build()  # fails now, not on a worker, if the learner is unusable
    private = open_dataset(
        options["private"], "private", label=options["label"], features=split_features(options["features"])
    )
    check_subsamples(private.rows, params.subsamples, learner.min_rows)
    return TrainingPlan(params, learner, private, noise, options["seed"])


def train_session(client: Any, plan: TrainingPlan) -> tuple[Session, Ensemble]:
    """Train the k models on the cluster; returns the new session (not yet saved) and its models."""
    k = plan.params.subsamples
    with progress(k, "training models") as bar:
        ensemble = train_models(
            client, plan.private, k, plan.learner, plan.noise.generator_seed(), on_progress=bar.update
        )
    coordinator = SparseVector(plan.params, plan.noise)  # draws the first noisy threshold
    session = Session(
        params=plan.params,
        learner={"name": plan.learner.name, "params": plan.learner.params},
        features=list(plan.private.features),
        private_uri=plan.private.uri,
        private_rows=plan.private.rows,
        seed=plan.seed,
        sparse_vector=coordinator.state,
        noise_state=getattr(plan.noise, "state", lambda: None)(),
    )
    return session, ensemble


def session_summary(session: Session) -> dict[str, Any]:
    """The parameters every summary reports."""
    p = session.params
    eps, delta = p.guarantee()
    return {
        "epsilon": p.epsilon,
        "delta": p.delta,
        "cutoff": p.cutoff,
        "queries_max": p.queries_max,
        "beta": p.beta,
        "lambda": p.lam,
        "subsamples": p.subsamples,
        "subsamples_source": p.subsamples_source,
        "threshold": p.threshold,
        "threshold_source": p.threshold_source,
        "proven_epsilon": eps,
        "proven_delta": delta,
        "private_rows": session.private_rows,
        "learner": session.learner["name"],
        "privacy": "private" if session.private else "NOT PRIVATE (seeded noise)",
    }


@click.command("train")
@click.option("--private", required=True, help="Private labelled dataset (Parquet file or directory, path or URI).")
@click.option("--state", required=True, type=click.Path(file_okay=False), help="New private state directory for the session.")
@privacy_options
@cluster_option
@json_option
def command(**options: Any) -> None:
    """Train the k subsample models of a new private session (A_SubSamp steps 1-5)."""
    from pipeline.state import save_models, save_session

    plan = plan_training(options)
    load_cluster_config(options["cluster"])
    with open_client(options["cluster"], echo=note) as client:
        session, ensemble = train_session(client, plan)
    save_models(options["state"], ensemble)
    save_session(options["state"], session)
    summary = {"state": options["state"], "models": ensemble.size, **session_summary(session)}
    emit_summary(summary, options["as_json"])
