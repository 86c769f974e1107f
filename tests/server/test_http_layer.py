"""Auth, request ids, error shapes, body limits and the last-resort error net, on the echo backend."""

from __future__ import annotations

import logging

import httpx
import pytest
from recipe.server.app import create_app
from recipe.server.backend import EchoBackend
from recipe.server.config import ServerConfig
from starlette.testclient import TestClient

KEY = "sk-test-123"


@pytest.fixture(scope="module")
def echo() -> EchoBackend:
    return EchoBackend()


def client(echo: EchoBackend, **cfg) -> TestClient:  # type: ignore[no-untyped-def]
    return TestClient(create_app(ServerConfig(**cfg), echo), raise_server_exceptions=False)


def assert_openai_error(body: dict, type_: str | None = None) -> None:
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    if type_:
        assert body["error"]["type"] == type_


def assert_anthropic_error(body: dict, type_: str) -> None:
    assert body["type"] == "error"
    assert body["error"]["type"] == type_
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]


def test_missing_key_is_401_in_each_api_shape(echo: EchoBackend) -> None:
    c = client(echo, api_keys=(KEY,))
    r = c.post("/v1/chat/completions", json={})
    assert r.status_code == 401
    assert_openai_error(r.json())
    assert r.json()["error"]["code"] == "invalid_api_key"
    r = c.post("/v1/messages", json={}, headers={"anthropic-version": "2023-06-01"})
    assert r.status_code == 401
    assert_anthropic_error(r.json(), "authentication_error")
    assert r.json()["request_id"] == r.headers["request-id"]
    r = c.get("/v1/models", headers={"authorization": "Bearer wrong"})
    assert r.status_code == 401


def test_bearer_and_x_api_key_are_both_accepted(echo: EchoBackend) -> None:
    c = client(echo, api_keys=("other", KEY))
    assert c.get("/v1/models", headers={"authorization": f"Bearer {KEY}"}).status_code == 200
    assert c.get("/v1/models", headers={"x-api-key": KEY, "anthropic-version": "2026-10-21"}).status_code == 200
    assert c.get("/v1/models", headers={"x-api-key": KEY + "x"}).status_code == 401
    assert c.get("/v1/models", headers={"authorization": f"Basic {KEY}"}).status_code == 401


def test_public_paths_need_no_key(echo: EchoBackend) -> None:
    c = client(echo, api_keys=(KEY,))
    for path in ("/health", "/version", "/metrics", "/openapi.json"):
        assert c.get(path).status_code == 200, path


def test_request_id_is_echoed_or_generated(echo: EchoBackend) -> None:
    c = client(echo)
    r = c.get("/health", headers={"x-request-id": "abc-123"})
    assert r.headers["x-request-id"] == "abc-123" and r.headers["request-id"] == "abc-123"
    r = c.get("/health", headers={"x-request-id": "bad id with spaces"})
    assert r.headers["x-request-id"].startswith("req_")
    assert r.headers["x-request-id"] != c.get("/health").headers["x-request-id"]


def test_unknown_route_and_method_use_the_error_shape(echo: EchoBackend) -> None:
    c = client(echo)
    r = c.get("/v1/nothing")
    assert r.status_code == 404
    assert_openai_error(r.json())
    r = c.get("/v1/messages")
    assert r.status_code == 405
    assert_anthropic_error(r.json(), "invalid_request_error")


def test_body_over_the_limit_is_413(echo: EchoBackend) -> None:
    c = client(echo, max_body_bytes=1000)
    big = b'{"model": "echo", "pad": "' + b"x" * 2000 + b'"}'
    r = c.post("/v1/chat/completions", content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413
    assert_openai_error(r.json())
    r = c.post("/v1/messages", content=big)
    assert r.status_code == 413
    assert_anthropic_error(r.json(), "request_too_large")

    def chunks():  # no content-length: the limit is enforced while reading
        for _ in range(10):
            yield b"x" * 500

    r = c.post("/tokenize", content=chunks())
    assert r.status_code == 413


def test_unexpected_failure_is_500_without_detail_and_logged_with_request_id(
    echo: EchoBackend, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken(EchoBackend):
        def stats(self):  # type: ignore[no-untyped-def]
            raise RuntimeError("secret internal detail")

    c = TestClient(create_app(ServerConfig(), Broken()), raise_server_exceptions=False)
    with caplog.at_level(logging.ERROR, logger="recipe.server"):
        r = c.get("/metrics", headers={"x-request-id": "trace-me"})
    assert r.status_code == 500
    assert "secret" not in r.text and "Traceback" not in r.text
    assert_openai_error(r.json(), "server_error")
    assert r.headers["x-request-id"] == "trace-me"
    assert any("trace-me" in rec.getMessage() for rec in caplog.records)
    assert any("secret internal detail" in (rec.exc_text or "") for rec in caplog.records)


def test_models_in_openai_and_anthropic_shapes(echo: EchoBackend) -> None:
    c = client(echo, served_model_names=("alpha", "beta"))
    body = c.get("/v1/models").json()
    assert body["object"] == "list" and [m["id"] for m in body["data"]] == ["alpha", "beta"]
    assert all(m["object"] == "model" and isinstance(m["created"], int) for m in body["data"])
    body = c.get("/v1/models", headers={"anthropic-version": "2023-06-01"}).json()
    assert body["first_id"] == "alpha" and body["last_id"] == "beta" and body["has_more"] is False
    assert body["data"][0]["type"] == "model" and body["data"][0]["created_at"].endswith("Z")
    assert c.get("/v1/models/alpha").json()["id"] == "alpha"
    r = c.get("/v1/models/gpt-4o")
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"


def test_tokenize_and_detokenize_round_trip(echo: EchoBackend) -> None:
    c = client(echo)
    text = "Hello, wörld — 你好"
    r = c.post("/tokenize", json={"prompt": text, "return_token_strs": True}).json()
    assert r["tokens"] == echo.model.tokenizer.encode_plain(text)
    assert r["count"] == len(r["tokens"]) and r["max_model_len"] == echo.model.context_length
    assert len(r["token_strs"]) == r["count"]
    assert c.post("/detokenize", json={"tokens": r["tokens"]}).json() == {"prompt": text}
    assert c.post("/detokenize", json={"tokens": [-1]}).status_code == 400
    assert c.post("/detokenize", json={"tokens": "nope"}).status_code == 400
    assert c.post("/tokenize", content=b"{not json").status_code == 400
    assert c.post("/tokenize", json={}).status_code == 400


def test_health_reports_draining(echo: EchoBackend) -> None:
    app = create_app(ServerConfig(), echo)
    c = TestClient(app)
    assert c.get("/health").status_code == 200
    app.state.recipe.draining = True
    assert c.get("/health").status_code == 503


def test_exposure_rule() -> None:
    ServerConfig(host="127.0.0.1").check_exposure()
    ServerConfig(host="::1").check_exposure()
    ServerConfig(host="0.0.0.0", api_keys=(KEY,)).check_exposure()
    ServerConfig(host="0.0.0.0", allow_unauthenticated=True).check_exposure()
    with pytest.raises(ValueError, match="--allow-unauthenticated"):
        ServerConfig(host="0.0.0.0").check_exposure()
    with pytest.raises(ValueError):
        ServerConfig(api_keys=("",))


def test_openapi_document_lists_every_route(echo: EchoBackend) -> None:
    paths = client(echo).get("/openapi.json").json()["paths"]
    for p in ("/v1/chat/completions", "/v1/messages", "/v1/messages/count_tokens", "/v1/responses",
              "/v1/responses/{response_id}", "/v1/models", "/tokenize", "/detokenize", "/health",
              "/metrics", "/version"):
        assert p in paths, p


def test_live_server_sends_ids_over_real_http(echo: EchoBackend, serve) -> None:  # type: ignore[no-untyped-def]
    with serve(create_app(ServerConfig(), echo)) as srv:
        r = httpx.get(srv.base + "/health")
        assert r.status_code == 200 and r.headers["x-request-id"].startswith("req_")


def _without_ids(value):  # type: ignore[no-untyped-def]
    """The value with per-response identities (ids, signatures derived from them) removed."""
    if isinstance(value, dict):
        return {k: _without_ids(v) for k, v in value.items() if k not in ("id", "signature", "encrypted_content")}
    if isinstance(value, list | tuple):
        return [_without_ids(v) for v in value]
    return value


def test_large_bodies_prepared_off_the_loop_give_identical_answers(echo: EchoBackend) -> None:
    app = create_app(ServerConfig(), echo)
    c = TestClient(app)
    text = "long context words " * 2000
    for path, body in (
        ("/v1/chat/completions", {"model": "echo", "messages": [{"role": "user", "content": text}], "max_tokens": 6}),
        ("/v1/messages", {"model": "echo", "messages": [{"role": "user", "content": text}], "max_tokens": 6}),
        ("/v1/responses", {"model": "echo", "input": text, "max_output_tokens": 6, "store": False}),
    ):
        answers = []
        for offload in (1 << 40, 0):  # inline, then in a worker thread
            app.state.recipe.pipeline.offload_bytes = offload
            r = c.post(path, json=body)
            assert r.status_code == 200, r.text
            out = r.json()
            answers.append(_without_ids((out.get("choices") or out.get("content") or out.get("output"), out.get("usage"))))
        assert answers[0] == answers[1], path
