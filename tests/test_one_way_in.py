"""One way in (issue 27): no module of pipeline/ or jobs/ reads or parses a file another way than
through its reader module, so every file a user or operator names gets the same checks (a regular
file, a bounded size, strict parsing).

READS is a table: a kind of read (matched on the syntax tree, so a comment or a docstring does not
count), the modules that may make it and why. A new read elsewhere fails
``test_every_read_goes_through_its_reader``; a new kind of read is a new row (Parquet's openers
are one more row, owned by pipeline/data/datasets.py).
"""
from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
READER = "pipeline/data/user_files.py"


def _dotted(node: ast.expr) -> str:
    """``np.lib.format.read_array`` for an attribute chain, ``open`` for a name, "" otherwise."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def _calls(*names: str) -> Callable[[ast.Call], bool]:
    return lambda call: _dotted(call.func) in names


def _method(*names: str) -> Callable[[ast.Call], bool]:
    """A method call by name on anything (``Path(p).read_text()``)."""
    return lambda call: isinstance(call.func, ast.Attribute) and call.func.attr in names


def _open_for_reading(call: ast.Call) -> bool:
    """The builtin ``open`` (or ``io.open``) without a write mode: a read of a file."""
    if _dotted(call.func) not in ("open", "io.open", "builtins.open"):
        return False
    mode = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "mode"), None)
    text = mode.value if isinstance(mode, ast.Constant) and isinstance(mode.value, str) else "r"
    return not set(text) & set("wax")


def _yaml_load(call: ast.Call) -> bool:
    name = _dotted(call.func)
    return name.startswith("yaml.") and any(word in name for word in ("load", "compose", "parse", "scan"))


@dataclass(frozen=True)
class Read:
    """A kind of read: how to find it, and the modules allowed to make it (module -> why)."""

    matches: Callable[[ast.Call], bool]
    allowed: dict[str, str] = field(default_factory=dict)


READS: dict[str, Read] = {
    "json.load/json.loads": Read(_calls("json.load", "json.loads"), {
        READER: "the strict JSON reader",
        "jobs/replay.py": "the summary line `pcqr answer --json` printed in this process, not a file",
        "jobs/demo.py": "the summary line `pcqr answer --json` printed in this process, not a file",
    }),
    "yaml.*load": Read(_yaml_load, {READER: "the strict YAML reader"}),
    "np.load and NumPy file readers": Read(
        _calls("np.load", "numpy.load", "np.fromfile", "np.memmap", "np.loadtxt", "np.genfromtxt",
               "np.lib.format.read_array", "np.lib.format.open_memmap"),
        {READER: "the .npz/.npy reader: declared sizes checked before allocation"}),
    "pickle": Read(_calls("pickle.load", "pickle.loads", "joblib.load", "cloudpickle.load", "cloudpickle.loads")),
    "skops.io.load(s)": Read(_calls("skops.io.load", "skops.io.loads", "skops.io.get_untrusted_types"), {
        "pipeline/models/store.py": "skops archives from models.npz, each bounded first by user_files.check_zip; "
                                    "types outside the allowed learner modules refused",
    }),
    "open() for reading": Read(_open_for_reading, {
        "pipeline/public_log/answered.py": "the answered index's own spill files, written by this process "
                                           "in its private 0700 folder and read back in fixed-size chunks",
    }),
    "Path.read_text/read_bytes": Read(_method("read_text", "read_bytes")),
    "os.open/os.fdopen": Read(_calls("os.open", "os.fdopen"), {
        READER: "the one open: O_RDONLY | O_NONBLOCK | O_CLOEXEC, then fstat",
        "pipeline/session/state_lock.py": "pcqr's own lock file (O_RDWR | O_CREAT); its record goes through "
                                          "user_files.parse_json",
        "pipeline/data/atomic.py": "writes: a temporary file, and a folder opened to fsync it",
        "pipeline/data/private_folder.py": "writes: a new private file (O_WRONLY | O_CREAT)",
    }),
}


def _modules() -> list[Path]:
    return sorted(p for folder in ("pipeline", "jobs") for p in (ROOT / folder).rglob("*.py"))


def _found() -> dict[str, set[str]]:
    """Kind of read -> modules that make it."""
    found: dict[str, set[str]] = {kind: set() for kind in READS}
    for path in _modules():
        module = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Call):
                for kind, read in READS.items():
                    if read.matches(node):
                        found[kind].add(module)
    return found


def test_every_read_goes_through_its_reader() -> None:
    found = _found()
    stray = {kind: sorted(modules - READS[kind].allowed.keys()) for kind, modules in found.items()}
    assert not any(stray.values()), f"reads outside their reader (route them, or add a reason): {stray}"


def test_every_allowed_exception_is_still_needed() -> None:
    found = _found()
    stale = {kind: sorted(read.allowed.keys() - found[kind]) for kind, read in READS.items()}
    assert not any(stale.values()), f"allowed reads that no longer happen (remove them): {stale}"


@pytest.mark.parametrize("source,kind", [
    ("json.loads(text)", "json.load/json.loads"),
    ("yaml.safe_load(handle)", "yaml.*load"),
    ("yaml.load(handle, Loader=yaml.SafeLoader)", "yaml.*load"),
    ("np.load(path, allow_pickle=False)", "np.load and NumPy file readers"),
    ("open(path, encoding='utf-8')", "open() for reading"),
    ("open(path, 'rb')", "open() for reading"),
    ("Path(path).read_text()", "Path.read_text/read_bytes"),
    ("os.open(path, os.O_RDONLY)", "os.open/os.fdopen"),
])
def test_the_patterns_see_a_read(source: str, kind: str) -> None:
    call = ast.parse(source).body[0].value  # type: ignore[attr-defined]
    assert READS[kind].matches(call)


@pytest.mark.parametrize("source", ["open(path, 'w')", "open(path, mode='ab')", "json.dumps(x)", "yaml.safe_dump(x)"])
def test_the_patterns_let_writes_pass(source: str) -> None:
    call = ast.parse(source).body[0].value  # type: ignore[attr-defined]
    assert not any(read.matches(call) for read in READS.values())
