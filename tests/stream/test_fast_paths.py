"""The per-token fast paths (no marker character in a chunk; one plain token per update, looked up
instead of detokenized; deltas rendered from byte templates) produce exactly the events and SSE bytes
of the general path, on every golden case re-fed one token per update."""

from __future__ import annotations

import gzip
import json
import random
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recipe.stream import StreamProcessor
from recipe.stream.chat_events import ChatEventBuilder
from recipe.stream.dsml import DsmlToolCallParser, partial_length, partial_length_by_length
from recipe.stream.event_log import EventLog
from recipe.stream.messages_events import MessagesEventBuilder
from recipe.stream.responses_events import ResponsesEventBuilder
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
    fast_proc, fast = harness.run_ours(case, v4_tokenizer)
    monkeypatch.setattr(StreamProcessor, "fast_paths", False)
    monkeypatch.setattr(OutputTextParser, "fast_path", False)
    monkeypatch.setattr(DsmlToolCallParser, "find_partials", False)
    monkeypatch.setattr(DsmlToolCallParser, "fast_path", False)
    for builder in (ChatEventBuilder, MessagesEventBuilder, ResponsesEventBuilder):
        monkeypatch.setattr(builder, "use_templates", False)
    monkeypatch.setattr(EventLog, "compact", False)
    slow_proc, slow = harness.run_ours(case, v4_tokenizer)
    assert harness.normalise(harness.event_dicts(fast)) == harness.normalise(harness.event_dicts(slow))
    # the compact event log gives back what was sent, so the complete response is the same
    assert [e.sse() for e in fast_proc.events] == [e.sse() for e in fast]
    assert harness.normalise(fast_proc.response()) == harness.normalise(slow_proc.response())
    # byte-identical SSE (tool-call ids and timestamps aside)
    assert [_bytes(e.sse()) for e in fast] == [_bytes(e.sse()) for e in slow]


def _bytes(frame: bytes) -> bytes:
    frame = re.sub(rb"call_(\d\d)_[A-Za-z0-9]{24}", rb"call_\1_X", frame)
    return re.sub(rb'"(created_at|completed_at)":\d+', rb'"\1":0', frame)


_PATTERNS = st.sampled_from(['invoke name="', "</｜DSML｜tool_calls>", "</｜DSML｜ calls>", '"', "parameter name=",
                             "</｜DSML｜", " ", 'true">', 'false">', "aaab", "abab"])


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet='<｜/DSMLinvoke name="trufals> \nab', max_size=30), st.lists(_PATTERNS, min_size=1, max_size=3),
       st.integers(0, 3), st.integers(0, 25))
def test_partial_length_by_find_equals_by_length(head: str, patterns: list[str], which: int, cut: int) -> None:
    """Buffers ending in a prefix of a searched string (any length, the whole string included)."""
    tail = patterns[which % len(patterns)]
    buf = head + tail[: cut % (len(tail) + 1)]
    assert partial_length(buf, patterns) == partial_length_by_length(buf, patterns)


@pytest.mark.parametrize(("seed", "broken"), [(2207, False), (2208, True)])
def test_one_token_updates_of_fresh_cases_equal_live_reference(
    seed: int, broken: bool, differential: Any, v4_tokenizer: Any, reference_tokenizer: Any
) -> None:
    """Generated marker-dense outputs (JSON mode, DSML arguments, specials, stops) streamed one token id
    per update, the engine's case and the one the per-token fast paths take, against the reference."""
    rng = random.Random(seed)
    failures = []
    for i in range(80):
        case = differential.make_case(rng, i, broken=broken)
        case["feed"], case["logprobs"] = "tokens", rng.random() < 0.2
        upds = differential.updates(case, v4_tokenizer)
        flat = [u for u in upds if u["kind"] == "tokens"]
        ones = [{"kind": "tokens", "ids": [tid], **({"logprobs": [u["logprobs"][k]]} if "logprobs" in u else {})}
                for u in flat for k, tid in enumerate(u["ids"])]
        upds = [u for u in upds if u["kind"] == "ready"] + ones + [u for u in upds if u["kind"] == "finish"]
        diff = differential.compare_updates(case, upds, v4_tokenizer, reference_tokenizer)
        if diff:
            failures.append((i, case["api"], case["output"][:80], diff[:300]))
    assert not failures, f"seed {seed}: {len(failures)} of 80 differ: {failures[:3]}"
