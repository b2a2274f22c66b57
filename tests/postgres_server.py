"""A throwaway PostgreSQL server for the tests and benchmarks (issue 30): ``initdb`` and ``pg_ctl``
in a temporary folder, listening on 127.0.0.1 on a free port. Its superuser ``admin`` is trusted
on the folder's Unix socket only. Every other role logs in with a password over TCP, as analysts
would (scram-sha-256).

PostgreSQL refuses to run as root. As root, the server runs as the ``postgres`` system user that
Debian's package creates (``runuser``), in a folder made in that user's home and handed to it.
"""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

SUPERUSER = "admin"


def find_postgres() -> tuple[str | None, str]:
    """(the folder of initdb and pg_ctl, "") or (None, why not)."""
    candidates = []
    try:
        candidates.append(subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True,
                                         check=True).stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        pass
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]), reverse=True)
    candidates += [os.path.dirname(p) for p in (shutil.which("pg_ctl"),) if p]
    for folder in candidates:
        if os.access(os.path.join(folder, "initdb"), os.X_OK) and os.access(os.path.join(folder, "pg_ctl"), os.X_OK):
            if os.geteuid() == 0:
                try:
                    home = pwd.getpwnam("postgres").pw_dir
                except KeyError:
                    return None, "running as root, and there is no 'postgres' user to run the server as"
                if not os.path.isdir(home):
                    return None, f"running as root, and the 'postgres' user's home {home} is not a folder"
            return folder, ""
    return None, "no PostgreSQL server binaries (initdb, pg_ctl): install Debian's postgresql package"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PostgresServer:
    """One server in its own temporary folder; :meth:`close` stops it and removes the folder."""

    def __init__(self, bindir: str) -> None:
        self.bindir = bindir
        self._as_root = os.geteuid() == 0
        # As root the server runs as 'postgres', who cannot enter root's private temporary folders:
        # its folder is made in that user's home instead (removed by close, like any other).
        home = pwd.getpwnam("postgres").pw_dir if self._as_root else None
        self.folder = Path(tempfile.mkdtemp(prefix="pcqr-postgres-", dir=home))
        self.data = self.folder / "data"
        self.port = _free_port()
        if self._as_root:
            user = pwd.getpwnam("postgres")
            os.chown(self.folder, user.pw_uid, user.pw_gid)
        try:
            self._run("initdb", "-D", str(self.data), "-U", SUPERUSER, "-A", "trust", "--no-sync", "-E", "UTF8",
                      "--locale", "C")
            with open(self.data / "pg_hba.conf", "w") as hba:  # trust only the socket; passwords over TCP
                hba.write(f"local all {SUPERUSER} trust\nhost all all 127.0.0.1/32 scram-sha-256\n")
            for attempt in range(3):  # a free port can be taken by another process before the server binds it
                try:
                    self.start()
                    break
                except RuntimeError:
                    if attempt == 2:
                        raise
                    self.port = _free_port()
        except BaseException:
            self.close()
            raise

    def _run(self, tool: str, *args: str) -> None:
        command = [os.path.join(self.bindir, tool), *args]
        if self._as_root:
            command = ["runuser", "-u", "postgres", "--", *command]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            log = self.folder / "log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"{tool} failed: {result.stderr.strip() or result.stdout.strip()}\n{tail}")

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.folder / "log"), "-w", "-o",
                  f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c max_connections=200 "
                  "-c shared_buffers=32MB -c fsync=on", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-w", "-m", mode, "stop")

    def restart(self) -> None:
        """Stop and start on the same port and data (every open connection is lost)."""
        self.stop()
        self.start()

    @property
    def superuser_url(self) -> str:
        """The superuser, over the folder's socket (trusted), to database ``postgres``."""
        return f"postgresql://{SUPERUSER}@/postgres?host={self.folder}&port={self.port}"

    def url(self, role: str, password: str, database: str) -> str:
        """A role's URL over TCP on 127.0.0.1, as an analyst's would be."""
        return f"postgresql://{role}:{password}@127.0.0.1:{self.port}/{database}"

    def execute(self, *statements: str) -> None:
        """Run statements as the superuser, each on its own (CREATE DATABASE needs no transaction)."""
        import psycopg

        with psycopg.connect(self.superuser_url, autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)  # type: ignore[arg-type]  # the tests' own text

    def kill_connections(self, database: str) -> None:
        """Terminate every backend on ``database`` (its clients see a dropped connection)."""
        import psycopg

        with psycopg.connect(self.superuser_url, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s "
                         "AND pid <> pg_backend_pid()", (database,))

    def close(self) -> None:
        if (self.data / "postmaster.pid").exists():
            try:
                self.stop("immediate")
            except (RuntimeError, subprocess.TimeoutExpired):
                pass
        shutil.rmtree(self.folder, ignore_errors=True)
