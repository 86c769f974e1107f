"""The official `openai` and `anthropic` SDKs parse every stream we produce and agree with `.response()`.

Recorded SSE bytes are served to the SDK clients through a mock transport (no sockets); the stream
helpers (`chat.completions.stream`, `messages.stream`, `responses.stream`) accumulate them, and their
final object must contain everything our complete response says. A sample of the golden cases runs
by default, all of them with `-m slow`.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from recipe.stream import render_sse

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "transcripts" / "stream.jsonl.gz"
with gzip.open(GOLDEN, "rt", encoding="utf-8") as _fh:
    CASES = [json.loads(line) for line in _fh]
SAMPLE = [c for c in CASES if c["case_id"] % 6 < 2 or (c["kind"] in ("tools", "json") and c["case_id"] % 3 == 0)]


def _sse(status: int, body: bytes) -> dict[str, Any]:
    return {"status_code": status, "headers": {"content-type": "text/event-stream"}, "content": body}


def openai_client(body: bytes, status: int = 200) -> openai.OpenAI:
    transport = httpx.MockTransport(lambda request: httpx.Response(**_sse(status, body)))
    return openai.OpenAI(api_key="test", base_url="http://sdk.test/v1", http_client=httpx.Client(transport=transport),
                         max_retries=0)


def anthropic_client(body: bytes, status: int = 200) -> anthropic.Anthropic:
    import httpx2  # the anthropic SDK's own httpx fork

    transport = httpx2.MockTransport(lambda request: httpx2.Response(**_sse(status, body)))
    return anthropic.Anthropic(api_key="test", base_url="http://sdk.test", http_client=httpx2.Client(transport=transport),
                               max_retries=0)


def assert_contains(sdk: Any, ours: Any, path: str = "$") -> None:
    """Everything in `ours` is in the SDK's object (the SDK may add fields of its own, e.g. `None`s)."""
    if isinstance(ours, dict):
        assert isinstance(sdk, dict), f"{path}: SDK has {sdk!r}"
        for key, value in ours.items():
            if value is None and key not in sdk:
                continue
            assert key in sdk, f"{path}.{key} missing from the SDK's object"
            assert_contains(sdk[key], value, f"{path}.{key}")
    elif isinstance(ours, list):
        assert isinstance(sdk, list) and len(sdk) == len(ours), f"{path}: {sdk!r} != {ours!r}"
        for i, (a, b) in enumerate(zip(sdk, ours, strict=True)):
            assert_contains(a, b, f"{path}[{i}]")
    else:
        assert sdk == ours, f"{path}: SDK {sdk!r} != ours {ours!r}"


def check_case(case: dict[str, Any], harness: Any, tokenizer: Any) -> None:
    proc, events = harness.run_ours(case, tokenizer)
    body = render_sse(events)
    ours = proc.response()
    api = case["api"]
    if api == "chat":
        client = openai_client(body)
        with client.chat.completions.stream(model="m", messages=[{"role": "user", "content": "hi"}]) as stream:
            try:
                final: Any = stream.get_final_completion()
            except openai.LengthFinishReasonError as exc:  # the helper refuses to "parse" a cut answer
                final = exc.completion
            except openai.ContentFilterFinishReasonError:
                final = stream.current_completion_snapshot
        sdk = final.model_dump()
        # The SDK keeps `message.reasoning_content` (an extra field) but its stream accumulator drops
        # unknown keys of `logprobs`, so the reasoning tokens' logprobs (the reference's
        # `logprobs.reasoning_content`) cannot reach its final object.
        for choice in ours["choices"]:
            if choice["logprobs"] is not None:
                choice["logprobs"].pop("reasoning_content", None)
                if not choice["logprobs"]:
                    del choice["logprobs"]  # the SDK keeps an object whose `content` is None
        assert_contains(sdk, ours)
    elif api == "messages":
        aclient = anthropic_client(body)
        with aclient.messages.stream(model="m", max_tokens=16, messages=[{"role": "user", "content": "hi"}]) as mstream:
            message = mstream.get_final_message()
        assert_contains(message.model_dump(), ours)
    else:
        client = openai_client(body)
        with client.responses.stream(model="m", input="hi") as rstream:
            last = None
            for event in rstream:
                last = event
        assert last is not None and last.type in ("response.completed", "response.incomplete")
        assert_contains(last.response.model_dump(), ours)


@pytest.mark.parametrize("case", SAMPLE, ids=lambda c: f"{c['case_id']}-{c['api']}-{c['kind']}")
def test_sdk_final_object_equals_complete_response(case: dict[str, Any], harness: Any, v4_tokenizer: Any) -> None:
    check_case(case, harness, v4_tokenizer)


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['case_id']}-{c['api']}-{c['kind']}")
def test_sdk_parses_every_golden_stream(case: dict[str, Any], harness: Any, v4_tokenizer: Any) -> None:
    check_case(case, harness, v4_tokenizer)
