"""Our stream processor against the official reference's transcripts (golden/transcripts/stream.jsonl.gz).

Every case is replayed through `StreamProcessor` and compared event by event with what the reference's
stream processor emitted for the same backend updates (tool-call ids and timestamps normalised), and
our complete response is compared with the reference's accumulated body.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "transcripts" / "stream.jsonl.gz"
with gzip.open(GOLDEN, "rt", encoding="utf-8") as _fh:
    CASES = [json.loads(line) for line in _fh]


def _ids(case: dict[str, Any]) -> str:
    return f"{case['case_id']}-{case['api']}-{case['kind']}-{case['feed']}"


def test_corpus_covers_what_the_issue_asks() -> None:
    kinds = {c["kind"] for c in CASES}
    assert len(CASES) >= 300
    assert {"plain", "thinking", "tool", "tools", "stop", "stop_split", "length", "json", "special"} <= kinds
    assert {c["api"] for c in CASES} == {"chat", "messages", "responses"}
    assert {c["feed"] for c in CASES} == {"text", "tokens"}


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_events_equal_reference(case: dict[str, Any], harness: Any, v4_tokenizer: Any) -> None:
    _proc, events = harness.run_ours(case, v4_tokenizer)
    ours = harness.normalise(harness.event_dicts(events))
    ref = harness.normalise(case["reference"]["events"])
    assert ours == ref
    if case["api"] == "chat":
        assert events[-1].done == case["reference"]["done"]


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_complete_response_equals_reference_accumulation(case: dict[str, Any], harness: Any, v4_tokenizer: Any) -> None:
    proc, _ = harness.run_ours(case, v4_tokenizer)
    assert harness.normalise(proc.response()) == harness.normalise(case["reference"]["response"])
