"""The playground page at `/playground` and the small JSON API behind it.

Encode a request (any of the three APIs) into the DeepSeek prompt with its special tokens and ids, decode
model output into the three APIs' responses and SSE events side by side, report which schema keywords a
token mask enforces and validate outputs, and (with a model loaded) generate through the server's own
`/v1/...` routes. Every asset is served from this package: the page loads nothing from the network.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Literal

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from pydantic import BaseModel, Field
from recipe.server.config import ServerConfig
from recipe.server.errors import ApiError
from recipe.server.limits import read_body
from recipe.server.state import state_of

from recipe.codec import convert, encode, render
from recipe.conversation import ConversationRequest, ModelVersion
from recipe.errors import RequestError
from recipe.stream import Finish, Ready, StreamInputError, StreamProcessor, TextUpdate, TokenUpdate
from recipe.tokenizer import MissingSpecialTokenError, load_deepseek_v4_tokenizer

STATIC = Path(__file__).parent / "playground_static"
ASSETS = {"app.js": "text/javascript", "examples.js": "text/javascript", "style.css": "text/css"}
VERSION_MODELS = {"V4": "DeepSeek-V4-Pro", "V4.1": "DeepSeek-V4.1-Flash"}
Api = Literal["chat", "messages", "responses"]
APIS: tuple[Api, ...] = ("chat", "messages", "responses")
MAX_OUTPUT_CHARS = 200_000
MAX_OUTPUTS = 200

router = APIRouter(include_in_schema=False)


class EncodeIn(BaseModel):
    api: Api
    body: Any
    version: Literal["auto", "V4", "V4.1"] = "auto"


class DecodeIn(EncodeIn):
    output: str = Field(max_length=MAX_OUTPUT_CHARS)
    kind: Literal["text", "ids"] = "text"
    finish: Literal["stop", "length"] = "stop"


class ValidateIn(BaseModel):
    schema_: Any = Field(alias="schema")
    outputs: list[str] = Field(default_factory=list, max_length=MAX_OUTPUTS)


def _with_version(body: Any, version: str) -> Any:
    if version != "auto" and isinstance(body, dict):
        return {**body, "model": VERSION_MODELS[version]}
    return body


def _convert(payload: EncodeIn) -> ConversationRequest | dict[str, Any]:
    body = payload.body if not isinstance(payload.body, str) else payload.body.encode()
    try:
        return convert(payload.api, _with_version(body, payload.version))
    except RequestError as exc:
        return {"error": {"status": exc.status, "body": exc.body(payload.api)}}


def encode_view(payload: EncodeIn) -> dict[str, Any]:
    """The rendered prompt, its special ranges, ids and per-token text — or the API's error."""
    req = _convert(payload)
    if isinstance(req, dict):
        return req
    rendered = render(req)
    tok = load_deepseek_v4_tokenizer()
    note = None
    ids: list[int] | None
    try:
        ids = encode(req, tok)
    except MissingSpecialTokenError as exc:
        ids, note = None, f"{exc} (the DeepSeek V4 tokenizer lacks V4.1's special tokens; prompt text only)"
    tokens = [{"id": i, "text": tok.decode([i]), "special": i in tok.special_ids} for i in ids or []]
    return {
        "model_version": "V4" if req.model_version is ModelVersion.V4 else "V4.1",
        "prompt": rendered.prompt,
        "special_ranges": [list(r) for r in rendered.special_ranges],
        "token_ids": ids,
        "tokens": tokens,
        "counts": {
            "characters": len(rendered.prompt),
            "tokens": len(ids) if ids is not None else None,
            "special_tokens": len(rendered.special_ranges),
        },
        "note": note,
    }


def decode_view(payload: DecodeIn) -> dict[str, Any]:
    """Model output (text or ids) parsed as each API's complete response and SSE events."""
    req = _convert(payload)
    if isinstance(req, dict):
        return req
    tok = load_deepseek_v4_tokenizer()
    if payload.kind == "ids":
        try:
            ids = [int(x) for x in orjson.loads(payload.output)]
        except (orjson.JSONDecodeError, TypeError, ValueError):
            return {"error": {"status": 400, "body": {"error": {"message": "output ids must be a JSON array of integers"}}}}
        if any(not 0 <= i < tok.vocab_size for i in ids):
            return {"error": {"status": 400, "body": {"error": {"message": f"ids must be in [0, {tok.vocab_size})"}}}}
    fmt: Literal["deepseek_v4", "deepseek_v41"] = "deepseek_v4" if req.model_version is ModelVersion.V4 else "deepseek_v41"
    model = req.model or VERSION_MODELS["V4"]
    out: dict[str, Any] = {}
    for api in APIS:
        proc = StreamProcessor(api, req, response_id=f"playground-{api}", model=model, tokenizer=tok,
                               output_format=fmt, created=0)
        events = proc.feed(Ready(prompt_tokens=0))
        try:
            update = (TokenUpdate(ids) if payload.kind == "ids"
                      else TextUpdate(payload.output, token_count=len(tok.full.encode(payload.output, add_special_tokens=False).ids)))
            events += proc.feed(update)
            if not proc.finished:
                events += proc.feed(Finish(payload.finish))
        except StreamInputError as exc:
            events += proc.error_events(str(exc))
        out[api] = {"response": proc.response(), "events": [e.sse().decode("utf-8") for e in events]}
    return out


def validate_view(payload: ValidateIn) -> dict[str, Any]:
    """The keyword report of a schema over the DeepSeek V4 vocabulary, and each output's validity."""
    from recipe.constraints.compiler import schema_report
    from recipe.constraints.report import validate_output

    try:
        report = schema_report(payload.schema_, load_deepseek_v4_tokenizer()).to_dict()
    except Exception as exc:  # a schema the constraint layer refuses: show its message
        report = {"error": str(exc)}
    results = [{"index": i, "errors": validate_output(payload.schema_, text)} for i, text in enumerate(payload.outputs)]
    return {"report": report, "outputs": results}


def _bad_request(message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}}, 400)


def _limits_of(request: Request) -> ServerConfig:
    """The serving app's body limits; the standalone playground (no server state) gets the defaults."""
    if hasattr(request.app.state, "recipe"):
        return state_of(request).config
    return _STANDALONE_LIMITS


_STANDALONE_LIMITS = ServerConfig()


async def _parse(request: Request, model: type[BaseModel]) -> BaseModel | JSONResponse:
    try:
        config = _limits_of(request)
        return model.model_validate_json(await read_body(request, config.max_body_bytes, config.body_timeout_s))
    except ValueError as exc:
        return _bad_request(f"invalid playground request: {str(exc).splitlines()[0]}")


@router.get("/playground")
def page() -> HTMLResponse:
    return HTMLResponse((STATIC / "index.html").read_text(encoding="utf-8"))


@router.get("/playground/static/{name}")
def asset(name: str) -> Response:
    if name not in ASSETS:
        return _bad_request(f"no asset {name!r}")
    return FileResponse(STATIC / name, media_type=ASSETS[name])


@router.get("/playground/api/info")
def info(request: Request) -> dict[str, Any]:
    state = getattr(request.app.state, "recipe", None)
    names = list(getattr(state, "served_names", ()) or ())
    return {"generate": bool(names), "models": names, "versions": list(VERSION_MODELS)}


@router.post("/playground/api/encode")
async def api_encode(request: Request) -> Response:
    payload = await _parse(request, EncodeIn)
    if isinstance(payload, JSONResponse):
        return payload
    return JSONResponse(await asyncio.to_thread(encode_view, payload))  # type: ignore[arg-type]


@router.post("/playground/api/decode")
async def api_decode(request: Request) -> Response:
    payload = await _parse(request, DecodeIn)
    if isinstance(payload, JSONResponse):
        return payload
    return JSONResponse(await asyncio.to_thread(decode_view, payload))  # type: ignore[arg-type]


@router.post("/playground/api/validate")
async def api_validate(request: Request) -> Response:
    payload = await _parse(request, ValidateIn)
    if isinstance(payload, JSONResponse):
        return payload
    return JSONResponse(await asyncio.to_thread(validate_view, payload))  # type: ignore[arg-type]


def standalone_app() -> Any:
    """An app with only the playground (no model): what `recipe playground` serves."""
    from fastapi import FastAPI

    app = FastAPI(title="Recipe playground", docs_url=None, redoc_url=None, openapi_url=None)
    app.include_router(router)
    app.add_exception_handler(ApiError, _standalone_api_error)
    return app


async def _standalone_api_error(request: Request, exc: Exception) -> Response:
    """A limit hit without the serving app's handlers (no request ids there): the OpenAI error shape."""
    assert isinstance(exc, ApiError)
    return exc.response("openai", None)


