"""The gates' one interface (pcqr.pipeline.gates.gate) and their registry: every gate the parameters
know is registered; what ``release`` returns for a batch is what the gate's own test gives, with the
log's source codes and the instances spent; only the guess gate reads the features, and its answers do
not depend on where the batches end."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pcqr.pipeline.gates.gate import PublicRecord, SparseVectorState
from pcqr.pipeline.gates.public_guess import GuessGate, GuessSpec
from pcqr.pipeline.gates.registry import GATES, new_gate, open_gate
from pcqr.pipeline.privacy import subsamp
from pcqr.pipeline.privacy.noise import SeededNoise
from pcqr.pipeline.privacy.subsamp import SubSampParameters
from pcqr.pipeline.public_log.batches import (
    ABSTAINED, ANSWERED, FLIPPED_CODE, GNMAX_CODE, GUESS_CODE, REFUSED, SPARSE_VECTOR_CODE,
)

K = 500


def params(gate: str, queries_max: int = 2000) -> SubSampParameters:
    return SubSampParameters.create("tight", 1.0, 1e-6, 20, queries_max, 0.05, K, None, gate)


def copied(state: SparseVectorState) -> SparseVectorState:
    return dataclasses.replace(state, thresholds=state.thresholds.copy())


def unread() -> np.ndarray:
    raise AssertionError("this gate must not convert the queries' features")


def test_every_gate_of_the_parameters_is_registered() -> None:
    assert set(GATES) == set(subsamp.GATES)


@pytest.mark.parametrize("gate,code", [("stability", SPARSE_VECTOR_CODE), ("gnmax", GNMAX_CODE)])
def test_release_is_the_gates_own_test(gate: str, code: int) -> None:
    """stability and gnmax: ``release`` gives ``process``'s statuses and labels on the same state, every
    query's source is the gate's, and ``spent`` is the instances the batch used (abstentions or answers)."""
    p = params(gate, queries_max=20 if gate == "gnmax" else 2000)  # gnmax: T = m = 20
    one = new_gate(p, SeededNoise(7))
    twin = open_gate(p, copied(one.state))
    votes = np.random.default_rng(1).integers(K // 2 - 3, K // 2 + 4, size=300)  # near ties: bottoms
    released = one.release(votes, K, unread)
    status, label = twin.process(votes, K)  # type: ignore[attr-defined]
    assert np.array_equal(released.status, status) and np.array_equal(released.label, label)
    assert (released.source == code).all() and released.source.dtype == np.int8
    spending = ABSTAINED if gate == "stability" else ANSWERED
    assert released.spent == one.state.bottoms == int(np.count_nonzero(status == spending)) > 0
    assert one.halted and (status == REFUSED).any()  # T = 20 spent on 300 near ties


def test_the_guess_gate_spends_an_instance_per_flip_whatever_the_batching(tmp_path) -> None:
    """The guess gate (a prior student, an empty log): flips are the instances spent, it halts at T, and
    one batch or three give the same answers (the student's refits follow the released labels only)."""
    p = params("guess")
    record = PublicRecord(str(tmp_path), ("x0",), 0, GuessSpec("prior").to_dict())
    created = new_gate(p, SeededNoise(3))
    assert isinstance(created, GuessGate)
    with pytest.raises(ValueError, match="public record"):
        created.release(np.array([1]), K, lambda: np.zeros((1, 1)))
    rng = np.random.default_rng(2)
    votes = np.where(rng.random(600) < 0.9, K - rng.integers(0, 50, size=600), rng.integers(0, K + 1, size=600))
    X = rng.normal(size=(600, 1))
    calls = []

    def features(rows: slice) -> np.ndarray:
        calls.append(rows)
        return X[rows]

    whole = open_gate(p, copied(created.state), record)
    one = whole.release(votes, K, lambda: features(slice(0, 600)))
    flipped = one.source == FLIPPED_CODE
    assert np.isin(one.source, (GUESS_CODE, FLIPPED_CODE)).all() and len(calls) == 1
    assert one.spent == whole.state.bottoms == int(np.count_nonzero(flipped)) == p.cutoff
    assert (one.status[flipped] == ANSWERED).all() and one.status[-1] == REFUSED
    split = open_gate(p, copied(created.state), record)
    parts = [split.release(votes[a:b], K, lambda a=a, b=b: features(slice(a, b))) for a, b in ((0, 7), (7, 250), (250, 600))]
    for field in ("status", "label", "source"):
        assert np.array_equal(getattr(one, field), np.concatenate([getattr(r, field) for r in parts])), field
    assert sum(r.spent for r in parts) == one.spent


@pytest.mark.parametrize("gate", ["stability", "gnmax", "guess"])
def test_a_gate_past_its_m_queries_refuses_whatever_the_votes(gate) -> None:
    """``refuses_every_query`` (the answer loop then computes no votes): true once the gate has tested
    its m queries (``--labels M``: after the first M), and then its release refuses every fresh query
    whatever their votes -- unanimous or split -- so skipping the votes changes no answer."""
    from pcqr.pipeline.session.query_release import refuses_every_query

    g = new_gate(SubSampParameters.create("tight", 30.0, 1e-6, 20, 30, 0.05, K, None, gate), SeededNoise(1))
    if gate == "guess":  # its prior guess (0 until a 1 is released), as a session's
        g = open_gate(g.params, g.state, PublicRecord("unused", ("x0",), 0, GuessSpec("prior").to_dict()))
    assert not refuses_every_query(g)
    g.release(np.zeros(30, dtype=np.int64), K, lambda: np.zeros((30, 1)))  # unanimous 0: no instance spent
    assert refuses_every_query(g) and g.state.queries_seen == 30
    assert g.halted == (gate == "gnmax")  # gnmax halts at m; the sparse-vector gates only at T (until now: votes)
    for ones in (np.full(20, K), np.zeros(20, dtype=np.int64), np.full(20, K // 2)):
        released = g.release(ones, K, lambda: np.zeros((20, 1)))
        assert (released.status == REFUSED).all() and released.spent == 0
