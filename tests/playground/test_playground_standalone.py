"""`recipe playground` without a model: the API answers with the serving app's body limits (defaults here)."""

from __future__ import annotations

from fastapi.testclient import TestClient
from recipe.server.config import ServerConfig
from recipe.server.playground import standalone_app


def test_standalone_encode_answers_without_server_state() -> None:
    client = TestClient(standalone_app())
    body = {"api": "chat", "body": {"model": "DeepSeek-V4-Pro", "messages": [{"role": "user", "content": "hi"}]}}
    response = client.post("/playground/api/encode", json=body)
    assert response.status_code == 200, response.text
    assert response.json()["token_ids"]


def test_standalone_body_over_the_default_limit_is_413() -> None:
    client = TestClient(standalone_app())
    response = client.post("/playground/api/encode", content=b" " * (ServerConfig().max_body_bytes + 1),
                           headers={"content-type": "application/json"})
    assert response.status_code == 413
    assert response.json()["error"]["type"] == "invalid_request_error"
