"""Every body, stream event and error the server sends validates against the official wire schemas
(the OpenAI OpenAPI spec and the Anthropic SDK types, as packaged in `recipe.schemas`)."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest
from recipe.server.app import create_app
from recipe.server.backend import EchoBackend, echo_model_card
from recipe.server.config import ServerConfig

from recipe import schemas

MODEL = "DeepSeek-V4-Pro"
MSG = [{"role": "user", "content": "Schema check"}]


@pytest.fixture(scope="module")
def base(serve):  # type: ignore[no-untyped-def]
    with serve(create_app(ServerConfig(), EchoBackend(model=echo_model_card(MODEL)))) as s:
        yield s.base


def sse_events(base: str, path: str, body: dict[str, Any]) -> list[tuple[str | None, Any]]:
    out: list[tuple[str | None, Any]] = []
    name = None
    with httpx.stream("POST", base + path, json=body, timeout=30) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                out.append((name, line[6:] if line == "data: [DONE]" else orjson.loads(line[6:])))
                name = None
    return out


def valid(name: str, instance: Any) -> None:
    assert schemas.errors(name, instance) == [], (name, instance)


def test_chat_bodies_and_chunks(base: str) -> None:
    body = {"model": MODEL, "messages": MSG, "max_tokens": 4, "thinking": {"type": "disabled"}, "logprobs": True,
            "top_logprobs": 1}
    valid("openai.CreateChatCompletionResponse", httpx.post(base + "/v1/chat/completions", json=body).json())
    events = sse_events(base, "/v1/chat/completions", {**body, "stream": True, "stream_options": {"include_usage": True}})
    assert events[-1] == (None, "[DONE]")
    for _, chunk in events[:-1]:
        valid("openai.CreateChatCompletionStreamResponse", chunk)


def test_messages_bodies_and_events(base: str) -> None:
    body = {"model": MODEL, "messages": MSG, "max_tokens": 4}
    valid("anthropic.Message", httpx.post(base + "/v1/messages", json=body).json())
    events = sse_events(base, "/v1/messages", {**body, "stream": True})
    assert events[0][0] == "message_start" and events[-1][0] == "message_stop"
    for name, event in events:
        assert name == event["type"]
        valid("anthropic.RawMessageStreamEvent", event)
    valid("anthropic.MessageTokensCount", httpx.post(base + "/v1/messages/count_tokens",
                                                     json={"model": MODEL, "messages": MSG}).json())


def test_responses_bodies_and_events(base: str) -> None:
    body = {"model": MODEL, "input": "Schema check", "max_output_tokens": 4}
    created = httpx.post(base + "/v1/responses", json=body).json()
    valid("openai.Response", created)
    valid("openai.Response", httpx.get(base + f"/v1/responses/{created['id']}").json())
    events = sse_events(base, "/v1/responses", {**body, "stream": True})
    for name, event in events:
        assert name == event["type"]
        valid("openai.ResponseStreamEvent", event)


def test_models_and_errors(base: str) -> None:
    valid("openai.ListModelsResponse", httpx.get(base + "/v1/models").json())
    for m in httpx.get(base + "/v1/models", headers={"anthropic-version": "2023-06-01"}).json()["data"]:
        valid("anthropic.ModelInfo", m)
    valid("openai.ErrorResponse", httpx.post(base + "/v1/chat/completions", json={"model": "nope"}).json())
    valid("openai.ErrorResponse", httpx.post(base + "/v1/responses", content=b"[1]").json())
    valid("anthropic.ErrorResponse", httpx.post(base + "/v1/messages", json={"model": MODEL}).json())
    valid("anthropic.ErrorResponse", httpx.get(base + "/v1/messages").json())
