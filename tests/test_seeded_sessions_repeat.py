"""A seeded session (tests only, NOT private) repeats: the same data, options and --seed give the same
models and the same answers (the teachers' own random_state is fixed where the learner leaves it unset;
before issue 49 two seeded runs differed in a few answers, which also hid whether a change altered the
two-class path)."""
from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq

from pcqr.jobs.cli import main
from tests.conftest import write_thread_cluster


def test_two_seeded_runs_give_the_same_models_and_answers(tmp_path) -> None:
    cluster = write_thread_cluster(tmp_path)
    assert main(["generate", "--kind", "agnostic", "--concept", "corner", "--rows", "20000", "--queries", "800",
                 "--seed", "4", "--out", str(tmp_path / "data"), "--cluster", cluster]) == 0
    for run in ("a", "b"):
        common = ["--ledger", str(tmp_path / f"{run}.sqlite"), "--cluster", cluster]
        assert main(["train", "--private", str(tmp_path / "data" / "private"), "--epsilon", "2", "--queries-max", "800",
                     "--state", str(tmp_path / run), "--seed", "7", "--insecure-seed", *common]) == 0
        assert main(["answer", "--state", str(tmp_path / run), "--queries", str(tmp_path / "data" / "queries"),
                     "--log", str(tmp_path / f"log-{run}"), *common]) == 0
    first, second = np.load(tmp_path / "a" / "models.npz"), np.load(tmp_path / "b" / "models.npz")
    assert sorted(first.files) == sorted(second.files)
    assert all(np.array_equal(first[name], second[name]) for name in first.files)
    logs = [pq.read_table(tmp_path / f"log-{run}").select(["query_id", "answer", "status", "source"]) for run in "ab"]
    assert logs[0].equals(logs[1])
