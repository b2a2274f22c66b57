"""``Session``: one private classification-query session, from Python (``pcqr.Session``).

A session is a private state directory (the k models, the coordinator's key and T thresholds, the
counts), a row in the privacy-budget ledger that vouches for it, and a public log of every answer it
released. The Session object owns all three while it is open: it holds the state's lock (no other
process can answer through it), answers through the same library path as ``pcqr answer``
(pipeline/session/answering.py: ledger check, crash recovery, the sparse-vector coordinator, the
commit of each batch to the log before it is returned), and keeps one Dask client for its lifetime.
"""
from __future__ import annotations

import contextlib
import json
import reprlib
import os
import tempfile
import threading
from dataclasses import dataclass, replace
from types import TracebackType
from typing import Any, ContextManager, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pcqr.pipeline.budget.location import ledger_setting
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.session.answering import answer_stream
from pcqr.pipeline.public_log.batches import batch_files
from pcqr.pipeline.options import AnswerOptions, TrainingOptions, join_features
from pcqr.pipeline.session.planning import (
    odometer, one_label_warning, read_state_summary, session_summary, train_new_session,
)
from pcqr.pipeline.session.arguments import check_arguments
from pcqr.pipeline.session.progress import LOGGING, Reporter
from pcqr.pipeline.session.state import has_session, load_session
from pcqr.pipeline.session.state_lock import lock_state
from pcqr.pipeline.data.outputs import Output, check_outputs, check_session_paths
from pcqr.pipeline.data.parquet_opener import read_parquet
from pcqr.pipeline.spelling import python_api, spelled_with

QueryInput = Any
"""A pandas DataFrame, a pyarrow Table, a 2-D numpy array (columns: the session's features in
order) or a Parquet path (file or directory)."""


@dataclass(frozen=True)
class SessionStatus:
    """Where a session stands: its budget (instances used of T), its certificate and its counts.

    Attributes
    ----------
    used : int
        c, the sparse-vector instances spent (abstentions) so far.
    cutoff : int
        T, the instances allowed before the session halts.
    halted : bool
        True once c = T: every later query is refused (no budget is ever exceeded).
    epsilon, delta : float
        The (eps, delta) the session was charged and certified for.
    proven_epsilon, proven_delta : float
        What the accountant proves for the whole session (at most epsilon, delta).
    answered, abstained, refused : int
        Totals over every query the session has processed.
    log : str or None
        The public log directory (None before the first answer).
    mode : str
        realizable, agnostic or universal.
    private : bool
        False when the session was created with a seed (tests only): its output is NOT private.
    profile : str
        tight or paper: how the composition was certified.
    gate : str
        stability, guess or gnmax: how the votes are released (gnmax: T = m, used = answers).
    flipped : int
        Guess gate: answers released as 1 - g(x), each one of the T instances (0 otherwise).
    queries_per_instance : float or None
        Queries the coordinator tested per instance spent so far (None before the first abstention).
    forecast_more_queries : int or None
        At that rate, how many more queries the rest of the budget should test.
    queries_max : int
        m, the most queries the session tests (beyond it every query is refused).
    queries_seen : int
        The queries the coordinator has tested so far (answered or abstained; duplicates and
        refusals are not tested).
    one_label_warning : str or None
        When the released answers are (nearly) all one label: that, and what to try (public facts
        only: the released labels, n and k).
    labels : int or None
        M when the session was planned for M answers (``--labels M``, or the plan's own M): the
        models answer the first M queries, the student every later one (post-processing).
    student_answers : int
        Queries answered by the after-halt student so far (no budget).
    classes : int
        c, the classes the session answers (2 unless created with more).
    class_names : list of str or None
        Their names, in class order, when it was created with names.
    """

    used: int
    cutoff: int
    halted: bool
    epsilon: float
    delta: float
    proven_epsilon: float
    proven_delta: float
    answered: int
    abstained: int
    refused: int
    log: str | None
    mode: str
    private: bool
    profile: str = "paper"
    gate: str = "stability"
    flipped: int = 0
    queries_per_instance: float | None = None
    forecast_more_queries: int | None = None
    queries_max: int = 0
    queries_seen: int = 0
    one_label_warning: str | None = None
    labels: int | None = None
    student_answers: int = 0
    classes: int = 2
    class_names: list[str] | None = None


def session_status(state: str) -> SessionStatus:
    """The status of the session in ``state``, read from its state directory (atomically written)
    without taking its lock: it may be read while another process answers (``pcqr status``).
    Everything in it is public or a public parameter."""
    if not has_session(state):
        raise PcqrError(f"{spelled_with('--state', state)}: no session here")
    session = load_session(state)
    summary = session_summary(session)
    meter = odometer(session)
    used, cutoff = session.sparse_vector.bottoms, session.params.cutoff
    return SessionStatus(
        used=used, cutoff=cutoff, halted=used >= cutoff, epsilon=summary["epsilon"], delta=summary["delta"],
        proven_epsilon=summary["proven_epsilon"], proven_delta=summary["proven_delta"],
        answered=session.totals["answered"], abstained=session.totals["abstained"],
        refused=session.totals["refused"], log=session.log_dir, mode=session.mode, private=session.private,
        profile=session.params.profile, gate=session.params.gate, flipped=session.totals.get("flipped", 0),
        queries_per_instance=meter["queries_per_instance"],
        forecast_more_queries=meter["forecast_more_queries"], queries_max=session.params.queries_max,
        queries_seen=session.sparse_vector.queries_seen, one_label_warning=one_label_warning(session),
        labels=session.labels, student_answers=session.totals.get("student", 0),
        classes=session.params.classes, class_names=session.class_names,
    )


class Session:
    """A private classification-query session: train once within a budget, answer many queries.

    Open one with :meth:`Session.create` (trains k models on private data, charging the ledger)
    or :meth:`Session.open` (an existing state directory). The object holds the state's lock until
    :meth:`close` (or the end of a ``with`` block): one process answers through a session at a time.

    Parameters
    ----------
    state : str
        The private state directory.
    cluster : str, optional
        A cluster.yaml (see docs); default: ./cluster.yaml if present, else a local Dask cluster
        started on first use and closed with the session. When that local cluster's workers are
        threads of this process (answering with stump or linear models), this process's BLAS runs
        one thread until :meth:`close`, as Dask's worker processes do (NumPy work of your own in
        the same process meanwhile runs single-threaded BLAS).
    client : distributed.Client, optional
        Use this client instead of starting one (it is not closed by the session).
    ledger : str, optional
        The privacy-budget ledger: a SQLite file or a team's ``postgresql://`` URL; default:
        ``$PCQR_LEDGER`` or the user's ledger.
    reporter : Reporter, optional
        Where notes and progress go; default: the ``pcqr`` logger (INFO: a line every 15 s of a long step).
    local_threads : bool
        A local cluster whose cluster.yaml leaves ``processes: auto`` runs its workers as threads of
        this process for every task, training included (``PrivateClassifier``: its rows are in this
        process's memory already, and a cluster of threads starts in ~0.4 s instead of ~2 s).

    Examples
    --------
    >>> import pcqr                                                        # doctest: +SKIP
    >>> with pcqr.Session.create("state", private="data/private", epsilon=4.0, delta=1e-6,
    ...                          cutoff=20, subsamples=500) as session:    # doctest: +SKIP
    ...     table = session.answer(queries_dataframe, log="log")           # doctest: +SKIP
    ...     session.status().used                                          # doctest: +SKIP
    """

    def __init__(self, state: str, *, cluster: str | None = None, client: Any = None, ledger: str | None = None,
                 reporter: Reporter = LOGGING, local_threads: bool = False, _held: contextlib.ExitStack) -> None:
        self.state = state
        self.cluster = cluster
        self.local_threads = local_threads
        self.ledger = ledger
        self.reporter = reporter
        self._client = client
        self._held = _held
        self._closed = False
        self.last_summary: dict[str, Any] = {}

    # -------------------------------------------------------------- opening

    @classmethod
    @python_api
    def create(cls, state: str, private: str, *, epsilon: float = TrainingOptions.epsilon,
               delta: float = TrainingOptions.delta, cutoff: int = TrainingOptions.cutoff,
               queries_max: int = TrainingOptions.queries_max, labels: int | None = None,
               after_halt: str = TrainingOptions.after_halt, beta: float = TrainingOptions.beta, profile: str | None = None, gate: str | None = None, guess: str | None = None,
               subsamples: int | None = None, threshold: float | None = None,
               learner: str = TrainingOptions.learner, learner_params: Mapping[str, Any] | None = None,
               mode: str = TrainingOptions.mode, hypothesis: str | None = None, alpha: float = TrainingOptions.alpha,
               label: str = TrainingOptions.label, classes: int | Sequence[str] = TrainingOptions.classes,
               features: Sequence[str] | None = None,
               seed: int | None = None, insecure_seed: bool = False, cluster: str | None = None,
               client: Any = None, ledger: str | None = None, wait: bool = False,
               reporter: Reporter = LOGGING, local_threads: bool = False, name: str | None = None) -> Session:
        """Train a new session on private data, charging its whole (epsilon, delta) to the ledger.

        Every parameter is checked against the certificate before any private row is read; one
        that cannot be certified is refused (a :class:`PcqrError` naming it and the nearest value
        that can). The options are those of ``pcqr train`` (``--queries-max`` is ``queries_max``).

        Parameters
        ----------
        state : str
            A new private state directory (must not hold a session).
        private : str
            The private labelled dataset (Parquet file or directory, path or URI). It is read by
            the Dask workers only, never by this process.
        epsilon, delta : float
            The session's whole privacy budget.
        cutoff : int
            T, the abstentions (sparse-vector instances) allowed before the session halts.
        queries_max : int
            m, the most queries the session will answer.
        labels : int, optional
            M (``--labels``): the session is planned for M answers instead of ``queries_max`` (which
            must then be left at its default); the k models answer the first M queries and the
            student distilled from their answers every later one (``after_halt='student'``, the only
            choice then; post-processing of the public log, no budget).
        after_halt : {'student', 'refuse'}
            What will answer after the halt (``answer(after_halt=)``'s default here). With 'student'
            (the default) and neither ``gate`` nor ``labels`` given, the plan may choose ``labels``
            itself (``pcqr plan``'s M rule); 'refuse' keeps the teacher for all ``queries_max`` queries.
        beta : float
            Failure probability (enters k).
        profile : {'tight', 'paper'}, optional
            How lambda, k and w are computed and the composition certified (``--profile``): 'tight'
            (the default in realizable mode) by the exact optimal composition of the T instances,
            'paper' by Algorithm 5 as written (the only one in agnostic and universal modes).
        gate : {'stability', 'guess', 'gnmax'}, optional
            How the votes are released (``--gate``, realizable mode): 'stability',
            Algorithm 5's distance to instability, releasing the majority label; 'guess', the votes'
            margin toward a public guess g(x), releasing g(x) free or, spending one of the T
            instances, 1 - g(x): no stability term, every query answered until T disagreements;
            'gnmax', PATE's Gaussian noisy argmax: each of the first ``queries_max`` queries gets the
            noisy majority (Renyi DP; ``cutoff`` and ``threshold`` do not apply), then it halts.
            Default: chosen from public parameters by ``pcqr plan``'s rule (gnmax when its k
            leaves >= 100 rows per model and a 3/4 majority survives its noise, else guess;
            stability under ``profile='paper'``), and the choice noted in the log.
        guess : str, optional
            The guess gate's g (``--guess``): 'student' (the default: the learner refitted on the
            answers already released), 'prior' (the more frequent released label) or the path of a
            released model file.
        subsamples : int, optional
            k, the number of subsample models (default: Algorithm 5's k; the guess gate's: the
            smallest k at which a unanimous query agreeing with g is rarely charged; gnmax's: the
            smallest at which a 3/4 majority gets its label 95% of the time).
        threshold : float, optional
            w, the stability threshold: a privacy parameter (default: the smallest certifiable).
            Under the guess gate any w in [0, MAX_THRESHOLD] is certifiable (default 0).
        learner : str
            'stump', 'threshold' or a scikit-learn classifier's import path.
        learner_params : mapping, optional
            The learner's parameters (plain values).
        mode : {'realizable', 'agnostic', 'universal'}
        hypothesis : str, optional
            The class of agnostic and universal modes.
        alpha : float
            Agnostic and universal modes' target excess error.
        label : str
            The label column (0/1; over ``classes`` c > 2, the class indices 0 .. c - 1).
        classes : int or sequence of str
            The classes the labels and answers range over (public, given, never read from the rows): a
            count c (the label column holds 0 .. c - 1; 2 by default), or the labels' names in class
            order (the label column holds those names; class i is the i-th). More than two (at most
            100) are answered by gnmax (the default) or the stability gate, in realizable mode
            (docs/privacy.md, "the gates for c > 2 classes"). The log's answers are class indices.
        features : sequence of str, optional
            Feature columns (default: every column but the label; a column of a type pcqr cannot read as a number is refused by name).
        seed : int, optional
            Tests only, with ``insecure_seed=True``: the output is then NOT private.
        cluster, client, ledger, reporter, local_threads
            As for the class.
        wait : bool
            Wait for another process's lock on ``state`` instead of refusing at once.
        name : str, optional
            What the ledger calls the private data of this session's charge (default: ``private``'s
            path or URI); at most 200 characters, no control characters.

        Returns
        -------
        Session
            The open session (its lock held).

        Raises
        ------
        PcqrError
            One line naming the parameter (its Python name: every keyword is checked by type and
            range first), file or column; nothing is charged. A failure after the charge refunds it.
        """
        checked = check_arguments("Session.create", {
            "state": state, "private": private, "epsilon": epsilon, "delta": delta, "cutoff": cutoff,
            "queries_max": queries_max, "labels": labels, "after_halt": after_halt, "beta": beta, "profile": profile,
            "gate": gate, "guess": guess, "subsamples": subsamples, "threshold": threshold, "learner": learner,
            "learner_params": learner_params, "mode": mode, "hypothesis": hypothesis, "alpha": alpha, "label": label,
            "features": features, "seed": seed, "insecure_seed": insecure_seed, "cluster": cluster, "ledger": ledger,
            "wait": wait, "local_threads": local_threads, "name": name,
        }, optional=_OPTIONAL)  # as Python values: a NumPy integer as an int
        count, names = _class_spec(classes)
        options = TrainingOptions.from_values({**checked, "learner_param": _param_items(learner_params),
                                               "features": join_features(features), "classes": count,
                                               "class_names": names})
        state, cluster, ledger = options.state, options.cluster, options.ledger
        check_session_paths(state, None, private=options.private, ledger=ledger, cluster=cluster)  # before the lock
        session = cls._locked(state, create=True, wait=checked["wait"], cluster=cluster, client=client, ledger=ledger,
                              reporter=reporter, local_threads=checked["local_threads"])
        try:
            session.last_summary = train_new_session(options, session._connect, reporter)
        except BaseException as failure:
            session._abandon(failure)  # a refused plan leaves no state folder, not even its lock file
            raise
        return session

    @classmethod
    @python_api
    def open(cls, state: str, *, cluster: str | None = None, client: Any = None, ledger: str | None = None,
             wait: bool = False, reporter: Reporter = LOGGING, local_threads: bool = False) -> Session:
        """Open an existing session (from :meth:`create` or ``pcqr train``) to answer more queries.

        Parameters
        ----------
        state : str
            The session's private state directory.
        cluster, client, ledger, wait, reporter, local_threads
            As for :meth:`create`.

        Returns
        -------
        Session
            The open session (its lock held until :meth:`close`).

        Raises
        ------
        PcqrError
            No session in ``state``, or another process holds it.
        """
        check_arguments("Session.open", {"state": state, "cluster": cluster, "ledger": ledger, "wait": wait,
                                         "local_threads": local_threads}, optional=_OPTIONAL)
        session = cls._locked(state, create=False, wait=wait, cluster=cluster, client=client, ledger=ledger,
                              reporter=reporter, local_threads=local_threads)
        if not has_session(state):
            refusal = PcqrError(f"{spelled_with('--state', state)}: no session here (create one with Session.create "
                                "or 'pcqr train')")
            session._abandon(refusal)  # the folder keeps nothing of this call, not even the lock file
            raise refusal
        return session

    @classmethod
    def _locked(cls, state: str, *, create: bool, wait: bool, **kwargs: Any) -> Session:
        """The state's OS lock (other processes) and this process's claim (other Session objects:
        the OS lock is re-entrant within a process, a session's owner is one object)."""
        ledger_setting(kwargs.get("ledger"))  # an empty ledger setting: refused before anything is touched
        held = contextlib.ExitStack()
        try:
            held.enter_context(_claim(state))
            held.enter_context(lock_state(state, wait, create=create, command="pcqr.Session"))
        except BaseException:
            held.close()
            raise
        return cls(state, _held=held, **kwargs)

    def _connect(self, array_work: bool = False) -> ContextManager[Any]:
        """The session's Dask client, started on first use (threads or processes as that first use's
        ``array_work`` says: :func:`pcqr.pipeline.data.cluster.local_processes`) and kept until :meth:`close`."""
        if self._client is None:
            from pcqr.pipeline.data.cluster import load_cluster_config, open_client

            load_cluster_config(self.cluster)
            self._client = self._held.enter_context(open_client(self.cluster, echo=self.reporter.note,
                                                                array_work=array_work or self.local_threads))
        return contextlib.nullcontext(self._client)

    # -------------------------------------------------------------- answering

    @python_api
    def answer(self, queries: QueryInput, *, log: str | None = None, batch_size: int = AnswerOptions.batch_size,
               id_column: str | None = None, fallback_label: int | None = None, truth: str | None = None,
               allow_private_overlap: bool = False, after_halt: str = AnswerOptions.after_halt,
               student_learner: str | None = None, student_learner_params: Mapping[str, Any] | None = None,
               private_log: bool = False) -> pa.Table:
        """Answer a batch of queries privately; returns the answers as the public log records them.

        Each answer passes the session's sparse-vector coordinator and is committed to the public
        log (``log``) before it is returned, exactly as ``pcqr answer`` does: what this returns is
        what the log holds. Abstentions cost one of the T instances; after the T-th, every query is
        refused. Repeated queries get their logged answers at no cost. Queries answered in full
        before (the same rows in the same order, with the same ids: the same Parquet file, a copy of
        it, or an equal table) are not asked again: the answers the log holds for them are returned
        and :attr:`last_summary` says ``already_answered`` (pcqr.pipeline.session.inputs).

        Parameters
        ----------
        queries : pandas.DataFrame, pyarrow.Table, numpy.ndarray or str
            The queries: the session's feature columns (a 2-D array: in the session's feature
            order), optionally a ``query_id`` column; or a Parquet path.
        log : str, optional
            The public log directory; required on a session's first answer, then its own.
        batch_size : int
            Queries per log batch.
        id_column : str, optional
            The query id column (default: ``query_id`` if present, else row positions).
        fallback_label : {0, 1}, optional
            Fill abstained and refused answers with this label (post-processing).
        truth : str, optional
            Parquet of query_id + label: :attr:`last_summary` gets the answers' accuracy.
        allow_private_overlap : bool
            Accept queries that overlap a registered private dataset (see docs/privacy.md).
        after_halt : {'refuse', 'student'}
            As ``pcqr answer --after-halt``: after the T-th instance, refuse every query, or answer
            it with a student fitted on the answers the session released (post-processing of the
            public log, no budget; ``source`` is ``student``).
        student_learner : str, optional
            The student's learner (default: the guess gate's student learner, else the session's).
        student_learner_params : mapping, optional
            Its parameters.
        private_log : bool
            ``log`` is a private folder of the caller's that is never published (PrivateClassifier's
            temporary folder): the misuse guard, which keeps private rows out of public logs, does
            not run. Never pass it for a log anyone else reads.

        Returns
        -------
        pyarrow.Table
            One row per query, the log's columns (query_id, the features, answer, status, ...).
            ``status`` is answered / abstained / refused; ``answer`` is null unless answered (or
            filled by ``fallback_label``).

        Raises
        ------
        PcqrError
            Bad input (wrong columns, NaN, ...) or a keyword of the wrong type or range, named in
            one line, before any answer.
        """
        self._check_open()
        checked = check_arguments("Session.answer", {
            "log": log, "batch_size": batch_size, "id_column": id_column, "fallback_label": fallback_label,
            "truth": truth, "allow_private_overlap": allow_private_overlap, "after_halt": after_halt,
            "student_learner": student_learner, "student_learner_params": student_learner_params,
            "private_log": private_log,
        }, optional=_OPTIONAL)  # as Python values: a NumPy integer as an int
        classes = load_session(self.state).params.classes
        if checked["fallback_label"] is not None and checked["fallback_label"] >= classes:
            raise PcqrError(f"Session.answer: fallback_label={checked['fallback_label']!r}: expected "
                            f"{'0 or 1' if classes == 2 else f'a class index 0 .. {classes - 1}'} (the session's classes)")
        with tempfile.TemporaryDirectory(prefix="pcqr-queries-") as scratch:
            path = queries if isinstance(queries, (str, os.PathLike)) else self._write_queries(queries, scratch)
            before = load_session(self.state).next_batch
            training = TrainingOptions(state=self.state, ledger=self.ledger, cluster=self.cluster)
            answering = AnswerOptions.from_values({**checked, "queries": os.fspath(path), "log_dir": checked["log"],
                                                   "student_learner_param": _param_items(student_learner_params)})
            named = _naming(self.reporter, None if path is queries else os.fspath(path))
            try:
                self.last_summary = answer_stream(training, answering, self._connect, named)
            except PcqrError as refused:
                if path is queries:
                    raise
                raise PcqrError(_as_named(str(refused), os.fspath(path))) from None
        log_dir = self.last_summary["log"]
        first, last = self.last_summary.get("already_answered_batches") or (before, None)
        tables = [read_parquet(file) for number, file in batch_files(log_dir)
                  if number >= first and (last is None or number <= last)]
        return pa.concat_tables(tables) if tables else pa.table({})

    def _write_queries(self, queries: QueryInput, scratch: str) -> str:
        """In-memory queries (public) to one Parquet file the workers read."""
        table = _as_table(queries, load_session(self.state).features)
        path = os.path.join(scratch, "queries.parquet")
        pq.write_table(table, path)
        return path

    # -------------------------------------------------------------- looking

    @python_api
    def status(self) -> SessionStatus:
        """The session's budget, certificate and counts (read from its state; no privacy cost).

        Returns
        -------
        SessionStatus
        """
        self._check_open()
        return session_status(self.state)

    @python_api
    def report(self, out: str, *, truth: str | None = None) -> list[str]:
        """Write the session report (``pcqr report``): a self-contained HTML page ``out`` and PNG
        figures beside it, from the public log (and ``truth``, if given) plus the state's summary.

        Parameters
        ----------
        out : str
            The HTML file to write (the figures go to ``<out stem>-<figure>.png``).
        truth : str, optional
            Parquet of query_id + label: answer accuracy over the stream.

        Returns
        -------
        list of str
            The files written, the HTML page first.

        Raises
        ------
        PcqrError
            No answers logged yet, or matplotlib missing (``pip install 'pcqr[report]'``).
        """
        from pcqr.pipeline.report.render import pyplot, report_files, write_report
        from pcqr.pipeline.report.contents import session_report

        self._check_open()
        log = load_session(self.state).log_dir
        if log is None:
            raise PcqrError(f"the session in {self.state} has answered nothing yet: no log to report on")
        check_outputs([Output("out", path) for path in report_files(out)],
                      [("log", log), ("state", self.state), ("truth", truth)], overwrite=True)
        pyplot()
        return write_report(session_report(log, state=read_state_summary(self.state), truth=truth), out)

    @python_api
    def summary(self) -> dict[str, Any]:
        """The session's public parameters and certificate, as ``pcqr train --json`` prints them."""
        self._check_open()
        return session_summary(load_session(self.state))

    @property
    def features(self) -> list[str]:
        """The feature columns a query must have, in order."""
        return list(load_session(self.state).features)

    # -------------------------------------------------------------- closing

    def close(self) -> None:
        """Release the lock and close the Dask client the session started (idempotent)."""
        if not self._closed:
            self._closed = True
            self._held.close()

    def _abandon(self, failure: BaseException) -> None:
        """Close after ``failure``: the lock (pcqr.pipeline.session.state_lock.lock_state) sees it and
        removes its lock file, and the state folder it made, when nothing else was written."""
        if not self._closed:
            self._closed = True
            self._held.__exit__(type(failure), failure, failure.__traceback__)

    def _check_open(self) -> None:
        if self._closed:
            raise PcqrError(f"the session in {self.state} is closed; open it again with Session.open")

    def __enter__(self) -> Session:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Session({self.state!r}{', closed' if self._closed else ''})"


#: The keywords that may be None (their defaults are decided by the plan, the session or the environment).
def _class_spec(classes: Any) -> tuple[int, tuple[str, ...] | None]:
    """``Session.create(classes=...)``: a count or a sequence of names (their text as ``--classes``
    reads it: pcqr.pipeline.privacy.limits.parse_classes); one line naming ``classes=`` otherwise."""
    from pcqr.pipeline.privacy.limits import parse_classes

    if isinstance(classes, (bool, np.bool_)) or not (
            isinstance(classes, (int, np.integer)) or (isinstance(classes, (list, tuple))
                                                       and all(isinstance(n, str) and "," not in n for n in classes))):
        raise PcqrError(f"Session.create: classes={reprlib.repr(classes)}: expected a count (an int) or a list of "
                        "two or more distinct names (strings without commas)")
    text = str(int(classes)) if isinstance(classes, (int, np.integer)) else ",".join(classes)
    return parse_classes(text)


_OPTIONAL = ("labels", "profile", "gate", "guess", "subsamples", "threshold", "learner_params", "hypothesis",
             "features", "seed", "cluster", "ledger", "name", "log", "id_column", "fallback_label", "truth",
             "student_learner", "student_learner_params")

_OPEN: set[str] = set()
_OPEN_GUARD = threading.Lock()


@contextlib.contextmanager
def _claim(state: str) -> Iterator[None]:
    key = os.path.realpath(state)
    with _OPEN_GUARD:
        if key in _OPEN:
            raise PcqrError(f"{spelled_with('--state', state)} is in use by another open Session in this process; "
                            "close it first")
        _OPEN.add(key)
    try:
        yield
    finally:
        with _OPEN_GUARD:
            _OPEN.discard(key)


def _as_named(message: str, scratch_file: str) -> str:
    """In-memory queries named as the caller knows them ("queries"), not by their scratch file."""
    return message.replace(f"--queries {scratch_file}", "queries").replace(scratch_file, "queries")


def _naming(reporter: Reporter, scratch_file: str | None) -> Reporter:
    """``reporter``, with in-memory queries' scratch file named "queries" in its notes."""
    if scratch_file is None:
        return reporter
    return replace(reporter, note=lambda message: reporter.note(_as_named(message, scratch_file)))


def _param_items(params: Mapping[str, Any] | None) -> tuple[str, ...]:
    """Learner parameters as the command line's ``key=value`` items (parsed back the same way)."""
    return tuple(f"{key}={value if isinstance(value, str) else json.dumps(value)}"
                 for key, value in (params or {}).items())


def _as_table(queries: QueryInput, features: list[str]) -> pa.Table:
    """A pyarrow Table from a DataFrame, a Table or a 2-D array (columns: ``features``)."""
    if isinstance(queries, pa.Table):
        return queries
    if isinstance(queries, np.ndarray):
        if queries.ndim != 2 or queries.shape[1] != len(features):
            raise PcqrError(f"queries: a numpy array needs shape (n, {len(features)}) for the session's features "
                            f"{', '.join(features)}; got {queries.shape}")
        return pa.table({name: np.asarray(queries[:, i], dtype=np.float64) for i, name in enumerate(features)})
    if hasattr(queries, "to_numpy") and hasattr(queries, "columns"):  # a pandas DataFrame
        return pa.Table.from_pandas(queries, preserve_index=False)
    raise PcqrError(f"queries: expected a pandas DataFrame, a pyarrow Table, a 2-D numpy array or a Parquet path; "
                    f"got {type(queries).__name__}")
