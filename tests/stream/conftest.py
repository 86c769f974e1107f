"""Shared harness of the stream tests: golden cases, request mapping, running our processor, normalising."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest

from recipe.conversation import (
    Conversation,
    ConversationRequest,
    InferenceOptions,
    ModelVersion,
    ParsingOptions,
    ThinkingInitialStage,
)

if TYPE_CHECKING:  # recipe.stream loads in the tests, after tests/conftest.py chose compiled or pure modules
    from recipe.stream import StreamProcessor
    from recipe.stream.sse import Event

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "transcripts" / "stream.jsonl.gz"
_CALL_ID = re.compile(r"call_(\d\d)_[A-Za-z0-9_-]{20,40}")
_TIME_KEYS = {"created", "created_at", "completed_at"}


def load_cases() -> list[dict[str, Any]]:
    with gzip.open(GOLDEN, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def recipe_request(api: str, body: dict[str, Any]) -> ConversationRequest:
    """Our `ConversationRequest` with the parsing options the reference's conversion produced."""
    import deepseek_recipe as dr

    req_cls = {"chat": dr.ChatCompletionRequest, "messages": dr.MessagesRequest, "responses": dr.ResponsesRequest}[api]
    cr = req_cls(body).convert(dr.ConversionOptions())
    po = cr.parsing_options
    stage = po.thinking_initial_stage
    ours_stage = None
    if stage is not None:
        name = {
            str(dr.ThinkingInitialStage.ReasoningStart): ThinkingInitialStage.REASONING_START,
            str(dr.ThinkingInitialStage.ReasoningContinuation): ThinkingInitialStage.REASONING_CONTINUATION,
            str(dr.ThinkingInitialStage.ContentContinuation): ThinkingInitialStage.CONTENT_CONTINUATION,
        }
        ours_stage = name[str(stage)]
    version = ModelVersion.V41 if str(cr.model_version).endswith("V41Flash") else ModelVersion.V4
    io = cr.inference_options
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    return ConversationRequest(
        conversation=Conversation(thinking_mode=cr.conversation.thinking_mode),
        model_version=version,
        model=body["model"],
        inference_options=InferenceOptions(max_tokens=io.max_tokens, logprobs=io.logprobs, top_logprobs=io.top_logprobs),
        parsing_options=ParsingOptions(
            parse_tool_calls=po.parse_tool_calls,
            starts_in_tool_calls=po.starts_in_tool_calls,
            parse_json_output=po.parse_json_output,
            thinking_initial_stage=ours_stage,
            stop_sequences=tuple(po.stop_sequences),
        ),
        stream=bool(body.get("stream")),
        include_usage=include_usage,
    )


def to_update(u: dict[str, Any]) -> Any:
    """`stream_differential.to_update` (one definition for the suite, the runner and the bench)."""
    return load_differential().to_update(u)


def run_ours(case: dict[str, Any], tokenizer: Any) -> tuple[StreamProcessor, list[Event]]:
    from recipe.stream import StreamProcessor, responses_echo

    api = case["api"]
    request = recipe_request(api, case["body"])
    fmt = "deepseek_v41" if request.model_version is ModelVersion.V41 else "deepseek_v4"
    echo = responses_echo(case["body"]) if api == "responses" else None
    proc = StreamProcessor(api, request, response_id="resp-1", model=case["body"]["model"], tokenizer=tokenizer,
                           output_format=fmt, created=1700000000, echo=echo)
    events: list[Event] = []
    for u in case["updates"]:
        events += proc.feed(to_update(u))
        if proc.finished:
            break
    events += proc.finish()
    return proc, events


def normalise(value: Any) -> Any:
    """Replace tool-call ids' random part and timestamps so runs compare equal."""
    if isinstance(value, dict):
        return {k: (0 if k in _TIME_KEYS and isinstance(v, int) else normalise(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [normalise(v) for v in value]
    if isinstance(value, str):
        return _CALL_ID.sub(lambda m: f"call_{m.group(1)}_X", value)
    return value


def event_dicts(events: list[Event]) -> list[dict[str, Any]]:
    return [{"event": e.name, "data": e.data} for e in events if not e.done]


@pytest.fixture(scope="session")
def v4_tokenizer() -> Any:
    from recipe.tokenizer import load_deepseek_v4_tokenizer

    return load_deepseek_v4_tokenizer()


@pytest.fixture(scope="session")
def golden_cases() -> list[dict[str, Any]]:
    return load_cases()


@pytest.fixture(scope="session")
def harness() -> SimpleNamespace:
    return SimpleNamespace(recipe_request=recipe_request, to_update=to_update, run_ours=run_ours,
                           normalise=normalise, event_dicts=event_dicts, load_cases=load_cases)


@pytest.fixture(scope="session")
def differential() -> Any:
    return load_differential()


def load_differential() -> Any:
    """tests/stream/stream_differential.py (loaded by path: the suite runs with --import-mode=importlib)."""
    import importlib.util
    import sys

    name = "stream_differential"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).parent / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="session")
def reference_tokenizer() -> Any:
    import deepseek_recipe as dr

    from recipe.tokenizer import deepseek_v4_tokenizer_path

    return dr.Tokenizer.from_file(str(deepseek_v4_tokenizer_path()))
