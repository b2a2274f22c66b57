"""Tests for pcqr.pipeline.data.cluster: cluster.yaml -> a Dask Client."""
from __future__ import annotations

import importlib
import json
import operator
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dask.config
import psutil
import pytest
import yaml
from distributed import Client

from pcqr.pipeline.data.cluster import ClusterConfig, load_cluster_config, local_dashboard, local_processes, open_client
from pcqr.pipeline.errors import PcqrError

REPO = Path(__file__).resolve().parents[1]
STARTUP_TIMEOUT = 30.0


def _write(folder: Path, config: dict[str, Any] | str, name: str = "cluster.yaml") -> Path:
    path = folder / name
    path.write_text(config if isinstance(config, str) else yaml.safe_dump(config), encoding="utf-8")
    return path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _listening_ips(proc: psutil.Process) -> set[str]:
    """Addresses that this process and its children (worker processes) listen on."""
    procs = [proc, *proc.children(recursive=True)]
    return {c.laddr.ip for p in procs for c in p.net_connections() if c.status == psutil.CONN_LISTEN}


@pytest.fixture(autouse=True)
def _hermetic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run each test in an empty folder with no pcqr settings in the environment."""
    monkeypatch.chdir(tmp_path)
    for name in list(os.environ):
        if name.startswith("DASK_PCQR"):
            monkeypatch.delenv(name)


@pytest.fixture(scope="module")
def scheduler(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A `dask scheduler` and one `dask worker`, started as separate processes on 127.0.0.1."""
    folder = tmp_path_factory.mktemp("scheduler")
    sched_file = folder / "scheduler.json"
    log = (folder / "processes.log").open("w")
    procs: list[subprocess.Popen[bytes]] = []

    def start(*args: str) -> None:
        procs.append(subprocess.Popen([sys.executable, "-m", *args], stdout=log, stderr=subprocess.STDOUT))

    try:
        start("distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
              "--dashboard-address", "127.0.0.1:0", "--scheduler-file", str(sched_file))
        deadline = time.monotonic() + STARTUP_TIMEOUT
        address = None
        while address is None:
            assert procs[0].poll() is None, f"scheduler exited; see {log.name}"
            assert time.monotonic() < deadline, f"scheduler not ready; see {log.name}"
            try:
                address = json.loads(sched_file.read_text())["address"]
            except (OSError, ValueError, KeyError):
                time.sleep(0.1)
        start("distributed.cli.dask_worker", address, "--host", "127.0.0.1", "--nthreads", "1",
              "--no-nanny", "--no-dashboard", "--memory-limit", "0")
        with Client(address, timeout="10s") as client:
            client.wait_for_workers(1, timeout=STARTUP_TIMEOUT)
        yield {"address": address, "scheduler_file": sched_file, "processes": procs}
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=2)  # a worker without nanny may linger on SIGTERM (it waited the whole 10 s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()


def test_default_is_local_on_loopback() -> None:
    # the session-wide `client` fixture's cluster.yaml (processes: false) stays in dask's config
    # while it is open; this test is about the built-in default, processes: auto
    with dask.config.set({"pcqr.cluster.processes": "auto"}):
        _default_is_local_on_loopback()


def _default_is_local_on_loopback() -> None:
    config = load_cluster_config(None)
    assert config == ClusterConfig(None, "local", config.options, config.dask_config)
    assert config.options["dashboard-address"] is None
    lines: list[str] = []
    with open_client(None, echo=lines.append) as client:  # processes, and no dashboard: none was asked for
        assert client.scheduler.address.startswith("tcp://127.0.0.1:")
        workers = client.scheduler_info()["workers"]
        assert workers and all(addr.startswith("tcp://127.0.0.1:") for addr in workers)
        assert client.cluster.scheduler.http_server.address == "127.0.0.1"
        assert _listening_ips(psutil.Process()) == {"127.0.0.1"}
        assert client.submit(operator.add, 1, 1).result() == 2
    assert client.status == "closed"
    assert lines == []  # no dashboard line unless one was asked for


def _status_page(client: Any) -> int:
    """The HTTP status of the scheduler's dashboard page (its HTTP server runs either way)."""
    port = client.scheduler_info()["services"]["dashboard"]
    try:
        return int(urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=10).status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def test_a_dashboard_and_its_line_only_when_asked_for(tmp_path: Path) -> None:
    """``dashboard-address`` null (the default) or ``auto`` (older files): no dashboard (its start would
    be ~0.4 s of a short answer run) and no line, threads or processes; a port starts one and pcqr
    prints its address."""
    assert local_dashboard("auto") is None and local_dashboard(None) is None
    assert local_dashboard("127.0.0.1:8787") == "127.0.0.1:8787"
    for setting in ({}, {"dashboard-address": "auto"}):
        path = _write(tmp_path, {"pcqr": {"cluster": {"n-workers": 1, **setting}}})
        lines: list[str] = []
        with open_client(str(path), echo=lines.append, array_work=True) as client:
            assert _status_page(client) == 404
        assert lines == []
    path = _write(tmp_path, {"pcqr": {"cluster": {"n-workers": 1, "dashboard-address": ":0"}}})
    lines = []
    with open_client(str(path), echo=lines.append, array_work=True) as client:
        assert _status_page(client) == 200
    assert len(lines) == 1 and lines[0].startswith("dashboard: http://127.0.0.1:")
    assert load_cluster_config(str(_write(tmp_path, {"pcqr": {"cluster": {"dashboard-address": None}}}))
                               ).options["dashboard-address"] is None


def test_worker_threads_run_one_blas_thread(tmp_path: Path) -> None:
    """Workers that are threads of this process get one BLAS thread (as Dask gives worker
    processes), restored when the cluster closes; worker processes leave this process's alone."""
    from threadpoolctl import threadpool_info

    importlib.import_module("numpy")  # loads the BLAS threadpoolctl reports

    def blas() -> list[int]:
        return [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]

    before = blas()
    path = _write(tmp_path, {"pcqr": {"cluster": {"n-workers": 1}}})
    with open_client(str(path), array_work=True) as client:
        assert blas() and set(blas()) == {1}
        assert set(client.submit(blas, pure=False).result()) == {1}  # inside a worker task too
    assert blas() == before


def test_a_local_cluster_keeps_a_short_history(tmp_path: Path) -> None:
    """A local cluster's scheduler and workers keep 100 transitions and events and 10 computations,
    not Dask's 1,000 and 100 (each holding a task's arguments: a driver whose workers are threads
    grew with every log batch up to the caps; issue 32). The user's configuration is back afterwards."""
    import dask

    keys = ("distributed.admin.low-level-log-length", "distributed.diagnostics.computations.max-history")
    before = [dask.config.get(key) for key in keys]
    path = _write(tmp_path, {"pcqr": {"cluster": {"n-workers": 1}}})
    with open_client(str(path), array_work=True) as client:
        assert client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.computations.maxlen) == 10
        assert client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.transition_log.maxlen) == 100
    assert [dask.config.get(key) for key in keys] == before


def test_threads_only_local_listens_on_loopback_only(tmp_path: Path) -> None:
    path = _write(tmp_path, {"pcqr": {"cluster": {"n-workers": 1, "processes": False}}})
    with open_client(str(path)) as client:
        assert client.scheduler.address.startswith("tcp://127.0.0.1:")
        assert _listening_ips(psutil.Process()) == {"127.0.0.1"}
        assert client.submit(operator.add, 1, 1).result() == 2


def test_processes_auto_makes_threads_for_array_work_only(tmp_path: Path) -> None:
    """``processes: auto`` (the default): the workers are threads of this process when the command
    says its tasks are array work, processes otherwise; true / false are obeyed either way."""
    assert local_processes("auto", array_work=True) is False and local_processes("auto", array_work=False) is True
    assert local_processes(True, array_work=True) is True and local_processes(False, array_work=False) is False
    defaults = yaml.safe_load((REPO / "pipeline" / "data" / "cluster-defaults.yaml").read_text())
    assert defaults["pcqr"]["cluster"]["processes"] == "auto"
    assert load_cluster_config(str(REPO / "cluster.yaml")).options["processes"] == "auto"
    path = _write(tmp_path, {"pcqr": {"cluster": {"n-workers": 1}}})
    with open_client(str(path), array_work=True) as client:
        assert client.run(os.getpid) == {w: os.getpid() for w in client.scheduler_info()["workers"]}


def test_cluster_yaml_in_current_folder_is_used(tmp_path: Path) -> None:
    _write(tmp_path, {"pcqr": {"cluster": {"n-workers": 3}}})
    config = load_cluster_config(None)
    assert config.source == Path("cluster.yaml") and config.options["n-workers"] == 3


def test_repo_example_is_valid() -> None:
    config = load_cluster_config(str(REPO / "cluster.yaml"))
    assert config.backend == "local"
    assert config.options["n-workers"] == 2 and config.options["threads-per-worker"] == 1
    assert config.options["memory-limit"]


def test_address_backend(tmp_path: Path, scheduler: dict[str, Any]) -> None:
    path = _write(tmp_path, {"pcqr": {"cluster": {"backend": "address", "address": scheduler["address"]}}})
    lines: list[str] = []
    with open_client(str(path), echo=lines.append) as client:
        assert client.scheduler.address == scheduler["address"]
        assert client.submit(operator.add, 41, 1).result() == 42
    assert lines == []  # a remote scheduler: no dashboard line (none was asked for)
    assert all(proc.poll() is None for proc in scheduler["processes"])  # not ours to shut down


def test_scheduler_file_backend_resolves_relative_to_yaml(scheduler: dict[str, Any]) -> None:
    folder = scheduler["scheduler_file"].parent  # cwd is elsewhere: the path must resolve from here
    path = _write(folder, {"pcqr": {"cluster": {"backend": "scheduler-file",
                                                "scheduler-file": "scheduler.json"}}}, "sf.yaml")
    with open_client(str(path)) as client:
        assert client.scheduler.address == scheduler["address"]
        assert client.submit(operator.add, 2, 1).result() == 3


def test_spec_backend_scales(tmp_path: Path) -> None:
    kwargs = {"n_workers": 0, "processes": False, "host": "127.0.0.1", "protocol": "tcp://",
              "dashboard-address": "127.0.0.1:0"}
    path = _write(tmp_path, {"pcqr": {"cluster": {"backend": "spec", "class": "distributed.LocalCluster",
                                                  "kwargs": kwargs, "scale": 1}}})
    with open_client(str(path)) as client:
        client.wait_for_workers(1, timeout=STARTUP_TIMEOUT)
        assert client.submit(operator.add, 3, 1).result() == 4


def test_environment_overrides_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path, {"distributed": {"scheduler": {"allowed-failures": 7}},
                             "pcqr": {"cluster": {"backend": "local", "n-workers": 2}}})
    monkeypatch.setenv("DASK_PCQR__CLUSTER__BACKEND", "address")
    monkeypatch.setenv("DASK_PCQR__CLUSTER__ADDRESS", "tcp://127.0.0.1:8786")
    monkeypatch.setenv("DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES", "9")
    config = load_cluster_config(str(path))
    assert config.backend == "address"
    assert config.options["address"] == "tcp://127.0.0.1:8786"
    assert dask.config.get("distributed.scheduler.allowed-failures", config=config.dask_config) == 9
    monkeypatch.setenv("DASK_PCQR__CLUSTER__BACKEND", "local")
    monkeypatch.setenv("DASK_PCQR__CLUSTER__N_WORKERS", "5")
    assert load_cluster_config(str(path)).options["n-workers"] == 5


def test_dask_keys_apply_while_open_and_reach_workers(tmp_path: Path) -> None:
    path = _write(tmp_path, {"distributed": {"scheduler": {"allowed-failures": 7}},
                             "pcqr": {"cluster": {"n-workers": 1, "threads-per-worker": 1}}})
    before = dask.config.get("distributed.scheduler.allowed-failures")
    assert load_cluster_config(str(path)).dask_config["distributed"]["scheduler"]["allowed-failures"] == 7
    with open_client(str(path)) as client:
        assert dask.config.get("distributed.scheduler.allowed-failures") == 7
        assert dask.config.get("distributed.scheduler.work-stealing") is not None  # merged, not replaced
        seen = client.run(lambda: dask.config.get("distributed.scheduler.allowed-failures"))
        assert list(seen.values()) == [7]  # worker processes see the file's config too
    assert dask.config.get("distributed.scheduler.allowed-failures") == before


def test_unreachable_scheduler_fails_fast(tmp_path: Path) -> None:
    path = _write(tmp_path, {"distributed": {"comm": {"timeouts": {"connect": "1s"}}},
                             "pcqr": {"cluster": {"backend": "address",
                                                  "address": f"tcp://127.0.0.1:{_free_port()}"}}})
    start = time.monotonic()
    with pytest.raises(PcqrError) as info, open_client(str(path)):
        pass
    assert time.monotonic() - start < 15
    _assert_one_line(info.value, str(path), "pcqr.cluster.address")


def _assert_one_line(error: PcqrError, *parts: str) -> None:
    message = str(error)
    assert "\n" not in message
    for part in parts:
        assert part in message, (part, message)


BAD_CONFIGS: list[tuple[str, str, str]] = [
    ("unknown-backend", "pcqr: {cluster: {backend: foo}}\n", "pcqr.cluster.backend: unknown backend 'foo'"),
    ("invalid-yaml", "pcqr:\n  cluster: [1, 2\n  backend: x\n", "line 3"),
    ("unimportable-class", "pcqr: {cluster: {backend: spec, class: no_such_pkg.Cluster}}\n",
     "pcqr.cluster.class: cannot import 'no_such_pkg.Cluster'"),
    ("not-a-cluster", "pcqr: {cluster: {backend: spec, class: collections.OrderedDict}}\n", "pcqr.cluster.class"),
    ("bad-type", "pcqr: {cluster: {n-workers: two}}\n", "pcqr.cluster.n-workers: expected"),
    ("bad-memory", "pcqr: {cluster: {memory-limit: lots}}\n", "pcqr.cluster.memory-limit"),
    ("public-dashboard", "pcqr: {cluster: {dashboard-address: '0.0.0.0:8787'}}\n",
     "pcqr.cluster.dashboard-address"),
    ("missing-address", "pcqr: {cluster: {backend: address}}\n", "pcqr.cluster.address"),
    ("bad-scheme", "pcqr: {cluster: {backend: address, address: 'http://x:1'}}\n", "pcqr.cluster.address"),
    ("missing-cert", "pcqr: {cluster: {backend: address, address: 'tls://x:1', tls: {ca-file: ca.pem}}}\n",
     "pcqr.cluster.tls.ca-file: no such file"),
    ("top-level-list", "- 1\n", "(top level): expected a mapping"),
    ("unknown-key", "pcqr: {cluster: {n-wrokers: 2}}\n", "pcqr.cluster.n-wrokers: unknown key"),
    ("address-without-backend", "pcqr: {cluster: {address: 'tcp://x:1'}}\n", "pcqr.cluster.address"),
    ("scale-and-adapt", "pcqr: {cluster: {backend: spec, class: distributed.LocalCluster, scale: 1,"
     " adapt: {maximum: 2}}}\n", "pcqr.cluster.adapt"),
    ("not-a-mapping", "pcqr: {cluster: 5}\n", "pcqr.cluster: expected a mapping"),
    ("processes-word", "pcqr: {cluster: {processes: sometimes}}\n", "pcqr.cluster.processes: expected true, false or auto"),
]


@pytest.mark.parametrize(("name", "text", "expected"), BAD_CONFIGS, ids=[c[0] for c in BAD_CONFIGS])
def test_user_errors_name_file_and_key(tmp_path: Path, name: str, text: str, expected: str) -> None:
    path = _write(tmp_path, text, f"{name}.yaml")
    for call in (load_cluster_config, lambda p: open_client(p).__enter__()):
        with pytest.raises(PcqrError) as info:
            call(str(path))
        _assert_one_line(info.value, f"{name}.yaml: ", expected)


def test_address_backend_passes_tls_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "certs").mkdir()
    for name in ("ca.pem", "client.pem", "client.key"):
        (tmp_path / "certs" / name).write_text("not really a certificate\n")
    tls = {"ca-file": "certs/ca.pem", "cert": "certs/client.pem", "key": "certs/client.key"}
    path = _write(tmp_path, {"pcqr": {"cluster": {"backend": "address", "address": "tls://127.0.0.1:1", "tls": tls}}})
    seen: dict[str, Any] = {}

    def fake_client(**kwargs: Any) -> Client:
        seen.update(kwargs)
        raise OSError("Timed out trying to connect")

    monkeypatch.chdir("/")  # relative certificate paths resolve from the cluster.yaml's folder, not the cwd
    monkeypatch.setattr("pcqr.pipeline.data.cluster.Client", fake_client)
    with pytest.raises(PcqrError) as info, open_client(str(path)):
        pass
    _assert_one_line(info.value, str(path), "pcqr.cluster.address: cannot reach the scheduler")
    security = seen["security"]
    assert security.require_encryption
    assert security.tls_ca_file == str(tmp_path / "certs" / "ca.pem")
    assert security.tls_client_cert == str(tmp_path / "certs" / "client.pem")
    assert security.tls_client_key == str(tmp_path / "certs" / "client.key")
    path.write_text(path.read_text().replace("tls://", "tcp://"))
    with pytest.raises(PcqrError) as info:
        load_cluster_config(str(path))
    _assert_one_line(info.value, "pcqr.cluster.tls: needs a tls:// address")


def test_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(PcqrError) as info:
        load_cluster_config(str(tmp_path / "nope.yaml"))
    _assert_one_line(info.value, "nope.yaml: --cluster: no such file")


def test_error_from_environment_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DASK_PCQR__CLUSTER__BACKEND", "foo")
    with pytest.raises(PcqrError) as info:
        load_cluster_config(None)
    _assert_one_line(info.value, "pcqr.cluster.backend", "DASK_PCQR__CLUSTER__BACKEND", "unknown backend 'foo'")
