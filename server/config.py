"""Server configuration: one frozen value built by the CLI (or a test) and read by every part of the app."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})


def default_responses_db() -> Path:
    """Where stored Responses live unless `--responses-db` says otherwise."""
    return Path.home() / ".local" / "share" / "recipe" / "responses.sqlite3"


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class ServerConfig:
    """Everything the HTTP layer needs to know; the model itself lives in the backend.

    `api_keys` empty means no authentication, which is only allowed on a loopback host unless
    `allow_unauthenticated` is set. `responses_db` is a SQLite path (":memory:" keeps nothing across restarts).
    """

    host: str = "127.0.0.1"
    port: int = 8000
    api_keys: tuple[str, ...] = ()
    allow_unauthenticated: bool = False
    served_model_names: tuple[str, ...] = ()
    responses_db: str = ":memory:"
    max_body_bytes: int = 8 * 1024 * 1024
    max_pending_requests: int = 256
    request_timeout_s: float = 600.0
    retry_after_s: int = 1
    metrics_prefix: str = "recipe"
    drain_timeout_s: float = 30.0
    constraint_compile_timeout_s: float = 10.0  # an output constraint compiling longer is a 400
    stream_stall_timeout_s: float = 30.0  # a stream whose client reads nothing this long is aborted
    header_timeout_s: float = 10.0  # a connection must finish sending its request headers within this
    body_timeout_s: float = 60.0  # ... and its request body within this after the headers (408 past it)
    heap_trim_interval_s: float = 30.0  # give freed heap back to the OS this often after activity (0: off)
    constraint_memo_bytes: int = 64 * 1024 * 1024  # compiled output constraints asked for twice (0: off)
    malloc_arena_max: int = 1  # glibc malloc arenas for the whole process (0: glibc's default, 8 per core)
    kv_retention_by_api: tuple[tuple[str, str], ...] = ()  # (api, retention class): see kv_retention.py
    kv_retention_by_key: tuple[tuple[str, str], ...] = ()  # (API key, retention class)
    # Convert as deepseek-recipe 0.2.0 does, rejecting what recipe.protocols.leniency accepts from real clients.
    strict_reference: bool = False
    default_thinking_mode: bool | None = None  # None: on for the DeepSeek prompt formats, off for ChatML (no markup)
    max_output_tokens: int = 8192  # no request generates more; it is also the limit of a request that sets none
    close_tool_objects: bool = True  # tool arguments take only declared keys (recipe.constraints.closed_objects)
    close_within_limit: bool = True  # constrained outputs end complete within max_tokens (recipe.constraints.closing)

    def __post_init__(self) -> None:
        if self.max_body_bytes <= 0:
            raise ValueError("max_body_bytes must be positive")
        if self.max_pending_requests <= 0:
            raise ValueError("max_pending_requests must be positive")
        if self.request_timeout_s <= 0:
            raise ValueError("request_timeout_s must be positive")
        if min(self.constraint_compile_timeout_s, self.stream_stall_timeout_s, self.header_timeout_s,
               self.body_timeout_s) <= 0:
            raise ValueError("timeouts must be positive")
        if self.heap_trim_interval_s < 0:
            raise ValueError("heap_trim_interval_s must be 0 (off) or positive")
        if self.constraint_memo_bytes < 0:
            raise ValueError("constraint_memo_bytes must be 0 (off) or positive")
        if self.malloc_arena_max < 0:
            raise ValueError("malloc_arena_max must be 0 (glibc's default) or positive")
        if self.max_output_tokens < 1:
            raise ValueError("max_output_tokens must be positive")
        if any(not k for k in self.api_keys):
            raise ValueError("an API key must not be empty")

    def check_exposure(self) -> None:
        """Refuse to serve without keys on a non-loopback address unless explicitly allowed."""
        if not self.api_keys and not self.allow_unauthenticated and not is_loopback(self.host):
            raise ValueError(
                f"refusing to listen on {self.host} without an API key: pass --api-key KEY, "
                "or --allow-unauthenticated to serve an open endpoint on purpose"
            )
