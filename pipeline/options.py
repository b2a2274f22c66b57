"""What a user asks of a session, as typed values: the command line's options travel down as these.

``TrainingOptions`` are the parameters of a new session (A_SubSamp, Algorithm 5; A_AgPrivCl and
A_UnvPrivCl in agnostic and universal mode); ``AnswerOptions`` are how one stream of queries is
answered. Their defaults are the command line's defaults (pcqr.jobs.options reads them from here),
so the two cannot drift apart. Nothing here is checked: the planner checks every value against
the certificate before any row is read (pipeline/session/planning.py).
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Sequence


#: ``--learner auto`` (the default; ``PrivateClassifier(learner='auto')``): a decision tree as deep as the
#: rows a model gets can support (pcqr.pipeline.models.learners.auto_learner). Named here, where
#: nothing imports scikit-learn, so that a summary or a warning can tell an auto session by its name.
#: --classes: at most this many (a released class is an int8 index in the gates, the log's batches and
#: the answered index's outcome bits; pcqr.pipeline.privacy.limits.check_classes).
MAX_CLASSES = 100



AUTO = "auto"
AUTO_TREE = "sklearn.tree.DecisionTreeClassifier"
#: ``--student-learner cross-validated`` (the after-halt student of an auto session): the learner
#: cross-validation on the released answers picks (pcqr.pipeline.models.student_selection).
CROSS_VALIDATED = "cross-validated"


@dataclass(frozen=True)
class TrainingOptions:
    """The parameters of a new session; the names are the command line's (``--queries-max`` is
    ``queries_max``). ``features`` is the ``--features`` text (comma-separated) or None."""

    state: str
    private: str | None = None
    mode: str = "realizable"
    hypothesis: str | None = None
    alpha: float = 0.1
    epsilon: float = 1.0
    delta: float = 1e-6
    cutoff: int = 50
    queries_max: int = 10_000
    labels: int | None = None  # M: the teacher answers the first M queries, the student the rest (replaces queries_max)
    beta: float = 0.05
    profile: str | None = None  # tight | paper; None: tight in realizable mode, paper in the others
    gate: str | None = None  # stability | guess | gnmax; None: chosen by planning.choose_gate
    guess: str | None = None  # guess gate: prior | student | a released model file; None: student
    subsamples: int | None = None
    threshold: float | None = None
    learner: str = AUTO
    learner_param: tuple[str, ...] = ()
    label: str = "label"
    classes: int = 2  # c: the private labels are 0 .. c - 1 (more than two: gnmax or stability; issue 49)
    class_names: tuple[str, ...] | None = None  # --classes A,B,C: the labels' names, class i = names[i]
    features: str | None = None
    seed: int | None = None
    insecure_seed: bool = False
    ledger: str | None = None
    cluster: str | None = None
    # what answers after the halt (the one-shot ``pcqr answer``'s --after-halt; PrivateClassifier's):
    # with 'student', a session given neither --gate nor --labels may be planned for fewer labels
    after_halt: str = "student"
    name: str | None = None  # Python API: what the ledger calls the private data (default: its URI)

    @classmethod
    def from_values(cls, values: dict[str, Any]) -> TrainingOptions:
        """The fields named in ``values`` (a command's parsed options); other keys are ignored."""
        return cls(**_pick(cls, values))

    def public_record(self) -> dict[str, Any]:
        """The public parameters the ledger records with the session's charge."""
        keys = ("mode", "hypothesis", "alpha", "epsilon", "delta", "cutoff", "queries_max", "labels", "beta",
                "profile", "gate", "guess", "subsamples", "threshold", "learner")
        return {**{k: getattr(self, k) for k in keys}, "features": recorded_features(self.features),
                "state": self.state, **({"classes": self.classes} if self.classes != 2 else {}),
                **({"class_names": list(self.class_names)} if self.class_names else {})}


@dataclass(frozen=True)
class AnswerOptions:
    """How one stream of queries is answered (``pcqr answer``'s own options)."""

    queries: str
    log_dir: str | None = None
    id_column: str | None = None
    batch_size: int = 100_000
    fallback_label: int | None = None
    truth: str | None = None
    allow_private_overlap: bool = False
    private_log: bool = False  # Python API only: the log is the caller's private folder, never published
    after_halt: str = "student"  # refuse | student (pcqr.pipeline.session.distillation)
    student_learner: str | None = None  # None: the guess gate's student learner, else the session's
    student_learner_param: tuple[str, ...] = ()

    @classmethod
    def from_values(cls, values: dict[str, Any]) -> AnswerOptions:
        return cls(**_pick(cls, values))


def _pick(cls: type, values: dict[str, Any]) -> dict[str, Any]:
    picked = {f.name: values[f.name] for f in fields(cls) if f.name in values}
    for name in ("learner_param", "student_learner_param"):
        if name in picked:
            picked[name] = tuple(picked[name] or ())
    return picked


#: The feature columns a charge's parameters name; more are recorded as a count (the ledger's record
#: stays small however wide the data: pcqr.pipeline.budget.bounds).
RECORDED_FEATURES = 8
RECORDED_NAME_CHARS = 64


def recorded_features(features: str | None) -> str | None:
    """The ``--features`` text as a charge records it: as given, unless it names more than
    RECORDED_FEATURES columns or is long; then the first RECORDED_FEATURES names (RECORDED_NAME_CHARS
    characters each at most) and how many there are (``x0,x1,...,x7,... (10,000 features)``)."""
    if features is None or (len(features) <= RECORDED_FEATURES * RECORDED_NAME_CHARS
                            and features.count(",") < RECORDED_FEATURES):
        return features
    names = features.split(",")
    return f"{','.join(name[:RECORDED_NAME_CHARS] for name in names[:RECORDED_FEATURES])},... ({len(names):,} features)"


def join_features(features: Sequence[str] | str | None) -> str | None:
    """A list of feature columns as the ``--features`` text (the form the ledger records)."""
    if features is None or isinstance(features, str):
        return features
    return ",".join(features)
