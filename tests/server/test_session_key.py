"""A request's session key (`prompt_cache_key`; Messages: `metadata.prompt_cache_key`) reaches the backend
unchanged on each API, a body without one passes None, and a key that is not a string of 1 to 256 characters
is a 400 in the API's own error shape."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from recipe.server.app import create_app
from recipe.server.config import ServerConfig
from recipe.server.session_key import MAX_CHARS, session_key
from recording_backend import RecordingEcho
from starlette.testclient import TestClient

MODEL = "DeepSeek-V4-Pro"
PATHS = {"chat": "/v1/chat/completions", "messages": "/v1/messages", "responses": "/v1/responses"}


def Recording() -> RecordingEcho:
    return RecordingEcho(MODEL, "session_key")


def _body(api: str, key: object) -> dict:
    base: dict = {"model": MODEL, "max_tokens": 4}
    if api == "responses":
        base["input"] = "hi"
    else:
        base["messages"] = [{"role": "user", "content": "hi"}]
    if key is not None:
        if api == "messages":
            base["metadata"] = {"prompt_cache_key": key}
        else:
            base["prompt_cache_key"] = key
    return base


@settings(max_examples=25, deadline=None)
@given(api=st.sampled_from(sorted(PATHS)), key=st.one_of(st.none(), st.text(min_size=1, max_size=MAX_CHARS)))
def test_each_api_passes_the_key_to_the_backend(api: str, key: str | None) -> None:
    backend = Recording()
    with TestClient(create_app(ServerConfig(), backend)) as c:
        r = c.post(PATHS[api], json=_body(api, key), headers={"anthropic-version": "2023-06-01"})
        assert r.status_code == 200, r.text
    assert backend.seen == [key]


@pytest.mark.parametrize("api", sorted(PATHS))
@pytest.mark.parametrize("bad", ["", "x" * (MAX_CHARS + 1), 7, ["a"], {"k": "v"}])
def test_a_bad_key_is_a_400_in_the_apis_shape(api: str, bad: object) -> None:
    backend = Recording()
    with TestClient(create_app(ServerConfig(), backend)) as c:
        r = c.post(PATHS[api], json=_body(api, bad), headers={"anthropic-version": "2023-06-01"})
    assert r.status_code == 400, r.text
    body = r.json()
    if api == "messages":
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    else:
        assert body["error"]["param"] == "prompt_cache_key"
    assert backend.seen == []


def test_the_key_is_read_from_raw_bytes_and_from_parsed_bodies_alike() -> None:
    raw = b'{"prompt_cache_key": "s-1", "messages": []}'
    assert session_key("chat", raw) == session_key("chat", {"prompt_cache_key": "s-1"}) == "s-1"
    assert session_key("chat", b'{"messages": []}') is None
    assert session_key("messages", b'{"prompt_cache_key": "top-level is not Anthropic\'s place"}') is None
