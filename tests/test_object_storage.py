"""Datasets, logs and released tables in object storage (issue 32), against a real S3-compatible server
(moto's server mode on 127.0.0.1: tests/s3_server.py, the ``s3`` fixture of tests/conftest.py).

* pipeline/data/object_store.py: a conditional put writes a key once; listing, refusals in one line.
* The README's commands, on a cluster of separate processes that share nothing but the bucket and
  learn the S3 settings from the driver's cluster.yaml: generate into the bucket, train, answer into
  a bucket log (again: nothing asked), replay and report it; sanitize into the bucket and answer from
  its table. No credential appears in any output, log, state, ledger or object.
* The commit protocol on a bucket (pipeline/session/commit.py): a batch already put with the same
  bytes is accepted, other bytes are refused, a committed batch still pending is published on resume.
"""
from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pcqr.jobs.cli import main
from pcqr.pipeline.data import locations, object_store
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.session import commit
from tests.s3_server import ACCESS_KEY, SECRET_KEY

PRIVACY = ["--epsilon", "4", "--cutoff", "20", "--subsamples", "50"]


def _pcqr(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# --- the store -------------------------------------------------------------------------------------


def test_a_key_is_put_once_and_never_replaced(s3) -> None:
    uri = s3.uri("log/batch-00000000.parquet")
    assert object_store.put_once(uri, b"first")
    assert not object_store.put_once(uri, b"second")
    assert s3.read("log/batch-00000000.parquet") == b"first"
    object_store.put(s3.uri("log/_released-model.json"), b"{}")
    assert locations.names_in(s3.uri("log")) == ["_released-model.json", "batch-00000000.parquet"]
    assert locations.is_folder(s3.uri("log")) and not locations.is_folder(s3.uri("nothing"))
    assert locations.names_in(s3.uri("nothing")) == []
    assert locations.read_file(uri, "log batch", 100) == b"first"
    with pytest.raises(PcqrError, match="more than pcqr reads"):
        locations.read_file(uri, "log batch", 3)


def test_refusals_are_one_line_and_name_the_location(s3, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(PcqrError, match=r"^--out s3://no-such-bucket/x: the bucket does not exist$"):
        object_store.check_writable("s3://no-such-bucket/x", "--out")
    with pytest.raises(PcqrError, match="credentials in a URI are refused"):
        object_store.check_writable(f"s3://{ACCESS_KEY}:{SECRET_KEY}@{s3.name}/x", "--out")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there
    object_store.configure(None)
    with pytest.raises(PcqrError, match="cannot be reached") as refused:
        object_store.check_writable(s3.uri("x"), "--log")
    assert "\n" not in str(refused.value) and SECRET_KEY not in str(refused.value)


def test_without_boto3_a_write_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "boto3", None)  # import boto3 raises ImportError
    object_store.configure(None)
    try:
        with pytest.raises(PcqrError, match=r"^--out s3://b/x: writing to s3:// needs boto3: pip install 'pcqr\[s3\]'$"):
            object_store.check_writable("s3://b/x", "--out")
    finally:
        object_store.configure(None)


def test_settings_never_show_the_secret() -> None:
    settings = object_store.settings_from({"AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_ACCESS_KEY_ID": ACCESS_KEY},
                                          {"AWS_REGION": "eu-west-1", "AWS_ACCESS_KEY_ID": "from-the-file"})
    assert settings.access_key_id == ACCESS_KEY and settings.region == "eu-west-1"  # the environment wins
    assert SECRET_KEY not in repr(settings) and SECRET_KEY not in str(settings)
    with pytest.raises(PcqrError, match=r"cluster.yaml: pcqr.storage.AWS_SECRET: unknown key"):
        object_store.settings_from({}, {"AWS_SECRET": "x"})


def _assert_no_secret(tmp_path: Path, s3, bucket: str | None = None) -> None:
    """Neither credential is in any local file (state, ledger, outputs, the cluster's processes' output)
    but the cluster.yaml that holds them, or in any object of the bucket."""
    for path in tmp_path.rglob("*"):
        if path.is_file() and path.name != "cluster.yaml":
            data = path.read_bytes()
            assert SECRET_KEY.encode() not in data and ACCESS_KEY.encode() not in data, path
    for key in s3.server.keys(bucket or s3.name):
        data = s3.server.read(bucket or s3.name, key)
        assert SECRET_KEY.encode() not in data and ACCESS_KEY.encode() not in data, key


def test_a_released_model_in_the_bucket_predicts_into_the_bucket(s3, tmp_path: Path, capsys, monkeypatch) -> None:
    """learn --out, predict MODEL QUERIES --out: the model, the queries and the predictions all in the bucket."""
    from tests.conftest import threshold_data, write_thread_cluster

    monkeypatch.setenv("PCQR_LEDGER", str(tmp_path / "ledger.sqlite"))
    cluster = write_thread_cluster(tmp_path)
    sink = io.BytesIO()
    pq.write_table(pa.table(threshold_data(20000, seed=3)), sink)
    object_store.put(s3.uri("private/part-0.parquet"), sink.getvalue())
    sink = io.BytesIO()
    pq.write_table(pa.table(threshold_data(500, seed=4)).drop(["label"]), sink)
    object_store.put(s3.uri("queries/part-0.parquet"), sink.getvalue())
    code, _, err = _pcqr(capsys, "learn", "--algorithm", "label-private", "--private", s3.uri("private"), "--features",
                         "x0", "--hypothesis", "threshold", "--features-are-public", "--epsilon", "1",
                         "--out", s3.uri("model.json"), "--cluster", cluster)
    assert code == 0, err
    code, _, err = _pcqr(capsys, "predict", s3.uri("model.json"), s3.uri("queries"), "--out", s3.uri("predictions"),
                         "--allow-private-overlap", "--cluster", cluster)
    assert code == 0, err
    assert s3.keys("predictions/") == ["predictions/part-00000.parquet"]
    assert pq.read_table(io.BytesIO(s3.read("predictions/part-00000.parquet"))).num_rows == 500


def test_a_state_in_the_bucket_is_refused_and_nothing_is_charged(s3, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("PCQR_LEDGER", str(tmp_path / "ledger.sqlite"))
    code, _, err = _pcqr(capsys, "train", "--private", s3.uri("data/private"), "--state", s3.uri("st"), *PRIVACY)
    assert code == 2 and "--state" in err and "local" in err and len(err.strip().splitlines()) == 1, err
    assert s3.keys() == [] and not (tmp_path / "ledger.sqlite").exists()


# --- the commit protocol on a bucket ----------------------------------------------------------------


def test_publish_accepts_its_own_batch_and_refuses_another(s3, tmp_path: Path) -> None:
    state, log = str(tmp_path / "st"), s3.uri("log")
    batch = _encoded_batch()
    commit.stage(state, 0, batch)
    commit.publish(state, log, 0, batch)
    assert s3.read("log/batch-00000000.parquet") == batch and not os.listdir(tmp_path / "st" / "pending")
    commit.publish_once(log, 0, batch)  # put again (a lost reply, a resumed run): the same bytes are fine
    with pytest.raises(PcqrError, match="batch-00000000.parquet: differs from the batch this session committed"):
        commit.publish_once(log, 0, _encoded_batch(answer=0))
    assert s3.read("log/batch-00000000.parquet") == batch


def test_recovery_publishes_a_committed_batch_still_pending(s3, tmp_path: Path) -> None:
    from pcqr.pipeline.public_log.batches import sha256

    state, log = str(tmp_path / "st"), s3.uri("log")
    batch = _encoded_batch()
    commit.stage(state, 0, batch)  # killed after the commit (steps 1-3), before the put
    note = commit.recover(state, log, 0, sha256(batch))
    assert note and "recovered batch 0" in note and s3.read("log/batch-00000000.parquet") == batch
    assert commit.recover(state, log, 0, sha256(batch)) is None  # again: published, the same bytes
    with pytest.raises(PcqrError, match="differs from the batch this session committed"):
        commit.recover(state, log, 0, sha256(b"another"))


def _encoded_batch(answer: int = 1) -> bytes:
    import numpy as np
    import pyarrow as pa

    from pcqr.pipeline.public_log.batches import batch_table, encode_batch

    queries = pa.table({"query_id": pa.array([0, 1], pa.int64()), "x0": [0.5, -0.5]})
    table = batch_table(queries, "query_id", ["x0"], np.zeros(2, np.int8), np.full(2, answer, np.int8), 0)
    return encode_batch(table, {"version": "test"}, "")


def test_read_parquet_of_an_object(s3) -> None:
    from pcqr.pipeline.data.parquet_opener import read_parquet

    sink = io.BytesIO()
    batch = _encoded_batch()
    object_store.put(s3.uri("one.parquet"), batch)
    sink.write(batch)
    assert read_parquet(s3.uri("one.parquet")).equals(pq.read_table(io.BytesIO(sink.getvalue())))


# --- the README's commands, on a cluster of separate processes that share nothing but the bucket --------


@pytest.mark.slow
def test_the_readme_section_runs_on_a_cluster_that_shares_nothing_but_the_bucket(s3, tmp_path: Path) -> None:
    """The README's "Data in object storage" commands, as written, in a folder whose cluster.yaml names
    an external cluster (a scheduler and two workers, separate processes) and the S3 settings
    (``pcqr: storage:``). Neither the cluster's processes, working in their own empty folder, nor the
    driver has an AWS variable: the workers learn the settings from the driver's client only. After
    it: the same answer again asks nothing, the workers' folder is empty, the driver's holds only
    its cluster.yaml, ledger, state and the replay, and no credential is in any file or object."""
    import subprocess

    from tests.external_cluster import ExternalCluster, _dask_cli_missing
    from tests.forked_pcqr import ForkedPcqr
    from tests.test_readme import ROOT, block_run_by

    if _dask_cli_missing():
        pytest.skip(str(_dask_cli_missing()))
    s3.server.create_bucket("pcqr-data")  # the README's bucket (this test's alone on the server)
    storage = s3.server.environment()
    bare = {name: value for name, value in os.environ.items() if not name.startswith("AWS_")}
    for folder in ("workers", "cluster", "bin", "work"):
        (tmp_path / folder).mkdir()
    cluster = ExternalCluster(tmp_path / "cluster", env=bare, cwd=tmp_path / "workers").start(workers=2, nanny=False)
    work = tmp_path / "work"
    try:
        (work / "cluster.yaml").write_text(  # the folder's cluster.yaml: every command uses it
            f"pcqr:\n  cluster:\n    backend: address\n    address: {cluster.address}\n  storage:\n"
            + "".join(f"    {name}: {value}\n" for name, value in storage.items()))
        env = {**bare, "PCQR_LEDGER": str(work / "ledger.sqlite")}
        block = block_run_by("tests/test_object_storage.py")
        with ForkedPcqr(tmp_path / "bin", env, ROOT) as forked:  # each pcqr forked from one preloaded interpreter
            result = subprocess.run(["bash", "-c", "set -e\n" + "\n".join(block)], cwd=work,
                                    env={**env, "PATH": forked.path}, capture_output=True, text=True, timeout=600)
            assert result.returncode == 0, result.stderr[-3000:]
            assert "Traceback" not in result.stderr and SECRET_KEY not in result.stdout + result.stderr
            keys = s3.server.keys("pcqr-data")
            again = subprocess.run(["bash", "-c", f"{block[2]} --json"], cwd=work, env={**env, "PATH": forked.path},
                                   capture_output=True, text=True, timeout=600)  # the same queries: nothing asked
        assert again.returncode == 0 and json.loads(again.stdout.splitlines()[-1])["already_answered"] == 3000
        assert s3.server.keys("pcqr-data") == keys  # nothing written
        assert {"census/answers/batch-00000000.parquet", "census/report.html", "census/x0.parquet"} <= set(keys)
        assert pq.read_table(work / "replayed.parquet").num_rows == 3000
        assert os.listdir(tmp_path / "workers") == []  # the workers kept nothing on their disk
        assert sorted(os.listdir(work)) == ["cluster.yaml", "ledger.sqlite", "replayed.parquet", "st"]
    finally:
        cluster.stop()
    _assert_no_secret(tmp_path, s3, "pcqr-data")
