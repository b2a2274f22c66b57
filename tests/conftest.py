"""Shared fixtures: small datasets written to tmp, and an in-process Dask cluster."""
from __future__ import annotations

import os
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from distributed import Client

# A false-failure rate fixed for every statistical test in the suite.
P_FAIL = 1e-6


@pytest.fixture(scope="session", autouse=True)
def test_ledger(tmp_path_factory) -> Iterator[str]:
    """The suite charges its own ledger (never the user's ~/.local/share/pcqr/ledger.sqlite),
    from the first fixture on; tests that need an empty one pass --ledger or set PCQR_LEDGER."""
    path = str(tmp_path_factory.mktemp("ledger") / "ledger.sqlite")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PCQR_LEDGER", path)
        yield path


@pytest.fixture(scope="session")
def client(tmp_path_factory) -> Iterator[Client]:
    """One small cluster of threads (loopback only, as pcqr opens it) for tests that call
    pipeline functions directly."""
    from pipeline.cluster import open_client

    path = tmp_path_factory.mktemp("client") / "cluster.yaml"
    path.write_text("pcqr:\n  cluster:\n    backend: local\n    n-workers: 1\n"
                    "    threads-per-worker: 2\n    processes: false\n")
    with open_client(str(path)) as c:
        yield c


@pytest.fixture
def thread_cluster_yaml(tmp_path) -> str:
    """A cluster.yaml for CLI tests: a local cluster of threads (fast to start)."""
    path = tmp_path / "cluster.yaml"
    path.write_text(
        "pcqr:\n  cluster:\n    backend: local\n    n-workers: 1\n"
        "    threads-per-worker: 2\n    processes: false\n"
    )
    return str(path)


def write_parquet(path: str, columns: dict[str, object], row_group_size: int | None = None) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(pa.table(columns), path, row_group_size=row_group_size)
    return path


def threshold_data(rows: int, features: int = 3, seed: int = 0, noise: float = 0.0) -> dict[str, np.ndarray]:
    """Labels 1 iff x0 > 0.1, optionally flipped with probability noise."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(rows, features))
    y = (X[:, 0] > 0.1).astype(np.int8)
    if noise:
        y ^= (rng.random(rows) < noise).astype(np.int8)
    columns: dict[str, np.ndarray] = {f"x{j}": X[:, j] for j in range(features)}
    columns["label"] = y
    return columns
