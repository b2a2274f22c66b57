"""Planning a new session: every parameter checked against the certificate before any row is read,
then the ledger charge, then the k models trained (A_SubSamp steps 1-5; A_AgPrivCl's relabelling).

``plan_training`` reads only the private dataset's metadata: the session's privacy parameters come
from :func:`pcqr.pipeline.privacy.session_plan.plan_session` (one function per mode), the learner and
the work bounds are checked here; ``session_charge`` charges the whole
(eps, delta) before the first private row is read; ``train_session`` trains on the cluster and
draws the coordinator's key and T thresholds. ``session_summary`` is the public certificate every
summary reports. The command line (pcqr.jobs.train, pcqr.jobs.answer) and pcqr.Session call these.
"""
from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ContextManager

import numpy as np

from pcqr.pipeline.data.cluster import Connect, learner_modules
from pcqr.pipeline.data.datasets import Dataset, open_dataset, split_features
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.gates.public_guess import GuessSpec
from pcqr.pipeline.gates.registry import new_gate
from pcqr.pipeline.mechanisms.relabel import relabel_and_resample
from pcqr.pipeline.mechanisms.universal import private_fingerprint
from pcqr.pipeline.models.store import check_storable
from pcqr.pipeline.models.subsample import (
    PART_ROWS, check_subsamples, load_part, subsample_sizes, train_models, train_models_on,
)
from pcqr.pipeline.models.votes import Ensemble
from pcqr.pipeline.options import AUTO, AUTO_TREE, CROSS_VALIDATED, TrainingOptions
from pcqr.pipeline.privacy.agnostic_parameters import AgnosticParameters
from pcqr.pipeline.privacy.limits import check_delta, check_training_size, warn_large_delta
from pcqr.pipeline.privacy.noise import NoiseSource, noise_source
from pcqr.pipeline.privacy.session_plan import SessionPlan, check_mode_options, plan_session
from pcqr.pipeline.privacy.subsamp import SubSampParameters
from pcqr.pipeline.privacy.universal_parameters import UniversalParameters
from pcqr.pipeline.report.contents import StateSummary
from pcqr.pipeline.session.book import NewSession, new_session
from pcqr.pipeline.session.progress import LOGGING, Reporter
from pcqr.pipeline.session.state import SessionState, has_session
from pcqr.pipeline.spelling import speaking_python, spelled, spelled_with

if TYPE_CHECKING:  # imported where used: scikit-learn only when a session is trained
    from pcqr.pipeline.models.learners import LearnerSpec


@dataclass(frozen=True)
class TrainingPlan:
    """Everything checked before any private row is read: the session's privacy plan, and the work
    that trains its models (the private dataset's metadata, the learner, the noise source)."""

    privacy: SessionPlan
    learner: LearnerSpec
    private: Dataset
    noise: NoiseSource
    seed: int | None
    hypothesis_class: Any = None  # agnostic and universal mode: the class that relabels and learns
    guess: GuessSpec | None = None  # the guess gate's public guess
    student: dict[str, Any] | None = None  # an auto session's student learner: 'cross-validated', unresolved
    class_names: tuple[str, ...] | None = None  # --classes low,mid,high: the labels' names, in class order

    @property
    def params(self) -> SubSampParameters:
        return self.privacy.params

    def learner_record(self) -> dict[str, Any]:
        """The session's learner as session.json holds it (the after-halt student's under ``student``)."""
        return {"name": self.learner.name, "params": self.learner.params,
                "hypothesis": self.hypothesis_class.name if self.hypothesis_class is not None else None,
                **({"student": self.student} if self.student is not None else {})}

    @property
    def agnostic(self) -> AgnosticParameters | None:
        return self.privacy.agnostic

    @property
    def universal(self) -> UniversalParameters | None:
        return self.privacy.universal


def plan_training(options: TrainingOptions, reporter: Reporter = LOGGING) -> TrainingPlan:
    """The session's plan (:func:`pcqr.pipeline.privacy.session_plan.plan_session`), its learner and
    the private dataset's metadata, all checked; no row read."""
    check_delta(options.delta)  # a delta that certifies nothing: refused before anything is read
    if options.state and has_session(options.state):
        raise PcqrError(f"{spelled_with('--state', options.state)} already holds a session; use a new directory")
    if options.private is None:
        raise PcqrError(f"{spelled_with('--state', options.state)}: a new session needs {spelled('--private')} (the "
                        "private labelled dataset)")
    noise = noise_source(options.seed, options.insecure_seed)
    with reporter.phase("reading the private dataset's metadata"):
        private = open_dataset(
            options.private, "private", label=options.label, features=split_features(options.features),
            named_labels=options.class_names is not None,
        )
    check_mode_options(options)
    hypothesis_class = None if options.mode == "realizable" else _hypothesis_class(options, private)
    plan = plan_session(options, private.rows, hypothesis_class and hypothesis_class.vc_dimension())
    if hypothesis_class is not None:
        return _warned(_agnostic_training(plan, private, noise, options.seed, hypothesis_class), reporter)
    check_training_size(plan.params.subsamples, len(private.parts(PART_ROWS)),
                        "--subsamples" if options.subsamples is not None else "Algorithm 5's")
    from pcqr.pipeline.models.learners import LearnerSpec, parse_learner_params, resolve_auto

    given = parse_learner_params(options.learner_param)  # 'auto': the rule's tree at n / k rows a model (public)
    learner = LearnerSpec(*resolve_auto(options.learner, given, private.rows // plan.params.subsamples),
                          learner_modules(options.cluster))
    # an auto session's after-halt student: the learner cross-validation on its released answers picks
    student = {"name": CROSS_VALIDATED, "params": given} if options.learner == AUTO else None
    guess = None if plan.params.gate != "guess" else GuessSpec.parse(
        options.guess or "student", options.learner, given, private.features)
    check_subsamples(private.rows, plan.params.subsamples, learner.min_rows)
    classes = plan.params.classes
    trial = learner.check(len(private.features), private.rows // plan.params.subsamples, classes)  # uncharged
    check_storable(trial, len(private.features), learner.modules, classes)  # its models can be saved and loaded
    return _warned(TrainingPlan(plan, learner, private, noise, options.seed, guess=guess, student=student,
                                class_names=options.class_names), reporter)


#: The share of one-class models (balanced labels: a lower bound) from which the few-rows warning is given.
ONE_CLASS_SHARE = 0.25


class OneClassWarning(UserWarning):
    """The models get so few private rows that at least a quarter of them see one class only
    (:func:`few_rows_warning`): the answers may be little better than the majority class. The Python
    API issues it through :mod:`warnings`; ``pcqr train`` writes it on stderr."""


def few_rows_warning(rows: int, subsamples: int) -> str | None:
    """The plain-words warning for models fed too few rows to learn (public: n and k), else None.

    A subsample of r rows holds one class only with probability p^r + (1 - p)^r >= 2^(1 - r) (p the
    share of 1s), and its model then answers that class whatever the query (fit_subsample's
    ConstantModel). The warning is given when that bound, averaged over the k subsamples' sizes
    (pcqr.pipeline.models.subsample.subsample_sizes), is at least ONE_CLASS_SHARE, and states it
    rounded down. Measured with PrivateClassifier's defaults at epsilon 8 on scikit-learn's
    breast-cancer data (398 training rows, k = 199: 2 rows a model), three splits scored 0.64-0.77
    against a majority class of 0.63; k = 50 (7 rows a model) scored 0.77-0.84."""
    sizes = subsample_sizes(rows, max(subsamples, 1))
    share = float(np.mean(2.0 ** (1 - np.maximum(sizes, 1))))
    if share < ONE_CLASS_SHARE:
        return None
    low, high = int(sizes.min()), int(sizes.max())
    each = f"{low}" if low == high else f"{low}-{high}"
    return (f"{rows:,} private rows give each of the k = {subsamples:,} models {each} row{'' if high == 1 else 's'} "
            f"to learn from: on average at least {math.floor(100 * share)}% of the models see one class only (more "
            "when the labels are unbalanced) and answer it whatever the query, so the answers may be little better "
            "than answering the majority class; more rows, a larger epsilon, or fewer models "
            f"({spelled('--subsamples')}: each fed more rows, the votes noisier) give more useful answers")


def _warned(plan: TrainingPlan, reporter: Reporter) -> TrainingPlan:
    """Say so, in one line, when even a unanimous query would mostly abstain (issue 10), or when the
    models get too few rows to learn anything (:func:`few_rows_warning`: a :class:`OneClassWarning`
    for a caller of the Python API, which :mod:`warnings` filters can silence)."""
    useless, one_class = plan.privacy.usefulness_warning(), few_rows_warning(plan.private.rows, plan.params.subsamples)
    if useless is not None:
        reporter.note(f"warning: {useless}")
    if one_class is not None and speaking_python():
        warnings.warn(one_class, OneClassWarning, stacklevel=2)
    elif one_class is not None:
        reporter.note(f"warning: {one_class}")
    return plan


def _hypothesis_class(options: TrainingOptions, private: Dataset) -> Any:
    """The class agnostic and universal mode relabel with and learn (its VC dimension plans m_o)."""
    from pcqr.pipeline.hypotheses import make_class

    assert options.hypothesis is not None  # check_mode_options
    return make_class(options.hypothesis, len(private.features))


def _agnostic_training(plan: SessionPlan, private: Dataset, noise: NoiseSource, seed: int | None,
                       hypothesis_class: Any) -> TrainingPlan:
    """A_AgPrivCl's work: its class enumerable on S' (and on A_SSPP's public sample); B is ERM over
    the same class: thresholds and stumps use the built-in exact ERM learners (same class, both
    directions) so votes are counted by binary search, not model by model."""
    from pcqr.pipeline.hypotheses import ThresholdClass, check_enumerable
    from pcqr.pipeline.models.learners import LearnerSpec

    assert plan.agnostic is not None
    check_enumerable(hypothesis_class, plan.agnostic.sample_rows, "A_Relabel's sample S' of n' = eps n / 56 rows")
    if plan.universal is not None and plan.universal.switches:
        check_enumerable(hypothesis_class, plan.universal.public_queries, "A_SSPP's public sample of m_o queries")
    if hypothesis_class.name == "stump":
        learner = LearnerSpec("stump")
    elif isinstance(hypothesis_class, ThresholdClass):
        learner = LearnerSpec("threshold", {"feature": hypothesis_class.feature})
    else:
        learner = LearnerSpec("pcqr.pipeline.hypotheses.ERMClassifier", {"hypothesis": hypothesis_class.name})
    return TrainingPlan(plan, learner, private, noise, seed, hypothesis_class)


def session_charge(client: Any, plan: TrainingPlan, options: TrainingOptions, job: str,
                   reporter: Reporter = LOGGING) -> ContextManager[NewSession]:
    """The ledger charge of a new session: its whole (eps, delta), before any private row is read
    (pcqr.pipeline.budget.ledger). A session is charged once, however many answer calls follow; universal
    mode's A_SSPP is inside the same (eps, delta). The block registers the session with the charge
    (``.register(session)``: pcqr.pipeline.session.book); if it fails, the charge is refunded unless a
    batch was released, and the error says which."""
    from pcqr.pipeline.budget.charging import charge_private_use

    label = options.name or plan.private.uri  # the Python API's name for rows in memory (PrivateClassifier)
    with reporter.phase("charging the ledger (the private dataset's fingerprint)"):
        charged = charge_private_use(plan.private.files, label, job, options.epsilon, options.delta,
                                     {**options.public_record(), "gate": plan.params.gate}, options.ledger, client, features=plan.private.features)
    return new_session(charged, options.state, job)


def train_session(client: Any, plan: TrainingPlan, reporter: Reporter = LOGGING) -> tuple[SessionState, Ensemble]:
    """Train the k models on the cluster; returns the new session (not yet saved) and its models."""
    k = plan.params.subsamples
    relabeller = None
    # the key (and the sparse vector's T thresholds) drawn before any private row is read: A_AgPrivCl's
    # secret sample and universal mode's A_SSPP selection come from it too (privacy/keyed_draws.py)
    with reporter.phase("drawing the gate's key and thresholds"):
        coordinator = new_gate(plan.params, plan.noise)
    fingerprint = None
    if plan.universal:  # A_SSPP checks it
        with reporter.phase("fingerprinting the private dataset"):
            fingerprint = private_fingerprint(client, plan.private)
    if plan.agnostic is not None:
        relabeller, resampled = _relabel(client, plan, coordinator.state.key, reporter)
        sources, rows = [resampled], [plan.agnostic.sample_rows]
    with reporter.phase("training models", total=k, unit="models") as bar:
        if plan.agnostic is None:
            ensemble = train_models(
                client, plan.private, k, plan.learner, plan.noise.generator_seed(), on_progress=bar.update,
                classes=plan.params.classes, names=plan.class_names,
            )
        else:
            ensemble = train_models_on(
                client, sources, rows, k, plan.learner, plan.noise.generator_seed(), on_progress=bar.update
            )
    session = SessionState(
        params=plan.params,
        learner=plan.learner_record(),
        features=list(plan.private.features),
        private_uri=plan.private.uri if "://" in plan.private.uri else os.path.abspath(plan.private.uri),
        private_rows=plan.private.rows,
        seed=plan.seed,
        sparse_vector=coordinator.state,
        noise_state=getattr(plan.noise, "state", lambda: None)(),
        mode="universal" if plan.universal else "agnostic" if plan.agnostic else "realizable",
        agnostic=plan.agnostic.to_dict() if plan.agnostic else None,
        relabeller=relabeller.to_dict() if relabeller is not None else None,
        label=plan.private.label,
        universal=plan.universal.to_dict() if plan.universal else None,
        private_fingerprint=fingerprint,
        guess=plan.guess.to_dict() if plan.guess is not None else None,
        labels=plan.privacy.labels,
        class_names=list(plan.class_names) if plan.class_names else None,
    )
    return session, ensemble


def _relabel(client: Any, plan: TrainingPlan, key: bytes, reporter: Reporter) -> tuple[Any, Any]:
    """Steps 2-4 of Algorithm 3: h_hat (private) and the future of S_hat (its samples from ``key``)."""
    assert plan.agnostic is not None and plan.private.label is not None
    parts = plan.private.parts(PART_ROWS)
    sources = [client.submit(load_part, p, plan.private.features, plan.private.label, pure=False) for p in parts]
    reporter.note(f"relabelling n' = {plan.agnostic.sample_rows} rows with {plan.hypothesis_class.name} "
         "(exponential mechanism over its dichotomies)")
    with reporter.phase("relabelling"):
        return relabel_and_resample(
            client, sources, [p.rows for p in parts], plan.agnostic, plan.hypothesis_class, plan.noise, key
        )


def odometer(session: SessionState) -> dict[str, Any]:
    """The privacy odometer (public: counts of released outcomes and public parameters): the
    sparse-vector instances used (c of T), the queries the coordinator tested per instance spent so
    far, and at that rate how many more the rest of the budget should test (None before the first
    abstention: no rate yet). Repeats, h_priv's and the after-halt student's answers spend nothing
    and are not counted. Under ``--gate gnmax`` every answer is an instance and T = m."""
    totals = session.totals
    used, cutoff = session.sparse_vector.bottoms, session.params.cutoff
    tested = (totals["answered"] - totals.get("duplicates", 0) - totals.get("released_model", 0)
              - totals.get("student", 0) + totals["abstained"])
    rate = tested / used if used else None
    return {
        "instances_used": used,
        "instances_allowed": cutoff,
        "queries_tested": tested,
        "queries_per_instance": rate,
        "forecast_more_queries": None if rate is None else math.floor(rate * (cutoff - used)),
    }


#: A session "answers one label" when at least this many answers ...
ONE_LABEL_ANSWERS = 100
#: ... hold at most this share of the other label (the released labels are public; the votes are not read).
ONE_LABEL_SHARE = 0.005
#: What the warning suggests for a rare label: class-weighted trees (issue 29, item 4; benchmarks/imbalance.py).
CLASS_WEIGHTED = "--learner auto --learner-param class_weight=balanced"


def one_label_warning(session: SessionState) -> str | None:
    """One line when the session's released answers are (nearly) all one label, and what to try, from
    public facts only: the released labels (as the log holds them), n and k. None otherwise, for a
    state from before the count, and over c > 2 classes (the count is of label 1 only)."""
    answered, ones = session.totals["answered"], session.released_ones
    if session.params.classes != 2 or ones is None or ones > answered or answered < ONE_LABEL_ANSWERS or \
            min(ones, answered - ones) > ONE_LABEL_SHARE * answered:  # (ones > answered: a state rolled back by hand)
        return None
    label = 1 if ones > answered - ones else 0
    k = session.params.subsamples
    rows = session.private_rows // max(k, 1)
    learner = session.learner["name"].rsplit(".", 1)[-1]
    tries = [] if session.learner["name"] == AUTO_TREE else ["--learner auto (decision trees as deep as the rows allow)"]
    if "class_weight" not in (session.learner.get("params") or {}):
        tries.append(f"{CLASS_WEIGHTED} (each model weighs its own rows' labels)")
    tries += ["fewer models so each sees more rows (--subsamples)",
              "fewer labelled answers (--queries-max) with --after-halt student"]
    return (f"{max(ones, answered - ones) / answered:.1%} of the session's {answered:,} answers are label {label}: "
            f"its k = {k:,} models ({learner}, {rows:,} private rows each) may all answer the majority class; "
            f"try {', '.join(tries[:-1])} or {tries[-1]}")


def session_summary(session: SessionState) -> dict[str, Any]:
    """The parameters every summary reports."""
    p = session.params
    summary: dict[str, Any] = {
        "mode": session.mode,
        "epsilon": p.epsilon,
        "delta": p.delta,
        "cutoff": p.cutoff,
        "queries_max": p.queries_max,
        "labels": session.labels,
        "beta": p.beta,
        "profile": p.profile,
        "accountant": p.accountant_name,
        "gate": p.gate,
        **({"classes": p.classes} if p.classes != 2 else {}),
        **({"class_names": ",".join(session.class_names)} if session.class_names else {}),
        **({"sigma": p.lam} if p.gate == "gnmax" else {
            "lambda": p.lam, "noise_split": p.noise_split, "threshold_noise_scale": p.threshold_noise_scale,
            "query_noise_scale": p.query_noise_scale}),
        "subsamples": p.subsamples,
        "subsamples_source": p.subsamples_source,
        "threshold": p.threshold,
        "threshold_source": p.threshold_source,
        **p.certificate(),
        "private_rows": session.private_rows,
        "learner": session.learner["name"],
        "privacy": "private" if session.private else "NOT PRIVATE (seeded noise)",
    }
    if session.guess is not None:
        summary["guess"] = session.guess["kind"]
    plan = session.plan()
    if plan.agnostic is not None:
        agnostic = plan.agnostic
        summary.update(
            epsilon=agnostic.epsilon, delta=agnostic.delta, alpha=agnostic.alpha, **agnostic.certificate(),
            subsamp_epsilon=p.epsilon, subsamp_delta=p.delta, hypothesis=session.learner.get("hypothesis"),
            agnostic=agnostic.summary(),
        )
    if plan.universal is not None:
        universal = plan.universal
        summary.update(
            epsilon=universal.epsilon, delta=universal.delta, **universal.certificate(),
            universal=universal.summary(),
        )
    return summary


def read_state_summary(state: str) -> StateSummary:
    """A state's public summary for the session report (its certificate and counts) and its session's last
    batch hash, which the log must end at (pcqr report, pcqr distill); the state is only read."""
    from pcqr.pipeline.session.state import SESSION_FILE, load_session

    if not has_session(state):
        raise PcqrError(f"--state {state}: no session here")
    session = load_session(state)
    return StateSummary({**session_summary(session), "budget_used": session.sparse_vector.bottoms,
                         "totals": dict(session.totals)}, os.path.join(state, SESSION_FILE), session.last_hash)


def train_new_session(options: TrainingOptions, connect: Connect,
                      reporter: Reporter = LOGGING) -> dict[str, Any]:
    """``pcqr train``'s work, the state's lock held by the caller: plan (no row read), charge the
    ledger, train, register the session with the charge before its state exists, save. Returns
    the summary ``pcqr train --json`` prints."""
    from pcqr.pipeline.budget.ledger import charge_note
    from pcqr.pipeline.session.state import save_models, save_session

    plan = plan_training(options, reporter)  # under the lock: a second train finds this one's session
    with connect(array_work=trains_by_arrays(plan)) as client:
        with session_charge(client, plan, options, "train", reporter) as charge:
            session, ensemble = train_session(client, plan, reporter)
            charge.register(session)  # the ledger knows the session before its state exists
            save_models(options.state, ensemble)
            save_session(options.state, session)
    say_gate_chosen(plan, reporter)
    say_large_delta(plan, reporter)
    return {"state": options.state, "models": ensemble.size, **session_summary(session),
            **gate_chosen(plan), "ledger": charge_note(charge.charged),
            **({"ledger_overlap_budgets": charge.charged["overlap_budgets"]}
               if charge.charged.get("overlap_budgets") else {})}


def trains_by_arrays(plan: TrainingPlan) -> bool:
    """Training is array work (a local cluster's workers may be threads, cluster.yaml processes:
    auto): pcqr's own learners (stump, threshold: sorts and cumulative sums, NumPy releasing the
    GIL) in realizable mode. README's train (3 x 10^6 rows, k = 2,500 stumps): 5.5-5.7 s on
    threads against 6.8-8.4 s on worker processes. scikit-learn learners fit in Python: processes."""
    from pcqr.pipeline.models.learners import BUILTIN_LEARNERS

    return plan.learner.name in BUILTIN_LEARNERS and plan.agnostic is None and plan.universal is None


def gate_chosen(plan: TrainingPlan | None) -> dict[str, str]:
    """The summary's ``gate_chosen`` (why, when --gate was not given) and ``learner_chosen`` (the
    tree ``--learner auto`` chose, and why: public n and k only), else nothing."""
    if plan is None:
        return {}
    chosen = {"gate_chosen": plan.privacy.gate_chosen} if plan.privacy.gate_chosen else {}
    if plan.student is not None and plan.agnostic is None and plan.universal is None:  # an auto session
        from pcqr.pipeline.models.learners import auto_reason

        k = plan.params.subsamples
        chosen["learner_chosen"] = auto_reason(plan.private.rows // k, k, plan.learner.params)
    return chosen


def say_gate_chosen(plan: TrainingPlan | None, reporter: Reporter) -> None:
    """The note of the chosen gate, once the command has succeeded (a refusal stays one line)."""
    if plan is not None and plan.privacy.gate_chosen:
        reporter.note(f"gate: {plan.params.gate}, chosen from public parameters ({plan.privacy.gate_chosen}); "
                      "--gate stability|guess|gnmax to choose")


def say_large_delta(plan: TrainingPlan | None, reporter: Reporter) -> None:
    """The warning of a new session's delta at or above 1/n (pcqr.pipeline.privacy.limits.delta_note: the
    delta asked, n its private rows), once the command has succeeded (a refusal stays one line): on the
    reporter, or a LargeDeltaWarning to a caller of the Python API."""
    if plan is not None:
        asked = plan.universal or plan.agnostic or plan.params  # the outer mechanism's delta is the one asked
        warn_large_delta(asked.delta, plan.private.rows, reporter.note)
