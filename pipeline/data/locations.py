"""A local path or an object-storage URI behind one set of folder operations: what the public log,
``pcqr generate`` and the released tables need to list, test and remove, wherever they live.

Locally these are the ``os`` calls; at a URI (``s3://bucket/prefix``) a "folder" is a key prefix,
listed and read by pyarrow's file system (:func:`filesystem`) and changed
through :mod:`pcqr.pipeline.data.object_store`. Writing a file is
:func:`pcqr.pipeline.data.atomic.write_atomic`, which handles both.
"""
from __future__ import annotations

import os
import posixpath

import pyarrow as pa
import pyarrow.fs as pafs

from pcqr.pipeline.data import object_store
from pcqr.pipeline.data.user_files import read_bytes as read_local_bytes
from pcqr.pipeline.errors import PcqrError

is_uri = object_store.is_uri


def filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """The file system of a local path or a URI pyarrow understands, and the path inside it. An
    ``s3://`` URI uses pcqr's S3 settings (:mod:`pcqr.pipeline.data.object_store`: the AWS variables or
    the cluster.yaml's); a URI carrying credentials is refused."""
    if "://" in uri:
        object_store.refuse_credentials(uri)
        if uri.startswith(object_store.SCHEME):
            return object_store.arrow_filesystem(), uri[len(object_store.SCHEME):]
        try:
            return pafs.FileSystem.from_uri(uri)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as exc:
            raise PcqrError(f"{uri}: cannot open ({exc})") from None
    return pafs.LocalFileSystem(), os.path.abspath(uri)


def read_file(path: str, option: str, limit: int) -> bytes:
    """A file's bytes, at most ``limit``: a local one by the one reader of files
    (:func:`pcqr.pipeline.data.user_files.read_bytes`: a regular file), an object by its file system."""
    if not is_uri(path):
        return read_local_bytes(path, option, limit)
    fs, inside = filesystem(path)
    try:
        with fs.open_input_file(inside) as source:
            if source.size() > limit:
                raise PcqrError(f"{option} {path}: {source.size():,} bytes, more than pcqr reads ({limit:,})")
            return bytes(source.read())
    except FileNotFoundError:
        raise PcqrError(f"{option} {path}: no such file") from None
    except OSError as exc:
        raise object_store.timed_out(path, exc) or PcqrError(
            f"{option} {path}: cannot read it ({' '.join(str(exc).split())[:200]})") from None


def join(folder: str, name: str) -> str:
    """``name`` inside ``folder`` (a URI keeps ``/``)."""
    return posixpath.join(folder.rstrip("/"), name) if is_uri(folder) else os.path.join(folder, name)


def absolute(path: str) -> str:
    """A local path made absolute; a URI as it is (less a trailing ``/``)."""
    return path.rstrip("/") if is_uri(path) else os.path.abspath(path)


def _info(path: str) -> pafs.FileInfo:
    fs, inside = filesystem(path)
    try:
        return fs.get_file_info(inside)
    except OSError as exc:
        raise object_store.timed_out(path, exc) or PcqrError(
            f"{path}: cannot reach it ({' '.join(str(exc).split())[:200]})") from None


def exists(path: str) -> bool:
    """Whether a file or folder is at ``path``."""
    return _info(path).type != pafs.FileType.NotFound if is_uri(path) else os.path.exists(path)


def is_folder(path: str) -> bool:
    """Whether ``path`` is a folder (at a URI: a prefix with objects under it)."""
    return _info(path).type == pafs.FileType.Directory if is_uri(path) else os.path.isdir(path)


def names_in(folder: str) -> list[str]:
    """The names directly in ``folder``, sorted ([] when it is not a folder)."""
    if not is_uri(folder):
        return sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    fs, inside = filesystem(folder)
    try:
        found = fs.get_file_info(pafs.FileSelector(inside, allow_not_found=True))
    except OSError as exc:
        raise object_store.timed_out(folder, exc) or PcqrError(
            f"{folder}: cannot list it ({' '.join(str(exc).split())[:200]})") from None
    return sorted(posixpath.basename(entry.path) for entry in found)


def remove(path: str) -> None:
    """Remove the file at ``path`` (nothing if there is none)."""
    if is_uri(path):
        object_store.delete(path)
    else:
        try:
            os.unlink(path)
        except FileNotFoundError:
            return
