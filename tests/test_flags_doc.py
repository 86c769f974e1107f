"""docs/flags.md is what scripts/make_flags_doc.py makes of `recipe serve`'s parser, and lists every flag."""

from __future__ import annotations

import argparse
import runpy
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = runpy.run_path(str(ROOT / "scripts" / "make_flags_doc.py"))  # its functions, without running main


def test_flags_doc_is_regenerated_from_the_parser() -> None:
    assert (ROOT / "docs" / "flags.md").read_text(encoding="utf-8") == SCRIPT["render_doc"](), (
        "docs/flags.md is stale: run .venv/bin/python scripts/make_flags_doc.py")


def test_every_flag_has_a_row_under_its_group() -> None:
    doc = (ROOT / "docs" / "flags.md").read_text(encoding="utf-8")
    for group in SCRIPT["serve_parser"]()._action_groups:
        actions = [a for a in group._group_actions if not isinstance(a, argparse._HelpAction)]
        if not actions:
            continue
        section = doc.split(f"\n## {group.title}\n", 1)[1].split("\n## ", 1)[0]
        for a in actions:
            assert f"| `{a.option_strings[0]}" in section, (group.title, a.option_strings[0])
