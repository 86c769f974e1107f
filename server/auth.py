"""API keys: `Authorization: Bearer KEY` or `x-api-key: KEY` (any `anthropic-version`), compared in constant time."""

from __future__ import annotations

import hmac

# Paths anyone may read: liveness, version, metrics scrapes and the API documentation.
PUBLIC_PATHS = frozenset({"/health", "/version", "/metrics", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"})
PUBLIC_PREFIXES = ("/playground",)


def presented_key(headers: dict[str, str]) -> str | None:
    """The key a client sent, from `authorization: Bearer` or else `x-api-key`."""
    auth = headers.get("authorization")
    if auth:
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    key = headers.get("x-api-key")
    return key.strip() if key else None


class KeyChecker:
    """Accepts a request when its key equals one configured key; every key is compared, always."""

    def __init__(self, keys: tuple[str, ...]) -> None:
        self._keys = tuple(k.encode() for k in keys)

    @property
    def enabled(self) -> bool:
        return bool(self._keys)

    def is_public(self, path: str) -> bool:
        return path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES)

    def accepts(self, presented: str | None) -> bool:
        if not self._keys:
            return True
        if presented is None:
            return False
        given = presented.encode()
        ok = False
        for key in self._keys:
            ok |= hmac.compare_digest(given, key)
        return ok
