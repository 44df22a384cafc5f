"""The package's layers import one way, read from the source (the AST of every module).

Every ``import`` counts, at the top of a module or inside a function (a function-level import
hides a dependency from a reader, not from the layering). Importing ``a.b.c`` runs ``a`` and
``a.b`` first, so it is an edge to each of them as well: importing ``autotune.workloads.base``
loads ``autotune.workloads``, which registers (imports) ``gr00t_n16``.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

import autotune

ROOT = Path(autotune.__file__).parent
LOWER = ("autotune.config", "autotune.profiling", "autotune.data")
"""Layers below the training runner and the workloads: the configuration tree, the profiler and
classifier, and the generic LeRobot data layer."""
UPPER = ("autotune.train", "autotune.search", "autotune.report", "autotune.workloads.gr00t_n16",
         "autotune.workloads.gr00t_n17", "autotune.workloads.gr00t_common")  # fmt: skip
ACYCLIC = (
    "autotune.config",
    "autotune.data",
    "autotune.profiling",
    "autotune.train",
    "autotune.workloads",
    "autotune.search",
    "autotune.report",
)
"""Subpackages none of whose modules may sit on an import cycle."""
ONE_WAY = [
    ("autotune.data", "autotune.workloads.gr00t_n16"),
    ("autotune.train.window.profile", "autotune.train.window.runner"),
    ("autotune.data", "autotune.workloads.gr00t_n17"),
    ("autotune.data", "autotune.workloads.gr00t_common"),
    ("autotune.workloads.gr00t_common", "autotune.workloads.gr00t_n16"),
    ("autotune.workloads.gr00t_common", "autotune.workloads.gr00t_n17"),
    ("autotune.workloads.gr00t_n16", "autotune.workloads.gr00t_n17"),
    ("autotune.workloads.gr00t_n17", "autotune.workloads.gr00t_n16"),
    ("autotune.config", "autotune.train"),
    ("autotune.search.guide", "autotune.search.study"),
    ("autotune.search.trials", "autotune.search.study"),
    ("autotune.search.stage", "autotune.search.guide"),  # read by converge and the report
    ("autotune.search.objective", "autotune.search.study"),  # one trial, not the loop around it
    ("autotune.search.options", "autotune.search.objective"),  # read by confirm, output, reuse
    (
        "autotune.train.trial.record",
        "autotune.search",
    ),  # the trial record is read by the search and the report
    ("autotune.train.trial.record", "autotune.report"),
]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in ROOT.rglob("*.py")}


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _type_checking_only(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def _imported(node: ast.AST, module: str) -> list[str]:
    """The modules an import statement of ``module`` names (submodules of ``from X import y`` too)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:
        package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
        package = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
        base = f"{package}.{base}" if base else package
    return [base] + [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES]


def imported_by(tree: ast.AST, module: str, *, runtime: bool) -> set[str]:
    """Modules of the package that the source ``tree`` of ``module`` imports and, by importing,
    loads (its own ancestors excepted). ``runtime`` leaves out imports under ``if TYPE_CHECKING:``."""
    found: set[str] = set()
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if runtime and _type_checking_only(node):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))
        for name in _imported(node, module):
            while name and name not in MODULES:  # ``from a.b import function``: the module a.b
                name = name.rpartition(".")[0]
            if within(name, "autotune"):
                found.update(n for n in (*ancestors(name)[1:], name) if n in MODULES)
    return found - {module, *ancestors(module)}


@cache
def imports(module: str, *, runtime: bool) -> frozenset[str]:
    return frozenset(imported_by(ast.parse(MODULES[module].read_text()), module, runtime=runtime))


def reach(start: str, *, runtime: bool = True) -> dict[str, list[str]]:
    """Every module ``start`` loads, directly or through others, with one import chain to it."""
    paths = {start: [start]}
    todo = [start]
    while todo:
        here = todo.pop()
        for there in sorted(imports(here, runtime=runtime)):
            if there not in paths:
                paths[there] = [*paths[here], there]
                todo.append(there)
    return paths


SOURCE = """
from typing import TYPE_CHECKING
import autotune.workloads.base
from . import meta
from ..config.io import write_text_atomic
def f():
    from autotune.train.window import runner
if TYPE_CHECKING:
    from autotune.search import study
"""


def test_the_walk_sees_every_kind_of_import():
    """Function-level and relative imports, the packages an import runs, type-only imports."""
    runtime = {
        "autotune.workloads",
        "autotune.workloads.base",
        "autotune.data.meta",
        "autotune.config",
        "autotune.config.io",
        "autotune.train",
        "autotune.train.window",
        "autotune.train.window.runner",
    }
    for module in (
        "autotune.data.loader",
        "autotune.data",
    ):  # ``from .`` of a module and of a package
        tree = ast.parse(SOURCE)
        assert imported_by(tree, module, runtime=True) == runtime
        assert imported_by(tree, module, runtime=False) == runtime | {
            "autotune.search",
            "autotune.search.study",
        }


@pytest.mark.parametrize("lower", LOWER)
def test_lower_layers_never_import_upper_ones(lower):
    """Directly (type-only imports included) or through any module they load."""
    direct = [
        f"{m} imports {t}"
        for m in sorted(MODULES)
        if within(m, lower)
        for t in sorted(imports(m, runtime=False))
        if any(within(t, u) for u in UPPER)
    ]
    assert not direct, direct
    chains = [
        " -> ".join(chain)
        for m in sorted(MODULES)
        if within(m, lower)
        for t, chain in reach(m).items()
        if any(within(t, u) for u in UPPER)
    ]
    assert not chains, chains[:5]


def cycles() -> list[list[str]]:
    """The strongly connected components (of more than one module) of the runtime import graph."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in imports(v, runtime=True):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(MODULES):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_touches_the_checked_subpackages():
    touching = [c for c in cycles() if any(within(m, p) for m in c for p in ACYCLIC)]
    assert not touching, touching


@pytest.mark.parametrize("low, high", ONE_WAY, ids=[f"{a}<->{b}" for a, b in ONE_WAY])
def test_named_pairs_import_one_way(low, high):
    """No module of ``low`` loads ``high``, while ``high`` may load ``low``."""
    for m in (m for m in MODULES if within(m, low)):
        back = [chain for t, chain in reach(m).items() if within(t, high)]
        assert not back, " -> ".join(back[0])
