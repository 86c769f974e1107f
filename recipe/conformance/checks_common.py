"""Checks that span the APIs: models, auth, headers, health."""

from __future__ import annotations

from recipe.conformance import probes
from recipe.conformance.check import CheckSkipped, check, expect, expect_schema, expect_status
from recipe.conformance.session import Session


def _needs_key(s: Session) -> str:
    if not s.api_key:
        raise CheckSkipped("no --api-key given: auth checks need the server's key")
    return s.api_key


@check("common.models.list", "common", "required", "GET /v1/models", "200 with a list valid against ListModelsResponse")
def models_list(s: Session) -> None:
    ex = s.get("/v1/models")
    expect_status(ex, 200)
    expect_schema("openai.ListModelsResponse", ex.json(), ex)


@check("common.models.served_model_listed", "common", "recommended", "GET /v1/models", "the model under test is listed")
def models_listed(s: Session) -> None:
    ex = s.get("/v1/models")
    data = ex.json() or {}
    ids = [m.get("id") for m in data.get("data", []) if isinstance(m, dict)]
    expect(s.model in ids, f"model {s.model!r} not among {ids}", ex)


@check("common.auth.missing_key", "common", "required", "chat request without credentials", "401 in the OpenAI error shape")
def auth_missing(s: Session) -> None:
    _needs_key(s)
    ex = s.post("chat", probes.chat_body(s), auth=False)
    expect_status(ex, 401)
    expect_schema("openai.ErrorResponse", ex.json(), ex, "401 body")


@check("common.auth.wrong_key", "common", "required", "chat request with a wrong Bearer key", "401 in the OpenAI error shape")
def auth_wrong(s: Session) -> None:
    _needs_key(s)
    ex = s.post("chat", probes.chat_body(s), auth=False, headers={"authorization": "Bearer wrong-key-0000"})
    expect_status(ex, 401)
    expect_schema("openai.ErrorResponse", ex.json(), ex, "401 body")


@check("common.auth.messages_wrong_key", "messages", "required", "messages request with a wrong x-api-key", "401 in the Anthropic error shape")
def auth_messages_wrong(s: Session) -> None:
    _needs_key(s)
    ex = s.post("messages", probes.messages_body(s), auth=False, headers={"x-api-key": "wrong-key-0000"})
    expect_status(ex, 401)
    expect_schema("anthropic.ErrorResponse", ex.json(), ex, "401 body")


@check("common.auth.messages_x_api_key", "messages", "required", "messages with x-api-key only (old SDKs)", "2xx")
def auth_x_api_key(s: Session) -> None:
    key = _needs_key(s)
    ex = s.post("messages", probes.messages_body(s, max_tokens=4), auth=False, headers={"x-api-key": key})
    expect_status(ex, 200)


@check("common.auth.messages_bearer", "messages", "required", "messages with Authorization: Bearer (SDK 2.x)", "2xx")
def auth_bearer(s: Session) -> None:
    key = _needs_key(s)
    ex = s.post(
        "messages", probes.messages_body(s, max_tokens=4), auth=False,
        headers={"authorization": f"Bearer {key}", "anthropic-version": "2026-10-21"},
    )
    expect_status(ex, 200)


@check("common.messages.any_version", "messages", "required", "messages without an anthropic-version header", "2xx (the version is not enforced)")
def any_version(s: Session) -> None:
    hdrs = {"authorization": f"Bearer {s.api_key}"} if s.api_key else {}
    body = probes.messages_body(s, max_tokens=4)
    ex = s.send("POST", "/v1/messages", body, headers={"content-type": "application/json", **hdrs}, api="messages")
    expect_status(ex, 200)


@check("common.messages.beta_query", "messages", "recommended", "POST /v1/messages?beta=true (Claude Code)", "same as without the query")
def beta_query(s: Session) -> None:
    ex = s.post("messages", probes.messages_body(s, max_tokens=4), path="/v1/messages?beta=true")
    expect_status(ex, 200)


@check("common.messages.unknown_beta", "messages", "recommended", "anthropic-beta: foo-2099-01-01", "2xx (unknown betas ignored)")
def unknown_beta(s: Session) -> None:
    ex = s.post("messages", probes.messages_body(s, max_tokens=4), headers={"anthropic-beta": "foo-2099-01-01"})
    expect_status(ex, 200)


@check("common.request_id", "chat", "recommended", "chat request", "an x-request-id response header")
def request_id(s: Session) -> None:
    ex = probes.chat_basic(s)
    expect("x-request-id" in ex.headers or "request-id" in ex.headers, "no x-request-id header", ex)


@check("common.stream_ignores_accept", "chat", "required", "stream=true with accept: application/json (what the SDKs send)", "still text/event-stream")
def stream_accept(s: Session) -> None:
    ex = s.post("chat", probes.chat_body(s, stream=True, max_tokens=4), headers={"accept": "application/json"})
    expect_status(ex, 200)
    expect(ex.is_sse, f"content-type {ex.content_type!r}, not text/event-stream", ex)


@check("common.health", "common", "recommended", "GET /health", "200 when ready")
def health(s: Session) -> None:
    expect_status(s.get("/health"), 200)


@check("common.unknown_fields_ignored", "chat", "required", "chat body with unknown top-level fields (top_k, foo)", "2xx")
def unknown_fields(s: Session) -> None:
    ex = s.post("chat", probes.chat_body(s, max_tokens=4, top_k=20, foo="bar"))
    expect_status(ex, 200)
