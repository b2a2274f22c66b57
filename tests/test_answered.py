"""The answered-queries index (pcqr.pipeline.public_log.answered.AnsweredIndex) against a dict: every
answered key found with its first label, nothing else found, 8 bytes per entry."""
from __future__ import annotations

import numpy as np
import pytest

from pcqr.pipeline.public_log.answered import AnsweredIndex


def test_index_agrees_with_a_dict_over_many_merges() -> None:
    rng = np.random.default_rng(12)
    index, reference = AnsweredIndex(), {}
    seen = np.zeros(0, dtype=np.uint64)
    for size in [1, 5, 300, 2, 1000, 70, 4000, 1, 10_000, 33]:
        fresh = rng.integers(0, 2**64 - 1, size, dtype=np.uint64, endpoint=True)
        repeats = rng.choice(seen, min(size, seen.size), replace=False) if seen.size else seen
        # odd sizes: a key twice in one batch (its first label); even: every key once (the fast path)
        keys = np.concatenate((fresh, repeats, fresh[:size % 2]))
        labels = rng.integers(0, 2, keys.size).astype(np.int8)
        found, got = index.lookup(keys)
        expected = np.array([(k >> 1) in reference for k in keys.tolist()])
        np.testing.assert_array_equal(found, expected)
        np.testing.assert_array_equal(got[found], [reference[k >> 1] for k in keys[found].tolist()])
        assert not got[~found].any()
        index.add(keys, labels)
        for k, label in zip(keys.tolist(), labels.tolist()):
            reference.setdefault(k >> 1, label)
        seen = np.concatenate((seen, fresh))
    assert len(index) == len(reference) and index.nbytes == 8 * len(reference)
    assert all(np.all(run[:-1] < run[1:]) for run in index._runs)  # sorted, no duplicates


def test_keys_differing_only_in_the_lowest_bit_are_one_query() -> None:
    """The lowest bit holds the label: keys are compared on their upper 63 bits (collision 2^-63 a pair)."""
    index = AnsweredIndex()
    index.add(np.array([10], dtype=np.uint64), np.array([1], dtype=np.int8))
    found, label = index.lookup(np.array([10, 11, 12], dtype=np.uint64))
    assert found.tolist() == [True, True, False] and label.tolist() == [1, 1, 0]


def test_absent_keys_skip_the_lookup_with_the_same_result() -> None:
    rng = np.random.default_rng(5)
    one, two = AnsweredIndex(), AnsweredIndex()
    for _ in range(20):
        keys = rng.integers(0, 2**64 - 1, 500, dtype=np.uint64, endpoint=True)
        labels = rng.integers(0, 2, 500).astype(np.int8)
        found, _ = one.lookup(keys)
        one.add(keys[~found], labels[~found], absent=True)  # as the answer loop does
        two.add(keys, labels)
    assert [run.tolist() for run in one._runs] == [run.tolist() for run in two._runs]


def test_an_index_on_disk_agrees_with_one_in_memory_and_removes_its_files() -> None:
    """At most ``memory_entries`` entries in memory, the rest in runs on disk (merged geometrically,
    read back in chunks): the same answers as an index that keeps everything in memory."""
    import os

    from pcqr.pipeline.public_log import answered

    rng = np.random.default_rng(32)
    small, memory = AnsweredIndex(memory_entries=300), AnsweredIndex()
    old_chunk, answered.CHUNK = answered.CHUNK, 64  # many chunks, many fences
    try:
        seen = np.zeros(0, dtype=np.uint64)
        for size in [1, 299, 301, 50, 1000, 7, 4000, 64, 128, 2500]:
            fresh = rng.integers(0, 2**64 - 1, size, dtype=np.uint64, endpoint=True)
            repeats = rng.choice(seen, min(size, seen.size), replace=False) if seen.size else seen
            keys = np.concatenate((fresh, repeats, np.array([0, 2**64 - 1], dtype=np.uint64)))
            labels = rng.integers(0, 2, keys.size).astype(np.int8)
            for index in (small, memory):
                found, got = index.lookup(keys)
                index.add(keys[~found], labels[~found], absent=True)
            assert [a.tolist() for a in small.lookup(keys)] == [a.tolist() for a in memory.lookup(keys)]
            seen = np.concatenate((seen, fresh))
        assert len(small) == len(memory) and small.nbytes <= 8 * 300 * 2 and small.disk_bytes > 0
        assert 1 < len(small._disk) < 8  # merged geometrically
        for run in small._disk:
            on_disk = np.fromfile(run.path, dtype=np.uint64)
            assert on_disk.size == run.size and np.all(on_disk[:-1] < on_disk[1:])
            assert (on_disk[::64] >> np.uint64(1)).tolist() == (run.fences >> np.uint64(1)).tolist()
        folder = small._folder.path
        assert oct(os.stat(folder).st_mode & 0o777) == "0o700"
        small.close()
        assert not os.path.exists(folder)
    finally:
        answered.CHUNK = old_chunk


def test_the_spilled_index_lives_in_the_state_and_a_killed_runs_is_removed(tmp_path, thread_cluster_yaml) -> None:
    """The runs on disk go into the session's state folder (not $TMPDIR, where a SIGKILLed run would leave
    up to 8 bytes a query behind), and the next ``pcqr answer`` on the session removes what a killed run
    left there, under the state's lock."""
    import os

    from pcqr.jobs.cli import main
    from pcqr.pipeline.data.private_folder import PREFIX
    from tests.conftest import MECHANICS_PRIVACY, write_session_data

    index = AnsweredIndex(memory_entries=10, spill=str(tmp_path))
    index.add(np.arange(1, 50, dtype=np.uint64) * np.uint64(2**40), np.zeros(49, dtype=np.int8))
    (folder,) = [name for name in os.listdir(tmp_path) if name.startswith(PREFIX)]
    assert os.listdir(tmp_path / folder) and index.disk_bytes
    index.close()
    assert not (tmp_path / folder).exists()

    root = write_session_data(tmp_path / "s", rows=5000, queries=300)
    state = root / "state"
    answer = ["answer", "--state", str(state), "--queries", str(root / "queries"), "--log", str(root / "log"),
              "--cluster", thread_cluster_yaml]
    assert main(["train", "--private", str(root / "private"), "--state", str(state), *MECHANICS_PRIVACY,
                 "--cluster", thread_cluster_yaml]) == 0
    assert main(answer) == 0
    left = state / f"{PREFIX}killed"  # what a SIGKILLed run's index leaves
    left.mkdir()
    (left / "run-000001.u64").write_bytes(b"\0" * 64)
    assert main(answer) == 0  # the same queries again: nothing asked, the leftover removed
    assert not left.exists()


def test_the_answer_loop_with_a_spilled_index_answers_as_one_in_memory(
        tmp_path, monkeypatch, capsys, thread_cluster_yaml) -> None:
    """pcqr answer with an index that spills after 32 entries (chunks of 16) logs what a session whose
    index stays in memory logs -- the same answers, the same repeats answered from the log (answers
    and abstentions alike) -- both sessions trained alike with one seed."""
    import json

    import pyarrow.parquet as pq

    from pcqr.jobs.cli import main
    from pcqr.pipeline.public_log import answered
    from tests.conftest import MECHANICS_PRIVACY, write_parquet, write_session_data

    root = write_session_data(tmp_path, rows=20_000, queries=1000)
    asked = pq.read_table(root / "queries")
    order = np.random.default_rng(3).permutation(1000)
    columns = {c: asked.column(c).to_numpy() for c in ("x0", "x1", "x2")}
    write_parquet(str(root / "stream" / "p.parquet"),  # 1,000 queries, then the same again in another order
                  {"query_id": np.arange(2000), **{c: np.concatenate((v, v[order])) for c, v in columns.items()}},
                  row_group_size=100)
    summaries, logs = [], []
    for name in ("memory", "disk"):
        assert main(["train", "--private", str(root / "private"), "--state", str(root / name), "--seed", "5",
                     "--insecure-seed", *MECHANICS_PRIVACY, "--cluster", thread_cluster_yaml]) == 0
        if name == "disk":
            spills = []
            monkeypatch.setattr(answered.AnsweredIndex.__init__, "__defaults__", (32, None))
            monkeypatch.setattr(answered, "CHUNK", 16)
            plain_spill = answered.AnsweredIndex._spill
            monkeypatch.setattr(answered.AnsweredIndex, "_spill", lambda index: (spills.append(1), plain_spill(index)))
        capsys.readouterr()
        assert main(["answer", "--state", str(root / name), "--queries", str(root / "stream"), "--log",
                     str(root / f"log-{name}"), "--batch-size", "100", "--cluster", thread_cluster_yaml, "--json"]) == 0
        summaries.append(json.loads(capsys.readouterr().out.strip().splitlines()[-1]))
        logs.append(pq.read_table(root / f"log-{name}").sort_by("query_id"))
    # the second thousand, from the log: every one the first thousand answered or abstained on
    assert summaries[0]["duplicates"] == summaries[1]["duplicates"] == 1000 - summaries[0]["refused"] // 2
    for column in ("query_id", "answer", "status", "source"):
        assert logs[0].column(column).to_pylist() == logs[1].column(column).to_pylist(), column
    assert len(spills) >= 10  # the loop looked repeats up in runs on disk
