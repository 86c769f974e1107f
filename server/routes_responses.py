"""`/v1/responses`: the OpenAI Responses API, with `store` and `previous_response_id` kept in SQLite.

A stored row holds the response and the full input it answered (earlier turns already expanded), so a
continuation's input is that input, then the stored output items, then the new input.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter
from recipe.server.delivery import collect, json_response, stream_response
from recipe.server.errors import ApiError
from recipe.server.kv_retention import retention_class
from recipe.server.limits import read_body
from recipe.server.pipeline import Generation
from recipe.server.request_guard import key_owner_of
from recipe.server.session_key import session_key
from recipe.server.state import ServerState, state_of
from recipe.server.storage import StoreWriteError
from recipe.server.tool_policy import single_tool_call
from starlette.requests import Request
from starlette.responses import Response

router = APIRouter(tags=["OpenAI Responses"])

# Output item fields that describe the item's delivery, not the conversation; they are dropped when the item
# is replayed as input.
_OUTPUT_ONLY = ("status", "phase")


def input_items(value: Any) -> list[Any]:
    """A Responses `input` as an item list (a bare string is one user message)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    if isinstance(value, list):
        return list(value)
    raise ApiError(400, "Invalid 'input': expected a string or an array of input items.", param="input")


def output_as_input(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in item.items() if k not in _OUTPUT_ONLY} for item in output]


def _not_found(response_id: str, param: str | None = None) -> ApiError:
    return ApiError(404, f"Response with id '{response_id}' not found.", param=param, code="not_found")


def store_failed(exc: StoreWriteError) -> ApiError:
    """507: the response could not be stored; the server itself goes on serving."""
    return ApiError(507, f"{str(exc).capitalize()}. Retry with 'store': false, or later.", code="storage_unavailable")


def _check_storable(body: dict[str, Any], full_input: list[Any]) -> None:
    """A stored row (and the response object, which echoes request fields) must encode as JSON: values
    nested past the encoder's 255 levels are refused before generating rather than failing the save."""
    try:
        orjson.dumps(body)
        orjson.dumps(full_input)
    except orjson.JSONEncodeError:
        raise ApiError(400, "The request nests values too deeply to be stored; send it with 'store': false "
                            "or flatten it.", param="input") from None


async def _expand(state: ServerState, body: dict[str, Any], owner: str) -> tuple[dict[str, Any], list[Any]]:
    """The body with earlier turns prepended to its input, and that full input (what gets stored)."""
    items = input_items(body.get("input"))
    previous = body.get("previous_response_id")
    if previous is None:
        return body, items
    if not isinstance(previous, str):
        raise ApiError(400, "Invalid 'previous_response_id': expected a string.", param="previous_response_id")
    stored = await state.store.aget(previous, owner)
    if stored is None:  # also another key's response: whether it exists is not told
        raise ApiError(404, f"Previous response with id '{previous}' not found.",
                       param="previous_response_id", code="previous_response_not_found")
    full = [*stored.input_items, *output_as_input(stored.response.get("output") or []), *items]
    return {**body, "input": full}, full


@router.post("/v1/responses")
async def create_response(request: Request) -> Response:
    state = state_of(request)
    raw = await read_body(request, state.config.max_body_bytes, state.config.body_timeout_s)
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        body = None
    if not isinstance(body, dict):  # let conversion word the parse error exactly as the reference does
        state.pipeline.convert("responses", raw)
        raise ApiError(400, "The request body must be a JSON object.")
    owner = key_owner_of(request.scope)
    body, full_input = await _expand(state, body, owner)
    previous = body.get("previous_response_id")
    store = body.get("store", True) is not False
    # a continuation carries its whole history: treat it as large
    size = len(raw) if previous is None else max(len(raw), state.pipeline.offload_bytes)
    converted = await state.pipeline.aconvert("responses", body, size)
    if store:
        _check_storable(body, full_input)
    state.pipeline.parts.require("stream")
    gen = await state.pipeline.prepare(
        "responses", converted, echo=state.pipeline.parts.stream.responses_echo(body),
        response_fields={"store": store, "previous_response_id": previous}, size_hint=size,
        single_tool_call=single_tool_call("responses", body),
        kv_retention=retention_class(state.config, "responses", body, request.headers),
        session_key=session_key("responses", body),
    )

    async def save(g: Generation) -> None:
        if store:
            try:
                await state.store.aput(g.processors[0].response(), full_input, owner)
            except StoreWriteError as exc:
                raise store_failed(exc) from None

    if gen.stream:
        return await stream_response(request, state.pipeline, gen, on_complete=save)
    await collect(request, state.pipeline, gen)
    await save(gen)
    return json_response(gen.processors[0].response())


@router.get("/v1/responses/{response_id}")
async def retrieve_response(request: Request, response_id: str) -> Response:
    stored = await state_of(request).store.aget(response_id, key_owner_of(request.scope))
    if stored is None:
        raise _not_found(response_id)
    return json_response(stored.response)


@router.delete("/v1/responses/{response_id}")
async def delete_response(request: Request, response_id: str) -> Response:
    try:
        deleted = await state_of(request).store.adelete(response_id, key_owner_of(request.scope))
    except StoreWriteError as exc:
        raise store_failed(exc) from None
    if not deleted:
        raise _not_found(response_id)
    return json_response({"id": response_id, "object": "response", "deleted": True})


@router.get("/v1/responses/{response_id}/input_items")
async def list_input_items(request: Request, response_id: str) -> Response:
    stored = await state_of(request).store.aget(response_id, key_owner_of(request.scope))
    if stored is None:
        raise _not_found(response_id)
    data = stored.input_items
    return json_response({"object": "list", "data": data, "has_more": False,
                          "first_id": None, "last_id": None})
