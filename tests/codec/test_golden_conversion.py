"""Every golden case of the official reference converts identically: conversation, options, errors."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest


def test_golden_set_is_large_and_varied(golden: list[dict[str, Any]]) -> None:
    ok = [r for r in golden if "error" not in r]
    bad = [r for r in golden if "error" in r]
    assert len(ok) >= 1000 and len(bad) >= 150
    per_api = Counter(r["api"] for r in ok)
    assert min(per_api.values()) >= 250, per_api
    assert {r["model_version"] for r in ok} == {"V4", "V41"}
    kinds = Counter(r["error"]["kind"] for r in bad)
    assert kinds["parse"] >= 50 and kinds["conversion"] >= 100, kinds
    assert sum(1 for r in golden if "beyond_reference" in r) >= 3


@pytest.mark.parametrize("api", ["chat", "messages", "responses"])
def test_golden_conversion_identical(golden: list[dict[str, Any]], outcomes: Any, api: str) -> None:
    failures = []
    cases = [r for r in golden if r["api"] == api]
    for rec in cases:
        diff = outcomes.diff(outcomes.actual(rec), outcomes.expected(rec))
        if diff:
            failures.append(f"{rec['case_id']} ({rec.get('mutation')}): {diff}")
    assert not failures, f"{len(failures)}/{len(cases)} differ:\n" + "\n".join(failures[:10])


def test_decoded_dict_bodies_convert_like_their_json_text(golden: list[dict[str, Any]], outcomes: Any) -> None:
    """`convert` accepts an already decoded body (a dict) with the same result as its JSON text."""
    import orjson

    checked = 0
    for rec in golden:
        try:
            decoded = orjson.loads(rec["request"])
        except orjson.JSONDecodeError:
            continue
        if not isinstance(decoded, dict):
            continue
        checked += 1
        as_dict = outcomes.actual({**rec, "request": decoded})
        assert as_dict == outcomes.actual(rec), rec["case_id"]
    assert checked > 2000
