"""The value parsers (argparse `type=`) of `recipe serve`'s flags; a bad value is a usage error naming the flag.

Engine config fields name theirs (`option(..., parse="bytes")` in `recipe.engine.config`): `parser_named`.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import Any

_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
          "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_bytes(text: str) -> int:
    """'1048576', '512MiB', '4GiB', '2GB' -> bytes (> 0)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise argparse.ArgumentTypeError(f"bad byte size {text!r}: use a number with an optional unit (512MiB, 4GiB)")
    value = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if value <= 0:
        raise argparse.ArgumentTypeError(f"byte size must be > 0, got {text!r}")
    return value


def positive(kind: type) -> Callable[[str], Any]:
    """A parser of `kind` (int or float) values > 0."""
    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"bad value {text!r}: use a number > 0") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"value must be > 0, got {text!r}")
        return value

    return parse


positive_int = positive(int)


def draft_tokens(text: str) -> int | str:
    """`--num-speculative-tokens`: "auto" or a positive integer."""
    return text if text == "auto" else positive_int(text)


def replay_margin(text: str) -> int | None:
    """`--swa-replay-margin`: "exact" (None, the model's exact margin) or a number of tokens >= 0."""
    if text == "exact":
        return None
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"bad replay margin {text!r}: use 'exact' or a number of tokens >= 0")
    return int(text)


def retention(text: str) -> str:
    """`--kv-retention CLASS=DURATION`, checked here and passed on as written."""
    from recipe.engine.kv_tiers.retention import parse_retention

    try:
        parse_retention([text])
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def name_pair(text: str) -> tuple[str, str]:
    """NAME=CLASS -> (NAME, CLASS), both non-empty."""
    left, sep, right = text.partition("=")
    if not sep or not left or not right:
        raise argparse.ArgumentTypeError(f"bad value {text!r}: use NAME=CLASS")
    return left, right


def parser_named(name: str, kind: type) -> Callable[[str], Any]:
    """The parser an engine config field asks for by name (`option(..., parse=name)`); `kind` is the field's
    scalar type, which `positive` keeps."""
    if name == "positive":
        return positive(kind)
    return {"bytes": parse_bytes, "draft_tokens": draft_tokens, "replay_margin": replay_margin,
            "retention": retention}[name]
