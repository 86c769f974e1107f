"""A request's retention class: its metadata field, else its API key's class, else its API's, else the default."""

from __future__ import annotations

import pytest
from recipe.server.app import create_app
from recipe.server.config import ServerConfig
from recipe.server.kv_retention import from_body, retention_class
from recording_backend import RecordingEcho
from starlette.testclient import TestClient

MODEL = "DeepSeek-V4-Pro"


def Recording() -> RecordingEcho:
    return RecordingEcho(MODEL, "kv_retention")


def test_precedence() -> None:
    cfg = ServerConfig(api_keys=("k1", "k2"), kv_retention_by_api=(("messages", "agent"),),
                       kv_retention_by_key=(("k2", "batch"),))
    meta = b'{"metadata": {"kv_retention": "chat"}}'
    assert retention_class(cfg, "messages", meta, {"x-api-key": "k2"}) == "chat"
    assert retention_class(cfg, "messages", b"{}", {"x-api-key": "k2"}) == "batch"
    assert retention_class(cfg, "messages", b"{}", {"authorization": "Bearer k1"}) == "agent"
    assert retention_class(cfg, "chat", b"{}", {"authorization": "Bearer k1"}) is None
    assert from_body({"metadata": {"kv_retention": 3}}) is None and from_body(b"not json kv_retention") is None


@pytest.mark.parametrize(("path", "body", "expected"), [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                              "metadata": {"kv_retention": "batch"}}, "batch"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}, None),
    ("/v1/messages", {"messages": [{"role": "user", "content": "hi"}]}, "agent"),
    ("/v1/responses", {"input": "hi", "metadata": {"kv_retention": "chat"}}, "chat"),
])
def test_each_api_passes_the_class_to_the_backend(path: str, body: dict, expected: str | None) -> None:
    backend = Recording()
    app = create_app(ServerConfig(kv_retention_by_api=(("messages", "agent"),)), backend)
    with TestClient(app) as c:
        r = c.post(path, json={"model": MODEL, "max_tokens": 4, **body})
        assert r.status_code == 200, r.text
    assert backend.seen == [expected]
