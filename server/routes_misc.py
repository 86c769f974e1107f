"""Utility routes: models, tokenize/detokenize, health, version and the Prometheus scrape."""

from __future__ import annotations

import datetime
from typing import Any

import orjson
from fastapi import APIRouter
from recipe.server.delivery import json_response
from recipe.server.errors import ApiError
from recipe.server.limits import read_body
from recipe.server.metrics import CONTENT_TYPE
from recipe.server.state import state_of
from starlette.requests import Request
from starlette.responses import Response

import recipe

router = APIRouter(tags=["Utility"])


def _iso(ts: float) -> str:
    return datetime.datetime.fromtimestamp(int(ts), tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _anthropic_model(name: str, created: float, context_length: int) -> dict[str, Any]:
    return {"type": "model", "id": name, "display_name": name, "created_at": _iso(created), "lifecycle": "active",
            "max_input_tokens": context_length, "max_tokens": context_length}


@router.get("/")
async def root(request: Request) -> Response:
    """What answers here: a probe of the base URL (some clients check it before their first request)."""
    state = state_of(request)
    return json_response({"object": "recipe.server", "models": list(state.served_names),
                          "apis": ["/v1/chat/completions", "/v1/responses", "/v1/messages"]})


@router.get("/v1/models")
async def list_models(request: Request) -> Response:
    """OpenAI list shape; the Anthropic shape when the client sends `anthropic-version`."""
    state = state_of(request)
    created = int(state.backend.model.created or state.started_at)
    names = state.served_names
    if "anthropic-version" in request.headers:
        data = [_anthropic_model(n, created, state.backend.model.context_length) for n in names]
        return json_response({"data": data, "has_more": False, "first_id": names[0], "last_id": names[-1]})
    data = [{"id": n, "object": "model", "created": created, "owned_by": "recipe"} for n in names]
    return json_response({"object": "list", "data": data})


@router.get("/v1/models/{model_id:path}")
async def retrieve_model(request: Request, model_id: str) -> Response:
    state = state_of(request)
    if model_id not in state.served_names:
        raise ApiError(404, f"The model '{model_id}' does not exist.", param="model", code="model_not_found")
    created = int(state.backend.model.created or state.started_at)
    if "anthropic-version" in request.headers:
        return json_response(_anthropic_model(model_id, created, state.backend.model.context_length))
    return json_response({"id": model_id, "object": "model", "created": created, "owned_by": "recipe"})


async def _json_object(request: Request) -> dict[str, Any]:
    raw = await read_body(request, state_of(request).config.max_body_bytes,
                          state_of(request).config.body_timeout_s)
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise ApiError(400, "The request body is not valid JSON.") from None
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.")
    return body


@router.post("/tokenize")
async def tokenize(request: Request) -> Response:
    """`{prompt}` (plain text) or `{messages}` (a Chat conversation, rendered as for generation) →
    `{count, max_model_len, tokens[, token_strs]}`; `count` equals the Chat request's `prompt_tokens`."""
    state = state_of(request)
    body = await _json_object(request)
    tok = state.backend.model.tokenizer
    if isinstance(body.get("messages"), list):
        chat = {k: v for k, v in body.items() if k not in ("prompt", "return_token_strs", "add_special_tokens")}
        chat.setdefault("model", state.served_names[0])
        ids = state.pipeline.encode(state.pipeline.convert("chat", chat))
    elif isinstance(body.get("prompt"), str):
        ids = tok.encode_plain(body["prompt"])
    else:
        raise ApiError(400, "Send either 'prompt' (a string) or 'messages' (a Chat message list).", param="prompt")
    out: dict[str, Any] = {"count": len(ids), "max_model_len": state.backend.model.context_length, "tokens": ids}
    if body.get("return_token_strs"):
        out["token_strs"] = [tok.id_to_token(i) for i in ids]
    return json_response(out)


@router.post("/detokenize")
async def detokenize(request: Request) -> Response:
    state = state_of(request)
    body = await _json_object(request)
    ids = body.get("tokens")
    vocab = state.backend.model.tokenizer.vocab_size
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise ApiError(400, "'tokens' must be a list of integer token ids.", param="tokens")
    bad = [i for i in ids if not 0 <= i < vocab]
    if bad:
        raise ApiError(400, f"Token id {bad[0]} is outside the vocabulary (0..{vocab - 1}).", param="tokens")
    return json_response({"prompt": state.backend.model.tokenizer.decode(ids)})


@router.get("/health")
async def health(request: Request) -> Response:
    """200 while serving; 503 once shutdown has begun (in-flight requests are still draining), or once the
    backend cannot serve any more (its engine failed or stopped)."""
    state = state_of(request)
    failure = state.backend.failure()
    if failure is not None:
        return json_response({"status": "unhealthy", "reason": failure}, status=503)
    if state.draining:
        return json_response({"status": "draining"}, status=503)
    return json_response({"status": "ok"})


@router.get("/version")
async def version(request: Request) -> Response:
    card = state_of(request).backend.model
    return json_response({"version": getattr(recipe, "__version__", "0.1.0"), "model": card.name,
                          "architecture": card.architecture, "chat_format": card.chat_format})


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    return Response(state_of(request).metrics.render(), media_type=CONTENT_TYPE)
