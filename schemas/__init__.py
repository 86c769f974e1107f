"""JSON Schemas of the wire formats (requests, responses, stream events, errors), loaded as package data.

Files are named `<vendor>.<Type>.schema.json`; they are the official definitions with their known defects
fixed by `golden/make_schemas.py` (nullable, recursive refs, null user/usage, Anthropic ping and 413 type).
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator


def names() -> list[str]:
    """Every schema name available, e.g. `openai.CreateChatCompletionResponse`."""
    return sorted(
        p.name.removesuffix(".schema.json")
        for p in resources.files(__name__).iterdir()
        if p.name.endswith(".schema.json")
    )


@functools.cache
def load(name: str) -> dict[str, Any]:
    """The schema document `name` (raises FileNotFoundError for an unknown name)."""
    text = resources.files(__name__).joinpath(f"{name}.schema.json").read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


@functools.cache
def validator(name: str) -> Draft202012Validator:
    """A compiled draft 2020-12 validator for schema `name`, cached per process."""
    return Draft202012Validator(load(name))


def errors(name: str, instance: Any, limit: int = 3) -> list[str]:
    """Up to `limit` validation messages (path: message) of `instance` against schema `name`; [] when valid."""
    out: list[str] = []
    for err in validator(name).iter_errors(instance):
        path = "/".join(str(p) for p in err.absolute_path)
        out.append(f"{path or '<root>'}: {err.message[:300]}")
        if len(out) >= limit:
            break
    return out
