"""A ``pcqr`` executable for tests that run many commands through bash (the README's): each run is
forked from one interpreter that has imported pcqr and every command once, instead of importing
dask, scikit-learn and pyarrow again (about 1.5 s a command on two cores).

The executable is a small stdlib-only Python script. It sends its argv, working directory and
environment, with its stdin, stdout and stderr (as file descriptors, SCM_RIGHTS), to the server over a
UNIX socket; the server forks, the child takes them over and runs ``pcqr.jobs.cli.main``, exits as
the real command does (``pcqr.jobs.cli.finish``: the atexit functions run, the streams are flushed, the
interpreter's module teardown is skipped), and the server sends the exit code back.
"""
from __future__ import annotations

import os
import shlex
import stat
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

SERVER = r"""
import json, os, socket, sys, threading
from pcqr.jobs.cli import COMMANDS, finish, main
for module, *_ in COMMANDS.values():
    __import__("pcqr.jobs." + module)
path = sys.argv[1]
listener = socket.socket(socket.AF_UNIX)
listener.bind(path)
listener.listen(8)
open(path + ".ready", "w").close()

def reap(connection, pid):
    _, status = os.waitpid(pid, 0)
    connection.sendall(str(os.waitstatus_to_exitcode(status)).encode())
    connection.close()

while True:
    connection, _ = listener.accept()
    message, fds, _, _ = socket.recv_fds(connection, 1 << 22, 3)
    while not message.endswith(b"\n"):
        message += connection.recv(1 << 22)
    request = json.loads(message)
    pid = os.fork()
    if pid == 0:
        listener.close()
        connection.close()
        for fd, target in zip(fds, (0, 1, 2)):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        code = 1
        try:
            code = main(request["argv"])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        finish(code)  # as the pcqr script exits
    for fd in fds:
        os.close(fd)
    threading.Thread(target=reap, args=(connection, pid), daemon=True).start()
"""

CLIENT = r"""
import json, os, socket, sys
client = socket.socket(socket.AF_UNIX)
client.connect({path!r})
request = json.dumps({{"argv": sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ)}}) + "\n"
socket.send_fds(client, [request.encode()], [0, 1, 2])
reply = b""
while chunk := client.recv(64):
    reply += chunk
sys.exit(int(reply) if reply else 1)
"""


class ForkedPcqr:
    """``pcqr`` on a PATH, served by forks of one preloaded interpreter (module docstring). Use as a
    context manager; ``path`` is the PATH to give the commands; the server is started with ``env``,
    which should be the commands' own (dask reads its variables when imported)."""

    def __init__(self, folder: Path, env: dict[str, str], root: str) -> None:
        self.socket = folder / "pcqr.sock"
        self.server = subprocess.Popen([sys.executable, "-c", SERVER, str(self.socket)],
                                       env={**env, "PYTHONPATH": root})
        script = folder / "pcqr"
        script.write_text(f"#!{shlex.quote(sys.executable)} -I\n" + CLIENT.format(path=str(self.socket)))
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
        self.path = f"{folder}{os.pathsep}{env.get('PATH', '')}"
        deadline = time.monotonic() + 120
        while not Path(str(self.socket) + ".ready").exists():
            assert self.server.poll() is None and time.monotonic() < deadline, "the preloaded pcqr did not start"
            time.sleep(0.05)

    def __enter__(self) -> ForkedPcqr:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.server.kill()
        self.server.wait(timeout=60)
