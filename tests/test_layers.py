"""Imports go down the layers of docs/architecture.md, never up, and only through the ``pcqr`` namespace.

A value given on the command line travels down: ``pcqr.jobs`` (the commands) over the face ``pcqr``,
over ``pcqr.pipeline.session`` (the session and its coordinator), over the mechanisms, models and
hypotheses, over the ledger, over privacy accounting and data. A module may import its own group and
any lower layer; importing a higher layer (or a sibling on the same layer) fails here, naming the file
and the import. Imports inside functions count too: a deferred import is still a dependency.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Lowest first; groups on one line of this list are one layer and may not import each other.
LAYERS: list[tuple[str, ...]] = [
    ("pcqr.pipeline", "pcqr.pipeline.errors"),           # the version and the one error type
    ("pcqr.pipeline.data", "pcqr.pipeline.privacy"),     # datasets, cluster; noise and accounting
    ("pcqr.pipeline.budget",),                           # the ledger
    ("pcqr.pipeline.hypotheses",),                       # hypothesis classes and their dichotomies
    ("pcqr.pipeline.models",),                           # learners, the k subsample models, votes
    ("pcqr.pipeline.mechanisms",),                       # exponential, relabel, universal, PAP, PMW
    ("pcqr.pipeline.public_log",),                       # the answered-query log, its repeats index, replay
    ("pcqr.pipeline.gates",),                            # stability (sparse vector), guess, gnmax
    ("pcqr.pipeline.report",),                           # the session report from the public log; accuracy
    ("pcqr.pipeline.session",),                          # state, lock, ledger book, answer loop, commit
    ("pcqr.pipeline.estimator",),                        # PrivateClassifier, model selection
    ("pcqr.pipeline.audit",),                            # the documented audit surface
    ("pcqr",),                                           # the face: pcqr.Session, pcqr.PrivateClassifier
    ("pcqr.jobs",),                                      # the commands
]
SOURCES = {"pcqr": ROOT / "src" / "pcqr", "pcqr.pipeline": ROOT / "pipeline", "pcqr.jobs": ROOT / "jobs"}


def group_of(module: str) -> str:
    """The layer group a ``pcqr`` module belongs to (its longest listed prefix)."""
    groups = [g for layer in LAYERS for g in layer]
    return max((g for g in groups if module == g or module.startswith(g + ".")), key=len)


def rank(group: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if group in layer)


def modules() -> list[tuple[str, Path]]:
    found = []
    for prefix, folder in SOURCES.items():
        for path in sorted(folder.rglob("*.py")):
            if prefix == "pcqr" and path.parent != folder:
                continue
            parts = path.relative_to(folder).with_suffix("").parts
            name = ".".join((prefix, *parts)).removesuffix(".__init__")
            found.append((name, path))
    return found


def imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                found.append((node.lineno, "." * node.level + (node.module or "")))
            elif node.module:
                found += [(node.lineno, node.module)]
                if node.module in ("pcqr", "pcqr.pipeline"):  # from pcqr import jobs
                    found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names
                              if f"{node.module}.{a.name}" in {g for layer in LAYERS for g in layer}]
    return found


MODULES = modules()


def test_every_module_is_in_a_layer() -> None:
    assert len(MODULES) > 60
    for name, _ in MODULES:
        group_of(name)


@pytest.mark.parametrize("name,path", MODULES, ids=[n for n, _ in MODULES])
def test_imports_go_down_the_layers(name: str, path: Path) -> None:
    mine = group_of(name)
    for line, target in imports(path):
        where = f"{path.relative_to(ROOT)}:{line} imports {target}"
        assert not target.startswith("."), f"{where}: use the absolute pcqr.* name"
        top = target.split(".")[0]
        assert top not in ("pipeline", "jobs"), f"{where}: the installed package is pcqr.{target}"
        if top != "pcqr":
            continue
        theirs = group_of(target)
        if theirs == mine:
            continue
        assert rank(theirs) < rank(mine), f"{where}: layer {theirs} is not below {mine} (docs/architecture.md, Layers)"


def test_tests_and_benchmarks_import_the_installed_names() -> None:
    for folder in ("tests", "benchmarks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for line, target in imports(path):
                assert target.split(".")[0] not in ("pipeline", "jobs"), \
                    f"{path.relative_to(ROOT)}:{line} imports {target}: use pcqr.{target}"


def test_the_checker_sees_an_upward_import(tmp_path) -> None:
    """The layer test itself can fail: an import of the session from the ledger is upward."""
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from pcqr.pipeline.session.state import SessionState\n")
    (line, target), = imports(probe)
    assert rank(group_of(target)) > rank(group_of("pcqr.pipeline.budget.ledger"))


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph`` (module -> the modules it imports): every strongly connected
    component of more than one module, each sorted."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        order[module] = low[module] = len(order)
        stack.append(module)
        for target in graph.get(module, ()):
            if target not in order:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], order[target])
        if low[module] == order[module]:
            component = stack[stack.index(module):]
            del stack[stack.index(module):]
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in order:
            visit(module)
    return found


def import_graph(prefix: str) -> dict[str, set[str]]:
    """Module -> the modules under ``prefix`` it imports (deferred imports too)."""
    names = {n for n, _ in MODULES if n.startswith(prefix)}
    return {n: {t for _, t in imports(p) if t in names and t != n} for n, p in MODULES if n in names}


def test_the_budget_package_has_no_circle_of_imports() -> None:
    """Issue 46, item 6: the stores' factory and the shared bounds have homes that no store imports back."""
    assert circles(import_graph("pcqr.pipeline.budget.")) == []


def test_no_module_of_pcqr_is_in_a_circle_of_imports() -> None:
    """Issue 48, item 5: privacy/planner.py and privacy/session_plan.py imported each other; the rules
    both need (the gate and labels a session is given by default) live in privacy/gate_choice.py, and
    no circle is left anywhere in the package."""
    assert circles(import_graph("pcqr.")) == []


def test_the_circle_checker_sees_a_circle() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
