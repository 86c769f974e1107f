"""docs/performance.md and the README's summary are what scripts/make_performance_doc.py makes of bench/results/."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _module():
    spec = importlib.util.spec_from_file_location("make_performance_doc", ROOT / "scripts" / "make_performance_doc.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_performance_doc_is_regenerated_from_the_results() -> None:
    mpd = _module()
    results = mpd.load_results()
    assert (ROOT / "docs" / "performance.md").read_text(encoding="utf-8") == mpd.render_doc(results), (
        "docs/performance.md is stale: run .venv/bin/python scripts/make_performance_doc.py")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert mpd.with_summary(readme, results) == readme, (
        "the README's performance summary is stale: run .venv/bin/python scripts/make_performance_doc.py")


def test_one_file_per_capability_each_with_its_command() -> None:
    results = _module().load_results()  # raises on a missing field, an unknown section or status
    ids = [r["id"] for r in results]
    assert len(ids) == len(set(ids))
    for r in results:
        assert r["command"].startswith((".venv/bin/python bench/", ".venv/bin/recipe ")), r["id"]
        assert r["status"] != "not met" or r.get("note") or "not met" in r.get("headline", ""), (
            f"{r['id']}: a figure that falls short says why")
    summary = [r for r in results if r.get("headline")]
    assert {r["section"] for r in summary} == set(_module().SECTIONS), "each section has a headline in the README"


def test_a_bench_run_keeps_what_a_person_wrote(tmp_path: Path) -> None:
    mpd = _module()
    path = tmp_path / "codec.json"
    path.write_text(json.dumps({"id": "codec", "goal": "≤ 1.0×", "note": "why", "section": "Codec", "order": 10,
                                "figure": "old"}))
    mpd.merge_result(path, {"figure": "new", "command": "x", "status": "met"})
    data = json.loads(path.read_text())
    assert (data["figure"], data["goal"], data["note"], data["section"], data["order"]) == (
        "new", "≤ 1.0×", "why", "Codec", 10)
    assert data["measured"] and data["source"]
