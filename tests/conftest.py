"""Shared fixtures: small datasets written to tmp, and an in-process Dask cluster."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from distributed import Client

# A false-failure rate fixed for every statistical test in the suite.
P_FAIL = 1e-6

# Certifiable A_SubSamp settings for tests (issue 10: w is a privacy parameter, so no test passes
# --threshold; pcqr takes the smallest certifiable w). Both certificates are true; their eps is
# meaningless as privacy, which is fine for tests of mechanics.
#
# MECHANICS: k = 50 models answer almost every unanimous query (lambda 0.70, w 14, a unanimous
# query abstains with probability 3e-4, proven (57.4, 9.7e-4)); abstentions are the queries near
# the concept's boundary. For the ledger, the CLI, replay and the cluster.
MECHANICS = {"epsilon": 100.0, "delta": 1e-3, "cutoff": 20, "subsamples": 50}
# DENSE_BOTTOMS: T = 400, tight profile: lambda 8.78, w 194.5, k = 430 just above 2w = 389, so a
# unanimous query abstains with probability 0.19; on the 20,000-row realizable data of the crash
# tests 260 of 2,000 queries abstained, spread over the stream, without halting; proven (25, 1.0e-3).
# For crash tests, where abstentions must come often and at random.
DENSE_BOTTOMS = {"epsilon": 25.0, "delta": 1e-3, "cutoff": 400, "subsamples": 430}


def privacy_options(setting: dict[str, float]) -> list[str]:
    """A setting above as command-line options: ``--epsilon 100 --delta 0.001 ...``."""
    return [arg for key, value in setting.items() for arg in (f"--{key}", f"{value:g}")]


# Both settings are the stability gate's (Algorithm 5: abstentions are what T counts); named, since
# without --gate pcqr chooses a gate from public parameters.
STABILITY = ["--gate", "stability"]
# ... and the stump's: these settings test the mechanics (gates, ledger, logs, crashes), which do not
# depend on the learner, and the stump votes fastest. The default learner ('auto', a tree as deep as
# n / k supports) is tested in test_learners.py and test_one_label.py.
STUMP = ["--learner", "stump"]
MECHANICS_PRIVACY = [*privacy_options(MECHANICS), *STABILITY, *STUMP]
DENSE_BOTTOMS_PRIVACY = [*privacy_options(DENSE_BOTTOMS), *STABILITY, *STUMP]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files holding a ``slow`` test run first, the rest in their usual order: pytest-xdist hands each
    worker whole files (pyproject.toml), and a long test handed out last would leave the other idle."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """The base folder holds the tests' generated "private" datasets: removed when none of the tests
    failed. tmp_path_retention_policy = "failed" (pyproject.toml) removes only passed tests' tmp_path,
    never the folders of module- and session-scoped fixtures, and the controller never sees a
    pytest-xdist worker's folders; so each process removes its own."""
    import shutil

    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is not None and not session.testsfailed:  # a worker's, or a run without workers (-n 0)
        shutil.rmtree(factory.getbasetemp(), ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def suite_tmpdir(tmp_path_factory) -> Iterator[Path]:
    """$TMPDIR of the suite and of every process it starts (CLI runs, dask scheduler and workers):
    a folder of its own, removed at the end. A process the crash tests kill with SIGKILL cannot
    remove its private temporary folders (pcqr.pipeline.data.private_folder); they go with this one."""
    import shutil
    import tempfile

    folder = tmp_path_factory.mktemp("tmpdir")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TMPDIR", str(folder))
        patch.setattr(tempfile, "tempdir", str(folder))
        yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def no_heartbeat() -> Iterator[None]:
    """No sign-of-life line (pcqr.pipeline.session.progress: one every HEARTBEAT_S seconds of silence
    while a phase runs) in commands the suite runs in its own process: on a loaded machine a refusal
    can come after 15 s, and its one line would get a heartbeat before it. tests/test_sign_of_life.py
    sets its own interval."""
    from pcqr.pipeline.session import progress

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(progress, "HEARTBEAT_S", 1e9)
        yield


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
    from pcqr.pipeline.data.cluster import open_client

    with open_client(write_thread_cluster(tmp_path_factory.mktemp("client"))) as c:
        yield c


def write_thread_cluster(folder: Path) -> str:
    """FOLDER/cluster.yaml for CLI runs: a local cluster of threads (fast to start, no worker
    processes to spawn); returns its path."""
    path = folder / "cluster.yaml"
    path.write_text("pcqr:\n  cluster:\n    backend: local\n    n-workers: 1\n"
                    "    threads-per-worker: 2\n    processes: false\n")
    return str(path)


@pytest.fixture
def thread_cluster_yaml(tmp_path) -> str:
    """A cluster.yaml for CLI tests: a local cluster of threads."""
    return write_thread_cluster(tmp_path)


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


def write_session_data(root: Path, rows: int = 20_000, queries: int = 2000) -> Path:
    """ROOT/private (labelled threshold data in row groups of 5,000) and ROOT/queries (query_id +
    features): the small session most CLI tests run."""
    write_parquet(str(root / "private" / "p.parquet"), threshold_data(rows, seed=1), row_group_size=5000)
    q = threshold_data(queries, seed=2)
    write_parquet(str(root / "queries" / "p.parquet"),
                  {"query_id": np.arange(queries), **{k: v for k, v in q.items() if k != "label"}})
    return root


def answer_two_ways(root: Path, capsys: pytest.CaptureFixture[str], cluster: str, train: list[str],
                    answer: list[str]) -> tuple[list[dict], pa.Table]:
    """Two seeded sessions trained alike (``pcqr train`` + ``train``), asked the same 2,000 queries:
    "one" in two calls (1,200 then 800, batch sizes 500 then 300: the second rebuilds whatever it
    keeps from the log), "two" in one call (batch size 700). Asserts that the two logs agree row for
    row (query_id, answer, status, source); returns the answer summaries and the second log."""
    import json

    from pcqr.jobs.cli import main

    write_session_data(root, rows=20_000, queries=2000)
    both = pq.read_table(root / "queries")
    for name, rows in (("qa", both.slice(0, 1200)), ("qb", both.slice(1200))):
        write_parquet(str(root / name / "p.parquet"), {c: rows.column(c).to_numpy() for c in rows.column_names})
    for state in ("one", "two"):
        assert main(["train", "--private", str(root / "private"), "--state", str(root / state), "--seed", "5",
                     "--insecure-seed", "--cluster", cluster, *train]) == 0
    capsys.readouterr()
    for state, queries, log, size in (("one", "qa", "log1", 500), ("one", "qb", "log1", 300),
                                      ("two", "queries", "log2", 700)):
        assert main(["answer", "--state", str(root / state), "--queries", str(root / queries), "--log",
                     str(root / log), "--cluster", cluster, "--json", "--batch-size", str(size), *answer]) == 0
    summaries = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    logs = [pq.read_table(root / log).sort_by("query_id") for log in ("log1", "log2")]
    for column in ("query_id", "answer", "status", "source"):
        assert logs[0].column(column).to_pylist() == logs[1].column(column).to_pylist(), column
    return summaries, logs[1]


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[object]:
    """A real PostgreSQL server for this pytest process (tests/postgres_server.py), stopped and removed
    at the end. Missing PostgreSQL skips the test with the reason, except under CI=true, where it fails."""
    from tests.postgres_server import PostgresServer, find_postgres

    bindir, why = find_postgres()
    if bindir is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI needs a PostgreSQL server for the team ledger's tests: {why}")
        pytest.skip(why)
    server = PostgresServer(bindir)
    try:
        yield server
    finally:
        server.close()


_DATABASES = iter(range(10**6))
#: The roles of every team ledger the tests copy from TEMPLATE (the owner, and one analyst it granted).
LEDGER_OWNER, LEDGER_ANALYST, LEDGER_TEMPLATE = "ledger_owner", "ledger_analyst", "ledger_template"


@pytest.fixture
def postgres_database(postgres_server) -> object:
    """A fresh database on the server, owned by a fresh non-superuser role, and a fresh analyst role
    (nothing granted yet): ``admin_url`` (the owner's), ``analyst_url``, ``superuser_url`` (this
    database, as the superuser), ``database``, and ``analyst(name)`` for one more analyst role."""
    n = next(_DATABASES)
    owner, analyst, database = f"owner_{os.getpid()}_{n}", f"analyst_{os.getpid()}_{n}", f"ledger_{os.getpid()}_{n}"
    postgres_server.execute(f"CREATE ROLE {owner} LOGIN PASSWORD 'p'", f"CREATE ROLE {analyst} LOGIN PASSWORD 'p'",
                            f"CREATE DATABASE {database} OWNER {owner}")
    return _database(postgres_server, owner, analyst, database)


@pytest.fixture
def team_ledger(postgres_server) -> object:
    """A fresh database holding a team ledger (``pcqr ledger init`` by ``admin_url``'s role, with
    ``analyst_url``'s role granted): a copy of one template made once per server, which is faster than
    creating the schema for every test. Attributes as :func:`postgres_database`'s."""
    if not getattr(postgres_server, "ledger_template", False):
        from pcqr.pipeline.budget.team_ledger import init_ledger

        postgres_server.execute(f"CREATE ROLE {LEDGER_OWNER} LOGIN PASSWORD 'p'",
                                f"CREATE ROLE {LEDGER_ANALYST} LOGIN PASSWORD 'p'",
                                f"CREATE DATABASE {LEDGER_TEMPLATE} OWNER {LEDGER_OWNER}")
        init_ledger(postgres_server.url(LEDGER_OWNER, "p", LEDGER_TEMPLATE), LEDGER_ANALYST)
        postgres_server.ledger_template = True
    database = f"team_{os.getpid()}_{next(_DATABASES)}"
    postgres_server.execute(f"CREATE DATABASE {database} TEMPLATE {LEDGER_TEMPLATE} OWNER {LEDGER_OWNER}")
    return _database(postgres_server, LEDGER_OWNER, LEDGER_ANALYST, database)


def _database(postgres_server, owner: str, analyst: str, database: str) -> object:
    from types import SimpleNamespace

    def more(name: str) -> str:
        postgres_server.execute(f"CREATE ROLE {name} LOGIN PASSWORD 'p'")
        return postgres_server.url(name, "p", database)

    return SimpleNamespace(admin_url=postgres_server.url(owner, "p", database),
                           analyst_url=postgres_server.url(analyst, "p", database),
                           superuser_url=postgres_server.superuser_url.replace("/postgres?", f"/{database}?"),
                           database=database, analyst=more, server=postgres_server, owner=owner,
                           analyst_role=analyst)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[object]:
    """A real S3-compatible server for this pytest process (tests/s3_server.py: moto's server mode on
    127.0.0.1), stopped at the end. Missing moto skips the test with the reason, except under CI=true,
    where it fails."""
    from tests.s3_server import S3Server, find_moto

    why = find_moto()
    if why is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI needs an S3-compatible server for the object-storage tests: {why}")
        pytest.skip(why)
    server = S3Server()
    try:
        yield server
    finally:
        server.stop()


_BUCKETS = iter(range(10**6))


@pytest.fixture
def s3(s3_server, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """A new bucket on the S3 server for this test (tests/s3_server.py's Bucket), with this process's AWS
    variables pointing at the server (restored after the test), as a user's shell would."""
    from pcqr.pipeline.data import object_store
    from tests.s3_server import Bucket

    for name, value in s3_server.environment().items():
        monkeypatch.setenv(name, value)
    object_store.configure(None)
    yield Bucket(s3_server, s3_server.create_bucket(f"pcqr-{os.getpid()}-{next(_BUCKETS)}"))
    object_store.configure(None)
