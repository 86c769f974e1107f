"""The map in `engine/__init__.py`'s docstring (issue 46): every technique is named there with its module, one
hop away, and every module path it names exists (a renamed or moved module breaks this test, not the map)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ast.get_docstring(ast.parse((ROOT / "engine" / "__init__.py").read_text())) or ""
PATH = re.compile(r"`((?:engine|cluster)/[\w/]*?(?:\.py|/))`")
TECHNIQUES = (
    "continuous batching", "paged KV", "prefix caching", "async scheduling", "KV tiers", "session cache",
    "speculative decoding", "expert parallelism", "DeepSeek-V4", "GGUF", "hand-off", "structured output",
    "engine protocol", "sampling", "configuration",
)


def map_lines() -> list[str]:
    """The map's entries: lines starting with "- ", continuation lines joined on."""
    entries: list[str] = []
    for line in DOC.splitlines():
        if line.startswith("- "):
            entries.append(line[2:])
        elif entries and line.startswith("  "):
            entries[-1] += " " + line.strip()
    return entries


def test_every_named_module_exists() -> None:
    named = PATH.findall(DOC)
    assert len(named) >= 20, named
    missing = [p for p in named if not (ROOT / p).exists()]
    assert not missing, f"engine/__init__.py names modules that do not exist: {missing}"


def test_every_technique_is_one_hop_from_the_map() -> None:
    entries = map_lines()
    for technique in TECHNIQUES:
        hits = [e for e in entries if technique.lower() in e.split(":", 1)[0].lower()]
        assert hits, f"no map entry for {technique!r}"
        assert all(PATH.search(e) for e in hits), f"the entry for {technique!r} names no module: {hits}"


def test_every_engine_package_is_on_the_map() -> None:
    packages = sorted(p.parent.relative_to(ROOT).as_posix() + "/" for p in (ROOT / "engine").glob("*/__init__.py"))
    named = PATH.findall(DOC)
    unnamed = [p for p in packages if not any(n.startswith(p) for n in named)]
    assert not unnamed, f"engine packages missing from the map: {unnamed}"
