"""`POST /v1/messages` and `/v1/messages/count_tokens`: the Anthropic Messages API (query strings ignored)."""

from __future__ import annotations

import orjson
from fastapi import APIRouter
from recipe.server.delivery import collect, json_response, stream_response
from recipe.server.errors import ApiError
from recipe.server.kv_retention import retention_class
from recipe.server.limits import read_body
from recipe.server.session_key import session_key
from recipe.server.state import state_of
from recipe.server.tool_policy import single_tool_call
from starlette.requests import Request
from starlette.responses import Response

router = APIRouter(tags=["Anthropic Messages"])


@router.post("/v1/messages")
async def messages(request: Request) -> Response:
    state = state_of(request)
    body = await read_body(request, state.config.max_body_bytes, state.config.body_timeout_s)
    converted = await state.pipeline.aconvert("messages", body, len(body))
    gen = await state.pipeline.prepare("messages", converted, size_hint=len(body),
                                       single_tool_call=single_tool_call("messages", body),
                                       kv_retention=retention_class(state.config, "messages", body, request.headers),
                                       session_key=session_key("messages", body))
    if gen.stream:
        return await stream_response(request, state.pipeline, gen)
    await collect(request, state.pipeline, gen)
    return json_response(gen.processors[0].response())


@router.post("/v1/messages/count_tokens")
async def count_tokens(request: Request) -> Response:
    """`{"input_tokens": n}`: the prompt length the same Messages request would have."""
    state = state_of(request)
    raw = await read_body(request, state.config.max_body_bytes, state.config.body_timeout_s)
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise ApiError(400, "The request body is not valid JSON.") from None
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.")
    body = {k: v for k, v in body.items() if k not in ("stream", "max_tokens")}
    body["max_tokens"] = 1  # count_tokens takes no max_tokens; conversion of a Messages body wants one
    converted = state.pipeline.convert("messages", body)
    return json_response({"input_tokens": len(state.pipeline.encode(converted))})
