"""The one way pcqr opens a Parquet file or a folder of them, whoever asks (a dataset, a log batch,
a released table): tests/test_one_way_in_parquet.py fails if any other module calls pyarrow's
Parquet readers.

Before a byte of a file is parsed:

* the path is a regular file or a folder of them, never a FIFO, device, socket, broken link or
  symlink loop (each refused in one line: opening a FIFO would wait for a writer forever);
* the footer the file declares (its last 8 bytes: length and ``PAR1``) fits in the file and in
  :data:`MAX_FOOTER_BYTES`, and the Thrift decoder is bounded the same way
  (``thrift_string_size_limit``, ``thrift_container_size_limit``), so a small file cannot make
  pcqr allocate what it declares;
* after parsing, no two top-level columns share a name (pyarrow reads such a file, then fails
  with a KeyError when a column is asked for by name).
"""
from __future__ import annotations

import os
import stat
from collections import Counter

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from pcqr.pipeline.data import locations, object_store
from pcqr.pipeline.data.locations import filesystem
from pcqr.pipeline.data.user_files import file_kind
from pcqr.pipeline.errors import PcqrError

#: The largest Parquet footer (file metadata) pcqr parses: 64 MiB holds the metadata of thousands
#: of columns times thousands of row groups.
MAX_FOOTER_BYTES = 64 * 2**20
#: The most elements of one Thrift list in a footer (pyarrow's own default).
MAX_FOOTER_ITEMS = 1_000_000
#: The largest Parquet file pcqr reads whole into memory (a log batch, to hash and parse the same bytes).
MAX_FILE_BYTES = 8 * 2**30
#: The endings of the files a dataset folder is made of.
PARQUET_ENDINGS = (".parquet", ".parq", ".pq")


def _stat(path: str, shown: str) -> os.stat_result | None:
    """The path's status, following links (None: it does not exist); a link loop is refused."""
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:  # ELOOP (a symlink loop), ENAMETOOLONG, EACCES, ...
        raise PcqrError(f"{shown}: cannot open ({exc.strerror or exc})") from None


def regular_file(path: str, shown: str | None = None) -> None:
    """Refuse a local path that is not a regular file (missing, a folder, a FIFO, ...) in one line.
    A URI is left to its file system."""
    if "://" in path:
        return
    shown = shown or path
    found = _stat(path, shown)
    if found is None:
        raise PcqrError(f"{shown}: no such file")
    if not stat.S_ISREG(found.st_mode):
        kind = "a folder" if stat.S_ISDIR(found.st_mode) else file_kind(found.st_mode)
        raise PcqrError(f"{shown}: {kind}, not a regular Parquet file")


def dataset_files(uri: str, role: str) -> list[str]:
    """The Parquet files of a dataset: the file itself, or the folder's ``*.parquet`` files
    (recursively, sorted; names starting with ``.`` or ``_`` skipped). Anything in the way that
    is not a regular file or folder is refused, naming it."""
    if "://" in uri:
        try:
            return _remote_files(uri, role)
        except OSError as exc:  # the server unreachable, or not answering within pcqr: storage: timeouts
            raise object_store.timed_out(uri, exc) or PcqrError(
                f"{role} dataset {uri}: cannot list it ({' '.join(str(exc).split())[:200]})") from None
    root = os.path.abspath(uri)
    found = _stat(root, uri)
    if found is None:
        raise PcqrError(f"{role} dataset {uri}: no such file or directory")
    if stat.S_ISREG(found.st_mode):
        return [root]
    if not stat.S_ISDIR(found.st_mode):
        raise PcqrError(f"{role} dataset {uri}: {file_kind(found.st_mode)}, not a Parquet file or a folder of them")
    files: list[str] = []
    _walk(root, role, {(found.st_dev, found.st_ino)}, files)
    if not files:
        raise PcqrError(f"{role} dataset {uri}: the directory holds no .parquet file")
    return sorted(files)


def _walk(folder: str, role: str, above: set[tuple[int, int]], files: list[str]) -> None:
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as exc:
        raise PcqrError(f"{role} dataset {folder}: cannot list it ({exc.strerror or exc})") from None
    for entry in entries:
        hidden = entry.name.startswith((".", "_"))
        try:
            found = os.stat(entry.path)
        except OSError as exc:
            if hidden:
                continue
            raise PcqrError(f"{role} dataset: {entry.path}: cannot open ({exc.strerror or exc})") from None
        if stat.S_ISDIR(found.st_mode):
            key = (found.st_dev, found.st_ino)
            if key in above:
                raise PcqrError(f"{role} dataset: {entry.path}: a symlink loop (links to a folder above it)")
            _walk(entry.path, role, above | {key}, files)
        elif hidden:
            continue
        elif not stat.S_ISREG(found.st_mode):
            raise PcqrError(f"{role} dataset: {entry.path}: {file_kind(found.st_mode)}, not a regular Parquet file")
        elif entry.name.endswith(PARQUET_ENDINGS):
            files.append(entry.path)


def _remote_files(uri: str, role: str) -> list[str]:
    fs, path = filesystem(uri)
    scheme = uri.split("://", 1)[0]
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.NotFound:
        raise PcqrError(f"{role} dataset {uri}: no such file or directory")
    if info.type == pafs.FileType.File:
        return [f"{scheme}://{path}"]
    if info.type != pafs.FileType.Directory:
        raise PcqrError(f"{role} dataset {uri}: not a regular file or a folder of them")
    files = []
    for entry in fs.get_file_info(pafs.FileSelector(path, recursive=True)):
        if os.path.basename(entry.path).startswith((".", "_")) or entry.type == pafs.FileType.Directory:
            continue
        if entry.type != pafs.FileType.File:
            raise PcqrError(f"{role} dataset: {scheme}://{entry.path}: not a regular file")
        if entry.path.endswith(PARQUET_ENDINGS):
            files.append(f"{scheme}://{entry.path}")
    if not files:
        raise PcqrError(f"{role} dataset {uri}: the directory holds no .parquet file")
    return sorted(files)


def check_footer(source: pa.NativeFile, shown: str) -> None:
    """Refuse a file whose declared footer does not fit in it or in :data:`MAX_FOOTER_BYTES`."""
    size = source.size()
    head, tail = source.read_at(4, 0), source.read_at(8, max(size - 8, 0))
    if size < 12 or head != b"PAR1" or tail[4:] != b"PAR1":
        raise PcqrError(f"{shown}: not a readable Parquet file (no PAR1 at its start and end)")
    declared = int.from_bytes(tail[:4], "little")
    if declared + 12 > size:
        raise PcqrError(f"{shown}: not a readable Parquet file (its footer declares {declared:,} bytes, "
                        f"the file has {size:,})")
    if declared > MAX_FOOTER_BYTES:
        raise PcqrError(f"{shown}: its Parquet footer declares {declared:,} bytes, more than pcqr reads "
                        f"({MAX_FOOTER_BYTES:,})")


def parquet_file(path: str, data: bytes | None = None) -> pq.ParquetFile:
    """A Parquet file opened the one way (page checksums verified where the file has them): the
    file at ``path``, or ``data`` (its bytes, already read) named ``path`` in errors."""
    try:
        if data is not None:
            source: pa.NativeFile = pa.BufferReader(data)
        else:
            regular_file(path)
            fs, inside = filesystem(path)
            source = fs.open_input_file(inside)
        check_footer(source, path)
        opened = pq.ParquetFile(source, page_checksum_verification=True,
                                thrift_string_size_limit=MAX_FOOTER_BYTES,
                                thrift_container_size_limit=MAX_FOOTER_ITEMS)
        names = opened.schema_arrow.names
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise object_store.timed_out(path, exc) or PcqrError(
            f"{path}: not a readable Parquet file ({' '.join(str(exc).split())[:200]})") from None
    repeated = [name for name, count in Counter(names).items() if count > 1]
    if repeated:
        raise PcqrError(f"{path}: two columns are named {repeated[0]!r} (column names must be unique)")
    return opened


def read_parquet(path: str, columns: list[str] | None = None, data: bytes | None = None) -> pa.Table:
    """All rows of one Parquet file (the given columns), opened by :func:`parquet_file`."""
    opened = parquet_file(path, data)
    try:
        return opened.read(columns=columns)
    except (pa.ArrowException, OSError, KeyError) as exc:
        raise PcqrError(f"{path}: corrupt Parquet data ({' '.join(str(exc).split())[:200]})") from None


def parquet_bytes(path: str, option: str = "log batch") -> bytes:
    """A Parquet file's bytes (to hash them and parse the same bytes), at most :data:`MAX_FILE_BYTES`
    (:func:`pcqr.pipeline.data.locations.read_bytes`: a local regular file, or an object in storage)."""
    return locations.read_file(path, option, MAX_FILE_BYTES)


def schema_of(path: str) -> pa.Schema:
    """A Parquet file's Arrow schema (with its metadata), from its footer only."""
    return parquet_file(path).schema_arrow


def metadata_of(path: str) -> pq.FileMetaData:
    """A Parquet file's footer (row groups, rows), from its footer only."""
    return parquet_file(path).metadata


__all__ = ["MAX_FOOTER_BYTES", "dataset_files", "filesystem", "metadata_of", "parquet_bytes", "parquet_file",
           "read_parquet", "regular_file", "schema_of"]
