"""`recipe serve` flags of the sliding-window session cache (DeepSeek-V4; off unless `--swa-session-bytes`).

`--swa-session-bytes BYTES` turns it on with that host-memory budget; `--swa-session-ttl SECONDS` is the idle
TTL (180); `--swa-session-grain TOKENS` the grain window state is kept at (128); `--swa-replay-margin
exact|TOKENS` how much a window miss replays (the exact margin, or the sliding window plus TOKENS);
`--no-swa-replay` recomputes a miss instead. Each maps to the `EngineConfig` field of the same name.
"""

from __future__ import annotations

import argparse
from typing import Any

from recipe.server.kv_flags import parse_bytes


def _margin(text: str) -> int | None:
    if text == "exact":
        return None
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"bad replay margin {text!r}: use 'exact' or a number of tokens >= 0")
    return int(text)


def _positive(kind: type) -> Any:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"bad value {text!r}: use a number > 0") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"value must be > 0, got {text!r}")
        return value

    return parse


def add_swa_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("sliding-window session cache (DeepSeek-V4)")
    g.add_argument("--swa-session-bytes", type=parse_bytes, default=None, metavar="BYTES",
                   help="keep active sessions' window state in this much host memory (default: off)")
    g.add_argument("--swa-session-ttl", type=_positive(float), default=None, metavar="SECONDS",
                   help="drop a session's window state after this many idle seconds (default 180)")
    g.add_argument("--swa-session-grain", type=_positive(int), default=None, metavar="TOKENS",
                   help="keep window state at multiples of this many tokens (default 128)")
    g.add_argument("--swa-replay-margin", type=_margin, default=None, metavar="exact|TOKENS",
                   help="on a window miss replay the exact margin, or the sliding window plus TOKENS (default exact)")
    g.add_argument("--no-swa-replay", dest="swa_replay", action="store_false",
                   help="on a window miss recompute instead of replaying the last tokens")


def swa_engine_config(args: argparse.Namespace) -> dict[str, Any]:
    """The `EngineConfig` fields the flags set (absent ones keep the engine's defaults)."""
    out: dict[str, Any] = {}
    for name in ("swa_session_bytes", "swa_session_ttl", "swa_session_grain"):
        value = getattr(args, name, None)
        if value is not None:
            out[name] = value
    margin = getattr(args, "swa_replay_margin", None)
    if margin is not None:  # None: the exact margin, the engine's default
        out["swa_replay_margin"] = margin
    if getattr(args, "swa_replay", True) is False:
        out["swa_replay"] = False
    return out
