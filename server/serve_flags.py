"""Every flag of `recipe serve`: the server's own, written here, and the engine's, generated from
`EngineConfig`'s fields (`recipe.server.engine_flags`). `--help` and docs/flags.md show one group per concern:
the server, requests, then the engine's groups, which the server flags of the same concern join (the prompt
format beside the model, the retention routing beside the KV tiers, the disaggregated workers beside expert
parallelism).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import get_args

from recipe.server.backend import ChatFormat
from recipe.server.config import default_responses_db
from recipe.server.engine_flags import add_engine_groups, engine_flags
from recipe.server.flag_types import name_pair, positive_int


def add_serve_flags(p: argparse.ArgumentParser) -> None:
    """Every `recipe serve` flag onto `p`, in `--help`'s order of groups."""
    add_server_arguments(p.add_argument_group("server", "where it listens, who may call it, and its limits"))
    add_request_arguments(p.add_argument_group("requests", "how request bodies convert, and output limits"))
    groups = add_engine_groups(p)
    groups["checkpoint"].add_argument(
        "--chat-format", default=None, choices=get_args(ChatFormat),
        help="prompt format of the model, overriding the one read off its chat template (default: the "
             "checkpoint's: deepseek_r1 for a DeepSeek-R1-Distill template, else chatml)")
    add_retention_routing(groups["kv"])
    add_disagg_arguments(groups["parallel"])


def add_server_arguments(g: argparse._ArgumentGroup) -> None:
    g.add_argument("--host", default="127.0.0.1", help="address to listen on")
    g.add_argument("--port", type=int, default=8000, help="port to listen on")
    g.add_argument("--api-key", action="append", default=[], metavar="KEY", help="accept this key (repeatable)")
    g.add_argument("--allow-unauthenticated", action="store_true",
                   help="allow serving without any key on a non-loopback --host")
    g.add_argument("--served-model-name", action="append", default=[], metavar="NAME",
                   help="name(s) clients use for the model (default: the model's own name)")
    g.add_argument("--responses-db", default=str(default_responses_db()), metavar="PATH",
                   help="SQLite file for stored Responses (':memory:' keeps nothing)")
    g.add_argument("--max-body-bytes", type=int, default=8 * 1024 * 1024, help="largest request body (413 above)")
    g.add_argument("--max-pending", type=int, default=256, help="requests in the server at once (429 above)")
    g.add_argument("--request-timeout", type=float, default=600.0, metavar="SECONDS", help="per-request limit")
    g.add_argument("--header-timeout", type=float, default=10.0, metavar="SECONDS",
                   help="close a connection that has not sent complete request headers within this")
    g.add_argument("--body-timeout", type=float, default=60.0, metavar="SECONDS",
                   help="answer 408 and close when a request body has not fully arrived this long after its headers")
    g.add_argument("--heap-trim-interval", type=float, default=30.0, metavar="SECONDS",
                   help="after requests, hand freed heap back to the OS (glibc malloc_trim) at most this often; "
                        "0 turns it off")
    g.add_argument("--constraint-memo-mib", type=float, default=64.0, metavar="MIB",
                   help="keep compiled output constraints (schemas, regexes, tool lists) asked for at least twice, "
                        "up to this many MiB; 0 compiles every request's afresh")
    g.add_argument("--malloc-arena-max", type=int, default=1, metavar="N",
                   help="glibc malloc arenas for the whole server: fewer arenas keep memory freed by requests "
                        "from piling up in per-thread heaps; 0 keeps glibc's default (8 per core)")
    g.add_argument("--stream-stall-timeout", type=float, default=30.0, metavar="SECONDS",
                   help="abort a stream (and free its KV) whose client has read nothing for this long")
    g.add_argument("--drain-timeout", type=float, default=30.0, metavar="SECONDS",
                   help="how long shutdown waits for in-flight requests")
    g.add_argument("--metrics-prefix", default="recipe", help="Prometheus series prefix")
    g.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"), help="log level")
    g.add_argument("--pure-python-stream", action="store_true",
                   help="stream processing in the pure-Python modules even where the mypyc-compiled ones are "
                        "built (same bytes, slower; see recipe.compiled_stream)")
    g.add_argument("--backend", choices=("engine", "echo"), default="engine",
                   help="'echo' answers instantly without a model (for measuring the server itself; the engine "
                        "flags are then ignored but --model and --max-model-len, which name the echo model)")
    g.add_argument("--echo-token-delay", type=float, default=0.0, metavar="SECONDS",
                   help="with --backend echo: pause this long per token, to stand in for an engine's step time")
    g.add_argument("--echo-mode", choices=("reply", "repeat"), default="reply",
                   help="with --backend echo: 'reply' answers the last user turn once and stops (finish 'stop'); "
                        "'repeat' repeats the prompt until max_tokens (finish 'length', for load tests)")


def add_request_arguments(g: argparse._ArgumentGroup) -> None:
    g.add_argument("--strict-reference", action="store_true",
                   help="convert bodies exactly as deepseek-recipe 0.2.0 does: reject or ignore the client fields "
                        "Recipe accepts by default (developer role, forced tool choice with thinking, "
                        "max_completion_tokens, redacted_thinking, Messages output_config.format; see README)")
    g.add_argument("--default-thinking-mode", choices=("enabled", "disabled"), default=None,
                   help="thinking for a request that does not choose (default: enabled for the DeepSeek prompt "
                        "formats, disabled for ChatML models, which have no reasoning markup)")
    g.add_argument("--close-tool-objects", action=argparse.BooleanOptionalAction, default=True,
                   help="constrain tool-call arguments to the keys their schema declares where it leaves objects "
                        "open (always schema-valid; a small model otherwise may never close a forced call)")
    g.add_argument("--close-within-limit", action=argparse.BooleanOptionalAction, default=True,
                   help="near max_tokens, end a constrained output (tool call, JSON) on a path that completes it "
                        "instead of cutting it (strings cut short, optional parts left out)")
    g.add_argument("--max-output-tokens", type=positive_int, default=8192, metavar="N",
                   help="no request generates more tokens; also the limit of a request that sets none")


def add_retention_routing(g: argparse._ArgumentGroup) -> None:
    """Which retention class a request's KV gets (`ServerConfig.kv_retention_by_api` / `_by_key`)."""
    g.add_argument("--kv-retention-api", type=name_pair, action="append", default=[], metavar="API=CLASS",
                   help="retention class of an API's requests (chat, messages, responses; repeatable)")
    g.add_argument("--kv-retention-key", type=name_pair, action="append", default=[], metavar="KEY=CLASS",
                   help="retention class of the requests made with an API key (repeatable); a request's "
                        "metadata.kv_retention field wins over both")


def add_disagg_arguments(g: argparse._ArgumentGroup) -> None:
    """Prefill and decode in separate worker processes (`recipe.server.disagg_front`)."""
    g.add_argument("--prefill-workers", type=int, default=None, metavar="N",
                   help="prefill worker processes (with --decode-workers: disaggregated serving)")
    g.add_argument("--decode-workers", type=int, default=None, metavar="M", help="decode worker processes")
    g.add_argument("--both-workers", type=int, default=0, metavar="K",
                   help="colocated worker processes (both phases), balanced by the same router")
    g.add_argument("--autoscale", action="store_true",
                   help="move workers between the prefill and decode roles as load shifts")
    g.add_argument("--handoff-timeout", type=float, default=30.0, metavar="SECONDS",
                   help="longest a decode worker may take to take in a hand-off")
    g.add_argument("--no-pin-cores", action="store_true", help="do not pin workers to disjoint cores")
    g.add_argument("--ray-address", default=None, metavar="ADDR|auto",
                   help="run the workers as Ray actors on an existing Ray cluster (placement group spread over "
                        "its nodes; KV hand-off through the object store); default 1 prefill + 1 decode worker")
    g.add_argument("--ray-cpus-per-worker", type=float, default=1.0, metavar="CPUS",
                   help="CPUs of each worker's placement-group bundle")
    g.add_argument("--no-ray-ship-model", action="store_true",
                   help="the --model path exists on every Ray node: do not send its files through the object store")


def default_text(action: argparse.Action) -> str | None:
    """How `--help` and docs/flags.md show a flag's default: an engine flag's is the engine's (or `recipe
    serve`'s own); None where there is nothing to show (a switch, an unset value the help explains)."""
    if action.nargs == 0 and not isinstance(action, argparse.BooleanOptionalAction):  # a switch: given or not
        return None
    engine = {flag.dest: flag for flag in engine_flags()}.get(action.dest)
    value = action.default if engine is None else engine.default
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None or value == []:
        return None
    home = str(Path.home())
    return "~" + str(value)[len(home):] if str(value).startswith(home + "/") else str(value)


class FlagHelpFormatter(argparse.RawDescriptionHelpFormatter):
    """`--help` with each flag's default (`default_text`) after its help."""

    def _get_help_string(self, action: argparse.Action) -> str:
        shown = default_text(action)
        text = action.help or ""
        return text if shown is None else f"{text} (default: {shown.replace('%', '%%')})"
