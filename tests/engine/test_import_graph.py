"""The engine's and the cluster's import graphs have no circle; the engine never imports the cluster or the
server, and the cluster never imports the server (issue 46).

Every module under ``engine/`` (and, separately, under ``cluster/``) is parsed with ``ast``; each ``import`` /
``from ... import`` naming a module of the same tree (absolute or relative) becomes an arrow to the module's
file. All imports count: module level, inside functions, and under ``if TYPE_CHECKING:``. A deferred or
type-only import that exists to dodge a cycle is still a cycle for the reader, so the strict graph must be
acyclic too. ``from package import name`` points at ``package/name.py`` when that file exists (a submodule),
else at the package's ``__init__.py``; a package's ``__init__`` is a module like any other, so a submodule
importing names from its own package, which imports it back, is a circle. Only circles are checked here, not
which floor an arrow points to. An import of a package a tree must not depend on counts wherever it sits,
deferred or not: ``recipe.cluster`` depends on ``recipe.engine``, never the reverse.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Tree:
    """One source folder and the import package it installs as, with the packages it must never import."""

    root: Path
    package: str
    forbidden: tuple[str, ...]


ENGINE = Tree(ROOT / "engine", "recipe.engine", forbidden=("recipe.server", "recipe.cluster"))
CLUSTER = Tree(ROOT / "cluster", "recipe.cluster", forbidden=("recipe.server",))
TREES = pytest.mark.parametrize("tree", [ENGINE, CLUSTER], ids=lambda t: t.root.name)


@dataclass(frozen=True)
class Arrow:
    source: str
    target: str
    line: int
    deferred: bool  # inside a function or under TYPE_CHECKING


def module_name(tree: Tree, path: Path) -> str:
    parts = list(path.relative_to(tree.root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([tree.package, *parts])


def tree_modules(tree: Tree) -> dict[str, Path]:
    return {module_name(tree, p): p for p in sorted(tree.root.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> list[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import node with whether it is deferred (function body or TYPE_CHECKING block)."""
    found: list[tuple[ast.Import | ast.ImportFrom, bool]] = []

    def walk(node: ast.AST, deferred: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                found.append((child, deferred))
            inner = deferred or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.body:
                    walk_stmt(stmt, True)
                for stmt in child.orelse:
                    walk_stmt(stmt, deferred)
                continue
            walk(child, inner)

    def walk_stmt(stmt: ast.stmt, deferred: bool) -> None:
        if isinstance(stmt, ast.Import | ast.ImportFrom):
            found.append((stmt, deferred))
        walk(stmt, deferred or isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef))

    walk(tree, False)
    return found


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The tree's module a dotted name lands in: itself, or its nearest enclosing module of the tree."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def arrows_of(
    source: str, path: Path, modules: dict[str, Path], forbidden: tuple[str, ...]
) -> tuple[list[Arrow], list[str]]:
    """Arrows from one module to modules of its tree, and any import it makes of a forbidden package."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    arrows: list[Arrow] = []
    banned: list[str] = []
    for node, deferred in _imports(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            if node.level:
                base = source if is_package else source.rpartition(".")[0]
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            targets = [f"{base}.{alias.name}" for alias in node.names]
        for target in targets:
            if any(target == f or target.startswith(f + ".") for f in forbidden):
                banned.append(f"{where}:{node.lineno} imports {target}")
            resolved = _resolve(target, modules)
            if resolved is not None and resolved != source:
                arrows.append(Arrow(source, resolved, node.lineno, deferred))
    return arrows, banned


def import_graph(tree: Tree) -> tuple[list[Arrow], list[str]]:
    modules = tree_modules(tree)
    arrows: list[Arrow] = []
    banned: list[str] = []
    for name, path in modules.items():
        a, b = arrows_of(name, path, modules, tree.forbidden)
        arrows += a
        banned += b
    return arrows, banned


def strongly_connected(nodes: set[str], edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative; components of more than one module, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return sorted(components)


def cycles(tree: Tree, arrows: list[Arrow], *, include_deferred: bool) -> list[list[str]]:
    edges: dict[str, set[str]] = {}
    nodes = set(tree_modules(tree))
    for arrow in arrows:
        if arrow.deferred and not include_deferred:
            continue
        edges.setdefault(arrow.source, set()).add(arrow.target)
    return strongly_connected(nodes, edges)


def describe(tree: Tree, components: list[list[str]], arrows: list[Arrow]) -> str:
    prefix = tree.package + "."
    lines = []
    for component in components:
        members = set(component)
        lines.append(" <-> ".join(m.removeprefix(prefix) for m in component))
        for arrow in dict.fromkeys(arrows):  # one line per arrow, however many names it imports
            if arrow.source in members and arrow.target in members:
                kind = " (deferred)" if arrow.deferred else ""
                lines.append(
                    f"    {arrow.source.removeprefix(prefix)}:{arrow.line} -> {arrow.target.removeprefix(prefix)}{kind}"
                )
    return "\n".join(lines)


@TREES
def test_module_level_imports_are_acyclic(tree: Tree) -> None:
    arrows, _ = import_graph(tree)
    components = cycles(tree, arrows, include_deferred=False)
    assert not components, "import circles at module level:\n" + describe(tree, components, arrows)


@TREES
def test_no_circle_through_deferred_or_type_checking_imports(tree: Tree) -> None:
    arrows, _ = import_graph(tree)
    components = cycles(tree, arrows, include_deferred=True)
    assert not components, "import circles counting deferred imports:\n" + describe(tree, components, arrows)


@TREES
def test_no_import_of_a_package_that_depends_on_this_one(tree: Tree) -> None:
    """The engine imports neither the cluster nor the server; the cluster does not import the server."""
    _, banned = import_graph(tree)
    assert not banned, f"{tree.root.name}/ imports what depends on it:\n" + "\n".join(banned)


def test_the_graph_sees_relative_absolute_and_deferred_imports(tmp_path: Path) -> None:
    """The walker itself: a planted circle through a relative, a deferred and a TYPE_CHECKING import, and
    forbidden imports at module level and deferred (a name that only starts like a forbidden one is not)."""
    p = ENGINE.package
    modules = {f"{p}.a": tmp_path / "a.py", f"{p}.b": tmp_path / "b.py", f"{p}.c": tmp_path / "c.py"}
    modules[f"{p}.a"].write_text("from .b import thing\nimport recipe.clustering\n")
    modules[f"{p}.b"].write_text(
        "def f():\n    from recipe.engine import c\n    from recipe.cluster import router\n"
    )
    modules[f"{p}.c"].write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from recipe.engine.a import x\n"
        "import recipe.server.app\n"
    )
    arrows: list[Arrow] = []
    banned: list[str] = []
    for name, path in modules.items():
        tree_arrows, tree_banned = arrows_of(name, path, modules, ENGINE.forbidden)
        arrows += tree_arrows
        banned += tree_banned
    assert {(a.source[-1], a.target[-1], a.deferred) for a in arrows} == {
        ("a", "b", False),
        ("b", "c", True),
        ("c", "a", True),
    }
    assert sorted(line.rpartition(" imports ")[2] for line in banned) == [
        "recipe.cluster.router",
        "recipe.server.app",
    ]
    edges: dict[str, set[str]] = {}
    for arrow in arrows:
        edges.setdefault(arrow.source, set()).add(arrow.target)
    assert strongly_connected(set(modules), edges) == [sorted(modules)]
    strict = {a.source: {a.target} for a in arrows if not a.deferred}
    assert strongly_connected(set(modules), strict) == []
