"""Run a command against a mypyc-compiled copy of the stream processor, to measure what compiling buys.

The stream modules (`recipe/stream/*`, `recipe/detokenizer.py`) are copied with the rest of the package
folders to `--build` (default `build/mypyc_stream`, ignored by git), compiled there with mypyc (C extension
modules next to their sources in the copy), and `python ARGS...` runs with `recipe` mapped to that copy.
The working tree is never touched: nothing compiled can shadow an edited `.py` file. This is a measuring
tool, not how Recipe installs (the package stays pure Python).

    .venv/bin/python scripts/mypyc_stream.py -- bench/stream.py --cases 30 --repeats 3 --clock thread
    .venv/bin/python scripts/mypyc_stream.py --reuse -- -m pytest -q -p no:cacheprovider tests/stream
"""

from __future__ import annotations

import argparse
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"recipe": "recipe", "recipe.codecs": "codecs", "recipe.engine": "engine", "recipe.schemas": "schemas",
           "recipe.server": "server"}
MODULES = ["recipe/detokenizer.py", *(f"recipe/stream/{m}.py" for m in (
    "processor", "text_parser", "dsml", "json_mode", "chat_events", "messages_events", "responses_events", "sse",
    "token_text", "pieces", "token_markers", "usage", "call_ids"))]


def build(target: Path) -> None:
    """Copy the package folders to `target` and compile `MODULES` there."""
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for folder in FOLDERS.values():
        shutil.copytree(ROOT / folder, target / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", target / "pyproject.toml")
    mypyc = Path(sys.executable).parent / "mypyc"
    subprocess.run([str(mypyc), "--ignore-missing-imports", *MODULES], cwd=target, check=True,
                   stdout=subprocess.DEVNULL)
    compiled = sorted(target.glob("recipe/**/*.so"))
    if len(compiled) < len(MODULES):
        raise SystemExit(f"mypyc built {len(compiled)} of {len(MODULES)} modules")


def use(target: Path) -> None:
    """Map `recipe` and its folders to `target` for every later import (compiled modules come first)."""
    import importlib.abc
    import importlib.util

    class CopyFinder(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path=None, target_=None):  # type: ignore[no-untyped-def]
            folder = FOLDERS.get(fullname)
            if folder is None:
                return None
            init = target / folder / "__init__.py"
            return importlib.util.spec_from_file_location(fullname, init,
                                                          submodule_search_locations=[str(init.parent)])

    sys.path.insert(0, str(target))  # mypyc's shared runtime module sits at the top of the copy
    sys.meta_path.insert(0, CopyFinder())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", type=Path, default=ROOT / "build" / "mypyc_stream")
    ap.add_argument("--reuse", action="store_true", help="use the copy already built there")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="-- then a script path or -m module, and its arguments")
    ns = ap.parse_args()
    args = ns.args[1:] if ns.args[:1] == ["--"] else ns.args
    if not args:
        ap.error("nothing to run")
    if not ns.reuse:
        build(ns.build)
    use(ns.build)
    import recipe.stream.processor as processor

    print(f"recipe.stream.processor from {processor.__file__}", file=sys.stderr)
    if args[0] == "-m":
        sys.argv = args[1:]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = args
        runpy.run_path(args[0], run_name="__main__")


if __name__ == "__main__":
    main()
