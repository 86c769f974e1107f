"""Bad inputs: each must get a 4xx in its API's own error shape — never a 200, a 5xx, or FastAPI's `{"detail"}`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from recipe.conformance import probes
from recipe.conformance.check import Level, check, expect, expect_schema, expect_status
from recipe.conformance.session import Api, Session

Body = Callable[[Session], Any]


@dataclass(frozen=True)
class BadInput:
    name: str
    api: Api
    what: str
    body: Body
    statuses: tuple[int, ...] = (400,)
    level: Level = "required"
    path: str | None = None


def _chat(**extra: Any) -> Body:
    return lambda s: {**probes.chat_body(s), **extra}


def _messages(**extra: Any) -> Body:
    return lambda s: {**probes.messages_body(s), **extra}


def _responses(**extra: Any) -> Body:
    return lambda s: {**probes.responses_body(s), **extra}


def _without(base: Callable[[Session], dict[str, Any]], key: str) -> Body:
    return lambda s: {k: v for k, v in base(s).items() if k != key}


_ORPHAN_TOOL = [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "call_x", "content": "r"}]
_UNANSWERED_TOOL_USE = [
    {"role": "user", "content": "weather?"},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
    {"role": "user", "content": "and now?"},
]
_BAD_TOOL = [{"type": "function", "function": {"name": "bad name!", "parameters": {"type": "object", "properties": {}}}}]

BAD_INPUTS: list[BadInput] = [
    BadInput("invalid_json", "chat", "a body that is not JSON", lambda s: b'{"model": '),
    BadInput("not_an_object", "chat", "a JSON array body", lambda s: b"[1, 2]"),
    BadInput("missing_messages", "chat", "no messages", _without(probes.chat_body, "messages")),
    BadInput("empty_messages", "chat", "messages: []", _chat(messages=[])),
    BadInput("unknown_role", "chat", "a message with role 'wizard'", _chat(messages=[{"role": "wizard", "content": "x"}])),
    BadInput("content_wrong_type", "chat", "user content 42", _chat(messages=[{"role": "user", "content": 42}])),
    BadInput("temperature_range", "chat", "temperature: 3", _chat(temperature=3)),
    BadInput("top_p_range", "chat", "top_p: 1.5", _chat(top_p=1.5)),
    BadInput("max_tokens_zero", "chat", "max_tokens: 0", _chat(max_tokens=0)),
    BadInput("max_tokens_negative", "chat", "max_tokens: -5", _chat(max_tokens=-5)),
    BadInput("json_schema_without_schema", "chat", "response_format json_schema with no schema",
             _chat(response_format={"type": "json_schema", "json_schema": {"name": "x"}})),
    BadInput("unknown_model", "chat", "model: no-such-model", _chat(model="no-such-model-0000"), (400, 404)),
    BadInput("bad_tool_name", "chat", "a tool named 'bad name!'", _chat(tools=_BAD_TOOL)),
    BadInput("too_many_stops", "chat", "17 stop strings", _chat(stop=[f"s{i}" for i in range(17)])),
    BadInput("orphan_tool_message", "chat", "a tool message with no preceding tool call", _chat(messages=_ORPHAN_TOOL)),
    BadInput("top_logprobs_without_logprobs", "chat", "top_logprobs: 2 without logprobs", _chat(top_logprobs=2)),
    BadInput("context_overflow", "chat", "a prompt far longer than any context (~200K tokens)",
             _chat(messages=[{"role": "user", "content": "hello " * 200_000}]), (400, 413), "recommended"),
    BadInput("body_too_large", "chat", "a 16 MiB body", _chat(padding="x" * (16 << 20)), (413,), "recommended"),
    BadInput("invalid_json", "messages", "a body that is not JSON", lambda s: b'{"model": '),
    BadInput("missing_messages", "messages", "no messages", _without(probes.messages_body, "messages")),
    BadInput("unknown_role", "messages", "a message with role 'wizard'", _messages(messages=[{"role": "wizard", "content": "x"}])),
    BadInput("temperature_range", "messages", "temperature: 3", _messages(temperature=3)),
    BadInput("unknown_model", "messages", "model: no-such-model", _messages(model="no-such-model-0000"), (400, 404)),
    BadInput("tool_use_unanswered", "messages", "a tool_use not followed by its tool_result", _messages(messages=_UNANSWERED_TOOL_USE)),
    BadInput("empty_assistant_content", "messages", "an assistant message with content []",
             _messages(messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": []}])),
    BadInput("invalid_json", "responses", "a body that is not JSON", lambda s: b'{"model": '),
    BadInput("empty_input", "responses", "input: []", _responses(input=[])),
    BadInput("temperature_range", "responses", "temperature: 3", _responses(temperature=3)),
    BadInput("unknown_model", "responses", "model: no-such-model", _responses(model="no-such-model-0000"), (400, 404)),
    BadInput("orphan_function_output", "responses", "a function_call_output with an unknown call_id",
             _responses(input=[{"type": "function_call_output", "call_id": "call_nope", "output": "x"}])),
]

_SHAPE = {"chat": "openai.ErrorResponse", "responses": "openai.ErrorResponse", "messages": "anthropic.ErrorResponse"}


def _register(bad: BadInput) -> None:
    statuses = " or ".join(map(str, bad.statuses))

    @check(f"errors.{bad.api}.{bad.name}", bad.api, bad.level, bad.what, f"HTTP {statuses} with the {bad.api} error shape")
    def run(s: Session) -> None:
        ex = s.post(bad.api, bad.body(s), path=bad.path)
        expect(ex.status != 200, "HTTP 200 for a bad request (the SDKs would report success)", ex)
        expect(ex.status < 500, f"HTTP {ex.status}: a server error for a client mistake", ex)
        expect_status(ex, bad.statuses)
        expect_schema(_SHAPE[bad.api], ex.json(), ex, "error body")


for _bad in BAD_INPUTS:
    _register(_bad)
