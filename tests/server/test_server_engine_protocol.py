"""The server depends on the engine protocol alone (issue 46.1): no module under ``server/`` names a concrete
engine class (import or annotation) except the one factory function that constructs it, and the backends
type their engine as `recipe.engine.core.EngineClient`."""

from __future__ import annotations

import ast
import re
import typing
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVER = ROOT / "server"
CONCRETE = {"LLMEngine", "ExpertParallelEngine", "HandoffConnector", "AsyncLLM", "DisaggLLM", "create_engine"}
CONCRETE_MODULES = {"llm_engine", "async_engine", "ep_engine", "handoff_connector", "router"}  # where they are defined
FACTORIES = {("cli_serve.py", "build_backend"): {"AsyncLLM"}, ("disagg_front.py", "build_disagg_backend"): {"DisaggLLM"}}


def violations(path: Path, source: str) -> list[str]:
    """Concrete engine names imported or used in annotations outside the file's factory function."""
    tree = ast.parse(source)
    found: list[str] = []

    def visit(node: ast.AST, function: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else function
            allowed = FACTORIES.get((path.name, inner or ""), set())
            if isinstance(child, ast.ImportFrom) and (child.module or "").startswith(("recipe.engine", "recipe.cluster")):
                last = (child.module or "").rpartition(".")[2]
                for alias in child.names:
                    if alias.name in CONCRETE_MODULES or (last in CONCRETE_MODULES and alias.name not in allowed) or (
                            alias.name in CONCRETE and alias.name not in allowed):
                        found.append(f"{path.name}:{child.lineno} imports {child.module}.{alias.name}")
            if isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name.rpartition(".")[2] in CONCRETE_MODULES and alias.name.startswith("recipe."):
                        found.append(f"{path.name}:{child.lineno} imports {alias.name}")
            annotations: list[ast.expr] = []
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                args = child.args
                annotations += [a.annotation for a in [*args.posonlyargs, *args.args, *args.kwonlyargs,
                                                       *filter(None, [args.vararg, args.kwarg])] if a.annotation]
                annotations += [child.returns] if child.returns else []
            if isinstance(child, ast.AnnAssign):
                annotations.append(child.annotation)
            for annotation in annotations:
                named = CONCRETE & _names(annotation)
                if named:
                    found.append(f"{path.name}:{child.lineno} annotates with {', '.join(sorted(named))}")
            visit(child, inner)

    visit(tree, None)
    return found


def _names(annotation: ast.expr) -> set[str]:
    names = {n.id for n in ast.walk(annotation) if isinstance(n, ast.Name)}
    names |= {n.attr for n in ast.walk(annotation) if isinstance(n, ast.Attribute)}
    for const in ast.walk(annotation):  # string annotations
        if isinstance(const, ast.Constant) and isinstance(const.value, str):
            names |= set(re.findall(r"\w+", const.value))
    return names


def test_server_names_no_concrete_engine_outside_its_factory() -> None:
    found = [v for path in sorted(SERVER.rglob("*.py")) for v in violations(path, path.read_text())]
    assert not found, "the server names concrete engines:\n" + "\n".join(found)


def test_each_factory_constructs_its_engine() -> None:
    """The allowed places are real: each factory imports its engine class (so the check above is not vacuous)."""
    for (name, function), classes in FACTORIES.items():
        tree = ast.parse((SERVER / name).read_text())
        body = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == function)
        imported = {a.name for n in ast.walk(body) if isinstance(n, ast.ImportFrom) for a in n.names}
        called = {n.func.id for n in ast.walk(body) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        assert classes <= imported & called, (name, function)


def test_the_backends_type_their_engine_as_the_client_protocol() -> None:
    from recipe.engine.core import EngineClient
    from recipe.server.disagg_front import DisaggBackend
    from recipe.server.engine_backend import EngineBackend

    for cls in (EngineBackend, DisaggBackend):  # the protocol is imported for type checking only (no torch)
        hints = typing.get_type_hints(cls.__init__, localns={"EngineClient": EngineClient})
        assert hints["engine"] is EngineClient, cls.__name__


def test_the_check_catches_a_concrete_engine_outside_the_factory() -> None:
    planted = (
        "from recipe.engine.llm_engine import LLMEngine\n"
        "from recipe.cluster.router import DisaggLLM as R\n"
        "def build_backend():\n    from recipe.engine import AsyncLLM\n    return AsyncLLM()\n"
        "def other(engine: 'AsyncLLM') -> None:\n    from recipe.engine import AsyncLLM\n"
        "def fine(engine: 'EngineClient') -> None:\n    from recipe.engine.core import EngineClient\n"
    )
    found = violations(SERVER / "cli_serve.py", planted)
    assert [f.split(" ", 1)[0] for f in found] == ["cli_serve.py:1", "cli_serve.py:2", "cli_serve.py:6",
                                                    "cli_serve.py:7"], found
