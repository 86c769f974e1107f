"""The FastAPI app: `create_app(config, backend)` wires the routers, errors, auth, limits and metrics together."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
from collections.abc import AsyncIterator

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute, APIRouter
from recipe.server import openapi_bodies, routes_chat, routes_messages, routes_misc, routes_responses
from recipe.server.auth import KeyChecker
from recipe.server.backend import Backend
from recipe.server.config import ServerConfig
from recipe.server.errors import ApiError, shape_for_path
from recipe.server.heap_trim import HeapTrimmer
from recipe.server.limits import Admission
from recipe.server.metrics import ServerMetrics
from recipe.server.pipeline import Pipeline
from recipe.server.protocol_parts import ProtocolParts, load_protocol_parts
from recipe.server.request_guard import RequestGuard
from recipe.server.state import ServerState
from recipe.server.storage import ResponseStore
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import Response

log = logging.getLogger("recipe.server")


def _shape(request: Request) -> str:
    return shape_for_path(request.url.path, {k.lower(): v for k, v in request.headers.items()})


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    if exc.status >= 500:  # the status line itself is logged by RequestGuard
        log.error("request %s: %s", request.state.request_id, exc.message)
    return exc.response(_shape(request), request.state.request_id)  # type: ignore[arg-type]


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    messages = {404: f"Unknown route {request.method} {request.url.path}.",
                405: f"Method {request.method} is not allowed on {request.url.path}."}
    err = ApiError(exc.status_code, messages.get(exc.status_code, str(exc.detail)))
    return err.response(_shape(request), request.state.request_id)  # type: ignore[arg-type]


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    first = exc.errors()[0] if exc.errors() else {}
    where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
    err = ApiError(400, f"Invalid request: {where or 'body'}: {first.get('msg', 'invalid value')}", param=where or None)
    return err.response(_shape(request), request.state.request_id)  # type: ignore[arg-type]


def served_names_for(config: ServerConfig, backend: Backend) -> tuple[str, ...]:
    return config.served_model_names or (backend.model.name,)


def answer_head_probes(router: APIRouter) -> APIRouter:
    """`router` with HEAD on every GET route (clients probe `/v1/models/{id}` and the base URL with HEAD
    before they send a request); FastAPI routes answer only the methods they list. Kept out of the OpenAPI
    document."""
    routes = [r for r in router.routes if isinstance(r, APIRoute)]
    answered = {r.path for r in routes if "HEAD" in (r.methods or ())}  # the module's router outlives one app
    for route in routes:
        if "GET" in (route.methods or ()) and route.path not in answered:
            router.add_api_route(route.path, route.endpoint, methods=["HEAD"], include_in_schema=False,
                                 name=f"{route.name}_head")
    return router


def create_app(config: ServerConfig, backend: Backend, *, parts: ProtocolParts | None = None) -> FastAPI:
    """An app serving `backend` under `config`. The backend is shut down with the app."""
    names = served_names_for(config, backend)
    metrics = ServerMetrics(config.metrics_prefix, names[0], backend.stats)
    if hasattr(backend, "metrics_collector"):  # a backend with series of its own (the disaggregation router)
        metrics.registry.register(backend.metrics_collector(config.metrics_prefix, names[0]))
    admission = Admission(config.max_pending_requests, config.retry_after_s)
    pipeline = Pipeline(
        parts or load_protocol_parts(), backend, metrics, admission,
        served_names=names, request_timeout_s=config.request_timeout_s, retry_after_s=config.retry_after_s,
        compile_timeout_s=config.constraint_compile_timeout_s, constraint_memo_bytes=config.constraint_memo_bytes,
        strict_reference=config.strict_reference, default_thinking_mode=config.default_thinking_mode,
        max_output_tokens=config.max_output_tokens, close_tool_objects=config.close_tool_objects,
        close_within_limit=config.close_within_limit,
    )
    store = ResponseStore(config.responses_db)
    state = ServerState(config, backend, pipeline, metrics, store, names)
    trimmer = HeapTrimmer(config.heap_trim_interval_s)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        trimming = asyncio.ensure_future(trimmer.run())
        yield
        trimming.cancel()
        state.draining = True
        await backend.shutdown()
        store.close()

    app = FastAPI(
        title="Recipe",
        summary="OpenAI Chat Completions, Anthropic Messages and OpenAI Responses for one served model.",
        version="0.1.0",
        lifespan=lifespan,
    )
    app.state.recipe = state
    app.state.heap_trimmer = trimmer
    for module in (routes_chat, routes_messages, routes_responses, routes_misc):
        app.include_router(answer_head_probes(module.router))
    try:  # the playground page is an optional part
        playground = importlib.import_module("recipe.server.playground")
    except ImportError:
        pass
    else:
        app.include_router(answer_head_probes(playground.router))
    openapi_bodies.install(app)
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_middleware(RequestGuard, keys=KeyChecker(config.api_keys), max_body_bytes=config.max_body_bytes,
                       on_done=trimmer.note)
    return app
