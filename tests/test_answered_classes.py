"""The answered-queries index over c > 2 classes (issue 49): each index packs its entries by its own
layout (pcqr.pipeline.public_log.answered.OutcomeLayout), the outcome -- a class 0 .. c - 1, or the
abstention, c -- in the max(2, c.bit_length()) lowest bits; two-class entries are bit for bit the
old ones (label 0 or 1, abstained 2, in the two lowest bits)."""
from __future__ import annotations

import numpy as np
import pytest

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.public_log import answered
from pcqr.pipeline.public_log.answered import (
    ABSTAINED_OUTCOME, AnsweredIndex, OutcomeLayout, compared, index_from_log, key_order, origins, row_keys,
)

CLASSES = (3, 5, 100)


def _keys_and_outcomes(rng: np.random.Generator, classes: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """``size`` random keys (distinct in the bits an index over ``classes`` compares), their outcomes
    every class and the abstention, in turn."""
    keys = np.unique(compared(rng.integers(0, 2**64 - 1, 2 * size, dtype=np.uint64, endpoint=True), classes))
    keys = rng.permutation(keys)[:size]
    keys |= rng.integers(0, 2**64 - 1, size, dtype=np.uint64, endpoint=True) & ~OutcomeLayout(classes).key_mask
    outcomes = (np.arange(size) % (classes + 1)).astype(np.int8)  # classes is the abstention
    return keys, outcomes


@pytest.mark.parametrize("classes, bits", [(2, 2), (3, 2), (4, 3), (5, 3), (7, 3), (8, 4), (100, 7)])
def test_the_layout_of_c_classes(classes: int, bits: int) -> None:
    layout = OutcomeLayout(classes)
    assert layout.abstained == classes and layout.bits == bits
    assert int(layout.outcome_mask) == 2**bits - 1 and int(layout.key_mask) == 2**64 - 2**bits
    index = AnsweredIndex(classes=classes)
    assert index.classes == classes and index.abstained == classes and index.layout == layout


@pytest.mark.parametrize("classes", [0, 1, -3, 2.0, True, "3", 101])
def test_a_layout_refuses_what_is_not_a_class_count(classes: object) -> None:
    with pytest.raises(ValueError):
        OutcomeLayout(classes)  # type: ignore[arg-type]


@pytest.mark.parametrize("classes", CLASSES)
def test_every_class_and_the_abstention_come_back_in_memory(classes: int) -> None:
    rng = np.random.default_rng(classes)
    keys, outcomes = _keys_and_outcomes(rng, classes, 4 * (classes + 1))
    index = AnsweredIndex(classes=classes)
    for part in np.array_split(np.arange(keys.size), 5):  # several runs, merged
        index.add(keys[part], outcomes[part])
    assert len(index) == keys.size and not index._disk
    found, got = index.lookup(keys)
    assert found.all() and got.tolist() == outcomes.tolist()
    assert set(got.tolist()) == set(range(classes + 1))
    # the same queries, whatever their outcome bits: one query each (compared on the key bits only)
    found, got = index.lookup(keys ^ ~OutcomeLayout(classes).key_mask)
    assert found.all() and got.tolist() == outcomes.tolist()
    strangers = rng.integers(0, 2**64 - 1, 1000, dtype=np.uint64, endpoint=True)
    strangers = strangers[~np.isin(compared(strangers, classes), compared(keys, classes))]
    found, got = index.lookup(strangers)
    assert not found.any() and not got.any()


@pytest.mark.parametrize("classes", CLASSES)
def test_every_class_and_the_abstention_come_back_from_disk(classes: int, monkeypatch) -> None:
    monkeypatch.setattr(answered, "CHUNK", 4)  # many chunks, many fences
    rng = np.random.default_rng(100 + classes)
    keys, outcomes = _keys_and_outcomes(rng, classes, 3 * (classes + 1) + 7)
    index, memory = AnsweredIndex(memory_entries=8, classes=classes), AnsweredIndex(classes=classes)
    try:
        for part in np.array_split(np.arange(keys.size), 9):
            for one in (index, memory):
                found, _ = one.lookup(keys[part])
                assert not found.any()
                one.add(keys[part], outcomes[part], absent=True)
        assert index._disk and index.disk_bytes and len(index) == keys.size
        found, got = index.lookup(keys)
        assert found.all() and got.tolist() == outcomes.tolist()
        assert [a.tolist() for a in index.lookup(keys)] == [a.tolist() for a in memory.lookup(keys)]
        key_mask = OutcomeLayout(classes).key_mask
        for run in index._disk:
            on_disk = np.fromfile(run.path, dtype=np.uint64)
            assert on_disk.size == run.size and np.all(on_disk[:-1] < on_disk[1:])
            assert (on_disk[::4] & key_mask).tolist() == run.fences.tolist()  # fences: the key bits only
        # adding the same keys again (other outcomes) changes nothing: of equal keys, the first's
        index.add(keys, (outcomes + 1) % (classes + 1))
        found, got = index.lookup(keys)
        assert found.all() and got.tolist() == outcomes.tolist() and len(index) == keys.size
    finally:
        index.close()


def test_class_two_and_the_abstention_are_distinct_over_three_classes() -> None:
    index = AnsweredIndex(classes=3)
    keys = np.array([8 << 8, 9 << 8, 10 << 8, 11 << 8], dtype=np.uint64)
    index.add(keys, np.array([2, index.abstained, 0, 1], dtype=np.int8))
    found, got = index.lookup(keys)
    assert index.abstained == 3 != 2 == ABSTAINED_OUTCOME
    assert found.all() and got.tolist() == [2, 3, 0, 1]


@pytest.mark.parametrize("classes, outcome", [(2, 3), (2, -1), (3, 4), (3, -1), (5, 6), (5, 7), (100, 101), (100, 127)])
def test_an_outcome_outside_the_classes_and_the_abstention_is_refused(classes: int, outcome: int) -> None:
    index = AnsweredIndex(classes=classes)
    with pytest.raises(ValueError):
        index.add(np.array([1 << 20, 2 << 20], dtype=np.uint64), np.array([0, outcome], dtype=np.int16))
    assert len(index) == 0


def test_two_classes_pack_their_entries_as_before() -> None:
    """The two-class layout is the old one, bit for bit: key & ~3 | outcome, abstained 2."""
    assert OutcomeLayout() == OutcomeLayout(2) and OutcomeLayout().abstained == ABSTAINED_OUTCOME == 2
    assert answered._OUTCOME_BITS == OutcomeLayout().outcome_mask == np.uint64(3)
    assert answered._KEY_BITS == OutcomeLayout().key_mask == ~np.uint64(3)
    rng = np.random.default_rng(2)
    keys = np.concatenate((rng.integers(0, 2**64 - 1, 500, dtype=np.uint64, endpoint=True),
                           np.array([0, 1, 2, 3, 4, 7, 2**64 - 1], dtype=np.uint64)))
    assert compared(keys).tolist() == compared(keys, 2).tolist() == (keys & ~np.uint64(3)).tolist()
    assert key_order(keys).tolist() == np.argsort(keys & ~np.uint64(3), kind="stable").tolist()
    index = AnsweredIndex()
    assert index.classes == 2 and index.abstained == ABSTAINED_OUTCOME
    few = np.array([2**64 - 1, 0x0123456789ABCDEF, 6, 2**40 + 1], dtype=np.uint64)
    index.add(few, np.array([1, 2, 0, 1], dtype=np.int8))
    (run,) = index._runs
    assert run.tolist() == sorted([2**64 - 3, 0x0123456789ABCDEE, 4, 2**40 + 1])
    assert [a.tolist() for a in index.lookup(few)] == [[True] * 4, [1, 2, 0, 1]]


def test_two_classes_spill_as_before(monkeypatch) -> None:
    monkeypatch.setattr(answered, "CHUNK", 4)
    rng = np.random.default_rng(22)
    keys = rng.integers(0, 2**64 - 1, 60, dtype=np.uint64, endpoint=True)
    labels = rng.integers(0, 3, 60).astype(np.int8)
    index = AnsweredIndex(memory_entries=8)
    try:
        index.add(keys, labels)
        (run,) = index._disk
        assert np.fromfile(run.path, dtype=np.uint64).tolist() == sorted(((keys & ~np.uint64(3)) | labels.astype(np.uint64)).tolist())
        assert run.fences.tolist() == sorted((keys & ~np.uint64(3)).tolist())[::4]
    finally:
        index.close()


@pytest.mark.parametrize("classes", (2, *CLASSES))
def test_origins_and_key_order_group_the_keys_an_index_of_c_classes_compares(classes: int) -> None:
    bits = OutcomeLayout(classes).bits
    base = np.array([5 << 20, 3 << 20, 9 << 20], dtype=np.uint64)
    # rows 0, 3, 5: one query (the outcome bits differ); row 1 and 4 another; row 2 alone; row 6: a
    # neighbour of row 2 that differs in the lowest key bit
    keys = np.array([base[0], base[1], base[2], base[0] | np.uint64(2**bits - 1), base[1] | np.uint64(1),
                     base[0] | np.uint64(2**(bits - 1)), base[2] | np.uint64(2**bits)], dtype=np.uint64)
    order = key_order(keys, classes)
    assert np.all(np.diff(compared(keys, classes)[order].astype(np.float64)) >= 0)
    expected = [0, 1, 2, 0, 1, 0, 6]
    assert origins(keys, classes=classes).tolist() == expected
    assert origins(keys, order, classes=classes).tolist() == expected
    assert order.tolist() == [1, 4, 0, 3, 5, 2, 6]  # stable: equal keys keep their rows' order
    if classes > 3:  # the old two-bit layout would tell rows 0 and 3 apart
        assert origins(keys).tolist() != expected


def _write_log(log_dir: str, batches: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> str:
    """A hash-chained log of (X, status, label) batches, as pcqr writes them; its last hash."""
    import pyarrow as pa

    from pcqr.pipeline.public_log.batches import append_batch, batch_table, encode_batch, sha256

    previous, start = "", 0
    for number, (X, status, label) in enumerate(batches):
        queries = pa.table({"query_id": np.arange(start, start + X.shape[0]), "x0": X[:, 0], "x1": X[:, 1]})
        data = encode_batch(batch_table(queries, "query_id", ["x0", "x1"], status, label, number), {}, previous)
        append_batch(log_dir, number, data)
        previous, start = sha256(data), start + X.shape[0]
    return previous


@pytest.mark.parametrize("classes", CLASSES)
def test_an_index_from_a_log_of_c_classes(classes: int, tmp_path) -> None:
    """Answers 0 .. c - 1 and abstentions read back from the verified log; refused rows not indexed;
    an answer outside the classes refused as tampering (a two-class index refuses class 2)."""
    rng = np.random.default_rng(7 * classes)
    batches = []
    for _ in range(3):
        X = rng.normal(size=(2 * classes + 6, 2))
        status = (np.arange(X.shape[0]) % 3).astype(np.int8)  # answered, abstained, refused
        label = np.where(status == 0, rng.integers(0, classes, X.shape[0]), 0).astype(np.int8)
        label[0] = classes - 1
        batches.append((X, status, label))
    last = _write_log(str(tmp_path / "log"), batches)
    seed = 1234
    index = index_from_log(str(tmp_path / "log"), ["x0", "x1"], seed, 3, last, classes=classes)
    assert index.classes == classes
    X = np.concatenate([b[0] for b in batches])
    status = np.concatenate([b[1] for b in batches])
    label = np.concatenate([b[2] for b in batches])
    found, got = index.lookup(row_keys(X, seed))
    assert found.tolist() == (status != 2).tolist()
    assert got[status == 0].tolist() == label[status == 0].tolist()
    assert (got[status == 1] == classes).all() and classes - 1 in got[status == 0]
    with pytest.raises(PcqrError, match="altered"):
        index_from_log(str(tmp_path / "log"), ["x0", "x1"], seed, 3, last)  # two classes: 2 .. c - 1 refused
    if classes > 3:
        with pytest.raises(PcqrError, match="altered"):
            index_from_log(str(tmp_path / "log"), ["x0", "x1"], seed, 3, last, classes=3)
