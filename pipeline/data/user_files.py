"""The one way in for every non-Parquet file pcqr reads from a path a user or operator chose.

cluster.yaml, ``pcqr run``/``submit`` specs, scheduler files, released-model and guess JSON, a
session's ``session.json``, ``thresholds.npy`` and ``models.npz`` are read here and nowhere else
(tests/test_one_way_in.py fails on a read that goes around). Before a byte is parsed:

* the path is opened ``O_RDONLY | O_NONBLOCK | O_CLOEXEC`` and its descriptor ``fstat``-ed (no
  race between check and read): anything but a regular file -- a FIFO, a device such as
  ``/dev/zero``, a socket, a folder, a symlink loop -- is refused, so no read can hang;
* its size is bounded by the limit its caller declares for that kind of file, from ``fstat``
  before reading, and at most ``limit + 1`` bytes are read (a file that grows meanwhile);
* JSON is UTF-8, keys are unique in every object, nesting is at most :data:`MAX_DEPTH` deep
  (counted before the parser recurses), and ``NaN`` is refused (pcqr never writes it; it does
  write ``Infinity`` for the thresholds of constant hypotheses);
* YAML is UTF-8, read with a ``SafeLoader`` that refuses a duplicate key in any mapping (naming the
  key and its line), nesting deeper than :data:`MAX_DEPTH`, an alias that refers to itself, and a
  document whose aliases expand to more than :data:`MAX_NODES` nodes (billion laughs);
* ``.npz`` and ``.npy``: every member's declared uncompressed size (the zip directory) and its
  declared shape and dtype (the ``.npy`` header) are checked against each other, against the limit
  and against the file's own size (a compressed member may expand :data:`MAX_RATIO` times) before
  any array is allocated; object arrays are refused (they would be pickles).

Every refusal is a :class:`~pcqr.pipeline.errors.PcqrError`: one line naming the path, the option
or file that named it, and what is wrong. A missing file is :class:`MissingFile` (a PcqrError), so
a caller may say what to do about it.
"""
from __future__ import annotations

import errno
import io
import json
import math
import os
import re
import stat
import struct
import zipfile
import zlib
from typing import IO, Any

import numpy as np
import yaml

from pcqr.pipeline.errors import PcqrError

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
#: cluster.yaml, ``pcqr run`` specs, scheduler files: an operator's few keys.
CONFIG_LIMIT = 1 * MiB
#: a released model (or a guess model): one hypothesis and its provenance.
MODEL_JSON_LIMIT = 16 * MiB
#: a session's ``session.json``: parameters and the fingerprints of the inputs it answered.
STATE_JSON_LIMIT = 256 * MiB
#: ``models.npz`` (k models; skops models of gradient-boosted trees are the largest) and ``thresholds.npy``.
ARRAY_FILE_LIMIT = 8 * GiB
#: Nesting depth of JSON and YAML (pcqr's own files nest at most 5 levels).
MAX_DEPTH = 64
#: Nodes a YAML document may expand to once its aliases are followed.
MAX_NODES = 100_000
#: How many times its compressed size a zip member may declare (pcqr writes them uncompressed).
MAX_RATIO = 64

#: What a damaged zip archive or .npy stream can raise while it is opened or read (zipfile raises
#: NotImplementedError for an unknown version or compression, RuntimeError for encryption).
_DAMAGED = (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, RuntimeError, ValueError, OSError,
            EOFError, SyntaxError, KeyError, struct.error, zlib.error)

_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
          stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a folder", stat.S_IFLNK: "a symbolic link"}
_WHY = {errno.ENOENT: "no such file", errno.EACCES: "permission denied", errno.EPERM: "permission denied",
        errno.ELOOP: "a loop of symbolic links, not a file", errno.EISDIR: "is a folder, not a file",
        errno.ENXIO: "is a socket or a device without a reader, not a file",
        errno.ENOTDIR: "a part of the path is not a folder", errno.ENAMETOOLONG: "the path is too long"}


class MissingFile(PcqrError):
    """The path names no file (a caller may add what to do, e.g. run ``pcqr train`` first)."""


def file_kind(mode: int) -> str:
    """What a file of ``os.stat`` mode ``mode`` is, in words ("a FIFO", "a folder", ...)."""
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def _size(n: int) -> str:
    return f"{n / GiB:.1f} GiB" if n >= GiB else f"{n / MiB:.1f} MiB" if n >= MiB else f"{n} bytes"


def read_bytes(path: str | os.PathLike[str], option: str, limit: int) -> bytes:
    """The bytes of the regular file ``path`` (named by ``option``), at most ``limit`` of them."""
    where = f"{os.fspath(path)}: {option}"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        why = _WHY.get(exc.errno or 0, f"cannot read ({exc.strerror or exc})")
        raise (MissingFile if exc.errno == errno.ENOENT else PcqrError)(f"{where}: {why}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise PcqrError(f"{where}: is {file_kind(info.st_mode)}, not a file")
        if info.st_size > limit:
            raise PcqrError(f"{where}: is {_size(info.st_size)}, more than the {_size(limit)} this kind of file may be")
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 16 * MiB))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise PcqrError(f"{where}: cannot read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    if left <= 0:
        raise PcqrError(f"{where}: grew beyond the {_size(limit)} this kind of file may be while it was read")
    return b"".join(chunks)


def decode_text(data: bytes, where: str) -> str:
    """UTF-8 text, or one line saying where the first byte that is not is."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        byte = f"byte {exc.start} is {data[exc.start]:#04x}"
        raise PcqrError(f"{where}: not UTF-8 text ({byte}); save it as UTF-8") from None


# --- JSON --------------------------------------------------------------------------------------------

_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_CHUNK = 1 << 22


def _json_depth(data: bytes) -> int:
    """The deepest nesting of ``[`` and ``{`` outside strings (a scan in chunks, no recursion)."""
    stripped = _JSON_STRING.sub(b"", data)
    depth = deepest = 0
    for start in range(0, len(stripped), _CHUNK):
        codes = np.frombuffer(stripped, np.uint8, count=min(_CHUNK, len(stripped) - start), offset=start)
        steps = ((codes == 0x5B) | (codes == 0x7B)).astype(np.int32) - ((codes == 0x5D) | (codes == 0x7D))
        running = np.cumsum(steps) + depth
        deepest, depth = max(deepest, int(running.max())), int(running[-1])
    return deepest


def _unique_keys(where: str) -> Any:
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for key, value in pairs:
            if key in result:
                raise PcqrError(f"{where}: the key {key!r} is given twice in one object")
            result[key] = value
        return result
    return hook


def _constant(where: str) -> Any:
    def parse(name: str) -> float:
        if name == "NaN":
            raise PcqrError(f"{where}: holds NaN, which is not a number pcqr reads")
        return float(name)  # Infinity, -Infinity: pcqr writes them for constant hypotheses' thresholds
    return parse


def parse_json(data: bytes | str, where: str) -> Any:
    """Strict JSON: UTF-8, unique keys, at most MAX_DEPTH levels, no NaN. ``where`` starts each error."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    text = decode_text(raw, where)
    depth = _json_depth(raw)
    if depth > MAX_DEPTH:
        raise PcqrError(f"{where}: nested {depth} levels deep, more than the {MAX_DEPTH} pcqr reads")
    try:
        return json.loads(text, object_pairs_hook=_unique_keys(where), parse_constant=_constant(where))
    except RecursionError:  # unbalanced brackets inside odd strings fooled the scan: still one line
        raise PcqrError(f"{where}: nested too deeply") from None
    except ValueError as exc:
        raise PcqrError(f"{where}: not valid JSON ({exc})") from None


def read_json(path: str | os.PathLike[str], option: str, limit: int) -> Any:
    """The strict JSON document in the regular file ``path`` (see :func:`parse_json`)."""
    return parse_json(read_bytes(path, option, limit), f"{os.fspath(path)}: {option}")


# --- YAML --------------------------------------------------------------------------------------------


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader refusing duplicate keys, deep nesting and self-referring aliases."""

    depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels",
                                                  self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # `<<: *defaults`: its keys may be overridden, as YAML says
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                except TypeError:
                    continue  # an unhashable key: the constructor below refuses it
                if duplicate:
                    raise yaml.constructor.ConstructorError(None, None, f"the key {key!r} is given twice",
                                                            key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _expanded_nodes(root: Any) -> int:
    """How many nodes ``root`` has once every alias is followed (refusing an alias inside itself)."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in sizes:
            continue
        children = [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else \
            list(node.value) if isinstance(node, yaml.SequenceNode) else []
        if done:
            open_nodes.discard(id(node))
            sizes[id(node)] = min(1 + sum(sizes[id(c)] for c in children), MAX_NODES + 1)
            continue
        if id(node) in open_nodes:
            raise yaml.composer.ComposerError(None, None, "an alias refers to the node that holds it", node.start_mark)
        open_nodes.add(id(node))
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in sizes)
    return sizes[id(root)]


def _load_yaml(text: str, where: str) -> Any:
    loader = _StrictLoader(text)  # the reader refuses control characters here
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_nodes(node) > MAX_NODES:
            raise PcqrError(f"{where}: its aliases expand to more than {MAX_NODES:,} values; write them out")
        return loader.construct_document(node)
    finally:
        loader.dispose()


def parse_yaml(text: str, where: str) -> Any:
    """Strict YAML (see the module docstring); ``where`` starts each error."""
    try:
        return _load_yaml(text, where)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise PcqrError(f"{where}: {at}invalid YAML: {getattr(exc, 'problem', None) or exc}") from None
    except RecursionError:
        raise PcqrError(f"{where}: invalid YAML: nested too deeply") from None


def read_yaml(path: str | os.PathLike[str], option: str, limit: int) -> Any:
    """The strict YAML document in the regular file ``path`` (see :func:`parse_yaml`)."""
    where = f"{os.fspath(path)}: {option}"
    return parse_yaml(decode_text(read_bytes(path, option, limit), where), where)


# --- NumPy -------------------------------------------------------------------------------------------


def _npy_header(handle: IO[bytes], where: str) -> tuple[tuple[int, ...], np.dtype[Any], int]:
    """(shape, dtype, bytes of data) a .npy header declares, read without allocating the array."""
    try:
        version = np.lib.format.read_magic(handle)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(handle)
        elif version == (2, 0):
            shape, _, dtype = np.lib.format.read_array_header_2_0(handle)
        else:
            raise ValueError(f".npy version {version} is not one pcqr writes")
    except _DAMAGED as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise PcqrError(f"{where}: not an array in .npy format ({reason})") from None
    if dtype.hasobject:
        raise PcqrError(f"{where}: holds Python objects (a pickle), which pcqr never loads")
    if any(d < 0 for d in shape):
        raise PcqrError(f"{where}: declares the shape {shape}")
    return shape, dtype, math.prod(shape) * dtype.itemsize


def _array(handle: IO[bytes], size: int, where: str) -> np.ndarray:
    """The array of a .npy stream whose header declared ``size`` bytes of data (checked by the caller)."""
    handle.seek(0)
    try:
        return np.lib.format.read_array(handle, allow_pickle=False)
    except _DAMAGED as exc:
        raise PcqrError(f"{where}: a damaged array of {_size(size)} ({' '.join(str(exc).split())})") from None


def parse_npy(data: bytes, where: str) -> np.ndarray:
    """One array from the bytes of a .npy file: its declared shape and dtype must fill the bytes exactly."""
    handle = io.BytesIO(data)
    shape, dtype, size = _npy_header(handle, where)
    if size != len(data) - handle.tell():
        raise PcqrError(f"{where}: declares a {shape} {dtype} array ({_size(size)}) "
                        f"but holds {_size(len(data) - handle.tell())} of data")
    return _array(handle, size, where)


def check_zip(data: bytes, where: str, limit: int) -> zipfile.ZipFile:
    """The zip archive in ``data``, once the uncompressed sizes its directory declares are within
    ``limit`` and within MAX_RATIO times ``data`` (no zip bomb); each name appears once."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except _DAMAGED as exc:
        raise PcqrError(f"{where}: not a zip archive ({exc})") from None
    infos = archive.infolist()
    declared = sum(info.file_size for info in infos)
    if declared > min(limit, MAX_RATIO * len(data) + MiB):
        raise PcqrError(f"{where}: its {len(infos)} members declare {_size(declared)} uncompressed, "
                        f"more than {MAX_RATIO} times its {_size(len(data))} or {_size(limit)}: refused before reading")
    names = [info.filename for info in infos]
    if len(set(names)) != len(names):
        raise PcqrError(f"{where}: a member name appears twice")
    return archive


def parse_npz(data: bytes, where: str, limit: int) -> dict[str, np.ndarray]:
    """The arrays of the bytes of an .npz, each member's declared shape and dtype checked against its
    declared size before it is read (``name.npy`` -> ``name``, as ``np.load``)."""
    archive = check_zip(data, where, limit)
    arrays: dict[str, np.ndarray] = {}
    with archive:
        for info in archive.infolist():
            name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            member = f"{where}: member {name!r}"
            try:
                handle = archive.open(info)
            except _DAMAGED as exc:
                raise PcqrError(f"{member}: cannot be read ({exc})") from None
            with handle:
                shape, dtype, size = _npy_header(handle, member)
                if size != info.file_size - handle.tell():
                    raise PcqrError(f"{member}: declares a {shape} {dtype} array ({_size(size)}) but holds "
                                    f"{_size(max(info.file_size - handle.tell(), 0))}: refused before reading")
                arrays[name] = _array(handle, size, member)
    return arrays


def read_npz(path: str | os.PathLike[str], option: str, limit: int) -> dict[str, np.ndarray]:
    """The arrays of the .npz file ``path`` (see :func:`parse_npz`)."""
    return parse_npz(read_bytes(path, option, limit), f"{os.fspath(path)}: {option}", limit)


def read_npy(path: str | os.PathLike[str], option: str, limit: int) -> np.ndarray:
    """The array of the .npy file ``path`` (see :func:`parse_npy`)."""
    return parse_npy(read_bytes(path, option, limit), f"{os.fspath(path)}: {option}")
