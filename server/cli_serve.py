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
from typing import Any, get_args

from recipe.server.backend import Backend, ChatFormat, EchoBackend, echo_model_card
from recipe.server.config import ServerConfig, default_responses_db
from recipe.server.disagg_front import add_disagg_args, build_disagg_backend, disagg_requested
from recipe.server.kv_flags import add_kv_args, kv_engine_config, kv_server_config
from recipe.server.malloc_arenas import limit_malloc_arenas
from recipe.server.swa_flags import add_swa_args, swa_engine_config

CHAT_FORMATS: tuple[str, ...] = get_args(ChatFormat)

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
        description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--model", default=None, metavar="NAME|PATH",
                   help="model to serve (default: the embedded SmolLM2-135M-Instruct demo model)")
    p.add_argument("--chat-format", default=None, choices=CHAT_FORMATS,
                   help="prompt format of the model, overriding the one read off its chat template (default: "
                        "the checkpoint's: deepseek_r1 for a DeepSeek-R1-Distill template, else chatml)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    p.add_argument("--api-key", action="append", default=[], metavar="KEY", help="accept this key (repeatable)")
    p.add_argument("--allow-unauthenticated", action="store_true",
                   help="allow serving without any key on a non-loopback --host")
    p.add_argument("--served-model-name", action="append", default=[], metavar="NAME",
                   help="name(s) clients use for the model (default: the model's own name)")
    p.add_argument("--responses-db", default=str(default_responses_db()), metavar="PATH",
                   help="SQLite file for stored Responses (default %(default)s; ':memory:' keeps nothing)")
    p.add_argument("--max-body-bytes", type=int, default=8 * 1024 * 1024, help="largest request body (413 above)")
    p.add_argument("--max-pending", type=int, default=256, help="requests in the server at once (429 above)")
    p.add_argument("--request-timeout", type=float, default=600.0, metavar="SECONDS", help="per-request limit")
    p.add_argument("--header-timeout", type=float, default=10.0, metavar="SECONDS",
                   help="close a connection that has not sent complete request headers within this")
    p.add_argument("--body-timeout", type=float, default=60.0, metavar="SECONDS",
                   help="answer 408 and close when a request body has not fully arrived this long after its headers")
    p.add_argument("--heap-trim-interval", type=float, default=30.0, metavar="SECONDS",
                   help="after requests, hand freed heap back to the OS (glibc malloc_trim) at most this often; "
                        "0 turns it off")
    p.add_argument("--constraint-memo-mib", type=float, default=64.0, metavar="MIB",
                   help="keep compiled output constraints (schemas, regexes, tool lists) asked for at least twice, "
                        "up to this many MiB (default 64); 0 compiles every request's afresh")
    p.add_argument("--malloc-arena-max", type=int, default=1, metavar="N",
                   help="glibc malloc arenas for the whole server (default 1): fewer arenas keep memory freed "
                        "by requests from piling up in per-thread heaps; 0 keeps glibc's default (8 per core)")
    p.add_argument("--stream-stall-timeout", type=float, default=30.0, metavar="SECONDS",
                   help="abort a stream (and free its KV) whose client has read nothing for this long")
    p.add_argument("--drain-timeout", type=float, default=30.0, metavar="SECONDS",
                   help="how long shutdown waits for in-flight requests")
    p.add_argument("--metrics-prefix", default="recipe", help="Prometheus series prefix (default recipe)")
    p.add_argument("--backend", choices=("engine", "echo"), default="engine",
                   help="'echo' answers instantly without a model (for measuring the server itself)")
    p.add_argument("--echo-token-delay", type=float, default=0.0, metavar="SECONDS",
                   help="with --backend echo: pause this long per token, to stand in for an engine's step time")
    p.add_argument("--echo-mode", choices=("reply", "repeat"), default="reply",
                   help="with --backend echo: 'reply' answers the last user turn once and stops (finish 'stop'); "
                        "'repeat' repeats the prompt until max_tokens (finish 'length', for load tests)")
    add_request_arguments(p)
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    p.add_argument("--pure-python-stream", action="store_true",
                   help="stream processing in the pure-Python modules even where the mypyc-compiled ones are "
                        "built (same bytes, slower; see recipe.compiled_stream)")
    add_engine_arguments(p)
    add_kv_args(p)
    add_disagg_args(p)
    add_swa_args(p)
    p.set_defaults(func=run)


def add_request_arguments(p: argparse.ArgumentParser) -> None:
    """How request bodies convert and how much one request may generate."""
    g = p.add_argument_group("requests", "how request bodies convert, and output limits")
    g.add_argument("--strict-reference", action="store_true",
                   help="convert bodies exactly as deepseek-recipe 0.2.0 does: reject or ignore the client fields "
                        "Recipe accepts by default (developer role, forced tool choice with thinking, "
                        "max_completion_tokens, redacted_thinking, Messages output_config.format; see README)")
    g.add_argument("--default-thinking-mode", choices=("enabled", "disabled"), default=None,
                   help="thinking for a request that does not choose (default: enabled for the DeepSeek prompt "
                        "formats, disabled for ChatML models, which have no reasoning markup)")
    g.add_argument("--close-tool-objects", action=argparse.BooleanOptionalAction, default=True,
                   help="constrain tool-call arguments to the keys their schema declares where it leaves objects "
                        "open (always schema-valid; a small model otherwise may never close a forced call; default on)")
    g.add_argument("--close-within-limit", action=argparse.BooleanOptionalAction, default=True,
                   help="near max_tokens, end a constrained output (tool call, JSON) on a path that completes it "
                        "instead of cutting it (strings cut short, optional parts left out; default on)")
    g.add_argument("--max-output-tokens", type=positive_int, default=8192, metavar="N",
                   help="no request generates more tokens; also the limit of a request that sets none (default 8192)")


def add_engine_arguments(p: argparse.ArgumentParser) -> None:
    """The embedded engine's options (`recipe.engine.EngineConfig`), spelled as vLLM spells them where it has
    the option; left unset, each keeps the engine's default."""
    g = p.add_argument_group("engine", "options of the embedded engine (ignored with --backend echo)")
    g.add_argument("--dtype", default=None, metavar="DTYPE",
                   help="weights and KV cache dtype: float32, bfloat16 or float16 (default float32)")
    g.add_argument("--threads", type=int, default=None, metavar="N",
                   help="torch CPU threads (default: every core this process may use)")
    g.add_argument("--kv-cache-bytes", type=int, default=None, metavar="BYTES",
                   help="KV cache memory in bytes (default: a fraction of free memory, capped on the CPU)")
    g.add_argument("--max-num-seqs", type=int, default=None, metavar="N", help="most sequences in one step")
    g.add_argument("--max-num-batched-tokens", type=int, default=None, metavar="N",
                   help="token budget of one step (prefill chunks + decodes)")
    g.add_argument("--max-model-len", type=int, default=None, metavar="N",
                   help="most tokens (prompt + output) per sequence (default: the model's context length; "
                        "with --backend echo it sets the echo model's context)")
    g.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=None,
                   help="reuse the KV of earlier requests' common prefixes (default on)")
    g.add_argument("--async-scheduling", action=argparse.BooleanOptionalAction, default=None,
                   help="schedule the next step while the current one runs (default on)")
    g.add_argument("--expert-parallel-size", type=int, default=None, metavar="N",
                   help="serve a mixture-of-experts checkpoint from N rank processes, routed experts sharded "
                        "(default 1: one process)")
    g.add_argument("--speculative", default=None, choices=("ngram", "draft-head", "mtp"), metavar="METHOD",
                   help="speculative decoding drafter: ngram, draft-head or mtp (default off)")
    g.add_argument("--num-speculative-tokens", default=None, type=speculative_tokens, metavar="K|auto",
                   help="draft tokens per step: an integer, or auto (per sequence, by confidence; default)")
    g.add_argument("--speculative-draft-vocab", default=None, choices=("reduced", "full"),
                   help="draft-head: draft from the head's frequency-ranked vocabulary (reduced, default) or the "
                        "whole vocabulary (EngineConfig.speculative_draft_vocab)")
    g.add_argument("--speculative-draft-head-weights", default=None, choices=("q8_0", "fp32"),
                   help="draft-head: draft with Q8_0 copies of the head's weights (q8_0, default) or the weights as "
                        "loaded (EngineConfig.speculative_draft_head_weights)")
    g.add_argument("--speculative-cost-fit", default=None, choices=("convex", "grid", "plane"),
                   help="auto draft lengths: the profiled step cost interpolated over the measured steps fitted "
                        "convex in tokens (convex, default) or non-decreasing (grid), or a least-squares plane "
                        "(EngineConfig.speculative_cost_fit)")
    g.add_argument("--speculative-cost-cells", action=argparse.BooleanOptionalAction, default=None,
                   help="auto: learn each running step's cost per sequences and tokens over the start-up profile's "
                        "(default on; off: one running correction; EngineConfig.speculative_cost_cells)")
    g.add_argument("--speculative-cost-cells-fit", action=argparse.BooleanOptionalAction, default=None,
                   help="auto: fit each batch size's learned step costs convex (or non-decreasing) in tokens, "
                        "weighted by their observations (default on; off: the cells' own factors; "
                        "EngineConfig.speculative_cost_cells_fit)")
    g.add_argument("--speculative-async", action=argparse.BooleanOptionalAction, default=None,
                   help="with --async-scheduling, steps that verify no draft overlap the next one (default on; "
                        "off: every speculative step waits for its predecessor; EngineConfig.speculative_async)")
    g.add_argument("--speculative-unverified-verdicts", action=argparse.BooleanOptionalAction, default=None,
                   help="the drafter calibrates on every proposal's verdict, read off the emitted tokens, also at "
                        "positions auto did not verify (default on; EngineConfig.speculative_unverified_verdicts)")
    g.add_argument("--speculative-hit-window", type=positive_int, default=None, metavar="N",
                   help="auto pauses drafting on the first draft tokens' hit rate over about N drafts (default 24; "
                        "EngineConfig.speculative_hit_window)")
    g.add_argument("--speculative-pause-margin", type=float, default=None, metavar="F",
                   help="auto pauses below F times break-even and resumes at break-even (default 0.6; 1: no "
                        "hysteresis; EngineConfig.speculative_pause_margin)")
    g.add_argument("--speculative-offline-weight", type=float, default=None, metavar="N",
                   help="draft-head: a calibration bin's offline verdicts weigh at most as much as N of the run's "
                        "own (default 20; EngineConfig.speculative_offline_weight)")
    g.add_argument("--speculative-price-drafting", action=argparse.BooleanOptionalAction, default=None,
                   help="auto prices the drafter's own time: a chained drafter stops where its next position no "
                        "longer pays for itself, and the length policy counts the drafting time (default on; "
                        "EngineConfig.speculative_price_drafting)")
    g.add_argument("--speculative-ngram-extend", action=argparse.BooleanOptionalAction, default=None,
                   help="ngram: continue after the latest occurrence, through the draft's own tokens past the end, "
                        "so a longer draft never changes its first tokens (default on; off: the latest occurrence "
                        "followed by a whole draft, else the earliest; EngineConfig.speculative_ngram_extend)")
    g.add_argument("--speculative-ngram-match-buckets", action=argparse.BooleanOptionalAction, default=None,
                   help="ngram: calibrate confidences by how far back the draft's occurrence matches (up to 32 "
                        "tokens; default on; off: by the matched n-gram alone; "
                        "EngineConfig.speculative_ngram_match_buckets)")
    g.add_argument("--weight-format", default=None, choices=("dtype", "int8", "int4", "q8_0", "q4_1", "gguf", "gguf_q8"),
                   help="weights: a GGUF file's own blocks by default (gguf: fp32 activations; gguf_q8: activations "
                        "rounded to Q8_0 as llama.cpp does), else dtype; int8/int4 (torch kernels), q8_0/q4_1 "
                        "(re-quantised, native CPU kernels)")
    g.add_argument("--exact", action=argparse.BooleanOptionalAction, default=None,
                   help="the reference path for parity tests: dequantised weights, per-sequence attention, torch "
                        "RMSNorm, layered decode (EngineConfig.exact)")
    g.add_argument("--step-threads", default="auto", choices=("auto", "off"),
                   help="intra-op threads per step: auto (default; profiled at start-up, about a second: small "
                        "steps may run on fewer threads than --threads) or off (every step on --threads; "
                        "EngineConfig.step_threads)")
    g.add_argument("--attention-backend", default=None, choices=("reference", "batched", "native"),
                   help="attention of the decode rows (EngineConfig.attention_backend)")
    g.add_argument("--norm-backend", default=None, choices=("torch", "native"),
                   help="RMSNorm: torch's kernel or the native one (EngineConfig.norm_backend)")
    g.add_argument("--linear-backend", default=None, choices=("torch", "few-rows"),
                   help="fp32 linears of a few rows (speculative verify steps, small batches): F.linear, or "
                        "weight-major (EngineConfig.linear_backend)")
    g.add_argument("--huge-pages", action=argparse.BooleanOptionalAction, default=None,
                   help="copy the CPU weights into transparent huge pages at start-up (default on; same values; "
                        "EngineConfig.huge_pages)")
    g.add_argument("--decode-backend", default=None, choices=("layers", "fused"),
                   help="decode-only steps of Llama models: per-layer modules, or all layers in one native call "
                        "(EngineConfig.decode_backend; default fused)")


def positive_int(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {value!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, got {n}")
    return n


def speculative_tokens(value: str) -> int | str:
    """`--num-speculative-tokens`: "auto" or a positive integer."""
    return value if value == "auto" else positive_int(value)


# CLI flag (argparse dest) -> EngineConfig field
ENGINE_OPTIONS = {
    "dtype": "dtype", "threads": "num_threads", "step_threads": "step_threads", "kv_cache_bytes": "kv_cache_bytes", "max_num_seqs": "max_num_seqs",
    "max_num_batched_tokens": "max_num_batched_tokens", "max_model_len": "max_model_len",
    "enable_prefix_caching": "enable_prefix_caching", "async_scheduling": "async_scheduling",
    "speculative": "speculative", "num_speculative_tokens": "num_speculative_tokens",
    "speculative_cost_fit": "speculative_cost_fit", "speculative_cost_cells": "speculative_cost_cells",
    "speculative_cost_cells_fit": "speculative_cost_cells_fit",
    "speculative_draft_vocab": "speculative_draft_vocab",
    "speculative_draft_head_weights": "speculative_draft_head_weights",
    "speculative_async": "speculative_async", "speculative_unverified_verdicts": "speculative_unverified_verdicts",
    "speculative_hit_window": "speculative_hit_window", "speculative_pause_margin": "speculative_pause_margin",
    "speculative_offline_weight": "speculative_offline_weight",
    "speculative_price_drafting": "speculative_price_drafting", "speculative_ngram_extend": "speculative_ngram_extend",
    "speculative_ngram_match_buckets": "speculative_ngram_match_buckets",
    "weight_format": "weight_format", "attention_backend": "attention_backend", "norm_backend": "norm_backend",
    "decode_backend": "decode_backend", "linear_backend": "linear_backend", "huge_pages": "huge_pages",
    "exact": "exact",
    "expert_parallel_size": "expert_parallel_size",
}


def engine_config_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The engine keyword arguments the command line set (unset flags are left to the engine's defaults)."""
    return {field: getattr(args, dest) for dest, field in ENGINE_OPTIONS.items() if getattr(args, dest, None) is not None}


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
        **kv_server_config(args),
    )


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
        return build_disagg_backend(args, {**engine_config_from_args(args), **kv_engine_config(args),
                                           **swa_engine_config(args)}, default_model_name(args.model))
    from recipe.engine import AsyncLLM
    from recipe.server.engine_backend import EngineBackend

    engine = AsyncLLM(args.model or "smollm2", **engine_config_from_args(args), **kv_engine_config(args),
                       **swa_engine_config(args))
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
    """The embedded engine's `EngineConfig.compute_path` (which weights and kernels a step runs), if any, with
    how many linears stayed dense where block weights were asked for (`recipe.engine.linear_census`)."""
    engine = getattr(getattr(backend, "engine", None), "engine", None)
    path = getattr(getattr(engine, "config", None), "compute_path", None)
    if not isinstance(path, str):
        return None
    from recipe.engine.linear_census import census_note
    from torch import nn

    model = getattr(engine, "model", None)
    return path + (census_note(model) if isinstance(model, nn.Module) else "")


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
