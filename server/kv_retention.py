"""Which retention class a request's KV is stored under, from configuration and the request.

In order: the request's metadata field `metadata.kv_retention` (Chat, Responses and Messages all carry a
`metadata` object); the class configured for the request's API key (`--kv-retention-key KEY=CLASS`); the
class configured for its API (`--kv-retention-api messages=agent`); else None, the engine's default
(`chat`). The engine refuses a class it does not know (400).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from recipe.server.auth import presented_key
from recipe.server.body_field import body_field

FIELD = "kv_retention"


def from_body(body: bytes | Mapping[str, Any]) -> str | None:
    """`metadata.kv_retention` of a request body, if it is a string."""
    value = body_field(body, FIELD, under="metadata")
    return value if isinstance(value, str) else None


def retention_class(config: Any, api: str, body: bytes | Mapping[str, Any], headers: Mapping[str, str]) -> str | None:
    explicit = from_body(body)
    if explicit is not None:
        return explicit
    by_key = dict(getattr(config, "kv_retention_by_key", ()))
    if by_key:
        key = presented_key(dict(headers))
        if key is not None and key in by_key:
            return by_key[key]
    return dict(getattr(config, "kv_retention_by_api", ())).get(api)
