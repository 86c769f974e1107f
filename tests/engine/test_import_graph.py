"""The engine's import graph has no circle and the engine never imports the server (issue 46).

Every module under ``engine/`` is parsed with ``ast``; each ``import`` / ``from ... import`` naming
``recipe.engine.*`` (absolute or relative) becomes an arrow to the module's file. All imports count:
module level, inside functions, and under ``if TYPE_CHECKING:``. A deferred or type-only import that
exists to dodge a cycle is still a cycle for the reader, so the strict graph must be acyclic too.
``from package import name`` points at ``package/name.py`` when that file exists (a submodule), else at
the package's ``__init__.py``; a package's ``__init__`` is a module like any other, so a submodule importing
names from its own package, which imports it back, is a circle. Only circles are checked here, not which
floor an arrow points to.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "engine"
PACKAGE = "recipe.engine"


@dataclass(frozen=True)
class Arrow:
    source: str
    target: str
    line: int
    deferred: bool  # inside a function or under TYPE_CHECKING


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ENGINE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([PACKAGE, *parts])


def engine_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(ENGINE.rglob("*.py"))}


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
    """The engine module a dotted name lands in: itself, or its nearest enclosing engine module."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def arrows_of(source: str, path: Path, modules: dict[str, Path]) -> tuple[list[Arrow], list[str]]:
    """Arrows from one module to engine modules, and any ``recipe.server`` imports it makes."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    arrows: list[Arrow] = []
    server: list[str] = []
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
            if target.startswith("recipe.server"):
                server.append(f"{where}:{node.lineno} imports {target}")
            resolved = _resolve(target, modules)
            if resolved is not None and resolved != source:
                arrows.append(Arrow(source, resolved, node.lineno, deferred))
    return arrows, server


def import_graph() -> tuple[list[Arrow], list[str]]:
    modules = engine_modules()
    arrows: list[Arrow] = []
    server: list[str] = []
    for name, path in modules.items():
        a, s = arrows_of(name, path, modules)
        arrows += a
        server += s
    return arrows, server


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


def cycles(arrows: list[Arrow], *, include_deferred: bool) -> list[list[str]]:
    edges: dict[str, set[str]] = {}
    nodes = set(engine_modules())
    for arrow in arrows:
        if arrow.deferred and not include_deferred:
            continue
        edges.setdefault(arrow.source, set()).add(arrow.target)
    return strongly_connected(nodes, edges)


def describe(components: list[list[str]], arrows: list[Arrow]) -> str:
    lines = []
    for component in components:
        members = set(component)
        lines.append(" <-> ".join(m.removeprefix(PACKAGE + ".") for m in component))
        for arrow in dict.fromkeys(arrows):  # one line per arrow, however many names it imports
            if arrow.source in members and arrow.target in members:
                kind = " (deferred)" if arrow.deferred else ""
                lines.append(
                    f"    {arrow.source.removeprefix(PACKAGE + '.')}:{arrow.line} -> "
                    f"{arrow.target.removeprefix(PACKAGE + '.')}{kind}"
                )
    return "\n".join(lines)


def test_module_level_imports_are_acyclic() -> None:
    arrows, _ = import_graph()
    components = cycles(arrows, include_deferred=False)
    assert not components, "import circles at module level:\n" + describe(components, arrows)


def test_no_circle_through_deferred_or_type_checking_imports() -> None:
    arrows, _ = import_graph()
    components = cycles(arrows, include_deferred=True)
    assert not components, "import circles counting deferred imports:\n" + describe(components, arrows)


def test_engine_does_not_import_the_server() -> None:
    _, server = import_graph()
    assert not server, "engine imports the server:\n" + "\n".join(server)


def test_the_graph_sees_relative_absolute_and_deferred_imports(tmp_path: Path) -> None:
    """The walker itself: a planted circle through a relative, a deferred and a TYPE_CHECKING import."""
    modules = {f"{PACKAGE}.a": tmp_path / "a.py", f"{PACKAGE}.b": tmp_path / "b.py", f"{PACKAGE}.c": tmp_path / "c.py"}
    modules[f"{PACKAGE}.a"].write_text("from .b import thing\n")
    modules[f"{PACKAGE}.b"].write_text("def f():\n    from recipe.engine import c\n")
    modules[f"{PACKAGE}.c"].write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from recipe.engine.a import x\n"
        "import recipe.server.app\n"
    )
    arrows: list[Arrow] = []
    server: list[str] = []
    for name, path in modules.items():
        tree_arrows, tree_server = arrows_of(name, path, modules)
        arrows += tree_arrows
        server += tree_server
    assert {(a.source[-1], a.target[-1], a.deferred) for a in arrows} == {
        ("a", "b", False),
        ("b", "c", True),
        ("c", "a", True),
    }
    assert len(server) == 1
    edges: dict[str, set[str]] = {}
    for arrow in arrows:
        edges.setdefault(arrow.source, set()).add(arrow.target)
    assert strongly_connected(set(modules), edges) == [sorted(modules)]
    strict = {a.source: {a.target} for a in arrows if not a.deferred}
    assert strongly_connected(set(modules), strict) == []

