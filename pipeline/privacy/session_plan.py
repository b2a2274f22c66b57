"""A session's plan: what the user asked, turned into every privacy parameter of the session, once.

One function per mode takes the options (:class:`pcqr.pipeline.options.TrainingOptions`) and the
public facts of the private dataset (its row count n: replace-one neighbours keep n public; in
universal mode the class's VC dimension d) and returns one immutable :class:`SessionPlan`: the mode,
the gate and why it was chosen, the profile, k, T, lambda or sigma, w and the certificate's terms.

- realizable (:func:`plan_realizable`): A_SubSamp (Algorithm 5 of papers/001) through one of the
  gates of :data:`pcqr.pipeline.privacy.subsamp.GATES`, its parameters by
  :meth:`SubSampParameters.create <pcqr.pipeline.privacy.subsamp.SubSampParameters.create>`;
- agnostic (:func:`plan_agnostic`): A_AgPrivCl (Algorithm 3), its A_SubSamp at (eps_hat, delta_hat)
  (:class:`pcqr.pipeline.privacy.agnostic_parameters.AgnosticParameters`);
- universal (:func:`plan_universal`): A_UnvPrivCl (Algorithm 4): A_AgPrivCl for the first m' queries
  at eps/2, then A_SSPP (:class:`pcqr.pipeline.privacy.universal_parameters.UniversalParameters`).

Each option is checked where the value it sets is derived, before any private row is read, and a
value that cannot be certified is refused in one line with the nearest one that can. Everything
below the plan (training, the coordinator, the summary) receives the plan, never the options.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.options import TrainingOptions
from pcqr.pipeline.privacy.agnostic_parameters import AgnosticParameters
from pcqr.pipeline.privacy.limits import check_classes, check_training_size, count_range
from pcqr.pipeline.privacy.subsamp import GUESS_OVER_CLASSES, SubSampParameters, check_queries_max
from pcqr.pipeline.privacy.universal_parameters import UniversalParameters
from pcqr.pipeline.spelling import spelled, spelled_with

#: The modes (``--mode``), each planned by its own function below.
MODES = ("realizable", "agnostic", "universal")


@dataclass(frozen=True)
class SessionPlan:
    """Every privacy parameter of one session (all public), checked and certified."""

    mode: str
    params: SubSampParameters  # A_SubSamp's: gate, profile, k, T, lambda (sigma under gnmax), w
    agnostic: AgnosticParameters | None = None  # A_AgPrivCl's (agnostic and universal mode)
    universal: UniversalParameters | None = None  # A_UnvPrivCl's (universal mode)
    gate_chosen: str | None = None  # why the gate was chosen, when --gate was not given
    labels: int | None = None  # --labels M: planned for the teacher's first M answers (params.queries_max = M)

    def certificate(self) -> dict[str, float]:
        """The whole session's proven_epsilon, each delta term and proven_delta."""
        outermost = self.universal or self.agnostic or self.params
        return outermost.certificate()

    @classmethod
    def from_records(cls, params: dict[str, Any] | None, agnostic: dict[str, Any] | None = None,
                     universal: dict[str, Any] | None = None) -> SessionPlan:
        """A session's plan from the records its state and its log's provenance keep (``to_dict`` of
        each parameter class); the certificate is recomputed from them, never read."""
        if universal:
            unv = UniversalParameters.from_dict(universal)
            return cls("universal", unv.agnostic.subsamp, unv.agnostic, unv)
        if agnostic:
            agn = AgnosticParameters.from_dict(agnostic)
            return cls("agnostic", agn.subsamp, agn)
        if params is None:
            raise KeyError("parameters")
        return cls("realizable", SubSampParameters.from_dict(params))

    def usefulness_warning(self) -> str | None:
        """One line when even a unanimous query would mostly abstain (issue 10), else None."""
        return self.params.usefulness_warning()


def plan_session(options: TrainingOptions, rows: int, vc: int | None = None) -> SessionPlan:
    """The plan of a new session in ``options.mode`` on ``rows`` private rows (``vc``: the class's VC
    dimension, universal mode only). ``--labels M`` plans the session for M answers
    (:func:`labelled_options`) and the plan records M; so does a realizable session given neither
    ``--gate`` nor ``--labels`` whose after-halt student answers (:func:`choose_labels`)."""
    check_mode_options(options)
    options = labelled_options(options)
    if options.mode == "agnostic":
        plan = plan_agnostic(options, rows)
    elif options.mode == "universal":
        if vc is None:
            raise PcqrError("--mode universal: the hypothesis class's VC dimension is needed to plan m_o")
        plan = plan_universal(options, rows, vc)
    else:
        plan = plan_realizable(options, rows)
    return plan if options.labels is None else replace(plan, labels=options.labels)


def labelled_options(options: TrainingOptions) -> TrainingOptions:
    """``--labels M``: the options of a session planned for M answers, i.e. ``--queries-max M``.

    Every gate's teacher answers at most ``queries_max`` queries (gnmax: m noisy-majority answers,
    then it halts; stability and guess: the sparse vector tests at most m queries, and its sampler
    term is summed over m), so M in its place bounds the teacher's answers at M and the certificate
    is the one for M answers; the after-halt student (post-processing of the public log) answers
    every later query. Refused with an explicit ``--queries-max`` (pcqr.jobs.options.check_labels_alone;
    here a value other than the default) and in universal mode, whose later queries are h_priv's."""
    if options.labels is None:
        return options
    count_range("--labels (M)", options.labels, why="an exact float")
    if options.queries_max != TrainingOptions.queries_max:
        raise PcqrError(f"{spelled('--labels M')} replaces {spelled('--queries-max')}: give one")
    if options.mode == "universal":
        raise PcqrError("--labels: --mode universal answers every query after its first m_o with A_SSPP's "
                        "released classifier, not a student; use --mode realizable or agnostic")
    return replace(options, queries_max=options.labels)


def plan_realizable(options: TrainingOptions, rows: int) -> SessionPlan:
    """A_SubSamp through the gate ``--gate`` names (or ``--guess`` implies); else, when a student
    answers after the halt (``after_halt`` 'student', the default), gnmax for the M labels
    :func:`choose_labels` recommends (M < m; the plan records M as ``--labels M`` would); else the
    gate :func:`choose_gate` picks from public parameters. k by the gate's rule unless ``--subsamples``."""
    asked = requested_gate(options) or ("gnmax" if options.classes > 2 and options.labels is not None else None)
    labelled = None if asked or options.labels is not None else choose_labels(options, rows)
    if labelled is not None:
        labels, reason = labelled
        params = realizable_parameters(replace(options, queries_max=labels), "gnmax", rows)
        return SessionPlan("realizable", params, gate_chosen=reason, labels=labels)
    gate, why = (asked, None) if asked else choose_gate(options, rows)
    if options.classes > 2 and gate not in ("gnmax", "stability"):
        raise PcqrError(f"{spelled_with('--classes', options.classes)}: gnmax, the gate chosen for more than two "
                        f"classes, cannot serve this request ({why}); give --gate stability, --labels M, a larger "
                        f"{spelled('--epsilon')} or more rows")
    params = realizable_parameters(options, gate, rows)
    if params.gate == "gnmax" and options.cutoff not in (TrainingOptions.cutoff, options.queries_max):
        raise PcqrError(f"{spelled_with('--cutoff', options.cutoff)}: {spelled_with('--gate', 'gnmax')} spends one "
                        f"unit per answer and halts after {spelled('--queries-max')} answers ({options.queries_max}); "
                        f"leave {spelled('--cutoff')} out")
    return SessionPlan("realizable", params, gate_chosen=why)


def plan_agnostic(options: TrainingOptions, rows: int) -> SessionPlan:
    """A_AgPrivCl: Algorithm 3's step 1 and its A_SubSamp, the class relabels and (by ERM) learns."""
    agnostic = AgnosticParameters.algorithm3(options.epsilon, options.delta, options.alpha, options.beta,
                                             options.queries_max, rows, options.subsamples, options.threshold)
    _check_agnostic_training(agnostic, options)
    return SessionPlan("agnostic", agnostic.subsamp, agnostic)


def plan_universal(options: TrainingOptions, rows: int, vc: int) -> SessionPlan:
    """A_UnvPrivCl: A_AgPrivCl for the first m' = min(m_o, m) queries at eps / 2 (Algorithm 4), then
    A_SSPP's h_priv at eps / 2."""
    universal = UniversalParameters.algorithm4(options.epsilon, options.delta, options.alpha, options.beta,
                                               options.queries_max, rows, vc, options.subsamples, options.threshold)
    _check_agnostic_training(universal.agnostic, options)
    return SessionPlan("universal", universal.agnostic.subsamp, universal.agnostic, universal)


def requested_gate(options: TrainingOptions) -> str | None:
    """The gate the options name (``--guess`` names the guess gate), or None when the plan chooses."""
    gate = options.gate or ("guess" if options.guess is not None else None)
    if options.guess is not None and gate != "guess":
        raise PcqrError(f"--guess {options.guess}: only the guess gate uses a guess; add --gate guess")
    return gate


def realizable_parameters(options: TrainingOptions, gate: str, rows: int) -> SubSampParameters:
    """A realizable session's parameters through ``gate`` on ``rows`` private rows (n is public): the
    certificate's check of every value, k by the gate's rule unless ``options.subsamples`` is given."""
    return SubSampParameters.create(
        options.profile or "tight", options.epsilon, options.delta, options.cutoff, options.queries_max,
        options.beta, options.subsamples, options.threshold, gate, options.classes,
    ).for_rows(rows)


def default_subsamples(options: TrainingOptions, rows: int) -> int:
    """The k a realizable session on ``rows`` private rows gets when ``subsamples`` is not given (the
    plan :func:`plan_session` makes; public parameters and n only, no row read)."""
    return plan_session(options, rows).params.subsamples


def choose_labels(options: TrainingOptions, rows: int) -> tuple[int, str] | None:
    """``--labels M`` for a realizable session given neither ``--gate`` nor ``--labels``, whose
    after-halt student (``after_halt`` 'student') answers the queries after the first M, and why; None where the plan keeps the
    teacher for the whole stream (:func:`choose_gate`). From public parameters only (n, eps, delta, m).

    M is :func:`pcqr.pipeline.privacy.gate_choice.recommend_labels`'s, taken when it is below m and its
    gnmax k leaves at least LABELS_ROWS_PER_MODEL rows a model. Options that name a gate by
    themselves (:func:`reserved_gate`) keep it.
    """
    from pcqr.pipeline.privacy.gate_choice import LABELS_ROWS_PER_MODEL, recommend_labels

    if options.after_halt == "refuse" or reserved_gate(options) is not None:
        return None
    check_queries_max(options.queries_max)  # before the ladder is walked: its k are calibrated up to m
    try:
        labels, _, k, why = recommend_labels(rows, options.epsilon, options.delta, options.cutoff,
                                             options.queries_max, options.beta, options.subsamples,
                                             options.classes)
    except PcqrError:  # gnmax cannot be certified here: choose_gate says what can
        return None
    if labels >= options.queries_max or rows // k < LABELS_ROWS_PER_MODEL:
        return None
    return labels, (f"--labels {labels:,}: the k = {k:,} models answer the first {labels:,} of m = "
                    f"{options.queries_max:,} queries through gnmax; {why}")


def reserved_gate(options: TrainingOptions) -> tuple[str, str] | None:
    """The gate options other than --gate name by themselves, and why: ``--profile paper`` is
    Algorithm 5 exactly (the stability gate); a ``--threshold`` or a ``--cutoff`` other than the
    default is not gnmax's (it has neither), so those leave the guess gate. None otherwise."""
    if options.profile == "paper":
        return "stability", "--profile paper is Algorithm 5 exactly"
    if options.threshold is not None or options.cutoff != TrainingOptions.cutoff:
        given = "--threshold" if options.threshold is not None else "--cutoff"
        return "guess", f"{given} is given and gnmax has none"
    return None


def choose_gate(options: TrainingOptions, rows: int) -> tuple[str, str]:
    """The gate of a realizable session when ``--gate`` is not given, from public parameters only
    (n is public: replace-one neighbours), and why (one clause, for the note).

    The gate :func:`reserved_gate` names, if any (``--guess`` names the guess gate before this is
    asked). Otherwise :func:`pcqr.pipeline.privacy.gate_choice.recommend_gate`, the
    rule ``pcqr plan --private-rows`` prints: gnmax when its k leaves enough rows per model and a
    3/4 majority's label survives its noise, else the guess gate."""
    from pcqr.pipeline.privacy.gate_choice import recommend_gate

    reserved = reserved_gate(options)
    if reserved is not None:
        return reserved
    if options.classes > 2:  # gnmax where it certifies, else the stability gate (the guess gate answers two)
        try:
            realizable_parameters(options, "gnmax", rows)
        except PcqrError as exc:
            return "stability", f"gnmax is refused here ({exc}); the stability gate answers {options.classes} classes"
        return "gnmax", f"gnmax answers {options.classes} classes, every query to m"
    try:
        return recommend_gate(rows, options.epsilon, options.delta, options.cutoff, options.queries_max,
                              options.beta, options.subsamples)
    except PcqrError as exc:  # gnmax cannot be certified here: the guess gate says why if it cannot either
        return "guess", f"gnmax is refused here: {exc}"


def check_mode_options(options: TrainingOptions) -> None:
    """Agnostic and universal mode run Algorithm 5's stability gate with the paper's parameters only,
    and need a hypothesis class (checked before the class is made: pcqr.pipeline.session.planning)."""
    mode, gate = options.mode, requested_gate(options)
    if mode not in MODES:
        raise PcqrError(f"--mode must be one of {', '.join(MODES)}, got {mode!r}")
    check_classes(options.classes)
    if options.classes > 2 and mode != "realizable":
        raise PcqrError(f"{spelled_with('--classes', options.classes)}: --mode {mode} relabels by the exponential "
                        "mechanism over two-label dichotomies; more than two classes need --mode realizable")
    if options.classes > 2 and gate not in (None, "gnmax", "stability"):
        given = spelled_with("--gate", gate) if options.gate else spelled_with("--guess", options.guess)
        raise PcqrError(f"{given}: {spelled_with('--classes', options.classes)} needs --gate gnmax or stability "
                        f"({GUESS_OVER_CLASSES}; leave --gate out or give one of them)")
    if mode == "realizable":
        return
    if gate not in (None, "stability"):
        given = f"--gate {gate}" if options.gate else f"--guess {options.guess}"
        raise PcqrError(f"{given}: --mode {mode} answers through Algorithm 5's stability "
                        "test only; use --mode realizable (or leave --gate and --guess out)")
    if options.profile not in (None, "paper"):
        raise PcqrError(f"--profile {options.profile}: --mode {mode} certifies Algorithm 3's chain with "
                        "Algorithm 5's parameters only; use --profile paper (or leave it out)")
    if not options.hypothesis:
        raise PcqrError(f"--mode {mode} needs --hypothesis CLASS (the class to relabel with and learn)")


def _check_agnostic_training(agnostic: AgnosticParameters, options: TrainingOptions) -> None:
    """A_AgPrivCl trains its k models on the n' rows of S_hat: k must fit the driver and n'."""
    k = agnostic.subsamp.subsamples
    check_training_size(k, 1, "--subsamples" if options.subsamples is not None else "Algorithm 5's")
    if agnostic.sample_rows < k:
        raise PcqrError(
            f"agnostic mode trains k = {k} subsamples on n' = eps n / 56 = {agnostic.sample_rows} rows: "
            f"needs at least {math.ceil(56 * k / options.epsilon)} private rows, the dataset has "
            f"{agnostic.rows} (or use a smaller --subsamples)"
        )

