"""The per-token fast paths (no marker character in a chunk; one plain token per update, looked up
instead of detokenized) produce exactly the events of the general path, on every golden case re-fed
one token per update."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from recipe.stream import StreamProcessor
from recipe.stream.text_parser import OutputTextParser

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "transcripts" / "stream.jsonl.gz"
with gzip.open(GOLDEN, "rt", encoding="utf-8") as _fh:
    CASES = [json.loads(line) for line in _fh]


def one_token_per_update(case: dict[str, Any]) -> dict[str, Any]:
    if case["feed"] != "tokens":
        return case
    ups = []
    for u in case["updates"]:
        if u["kind"] == "tokens":
            lps = u.get("logprobs")
            for k, tid in enumerate(u["ids"]):
                ups.append({"kind": "tokens", "ids": [tid], **({"logprobs": [lps[k]]} if lps else {})})
        else:
            ups.append(u)
    return {**case, "updates": ups}


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['case_id']}-{c['api']}-{c['feed']}")
def test_fast_paths_change_nothing(case: dict[str, Any], harness: Any, v4_tokenizer: Any,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    case = one_token_per_update(case)
    _, fast = harness.run_ours(case, v4_tokenizer)
    monkeypatch.setattr(StreamProcessor, "fast_paths", False)
    monkeypatch.setattr(OutputTextParser, "fast_path", False)
    _, slow = harness.run_ours(case, v4_tokenizer)
    assert harness.normalise(harness.event_dicts(fast)) == harness.normalise(harness.event_dicts(slow))
