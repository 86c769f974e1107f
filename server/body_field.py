"""One field of a request body read before conversion, from the raw bytes or a parsed body alike.

Routes read a few fields the codec does not carry (`metadata.kv_retention`, `prompt_cache_key`) straight
from the body; the bytes are parsed only when the field's name occurs in them, so a request without it
costs one substring search. A body that is not a JSON object answers None: conversion refuses it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson


def body_field(body: bytes | Mapping[str, Any], name: str, *, under: str | None = None) -> Any:
    """`body[under][name]` (or `body[name]` without `under`); None when absent or unreadable."""
    if isinstance(body, (bytes, bytearray)):
        if name.encode() not in body:
            return None
        try:
            body = orjson.loads(body)
        except orjson.JSONDecodeError:
            return None
    if not isinstance(body, Mapping):
        return None
    holder = body.get(under) if under is not None else body
    return holder.get(name) if isinstance(holder, Mapping) else None
