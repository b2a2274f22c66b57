"""Hostile non-Parquet files for tests/test_hostile.py's FILE_CASES (issue 27): files that are not
regular files, raw bytes, scheduler files and .npz archives that lie about their sizes.

FIFOs, sockets, symlink loops and links to /dev/zero are made in a folder beside the sandbox, not
in it: the table's before/after hash of every sandbox file would itself hang on them. A FIFO is
opened for writing (and closed) 10 s after it is made, so a command that wrongly reads it ends
(with the FIFO's needle missing from its error) instead of hanging the run.
"""
from __future__ import annotations

import io
import os
import shutil
import socket
import threading
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from tests.hostile_world import World

Mutate = Callable[[World], None]


def _specials(w: World) -> Path:
    folder = w.root.parent / f"{w.root.name}-specials"
    folder.mkdir(exist_ok=True)
    return folder


def _unblock(path: Path) -> None:
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))  # ENXIO when no reader waits: nothing to do
    except OSError:
        pass


def make_special(path: Path, kind: str) -> None:
    """``path`` (replaced) as a FIFO, a socket, a folder, a symlink loop or a link to /dev/zero."""
    if path.is_symlink() or path.is_file() or path.is_socket() or path.is_fifo():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)
    if kind == "fifo":
        os.mkfifo(path)
        timer = threading.Timer(10, _unblock, [path])
        timer.daemon = True
        timer.start()
    elif kind == "socket":
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(path))  # the socket file stays; opening it gives ENXIO
    elif kind == "folder":
        path.mkdir()
    elif kind == "loop":
        path.symlink_to(path.name)
    elif kind == "zero":
        path.symlink_to("/dev/zero")
    else:
        raise ValueError(kind)


def special(kind: str, name: str, key: str = "bad") -> Mutate:
    """w.paths[key]: a special file called ``name`` (outside the sandbox)."""
    def mutate(w: World) -> None:
        path = _specials(w) / name
        make_special(path, kind)
        w.paths[key] = str(path)
    return mutate


def raw(name: str, content: bytes | Callable[[World], bytes], key: str = "bad") -> Mutate:
    """w.paths[key]: the file cases/NAME holding ``content`` (bytes, or made from the world)."""
    def mutate(w: World) -> None:
        path = w.case_file(name)
        path.write_bytes(content(w) if callable(content) else content)
        w.paths[key] = str(path)
    return mutate


def scheduler_file(make: Mutate) -> Mutate:
    """w.paths["bad_cluster"]: a cluster.yaml of backend scheduler-file whose file ``make`` puts at w.paths["bad"]."""
    def mutate(w: World) -> None:
        make(w)
        path = w.case_file("sf-cluster.yaml")
        path.write_text(f"pcqr:\n  cluster:\n    backend: scheduler-file\n    scheduler-file: {w.paths['bad']}\n"
                        "distributed:\n  comm:\n    timeouts:\n      connect: 2s\n")
        w.paths["bad_cluster"] = str(path)
    return mutate


def state_copy_with(name: str, kind: str) -> Mutate:
    """w.paths["bad"]: a copy of the world's state (outside the sandbox) whose file NAME is special."""
    def mutate(w: World) -> None:
        copy = _specials(w) / "state"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(w.path("state"), copy, ignore=shutil.ignore_patterns("lock"))
        make_special(copy / name, kind)
        w.paths["bad"] = str(copy)
    return mutate


def log_copy_with(kind: str) -> Mutate:
    """w.paths["bad"]: a copy of the world's log (outside the sandbox) whose first batch is special."""
    def mutate(w: World) -> None:
        copy = _specials(w) / "log"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(w.path("log"), copy)
        make_special(min(copy.glob("batch-*.parquet")), kind)
        w.paths["bad"] = str(copy)
    return mutate


# --- .npy and .npz ---------------------------------------------------------------------------------


def npy_header(descr: str, shape: tuple[int, ...], version: tuple[int, int] = (1, 0)) -> bytes:
    sink = io.BytesIO()
    header = {"descr": descr, "fortran_order": False, "shape": shape}
    if version == (1, 0):
        np.lib.format.write_array_header_1_0(sink, header)
    else:
        np.lib.format.write_array_header_2_0(sink, header)
    return sink.getvalue()


def npy(array: np.ndarray) -> bytes:
    sink = io.BytesIO()
    np.save(sink, array, allow_pickle=False)
    return sink.getvalue()


def npz(members: dict[str, bytes], compression: int = zipfile.ZIP_STORED, zip64: bool = False) -> bytes:
    """An archive of raw members (``name`` -> the bytes of ``name.npy``), written without NumPy's checks."""
    sink = io.BytesIO()
    with zipfile.ZipFile(sink, "w", compression) as archive:
        for name, data in members.items():
            with archive.open(f"{name}.npy", "w", force_zip64=zip64) as member:
                member.write(data)
    return sink.getvalue()


def zeros_bomb(descr: str, shape: tuple[int, ...]) -> bytes:
    """One deflated member holding a real header and all its (zero) data: small file, huge member."""
    sink = io.BytesIO()
    size = int(np.prod(shape)) * np.dtype(descr).itemsize
    with zipfile.ZipFile(sink, "w", zipfile.ZIP_DEFLATED) as archive:
        with archive.open("feature.npy", "w", force_zip64=True) as member:
            member.write(npy_header(descr, shape))
            chunk = bytes(1 << 24)
            for start in range(0, size, len(chunk)):
                member.write(chunk[: min(len(chunk), size - start)])
    return sink.getvalue()


def models_with(w: World, **members: bytes) -> bytes:
    """The world's models.npz with some members replaced (raw .npy bytes)."""
    with zipfile.ZipFile(w.path("state") / "models.npz") as archive:
        kept = {info.filename[:-4]: archive.read(info) for info in archive.infolist()}
    return npz({**kept, **members})
