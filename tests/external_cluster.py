"""A Dask cluster of separate processes for the tests: `dask scheduler` and `dask worker`, each in its own
process group, listening on 127.0.0.1 only (tests/test_real_cluster.py, tests/test_object_storage.py)."""
from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from distributed import Client
from distributed.security import Security

REPO = Path(__file__).resolve().parents[1]
STARTUP_TIMEOUT = 60.0


def _dask_cli_missing() -> str | None:
    """Why `dask scheduler` / `dask worker` cannot be started here (None: they can)."""
    names = {entry.name for entry in importlib.metadata.entry_points(group="dask_cli")}
    if not {"scheduler", "worker"} <= names:
        return "the dask CLI entry points 'scheduler' and 'worker' (from distributed) are not installed"
    if importlib.util.find_spec("dask.__main__") is None:
        return "`python -m dask` is not available"
    return None



# --- the cluster: separate processes, each in its own process group -------------------------------


@dataclass
class ExternalCluster:
    """`dask scheduler` + `dask worker` processes; ``tls``: {ca, cert, key} for every process."""

    folder: Path
    tls: dict[str, Path] | None = None
    address: str = ""
    scheduler: subprocess.Popen[bytes] | None = None
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    env: dict[str, str] | None = None  # the processes' environment (None: this process's)
    cwd: Path | None = None  # their working folder (None: the checkout)

    @property
    def scheduler_file(self) -> Path:
        return self.folder / "scheduler.json"

    @property
    def log(self) -> Path:
        return self.folder / "processes.log"

    def security(self) -> Security | None:
        if self.tls is None:
            return None
        return Security(tls_ca_file=str(self.tls["ca"]), tls_client_cert=str(self.tls["cert"]),
                        tls_client_key=str(self.tls["key"]), require_encryption=True)

    def _tls_args(self) -> list[str]:
        if self.tls is None:
            return []
        return ["--tls-ca-file", str(self.tls["ca"]), "--tls-cert", str(self.tls["cert"]),
                "--tls-key", str(self.tls["key"])]

    def _spawn(self, *args: str) -> subprocess.Popen[bytes]:
        env = {**(os.environ if self.env is None else self.env),
               "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
        with self.log.open("ab") as log:  # the child keeps its own descriptor
            return subprocess.Popen([sys.executable, "-m", "dask", *args], cwd=self.cwd or REPO, env=env, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)

    def start(self, workers: int, nanny: bool) -> ExternalCluster:
        protocol = ["--protocol", "tls"] if self.tls else []
        self.scheduler = self._spawn("scheduler", "--host", "127.0.0.1", "--port", "0", *protocol,
                                     "--dashboard-address", "127.0.0.1:0",
                                     "--scheduler-file", str(self.scheduler_file), *self._tls_args())
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while not self.address:
            assert self.scheduler.poll() is None, f"the scheduler exited; see {self.log}"
            assert time.monotonic() < deadline, f"the scheduler did not start; see {self.log}"
            try:
                self.address = json.loads(self.scheduler_file.read_text())["address"]
            except (OSError, ValueError, KeyError):
                time.sleep(0.05)
        for _ in range(workers):
            self.add_worker(nanny)
        with self.client() as client:
            client.wait_for_workers(workers, timeout=STARTUP_TIMEOUT)
        return self

    def add_worker(self, nanny: bool) -> None:
        self.workers.append(self._spawn(
            "worker", self.address, "--host", "127.0.0.1", "--nthreads", "1", "--nworkers", "1",
            "--nanny" if nanny else "--no-nanny", "--no-dashboard", "--memory-limit", "0", *self._tls_args()))

    def client(self) -> Client:
        return Client(self.address, security=self.security(), timeout="20s")

    def stop(self) -> None:
        """SIGKILL every process group we started (workers first), then reap the leaders."""
        procs = [*self.workers, *([self.scheduler] if self.scheduler else [])]
        for proc in procs:  # a leader stays unreaped until wait(), so its group id cannot be reused yet
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        for proc in procs:
            proc.wait(timeout=30)


