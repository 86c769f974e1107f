"""`recipe serve` flags of the engine's KV memory: the device pool and the lower tiers.

`--kv-cache-bytes` (with the other engine flags in `cli_serve.py`) sizes the engine's pool; `--kv-host-bytes` turns on the
host-memory tier; `--kv-dir PATH` the persistent directory tier (off by default), `--kv-disk-bytes` caps it;
`--kv-retention CLASS=DURATION` (repeatable) sets retention classes over the defaults chat=7d, agent=3d.
Each maps to the `EngineConfig` field of the same name.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
          "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_bytes(text: str) -> int:
    """'1048576', '512MiB', '4GiB', '2GB' -> bytes (argparse type)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise argparse.ArgumentTypeError(f"bad byte size {text!r}: use a number with an optional unit (512MiB, 4GiB)")
    value = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if value <= 0:
        raise argparse.ArgumentTypeError(f"byte size must be > 0, got {text!r}")
    return value


def _retention(text: str) -> str:
    from recipe.engine.kv_tiers.retention import parse_retention

    try:
        parse_retention([text])
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _pair(text: str) -> tuple[str, str]:
    left, sep, right = text.partition("=")
    if not sep or not left or not right:
        raise argparse.ArgumentTypeError(f"bad value {text!r}: use NAME=CLASS")
    return left, right


def kv_server_config(args: argparse.Namespace) -> dict[str, Any]:
    """The `ServerConfig` fields that pick a request's retention class."""
    apis = dict(getattr(args, "kv_retention_api", []) or [])
    unknown = sorted(set(apis) - {"chat", "messages", "responses"})
    if unknown:
        raise ValueError(f"--kv-retention-api: unknown API(s) {unknown}; use chat, messages or responses")
    return {"kv_retention_by_api": tuple(apis.items()),
            "kv_retention_by_key": tuple(getattr(args, "kv_retention_key", []) or [])}


def add_kv_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("KV cache tiers")
    g.add_argument("--kv-host-bytes", type=parse_bytes, default=None, metavar="BYTES",
                   help="host-memory KV tier in a shared-memory segment (default: off)")
    g.add_argument("--kv-dir", default=None, metavar="PATH",
                   help="persistent KV tier in this directory, kept across restarts and shared by servers (default: off)")
    g.add_argument("--kv-disk-bytes", type=parse_bytes, default=None, metavar="BYTES",
                   help="byte budget of --kv-dir; least recently used blocks go first (default: no cap)")
    g.add_argument("--kv-retention", type=_retention, action="append", default=[], metavar="CLASS=DURATION",
                   help="keep unused KV of a retention class this long (repeatable; defaults chat=7d agent=3d)")
    g.add_argument("--kv-retention-api", type=_pair, action="append", default=[], metavar="API=CLASS",
                   help="retention class of an API's requests (chat, messages, responses; repeatable)")
    g.add_argument("--kv-retention-key", type=_pair, action="append", default=[], metavar="KEY=CLASS",
                   help="retention class of the requests made with an API key (repeatable); a request's "
                        "metadata.kv_retention field wins over both")


def kv_engine_config(args: argparse.Namespace) -> dict[str, Any]:
    """The `EngineConfig` fields the flags set (absent ones keep the engine's defaults)."""
    out: dict[str, Any] = {}
    for name in ("kv_host_bytes", "kv_dir", "kv_disk_bytes"):
        value = getattr(args, name, None)
        if value is not None:
            out[name] = value
    if getattr(args, "kv_retention", None):
        out["kv_retention"] = list(args.kv_retention)
    return out
