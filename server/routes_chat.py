"""`POST /v1/chat/completions`: OpenAI Chat Completions, streamed (`data:` frames ending in `[DONE]`) or whole."""

from __future__ import annotations

from fastapi import APIRouter
from recipe.server.chat_spec import complete_body
from recipe.server.delivery import collect, json_response, stream_response
from recipe.server.kv_retention import retention_class
from recipe.server.limits import read_body
from recipe.server.sampling_extras import read_extras
from recipe.server.session_key import session_key
from recipe.server.state import state_of
from recipe.server.tool_policy import single_tool_call
from starlette.requests import Request
from starlette.responses import Response

router = APIRouter(tags=["OpenAI Chat Completions"])


@router.post("/v1/chat/completions")
async def chat_completions(request: Request) -> Response:
    state = state_of(request)
    body = await read_body(request, state.config.max_body_bytes, state.config.body_timeout_s)
    converted = await state.pipeline.aconvert("chat", body, len(body))
    gen = await state.pipeline.prepare("chat", converted, size_hint=len(body),
                                       single_tool_call=single_tool_call("chat", body),
                                       extras=read_extras("chat", body),
                                       kv_retention=retention_class(state.config, "chat", body, request.headers),
                                       session_key=session_key("chat", body))
    if gen.stream:
        return await stream_response(request, state.pipeline, gen)
    await collect(request, state.pipeline, gen)
    if len(gen.processors) == 1:
        return json_response(complete_body(gen.processors[0].response()))
    return json_response(complete_body(state.pipeline.parts.stream.merge_choices(gen.processors)))
