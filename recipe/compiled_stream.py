"""The stream hot path compiled with mypyc, loaded in place of the pure-Python `recipe.stream` modules.

`build()` compiles `MODULES` (the per-token path: processor, parsers, event builders, SSE) once per key
into a cache directory (`~/.cache/recipe/stream/<key>`); the key hashes their sources, the sources of
every `recipe` module they import (mypyc compiles against those types), the mypy/mypyc version, the
Python version and the platform. `install()` runs first thing in `recipe/stream/__init__.py`: when the
build for the current sources exists it puts an import finder in front of the others that serves those
module names from the build, so `recipe.stream.processor` is the compiled module; otherwise (no C
compiler, failed build, sources changed since) nothing changes and the pure modules load. Both give the
same events and bytes (tests/stream/test_compiled_stream.py). The build is made at install
(`scripts/setup.sh` runs `python -m recipe.compiled_stream`) and by the test suite; importing never
compiles (a build takes tens of seconds).

Off switch: `use_compiled(False)` before `recipe.stream` is first imported (`recipe serve
--pure-python-stream`; pytest `--pure-stream`). Only what is compiled differs: no environment variable.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

# The compiled modules (recipe.stream.<name>). Left interpreted:
# accumulate/choices/logprobs/responses_echo (once per response, not per token).
MODULES = ("processor", "text_parser", "dsml", "json_mode", "chatml_tools", "chat_events", "messages_events", "id_count",
           "responses_events", "custom_input", "sse", "event_log", "pieces", "updates", "token_text", "token_markers",
           "usage", "call_ids")
GROUP = "recipe_stream"  # mypyc's shared library is the top-level module `recipe_stream__mypyc`
OPT_LEVEL = "3"
_SOURCE_ROOT = Path(__file__).resolve().parent.parent  # the folder holding the `recipe` package
# `from recipe.x import a, b` / `import recipe.x` (module, imported names); a regex, not `ast`: install() runs it
# on every import of recipe.stream, and parsing the sources would cost ~40 ms
_IMPORTS = re.compile(r"^[ \t]*(?:from[ \t]+(recipe[\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n#]*)|import[ \t]+(recipe[\w.]*))",
                      re.MULTILINE)


@dataclass
class _State:
    enabled: bool = True
    finder: _CompiledFinder | None = None


_STATE = _State()


def cache_dir() -> Path:
    return Path.home() / ".cache" / "recipe" / "stream"


def use_compiled(enabled: bool) -> None:
    """Allow the compiled stream modules (the default; used where built) or keep the pure-Python ones.
    Takes effect at the first import of `recipe.stream` (a process cannot hold both); raises RuntimeError
    when asked for pure Python after the compiled modules have loaded."""
    if not enabled and active():
        raise RuntimeError("recipe.stream is already imported with its compiled modules")
    _STATE.enabled = enabled
    if not enabled and _STATE.finder is not None:
        sys.meta_path.remove(_STATE.finder)  # type: ignore[arg-type]
        _STATE.finder = None


def active() -> bool:
    """Whether the loaded `recipe.stream` modules are the compiled ones."""
    module = sys.modules.get("recipe.stream.processor")
    return module is not None and not str(getattr(module, "__file__", "")).endswith(".py")


def source_files() -> list[Path]:
    """The sources a build depends on: `MODULES` and the `recipe` modules they import, transitively."""
    todo = [f"recipe.stream.{name}" for name in MODULES]
    seen: dict[str, Path] = {}
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        path = _module_path(name)
        if path is None:
            continue
        seen[name] = path
        for module, names, plain in _IMPORTS.findall(path.read_text(encoding="utf-8")):
            if plain:
                todo.append(plain)
                continue
            todo.append(module)
            todo.extend(f"{module}.{alias.split()[0]}" for alias in names.strip("()").replace("\n", " ").split(",")
                        if alias.strip())
    return [seen[name] for name in sorted(seen)]


def _module_path(name: str) -> Path | None:
    """The source file of a `recipe` module found under this package's folder (None elsewhere)."""
    parts = name.split(".")
    if parts[0] != "recipe":
        return None
    base = _SOURCE_ROOT.joinpath(*parts)
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def build_key() -> str:
    """The cache key of a build of the current sources (raises ImportError without mypy, hence mypyc)."""
    mypy = importlib.util.find_spec("mypy")  # found, not imported (importing mypy takes ~30 ms)
    if mypy is None or mypy.origin is None:
        raise ImportError("mypy (which ships mypyc) is not installed")
    digest = hashlib.sha256((Path(mypy.origin).parent / "version.py").read_bytes())
    for path in source_files():
        digest.update(str(path.relative_to(_SOURCE_ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(f"{sys.version}|{sys.platform}|{OPT_LEVEL}|{MODULES}".encode())
    return digest.hexdigest()[:16]


def build_dir() -> Path:
    return cache_dir() / build_key()


def build(quiet: bool = True) -> Path | None:
    """Compile the modules if this key is not in the cache yet; the build's folder, or None where no C
    compiler or mypyc is available or the build fails (then `install` keeps the pure modules)."""
    import shutil
    import subprocess
    import tempfile

    try:
        target = build_dir()
    except ImportError:  # no mypy (mypyc) installed
        return None
    if target.is_dir():
        return target
    if (shutil.which("cc") or shutil.which("gcc")) is None:
        return None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            done = subprocess.run(
                [sys.executable, "-m", "recipe.compiled_stream", "--compile-into", tmp],
                cwd=tmp, capture_output=quiet,  # not the project root: setuptools would read its pyproject.toml
            )
            if done.returncode != 0 or not (Path(tmp) / "lib").is_dir():
                return None
            try:
                os.replace(Path(tmp) / "lib", target)  # atomic: a concurrent builder's folder stays whole
            except OSError:
                if not target.is_dir():
                    raise
    except OSError:
        return None
    _prune(keep=target)
    return target


def _prune(keep: Path, newest: int = 8, days: float = 7.0) -> None:
    """Remove builds of other sources beyond the `newest` few that are older than `days` (a process may
    still be about to load a recent one)."""
    import shutil
    import time

    builds = sorted((p for p in cache_dir().iterdir() if p.is_dir() and p != keep and not p.name.startswith("tmp")),
                    key=lambda p: p.stat().st_mtime, reverse=True)
    for old in builds[newest:]:
        if time.time() - old.stat().st_mtime > days * 86400:
            shutil.rmtree(old, ignore_errors=True)


def _compile_into(out: Path) -> None:
    """Run mypyc + the C compiler over `MODULES` (in a child process: setuptools owns argv and may exit)."""
    from mypyc.build import mypycify
    from setuptools import setup

    config = out / "mypy.ini"
    config.write_text("[mypy]\nignore_missing_imports = True\nfollow_imports = silent\n")
    files = [str(_SOURCE_ROOT / "recipe" / "stream" / f"{name}.py") for name in MODULES]
    extensions = mypycify(["--config-file", str(config), *files], opt_level=OPT_LEVEL, target_dir=str(out / "c"),
                          group_name=GROUP)
    setup(name="recipe-compiled-stream", ext_modules=extensions,
          script_args=["-q", "build_ext", "--build-lib", str(out / "lib"), "--build-temp", str(out / "tmp")])


class _CompiledFinder:
    """Serves the compiled modules (and mypyc's shared library) from one build folder."""

    def __init__(self, folder: Path) -> None:
        suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
        self.paths: dict[str, str] = {}
        for path in folder.rglob("*"):
            suffix = next((s for s in suffixes if path.name.endswith(s)), None)
            if suffix is not None:
                rel = path.relative_to(folder)
                self.paths[".".join((*rel.parts[:-1], path.name[: -len(suffix)]))] = str(path)

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        location = self.paths.get(fullname)
        if location is None:
            return None
        loader = importlib.machinery.ExtensionFileLoader(fullname, location)
        return importlib.util.spec_from_file_location(fullname, location, loader=loader)


def install() -> bool:
    """Load the compiled modules from now on, if enabled and built for the current sources; whether so."""
    if not _STATE.enabled:
        return False
    if _STATE.finder is not None:
        return True
    try:
        folder = build_dir()
    except (ImportError, OSError):
        return False
    if not folder.is_dir():
        return False
    finder = _CompiledFinder(folder)
    if not all(f"recipe.stream.{name}" in finder.paths for name in MODULES):
        return False
    _STATE.finder = finder
    sys.meta_path.insert(0, finder)  # type: ignore[arg-type]
    try:  # the shared library holds all the compiled code: if it cannot load, keep the pure modules
        importlib.import_module(f"{GROUP}__mypyc")
    except ImportError:
        sys.meta_path.remove(finder)  # type: ignore[arg-type]
        _STATE.finder = None
        return False
    return True


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--compile-into":
        _compile_into(Path(sys.argv[2]))
    else:
        built = build(quiet=False)
        print(f"recipe compiled stream modules: {built if built else 'not built (no C compiler or mypyc); pure Python in use'}")
