"""`POST /v1/chat/completions`: OpenAI Chat Completions, streamed (`data:` frames ending in `[DONE]`) or whole."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from recipe.server.delivery import collect, json_response, stream_response
from recipe.server.limits import read_body
from recipe.server.state import state_of
from starlette.requests import Request
from starlette.responses import Response

router = APIRouter(tags=["OpenAI Chat Completions"])


def merge_choices(responses: list[dict[str, Any]]) -> dict[str, Any]:
    """One Chat body from the per-choice bodies of `n > 1`: choices re-indexed, completion usage summed."""
    merged = dict(responses[0])
    choices = []
    for index, body in enumerate(responses):
        for choice in body["choices"]:
            choices.append({**choice, "index": index})
    merged["choices"] = choices
    usage = merged.get("usage")
    if usage and len(responses) > 1:
        completion = sum(int(r["usage"]["completion_tokens"]) for r in responses)
        merged["usage"] = {**usage, "completion_tokens": completion,
                           "total_tokens": int(usage["prompt_tokens"]) + completion}
    return merged


@router.post("/v1/chat/completions")
async def chat_completions(request: Request) -> Response:
    state = state_of(request)
    body = await read_body(request, state.config.max_body_bytes)
    converted = state.pipeline.convert("chat", body)
    gen = await state.pipeline.prepare("chat", converted)
    if gen.stream:
        return await stream_response(request, state.pipeline, gen)
    return json_response(merge_choices(await collect(request, state.pipeline, gen)))
