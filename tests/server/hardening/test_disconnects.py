"""A client that leaves before a non-streaming answer is not a server failure: its generation is aborted,
nothing is logged as an error (no 500 status line, no traceback), and the server serves on."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson
import pytest
from recipe.server.app import create_app
from recipe.server.backend import EchoBackend
from recipe.server.config import ServerConfig


class _LeavesEarly:
    """An ASGI peer that sends its whole request, then disconnects after `after_s` without reading."""

    def __init__(self, path: str, body: dict[str, Any], after_s: float) -> None:
        self.path, self.body, self.after_s = path, orjson.dumps(body), after_s
        self.sent_body = False
        self.messages: list[dict[str, Any]] = []

    async def receive(self) -> dict[str, Any]:
        if not self.sent_body:
            self.sent_body = True
            return {"type": "http.request", "body": self.body, "more_body": False}
        await asyncio.sleep(self.after_s)
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        self.messages.append(message)

    def scope(self) -> dict[str, Any]:
        return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
                "scheme": "http", "path": self.path, "raw_path": self.path.encode(), "query_string": b"",
                "root_path": "", "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 2),
                "headers": [(b"content-type", b"application/json"), (b"anthropic-version", b"2023-06-01"),
                            (b"content-length", str(len(self.body)).encode())]}


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages", "/v1/responses"])
def test_a_client_leaving_a_non_streaming_request_is_no_error(path: str, caplog: pytest.LogCaptureFixture) -> None:
    echo = EchoBackend(chunk=1, token_delay_s=0.01)
    app = create_app(ServerConfig(), echo)
    key = "max_output_tokens" if path == "/v1/responses" else "max_tokens"
    body: dict[str, Any] = {"model": "echo", key: 5000}
    if path == "/v1/responses":
        body["input"] = "word " * 2000
    else:
        body["messages"] = [{"role": "user", "content": "word " * 2000}]
    peer = _LeavesEarly(path, body, after_s=0.3)

    async def go() -> None:
        await asyncio.wait_for(app(peer.scope(), peer.receive, peer.send), 30)

    with caplog.at_level(logging.INFO, logger="recipe.server"):
        asyncio.run(go())
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]
    assert not any(r.exc_info for r in caplog.records), "a traceback was logged for a client that left"
    assert any("disconnected before the answer" in r.getMessage() for r in caplog.records)
    assert not echo._running, "the generation of the client that left still runs"
    assert not any(m.get("status", 0) >= 500 for m in peer.messages)
