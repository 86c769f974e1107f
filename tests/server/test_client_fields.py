"""Fields and probes real clients send, through the server (echo backend, DeepSeek V4 prompt format).

Each test names the client behaviour it stands for: forced tool choice with thinking on (Agents SDK
`required`, pydantic-ai, LangChain `with_structured_output`, instructor), Chat `max_completion_tokens`
(current OpenAI SDKs), Messages `output_config.format`, HEAD probes, a reply that ends with a normal stop.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from recipe.server.app import create_app
from recipe.server.backend import EchoBackend, echo_model_card
from recipe.server.config import ServerConfig
from recording_backend import RecordingEcho

MODEL = "DeepSeek-V4-Pro"
HI = [{"role": "user", "content": "Hello there"}]
CHAT_TOOL = {"type": "function", "function": {"name": "pick", "parameters": {"type": "object",
                                                                          "properties": {"n": {"type": "integer"}}}}}
MESSAGES_TOOL = {"name": "pick", "input_schema": {"type": "object", "properties": {"n": {"type": "integer"}}}}
RESPONSES_TOOL = {"type": "function", "name": "pick", "parameters": {"type": "object",
                                                                   "properties": {"n": {"type": "integer"}}}}


def client(**config: Any) -> TestClient:
    backend = EchoBackend(model=echo_model_card(MODEL), mode="reply")
    return TestClient(create_app(ServerConfig(**config), backend))


def recording(field: str, **config: Any) -> tuple[TestClient, RecordingEcho]:
    backend = RecordingEcho(MODEL, field)
    return TestClient(create_app(ServerConfig(**config), backend)), backend


FORCED = [
    ("chat", "/v1/chat/completions", {"messages": HI, "tools": [CHAT_TOOL], "tool_choice": "required"}),
    ("chat", "/v1/chat/completions", {"messages": HI, "tools": [CHAT_TOOL],
                                      "tool_choice": {"type": "function", "function": {"name": "pick"}}}),
    ("messages", "/v1/messages", {"messages": HI, "max_tokens": 64, "tools": [MESSAGES_TOOL],
                                  "tool_choice": {"type": "tool", "name": "pick"}}),
    ("messages", "/v1/messages", {"messages": HI, "max_tokens": 64, "tools": [MESSAGES_TOOL],
                                  "tool_choice": {"type": "any"}, "thinking": {"type": "enabled", "budget_tokens": 1024}}),
    ("responses", "/v1/responses", {"input": "Hello there", "tools": [RESPONSES_TOOL], "tool_choice": "required"}),
    ("responses", "/v1/responses", {"input": "Hello there", "tools": [RESPONSES_TOOL],
                                    "tool_choice": {"type": "function", "name": "pick"}}),
]


@pytest.mark.parametrize(("api", "path", "body"), FORCED)
def test_a_forced_tool_choice_is_served_without_thinking(api: str, path: str, body: dict[str, Any]) -> None:
    c, backend = recording("constraint")
    r = c.post(path, json={"model": MODEL, **body})
    assert r.status_code == 200, r.text
    assert backend.seen[-1] is not None  # the tool-call constraint is applied
    out = r.json()
    if api == "chat":
        assert "reasoning_content" not in out["choices"][0]["message"]
    elif api == "messages":
        assert [b for b in out["content"] if b["type"] == "thinking"] == []
    else:
        assert [i for i in out["output"] if i["type"] == "reasoning"] == []
    strict, _ = recording("constraint", strict_reference=True)
    r = strict.post(path, json={"model": MODEL, **body})
    if api == "messages" and body["tool_choice"]["type"] == "any":
        assert r.status_code == 200  # the reference reads `any` as `auto`
        return
    assert r.status_code == 400
    err = r.json()
    message = err["error"]["message"]
    assert message == "Thinking mode does not support this tool_choice"
    if api == "messages":
        assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"


def test_max_completion_tokens_limits_the_completion() -> None:
    c, backend = recording("max_tokens")
    r = c.post("/v1/chat/completions", json={"model": MODEL, "messages": HI, "max_completion_tokens": 2})
    assert r.status_code == 200
    assert backend.seen == [2]
    assert r.json()["usage"]["completion_tokens"] == 2
    assert r.json()["choices"][0]["finish_reason"] == "length"
    strict, backend = recording("max_tokens", strict_reference=True)
    strict.post("/v1/chat/completions", json={"model": MODEL, "messages": HI, "max_completion_tokens": 2})
    assert backend.seen[-1] > 2  # the reference ignores the field


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/chat/completions", {"messages": HI}),
    ("/v1/chat/completions", {"messages": HI, "max_tokens": 100_000}),
    ("/v1/messages", {"messages": HI, "max_tokens": 100_000}),
    ("/v1/responses", {"input": "hi"}),
])
def test_the_server_caps_every_request(path: str, body: dict[str, Any]) -> None:
    c, backend = recording("max_tokens", max_output_tokens=7)
    assert c.post(path, json={"model": MODEL, **body}).status_code == 200
    assert backend.seen == [7]


def test_messages_output_config_format_becomes_a_json_constraint() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": False}
    c, backend = recording("constraint")
    body = {"model": MODEL, "max_tokens": 16, "messages": HI,
            "output_config": {"format": {"type": "json_schema", "schema": schema}}}
    assert c.post("/v1/messages", json=body).status_code == 200
    assert backend.seen[-1] is not None
    bad = c.post("/v1/messages", json={**body, "output_config": {"format": {"type": "json_schema"}}})
    assert bad.status_code == 400 and bad.json()["type"] == "error"
    strict, backend = recording("constraint", strict_reference=True)
    assert strict.post("/v1/messages", json=body).status_code == 200
    assert backend.seen[-1] is None  # the reference ignores the field


def test_echo_reply_answers_the_last_user_turn_and_stops() -> None:
    c = client()
    r = c.post("/v1/messages", json={"model": MODEL, "max_tokens": 100, "messages": HI})
    assert r.json()["stop_reason"] == "end_turn"
    assert [b["text"] for b in r.json()["content"] if b["type"] == "text"] == ["Hello there"]
    r = c.post("/v1/chat/completions", json={"model": MODEL, "messages": HI, "thinking": {"type": "disabled"}})
    assert r.json()["choices"][0]["finish_reason"] == "stop"
    assert r.json()["choices"][0]["message"]["content"] == "Hello there"
    r = c.post("/v1/responses", json={"model": MODEL, "input": "Hello there", "stream": True})
    assert '"status":"completed"' in r.text and "Hello there" in r.text
    r = c.post("/v1/chat/completions", json={"model": MODEL, "messages": HI, "max_tokens": 1})
    assert r.json()["choices"][0]["finish_reason"] == "length"


def test_head_answers_wherever_get_does() -> None:
    c = client()
    routes = ["/", "/v1/models", f"/v1/models/{MODEL}", "/v1/models/nope", "/health", "/version", "/metrics",
              "/v1/responses/resp_missing", "/playground"]
    for path in routes:
        get, head = c.get(path), c.head(path)
        assert head.status_code == get.status_code, path
        assert head.content == b"", path
    assert c.head("/v1/models", headers={"anthropic-version": "2023-06-01"}).status_code == 200
    assert c.get("/").json()["models"] == [MODEL]
    assert c.head("/v1/chat/completions").status_code == 405


def test_default_thinking_mode_is_a_server_choice() -> None:
    c = client(default_thinking_mode=False)
    r = c.post("/v1/chat/completions", json={"model": MODEL, "messages": HI})
    assert "reasoning_content" not in r.json()["choices"][0]["message"]
    on = client(default_thinking_mode=True).post("/v1/chat/completions", json={"model": MODEL, "messages": HI})
    assert "reasoning_content" in on.json()["choices"][0]["message"]
