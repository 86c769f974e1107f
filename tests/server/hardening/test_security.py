"""Security review, each finding as a test (docs/security.md lists them): key comparison, stored Responses
scoped to the key that made them, the playground behind the key, public metrics, no request path to the
filesystem, and regex / schema denial of service answered in the API's error shape."""

from __future__ import annotations

import base64
import hmac
from pathlib import Path
from typing import Any

import pytest
from recipe.server import auth
from recipe.server.app import create_app
from recipe.server.backend import EchoBackend
from recipe.server.config import ServerConfig
from starlette.testclient import TestClient

KEY_A = "sk-alice-0123456789"
KEY_B = "sk-bob-9876543210"


@pytest.fixture(scope="module")
def echo() -> EchoBackend:
    return EchoBackend()


def client(echo: EchoBackend, **cfg: Any) -> TestClient:
    return TestClient(create_app(ServerConfig(**cfg), echo), raise_server_exceptions=False)


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def assert_openai_error(r: Any, status: int, code: str | None = None) -> None:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    if code is not None:
        assert body["error"]["code"] == code
    assert "Traceback" not in r.text


# -- key comparison --------------------------------------------------------------------------------------


def test_every_key_is_compared_on_digests_of_one_length(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, int]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((len(a), len(b)))
        return real(a, b)

    monkeypatch.setattr(auth.hmac, "compare_digest", spy)
    checker = auth.KeyChecker(("k1", "a-much-longer-second-key", KEY_A))
    for guess in ("k1", "x", "a-much-longer-second-key-plus", KEY_A):
        calls.clear()
        checker.accepts(guess)
        # a match on the first key does not stop the loop, and every comparison is between 32-byte digests
        assert calls == [(32, 32)] * 3
    assert checker.accepts(KEY_A) and checker.accepts("k1") and not checker.accepts("k") and not checker.accepts(None)


def test_basic_auth_carries_the_key_as_password(echo: EchoBackend) -> None:
    c = client(echo, api_keys=(KEY_A,))
    ok = base64.b64encode(f"anyone:{KEY_A}".encode()).decode()
    bad = base64.b64encode(b"anyone:wrong").decode()
    assert c.get("/v1/models", headers={"authorization": f"Basic {ok}"}).status_code == 200
    assert c.get("/v1/models", headers={"authorization": f"Basic {bad}"}).status_code == 401
    assert c.get("/v1/models", headers={"authorization": "Basic !!not-base64"}).status_code == 401


# -- stored Responses belong to the key that stored them ------------------------------------------------


def _store(c: TestClient, key: str) -> str:
    r = c.post("/v1/responses", json={"model": "echo", "input": "remember this", "max_output_tokens": 4},
               headers=bearer(key))
    assert r.status_code == 200, r.text
    return str(r.json()["id"])


def test_another_key_cannot_read_continue_list_or_delete_a_stored_response(echo: EchoBackend) -> None:
    c = client(echo, api_keys=(KEY_A, KEY_B))
    rid = _store(c, KEY_A)
    assert_openai_error(c.get(f"/v1/responses/{rid}", headers=bearer(KEY_B)), 404, "not_found")
    assert_openai_error(c.get(f"/v1/responses/{rid}/input_items", headers=bearer(KEY_B)), 404, "not_found")
    r = c.post("/v1/responses", json={"model": "echo", "input": "go on", "previous_response_id": rid,
                                      "max_output_tokens": 4}, headers=bearer(KEY_B))
    assert_openai_error(r, 404, "previous_response_not_found")
    assert_openai_error(c.delete(f"/v1/responses/{rid}", headers=bearer(KEY_B)), 404, "not_found")
    # the owner still has it, and can continue from it
    assert c.get(f"/v1/responses/{rid}", headers=bearer(KEY_A)).json()["id"] == rid
    r = c.post("/v1/responses", json={"model": "echo", "input": "go on", "previous_response_id": rid,
                                      "max_output_tokens": 4}, headers=bearer(KEY_A))
    assert r.status_code == 200, r.text
    # the not-found answer is the same for a foreign id and for one that never existed
    foreign = c.get(f"/v1/responses/{rid}", headers=bearer(KEY_B)).json()["error"]["message"]
    assert foreign == f"Response with id '{rid}' not found."


def test_without_keys_stored_responses_are_shared_as_before(echo: EchoBackend) -> None:
    c = client(echo)
    r = c.post("/v1/responses", json={"model": "echo", "input": "x", "max_output_tokens": 2})
    rid = r.json()["id"]
    assert c.get(f"/v1/responses/{rid}").status_code == 200


def test_rows_written_before_scoping_stay_unreadable_to_keys(tmp_path: Path, echo: EchoBackend) -> None:
    import sqlite3

    path = tmp_path / "old.sqlite3"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE responses (id TEXT PRIMARY KEY, created_at INTEGER NOT NULL, model TEXT NOT NULL, "
               "previous_response_id TEXT, response BLOB NOT NULL, input_items BLOB NOT NULL)")
    db.execute("INSERT INTO responses VALUES ('resp_old', 1, 'm', NULL, '{\"id\":\"resp_old\"}', '[]')")
    db.commit()
    db.close()
    keyed = client(echo, api_keys=(KEY_A,), responses_db=str(path))
    assert_openai_error(keyed.get("/v1/responses/resp_old", headers=bearer(KEY_A)), 404, "not_found")
    keyed.app.state.recipe.store.close()  # type: ignore[attr-defined]
    open_server = client(echo, responses_db=str(path))
    assert open_server.get("/v1/responses/resp_old").json() == {"id": "resp_old"}
    open_server.app.state.recipe.store.close()  # type: ignore[attr-defined]


# -- playground and public paths ------------------------------------------------------------------------


def test_playground_needs_the_key_when_keys_are_set(echo: EchoBackend) -> None:
    c = client(echo, api_keys=(KEY_A,))
    for method, path in (("GET", "/playground"), ("GET", "/playground/static/app.js"),
                         ("GET", "/playground/api/info"), ("POST", "/playground/api/encode")):
        r = c.request(method, path, json={"api": "chat", "body": {}})
        assert r.status_code == 401, path
        assert r.headers["www-authenticate"].startswith("Basic ")
        assert_openai_error(r, 401, "invalid_api_key")
    basic = base64.b64encode(f"me:{KEY_A}".encode()).decode()
    assert c.get("/playground", headers={"authorization": f"Basic {basic}"}).status_code == 200
    assert c.get("/playground/api/info", headers=bearer(KEY_A)).status_code == 200
    # without keys configured (loopback only) the playground is open as before
    assert client(echo).get("/playground").status_code == 200


def test_metrics_health_and_docs_need_no_key_but_nothing_else_is_public(echo: EchoBackend) -> None:
    c = client(echo, api_keys=(KEY_A,))
    for path in ("/metrics", "/health", "/version", "/openapi.json"):
        assert c.get(path).status_code == 200, path
    for path in ("/v1/models", "/tokenize", "/v1/responses/x", "/playgroundx", "/metrics/../v1/models"):
        assert c.get(path).status_code == 401, path


# -- no path from a request to the filesystem -----------------------------------------------------------


def test_no_request_reads_a_file(echo: EchoBackend, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-CONTENT")
    c = client(echo)
    answers = [
        c.get("/playground/static/..%2F..%2F..%2F" + str(secret).lstrip("/").replace("/", "%2F")),
        c.get("/playground/static/" + "..%2Fplayground.py"),
        c.get("/playground/static/%2E%2E/__init__.py"),
        c.get(f"/v1/responses/..%2F..%2F{secret.name}"),
        c.get(f"/v1/models/{secret}"),
        c.post("/v1/chat/completions", json={"model": str(secret), "messages": [{"role": "user", "content": "x"}]}),
        c.post("/v1/chat/completions", json={"model": "echo", "max_tokens": 64, "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": f"file://{secret}"}}]}]}),
        c.post("/v1/messages", json={"model": "echo", "max_tokens": 64, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "url", "url": f"file://{secret}"}}]}]}),
        c.post("/v1/responses", json={"model": "echo", "max_output_tokens": 64, "input": [{"role": "user", "content": [
            {"type": "input_file", "file_url": f"file://{secret}"}]}]}),
        c.post("/playground/api/encode", json={"api": "chat", "body": {"model": "echo", "messages": [
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": f"file://{secret}"}}]}]}}),
    ]
    for r in answers:
        assert r.status_code < 500, r.text
        assert "TOP-SECRET-CONTENT" not in r.text and "Traceback" not in r.text


# -- regex and schema denial of service ------------------------------------------------------------------


def _chat_format(fmt: dict[str, Any]) -> dict[str, Any]:
    return {"model": "echo", "max_tokens": 4, "messages": [{"role": "user", "content": "x"}], "response_format": fmt}


def test_a_constraint_past_the_compile_budget_is_a_400(echo: EchoBackend) -> None:
    c = client(echo, constraint_compile_timeout_s=0.001)
    r = c.post("/v1/chat/completions", json=_chat_format({"type": "regex", "regex": "a{700}{700}"}))
    assert_openai_error(r, 400)
    assert "took longer than" in r.json()["error"]["message"]


def test_schema_size_and_depth_limits_are_400s(echo: EchoBackend) -> None:
    c = client(echo)
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(200):
        deep = {"type": "object", "properties": {"a": deep}}
    fmt = {"type": "json_schema", "json_schema": {"name": "deep", "schema": deep}}
    assert_openai_error(c.post("/v1/chat/completions", json=_chat_format(fmt)), 400)
    wide = {"type": "object", "properties": {f"p{i}": {"type": "string", "description": "d" * 64} for i in range(9000)}}
    fmt = {"type": "json_schema", "json_schema": {"name": "wide", "schema": wide}}
    assert_openai_error(c.post("/v1/chat/completions", json=_chat_format(fmt)), 400)


def test_backtracking_regexes_compile_in_linear_time(echo: EchoBackend) -> None:
    """The matcher is derivative-based (llguidance): classic catastrophic-backtracking patterns are cheap."""
    import time

    c = client(echo)
    for rx in ("(a+)+$", "(a|aa)*b", "((((a*)*)*)*)*c", "(x+x+)+y"):
        t = time.monotonic()
        r = c.post("/v1/chat/completions", json=_chat_format({"type": "regex", "regex": rx}))
        assert r.status_code == 200, r.text
        assert time.monotonic() - t < 30
