"""The one place a gate's name is looked up: ``params.gate`` -> the class that makes that gate.

The answer loop, the training and the status read a session's gate through :func:`new_gate` and
:func:`open_gate` only, so adding a gate is one module under pipeline/gates/ (a
:class:`pcqr.pipeline.gates.gate.GateKind`) and one entry in :data:`GATES`.
"""
from __future__ import annotations

from pcqr.pipeline.gates.gate import Gate, GateKind, PublicRecord, SparseVectorState
from pcqr.pipeline.gates.noisy_argmax import NoisyArgmax
from pcqr.pipeline.gates.public_guess import GuessGate
from pcqr.pipeline.gates.sparse_vector import SparseVector
from pcqr.pipeline.privacy.noise import NoiseSource
from pcqr.pipeline.privacy.subsamp import SubSampParameters

#: Each gate's name (``--gate``, ``params.gate``) and the class that makes it.
GATES: dict[str, GateKind] = {
    "stability": SparseVector,  # A_SubSamp with A_stab (docs/privacy.md, Mechanism 1)
    "guess": GuessGate,  # the sparse vector on the margin toward a public guess (Mechanism 1b)
    "gnmax": NoisyArgmax,  # the Gaussian noisy argmax (Mechanism 1c)
}


def new_gate(params: SubSampParameters, noise: NoiseSource) -> Gate:
    """A new session's gate: its key (and, for the sparse-vector gates, its T thresholds) drawn now,
    before any private value exists."""
    return GATES[params.gate].create(params, noise)


def open_gate(params: SubSampParameters, state: SparseVectorState, record: PublicRecord | None = None) -> Gate:
    """A saved session's gate, from its private state and (for the guess gate's student) its public
    record."""
    return GATES[params.gate].resume(params, state, record)
