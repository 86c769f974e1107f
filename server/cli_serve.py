"""`recipe serve`: the three APIs over the embedded engine (or the echo backend) with uvicorn.

With no arguments it serves the embedded demo model (SmolLM2-135M-Instruct, ChatML codec) on
http://127.0.0.1:8000. SIGINT/SIGTERM stop accepting, let in-flight requests finish (up to
`--drain-timeout`), then shut the engine down.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
from pathlib import Path
from typing import Any

from recipe.server.backend import Backend, EchoBackend, echo_model_card
from recipe.server.config import ServerConfig
from recipe.server.disagg_front import build_disagg_backend, disagg_requested
from recipe.server.engine_flags import engine_config_from_args
from recipe.server.malloc_arenas import limit_malloc_arenas
from recipe.server.serve_flags import FlagHelpFormatter, add_serve_flags

EPILOG = """\
authentication:
  Keys come from --api-key (repeatable) and the RECIPE_API_KEYS environment variable (comma-separated).
  Clients send 'Authorization: Bearer KEY' or 'x-api-key: KEY'. With no key the server only listens on a
  loopback address; to serve an open endpoint on another address pass --allow-unauthenticated as well.

metrics:
  GET /metrics (Prometheus text, no key needed) with vLLM's series names under --metrics-prefix
  (default 'recipe'; '--metrics-prefix vllm' gives names existing vLLM dashboards scrape unchanged).
"""


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "serve", help="serve OpenAI Chat/Responses and Anthropic Messages APIs over the embedded engine",
        description=__doc__, epilog=EPILOG, formatter_class=FlagHelpFormatter,
    )
    add_serve_flags(p)
    p.set_defaults(func=run)


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    keys = [*args.api_key, *(k for k in os.environ.get("RECIPE_API_KEYS", "").split(",") if k.strip())]
    return ServerConfig(
        host=args.host, port=args.port, api_keys=tuple(k.strip() for k in keys),
        allow_unauthenticated=args.allow_unauthenticated, served_model_names=tuple(args.served_model_name),
        responses_db=args.responses_db, max_body_bytes=args.max_body_bytes, max_pending_requests=args.max_pending,
        request_timeout_s=args.request_timeout, header_timeout_s=args.header_timeout,
        body_timeout_s=args.body_timeout, heap_trim_interval_s=args.heap_trim_interval,
        malloc_arena_max=args.malloc_arena_max, constraint_memo_bytes=int(args.constraint_memo_mib * 1024 * 1024),
        stream_stall_timeout_s=args.stream_stall_timeout, drain_timeout_s=args.drain_timeout, metrics_prefix=args.metrics_prefix,
        strict_reference=args.strict_reference, max_output_tokens=args.max_output_tokens,
        close_tool_objects=args.close_tool_objects, close_within_limit=args.close_within_limit,
        default_thinking_mode=None if args.default_thinking_mode is None else args.default_thinking_mode == "enabled",
        kv_retention_by_api=retention_by_api(args.kv_retention_api), kv_retention_by_key=tuple(args.kv_retention_key),
    )


def retention_by_api(pairs: list[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """`--kv-retention-api API=CLASS` pairs, the last per API winning; an unknown API is an error."""
    apis = dict(pairs)
    unknown = sorted(set(apis) - {"chat", "messages", "responses"})
    if unknown:
        raise ValueError(f"--kv-retention-api: unknown API(s) {unknown}; use chat, messages or responses")
    return tuple(apis.items())


DEMO_MODEL_NAME = "SmolLM2-135M-Instruct"


def default_model_name(model: str | None) -> str:
    """The name clients use when no --served-model-name is given: the demo model's, or the path's stem."""
    if not model or model == "smollm2":
        return DEMO_MODEL_NAME
    path = Path(model)
    return path.stem if path.suffix else path.name or model


def build_backend(args: argparse.Namespace) -> Backend:
    if args.backend == "echo":
        card = echo_model_card(args.model or "echo", context_length=args.max_model_len or 131072)
        return EchoBackend(model=card, token_delay_s=args.echo_token_delay, mode=args.echo_mode)
    if disagg_requested(args):
        return build_disagg_backend(args, engine_config_from_args(args), default_model_name(args.model))
    from recipe.engine import AsyncLLM
    from recipe.server.engine_backend import EngineBackend

    engine = AsyncLLM(args.model or "smollm2", **engine_config_from_args(args))
    return EngineBackend(engine, name=default_model_name(args.model))


def with_chat_format(backend: Backend, chat_format: str | None) -> Backend:
    """`backend` serving its model in `chat_format` (`--chat-format`); None keeps the checkpoint's own."""
    if chat_format is not None and chat_format != backend.model.chat_format:
        backend.model = dataclasses.replace(backend.model, chat_format=chat_format)  # type: ignore[arg-type]
    return backend


def banner(config: ServerConfig, backend: Backend, names: tuple[str, ...]) -> str:
    from recipe import compiled_stream

    stream = "compiled (mypyc, recipe.compiled_stream)" if compiled_stream.active() else "pure Python"
    m = backend.model
    host = f"[{config.host}]" if ":" in config.host else config.host
    base = f"http://{host}:{config.port}"
    return (
        f"Recipe is serving {', '.join(names)} ({m.architecture}, {m.chat_format} prompt format, "
        f"context {m.context_length}) at {base}\n"
        f"  OpenAI Chat Completions  {base}/v1/chat/completions   (OpenAI SDK base_url={base}/v1)\n"
        f"  OpenAI Responses         {base}/v1/responses   (stored in {config.responses_db})\n"
        f"  Anthropic Messages       {base}/v1/messages   (Anthropic SDK base_url={base})\n"
        f"  also /v1/models /tokenize /detokenize /health /metrics /version /docs; "
        f"auth {'on (' + str(len(config.api_keys)) + ' key(s))' if config.api_keys else 'off (no key)'}\n"
        f"  stream processing        {stream}"
        + (f"\n  engine                   {path}" if (path := engine_compute_path(backend)) else "")
    )


def engine_compute_path(backend: Backend) -> str | None:
    """Which weights and kernels the embedded engine's step runs (`EngineClient.compute_path`); None for a
    backend without an engine (echo) or a cluster."""
    from recipe.server.engine_backend import EngineBackend

    return backend.engine.compute_path() if isinstance(backend, EngineBackend) else None


def run(args: argparse.Namespace) -> int:
    from recipe import compiled_stream

    compiled_stream.use_compiled(not args.pure_python_stream)  # before anything imports recipe.stream
    import uvicorn
    from recipe.server.app import create_app, served_names_for
    from recipe.server.http_protocol import guarded_h11

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = config_from_args(args)
        config.check_exposure()
    except ValueError as exc:
        print(f"recipe serve: {exc}", file=sys.stderr)
        return 2
    limit_malloc_arenas(config.malloc_arena_max)  # before the backend and the server start their threads
    try:
        backend = with_chat_format(build_backend(args), args.chat_format)
    except (TypeError, ValueError) as exc:  # an engine option out of range, named by the engine's config
        print(f"recipe serve: {exc}", file=sys.stderr)
        return 2
    app = create_app(config, backend)
    message = banner(config, backend, served_names_for(config, backend))

    class Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            if self.started:
                print(message, flush=True)

        def handle_exit(self, sig: int, frame: Any) -> None:
            app.state.recipe.draining = True
            super().handle_exit(sig, frame)
            # uvicorn re-raises a captured signal after shutting down (a SIGINT then ends in a
            # KeyboardInterrupt traceback); a drained, clean shutdown exits 0 instead.
            self._captured_signals.clear()

    server = Server(uvicorn.Config(
        app, host=config.host, port=config.port, log_level=args.log_level, access_log=False,
        timeout_graceful_shutdown=int(config.drain_timeout_s), lifespan="on",
        http=guarded_h11(config.header_timeout_s, config.stream_stall_timeout_s),
    ))
    server.run()
    if server.started:
        print("Recipe stopped: in-flight requests finished, engine shut down.", flush=True)
        return 0
    return 1
