"""The private state directory of a session (``--state DIR``).

Everything here is private and never goes under the public output::

    DIR/models.npz     the k trained subsample models, written once, never a pickle
                       (pcqr.pipeline.models.store)
    DIR/session.json   parameters, the log it writes to, and the sparse-vector
                       state (c, the stream position, the secret session key),
                       rewritten atomically after every batch (the commit point
                       of pcqr.pipeline.session.commit)
    DIR/thresholds.npy the session's T noisy thresholds Z2[0..T-1] (int64),
                       drawn once when the session is created, written before
                       the first session.json
    DIR/pending/       a committed batch's bytes until they are in the log

A later ``pcqr answer --state DIR`` continues the same session: same models,
same parameters, same budget.
"""
from __future__ import annotations

import io
import json
import os
import secrets
import uuid
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from pcqr.pipeline import __version__
from pcqr.pipeline.data.atomic import write_atomic
from pcqr.pipeline.data.user_files import (
    ARRAY_FILE_LIMIT, STATE_JSON_LIMIT, MissingFile, parse_json, parse_npy, read_bytes,
)
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.models.store import dump_models, load_models_file
from pcqr.pipeline.gates.gate import SparseVectorState
from pcqr.pipeline.models.votes import Ensemble
from pcqr.pipeline.privacy.session_plan import SessionPlan
from pcqr.pipeline.privacy.subsamp import SubSampParameters

SESSION_FILE = "session.json"
MECHANISMS = {
    "realizable": "A_SubSamp (BTT18; Algorithms 5-6 of Nandi-Bassily)",
    "agnostic": "A_AgPrivCl (Algorithm 3 of Nandi-Bassily: A_Relabel, then A_SubSamp)",
    "universal": "A_UnvPrivCl (Algorithm 4 of Nandi-Bassily: A_AgPrivCl for m_o queries, then A_SSPP's h_priv)",
}
MODELS_FILE = "models.npz"
OLD_MODELS_FILE = "models.pkl"  # a pickle: refused, never loaded
THRESHOLDS_FILE = "thresholds.npy"


@dataclass
class SessionState:
    """A session's parameters and mutable state, as stored in session.json."""

    params: SubSampParameters
    learner: dict[str, Any]
    features: list[str]
    private_uri: str
    private_rows: int
    seed: int | None
    sparse_vector: SparseVectorState
    session_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    log_dir: str | None = None
    next_batch: int = 0
    last_hash: str = ""
    noise_state: Any = None
    totals: dict[str, int] = field(default_factory=lambda: {"answered": 0, "abstained": 0, "refused": 0})
    mode: str = "realizable"
    agnostic: dict[str, Any] | None = None  # AgnosticParameters (public)
    relabeller: dict[str, Any] | None = None  # h_hat of A_Relabel: PRIVATE, never in provenance
    label: str | None = None  # label column of the private dataset
    universal: dict[str, Any] | None = None  # UniversalParameters (public)
    released: dict[str, Any] | None = None  # h_priv's public record once A_UnvPrivCl has switched
    pending_batch: int | None = None  # the last committed batch (pcqr.pipeline.session.commit); may await publication
    input: dict[str, Any] | None = None  # the query input being answered: uri, identity, rows, done, first_batch
    answered_inputs: list[dict[str, Any]] = field(default_factory=list)  # inputs answered in full (session/inputs.py)
    dedupe_seed: int = field(default_factory=lambda: secrets.randbits(64))  # PRIVATE key of row hashes
    private_fingerprint: str | None = None  # PRIVATE: content fingerprint of the data (universal mode)
    guess: dict[str, Any] | None = None  # the guess gate's public guess (pcqr.pipeline.gates.public_guess.GuessSpec)
    released_ones: int | None = 0  # answers released as 1 (public, as the log); None: a state from before the count
    labels: int | None = None  # --labels M (public): the teacher answers the first M queries, the student the rest
    class_names: list[str] | None = None  # --classes low,mid,high (public): class i's name, the log's provenance lists them

    @property
    def processed(self) -> int:
        """Queries this session has passed through (answered, abstained or refused)."""
        return self.totals["answered"] + self.totals["abstained"] + self.totals["refused"]

    @property
    def private(self) -> bool:
        return self.seed is None

    def plan(self) -> SessionPlan:
        """The session's privacy plan, from its parameter records (the certificate is recomputed)."""
        return SessionPlan.from_records(self.params.to_dict(), self.agnostic, self.universal)

    def provenance(self) -> dict[str, Any]:
        """The public description of this session, for the log's metadata."""
        return {
            "package": "pcqr",
            "version": __version__,
            "session_id": self.session_id,
            "mechanism": MECHANISMS[self.mode],
            "mode": self.mode,
            "agnostic_parameters": self.agnostic,
            "universal_parameters": self.universal,
            "parameters": self.params.to_dict(),
            "epsilon": self.params.epsilon,
            "delta": self.params.delta,
            "cutoff": self.params.cutoff,
            "subsamples": self.params.subsamples,
            "threshold": self.params.threshold,
            "gate": self.params.gate,
            "guess": self.guess,
            "learner": self.learner,
            "features": self.features,
            "private_rows": self.private_rows,
            "seeded": not self.private,
            "privacy": "private" if self.private else "NOT PRIVATE: seeded noise (--insecure-seed)",
            "labels": self.labels,
            **({"class_names": self.class_names} if self.class_names is not None else {}),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": __version__,
            "session_id": self.session_id,
            "params": self.params.to_dict(),
            "learner": self.learner,
            "features": self.features,
            "private_uri": self.private_uri,
            "private_rows": self.private_rows,
            "seed": self.seed,
            "sparse_vector": self.sparse_vector.to_dict(),
            "log_dir": self.log_dir,
            "next_batch": self.next_batch,
            "last_hash": self.last_hash,
            "noise_state": self.noise_state,
            "totals": self.totals,
            "mode": self.mode,
            "agnostic": self.agnostic,
            "relabeller": self.relabeller,
            "label": self.label,
            "universal": self.universal,
            "released": self.released,
            "pending_batch": self.pending_batch,
            "input": self.input,
            "answered_inputs": self.answered_inputs,
            "dedupe_seed": self.dedupe_seed,
            "private_fingerprint": self.private_fingerprint,
            "guess": self.guess,
            "released_ones": self.released_ones,
            "labels": self.labels,
            **({"class_names": self.class_names} if self.class_names is not None else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], thresholds: np.ndarray) -> SessionState:
        """``thresholds``: the session's fixed thresholds, kept in THRESHOLDS_FILE (not the JSON)."""
        gate = (data.get("params") or {}).get("gate", "stability")
        if (gate == "guess") != (data.get("guess") is not None):
            raise PcqrError(f"the session's gate is {gate!r} but it {'holds no' if gate == 'guess' else 'holds a'} "
                            "public guess (edited state?)")
        ones = data.get("released_ones")
        if ones is not None and not (type(ones) is int and 0 <= ones < 2**63):
            raise PcqrError(f"the session's released_ones {ones!r} is not a count of its answers (edited state?)")
        params = SubSampParameters.from_dict(data["params"])
        names = data.get("class_names")
        if names is not None and not (isinstance(names, list) and len(names) == params.classes
                                      and all(isinstance(n, str) and n for n in names) and len(set(names)) == len(names)):
            raise PcqrError("the session's class_names are not its classes' distinct names (edited state?)")
        labels = data.get("labels")
        if labels is not None and not (type(labels) is int and labels == params.queries_max):
            raise PcqrError(f"the session's labels {labels!r} is not the m it was planned for (edited state?)")
        return cls(
            params=params,
            learner=data["learner"],
            features=list(data["features"]),
            private_uri=data["private_uri"],
            private_rows=int(data["private_rows"]),
            seed=data["seed"],
            sparse_vector=SparseVectorState.from_dict(data["sparse_vector"], thresholds),
            session_id=data["session_id"],
            log_dir=data["log_dir"],
            next_batch=int(data["next_batch"]),
            last_hash=data["last_hash"],
            noise_state=data["noise_state"],
            totals=dict(data["totals"]),
            mode=data.get("mode", "realizable"),
            agnostic=data.get("agnostic"),
            relabeller=data.get("relabeller"),
            label=data.get("label"),
            universal=data.get("universal"),
            released=data.get("released"),
            pending_batch=data.get("pending_batch"),
            input=data.get("input"),
            answered_inputs=list(data.get("answered_inputs") or []),
            dedupe_seed=int(data.get("dedupe_seed", 0)),
            private_fingerprint=data.get("private_fingerprint"),
            guess=data.get("guess"),
            released_ones=ones,
            labels=labels,
            class_names=names,
        )


def has_session(state_dir: str) -> bool:
    """Whether DIR holds a session.json (anything by that name: a link or a FIFO is refused when read)."""
    return os.path.lexists(os.path.join(state_dir, SESSION_FILE))


def save_session(state_dir: str, session: SessionState) -> None:
    """The commit point: session.json, atomically; the fixed thresholds first if not yet on disk."""
    thresholds = os.path.join(state_dir, THRESHOLDS_FILE)
    if not has_session(state_dir) or not os.path.exists(thresholds):  # a new session: (re)write them
        sink = io.BytesIO()
        np.save(sink, np.asarray(session.sparse_vector.thresholds, dtype=np.int64), allow_pickle=False)
        write_atomic(thresholds, sink.getvalue())
    write_atomic(os.path.join(state_dir, SESSION_FILE), json.dumps(session.to_dict(), indent=1).encode())


def load_thresholds(state_dir: str, cutoff: int) -> np.ndarray:
    """The session's T fixed thresholds (a plain int64 .npy, never unpickled; none for the gnmax gate)."""
    path = os.path.join(state_dir, THRESHOLDS_FILE)
    try:
        data = read_bytes(path, "--state", ARRAY_FILE_LIMIT)
    except MissingFile:
        raise PcqrError(f"{path}: missing (the session's fixed thresholds); the state is incomplete") from None
    thresholds = parse_npy(data, f"{path}: corrupt thresholds file")
    if thresholds.dtype != np.int64 or thresholds.shape != (cutoff,):
        raise PcqrError(f"{path}: holds {thresholds.shape} {thresholds.dtype} values, expected ({cutoff},) int64")
    return thresholds


def load_session(state_dir: str) -> SessionState:
    path = os.path.join(state_dir, SESSION_FILE)
    try:
        data = parse_json(read_bytes(path, "--state", STATE_JSON_LIMIT), f"{path}: corrupt session file")
        fixed = "key" in data["sparse_vector"]  # else from_dict refuses: the state predates the key
        drawn = 0 if data["params"].get("gate") == "gnmax" else int(data["params"]["cutoff"])  # gnmax: no thresholds
        thresholds = load_thresholds(state_dir, drawn) if fixed else np.zeros(0, np.int64)
        session = SessionState.from_dict(data, thresholds)
    except MissingFile:
        raise PcqrError(f"--state {state_dir}: no session here (run 'pcqr train' first, or pass --private)") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise PcqrError(f"{path}: corrupt session file ({exc})") from None
    try:  # a state whose parameters pcqr would not certify (edited by hand?) answers nothing
        session.params.certify()
    except PcqrError as exc:
        raise PcqrError(f"{path}: its parameters cannot be certified ({exc})") from None
    return session


def save_models(state_dir: str, ensemble: Ensemble) -> None:
    """The k models, written once, without pickle (pcqr.pipeline.models.store)."""
    write_atomic(os.path.join(state_dir, MODELS_FILE), dump_models(ensemble))


def load_models(state_dir: str, session: SessionState, modules: Sequence[str] = ()) -> Ensemble:
    """The session's k models, checked against it (k, features); ``modules``: the operator's
    extra allowed learner modules (cluster.yaml ``pcqr: learners: allow:``), for skops files."""
    path = os.path.join(state_dir, MODELS_FILE)
    old = os.path.join(state_dir, OLD_MODELS_FILE)
    if not os.path.exists(path) and os.path.exists(old):  # never opened: unpickling runs code
        raise PcqrError(f"{old}: written by an older pcqr (a pickle, which pcqr no longer loads); retrain")
    try:
        return load_models_file(path, session.params.subsamples, len(session.features), modules,
                                session.params.classes)
    except MissingFile:
        raise PcqrError(f"--state {state_dir}: no trained models ({MODELS_FILE} missing)") from None


def check_private_location(state_dir: str, public_dirs: list[str | None]) -> None:
    """Refuse a state directory inside a public output directory, or the reverse."""
    state = os.path.abspath(state_dir)
    for public in public_dirs:
        if public is None:
            continue
        out = os.path.abspath(public)
        if os.path.commonpath([state, out]) in (state, out):
            raise PcqrError(
                f"--state {state_dir} and the public output {public} overlap: "
                "the private models must not live under public output"
            )
