"""A continuing session's first query parts are voted on the validation pass's read (issue 32:
pcqr.pipeline.session.query_release.EarlyVotes): a stream up to EARLY_ROWS is read once on the
workers, the answers are those of the loop's own vote tasks, and past EARLY_ROWS the loop reads the
rest itself."""
from __future__ import annotations

import pyarrow.parquet as pq

import pcqr.pipeline.session.query_release as query_release
from pcqr.jobs.cli import main
from tests.conftest import write_session_data


def _trained(tmp_path, names, cluster) -> None:
    write_session_data(tmp_path, rows=20_000, queries=2000)
    queries = pq.read_table(tmp_path / "queries")  # in row groups of 200: parts of one batch each
    pq.write_table(queries, tmp_path / "queries" / "p.parquet", row_group_size=200)
    for name in names:
        assert main(["train", "--private", str(tmp_path / "private"), "--state", str(tmp_path / name),
                     "--epsilon", "1", "--cutoff", "20", "--gate", "guess", "--learner", "stump", "--seed", "7",
                     "--insecure-seed", "--cluster", cluster]) == 0


def _answer(tmp_path, name) -> list[str]:
    return ["answer", "--state", str(tmp_path / name), "--queries", str(tmp_path / "queries"), "--log",
            str(tmp_path / f"log-{name}"), "--batch-size", "200"]


VOTED: list[int] = []  # the parts the loop's vote tasks read (module level: Dask sends _counted by reference)
_VOTE_BATCH = query_release.vote_batch


def _counted(part, *args, **kwargs):
    VOTED.append(part.start)
    return _VOTE_BATCH(part, *args, **kwargs)


def test_a_stream_within_early_rows_is_voted_on_the_validation_read(tmp_path, monkeypatch, thread_cluster_yaml) -> None:
    _trained(tmp_path, ["early", "late"], thread_cluster_yaml)
    voted = VOTED
    voted.clear()
    monkeypatch.setattr(query_release, "vote_batch", _counted)
    assert main([*_answer(tmp_path, "early"), "--cluster", thread_cluster_yaml]) == 0
    assert voted == []  # every part's votes came from the validation pass
    monkeypatch.setattr(query_release, "EARLY_ROWS", 600)  # three parts of 200 on the read, the rest in the loop
    assert main([*_answer(tmp_path, "late"), "--cluster", thread_cluster_yaml]) == 0
    assert sorted(voted) == list(range(600, 2000, 200))  # (two worker threads: in either order)
    logs = [pq.read_table(tmp_path / f"log-{name}").sort_by("query_id") for name in ("early", "late")]
    for column in ("query_id", "answer", "status", "source"):  # the same seeded session answers the same
        assert logs[0].column(column).to_pylist() == logs[1].column(column).to_pylist(), column
    assert logs[0].num_rows == 2000
