"""The scheduler file of ``backend: scheduler-file`` (``dask scheduler --scheduler-file F`` writes it).

pcqr reads it itself, through :mod:`pcqr.pipeline.data.user_files`, and hands distributed only the
address: a JSON object whose ``"address"`` is a scheduler URI. Anything else (``/etc/passwd``,
``{"address": 5}``, a FIFO) is one line naming the cluster.yaml's key and the file.
"""
from __future__ import annotations

import os
import re
import time
from collections.abc import Callable

from pcqr.pipeline.data.user_files import CONFIG_LIMIT, MissingFile, read_json
from pcqr.pipeline.errors import PcqrError

#: The comms distributed knows (distributed.comm.registry), then HOST:PORT or a path.
ADDRESS = re.compile(r"(tcp|tls|inproc|ucx|ws|wss)://[^\s/]\S*")


def scheduler_address(path: str, error: Callable[[str], PcqrError], timeout: float) -> str:
    """The address in the scheduler file ``path``, waited for up to ``timeout`` seconds (the scheduler
    writes it once it listens). ``error`` makes the one-line error (it names the cluster.yaml's key)."""
    deadline = time.monotonic() + timeout
    while not os.path.lexists(path) and time.monotonic() < deadline:
        time.sleep(0.1)
    try:
        record = read_json(path, "scheduler file", CONFIG_LIMIT)
    except MissingFile:
        raise error(f"no such file {path!r} (is the scheduler running?)") from None
    except PcqrError as exc:
        raise error(str(exc)) from None
    address = record.get("address") if isinstance(record, dict) else None
    if not isinstance(address, str) or not ADDRESS.fullmatch(address):
        got = f"an address {address!r}" if isinstance(record, dict) else f"a JSON {type(record).__name__}"
        raise error(f"{path}: not a scheduler file: expected a JSON object whose \"address\" is "
                    f"tcp://HOST:PORT or tls://HOST:PORT, got {got}")
    return address
