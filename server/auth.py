"""API keys: `Authorization: Bearer KEY`, `x-api-key: KEY` (any `anthropic-version`) or HTTP Basic with the key
as the password (what a browser sends for the playground), compared in constant time.

When keys are configured every path but the few public ones needs a key, the playground included: a
browser asked for it gets `WWW-Authenticate: Basic`, prompts once and sends the key on the page's own calls.
Each accepted key has an owner id (a digest of the key, never the key itself) that scopes stored Responses.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac

# Paths anyone may read: liveness, version, metrics scrapes and the API documentation.
PUBLIC_PATHS = frozenset({"/health", "/version", "/metrics", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"})
PLAYGROUND_PREFIX = "/playground"
# The owner of what is stored when no key is configured (or presented).
NO_OWNER = ""


def _basic_password(value: str) -> str | None:
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    _user, sep, password = decoded.partition(":")
    return password if sep and password else None


def presented_key(headers: dict[str, str]) -> str | None:
    """The key a client sent, from `authorization: Bearer` (or Basic's password) or else `x-api-key`."""
    auth = headers.get("authorization")
    if auth:
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
        if scheme.lower() == "basic":
            password = _basic_password(value)
            if password:
                return password
    key = headers.get("x-api-key")
    return key.strip() if key else None


def owner_of(key: str | None) -> str:
    """The id stored Responses are scoped to: a SHA-256 of the key (the key itself is never stored)."""
    if not key:
        return NO_OWNER
    return "key_" + hashlib.sha256(key.encode()).hexdigest()[:32]


class KeyChecker:
    """Accepts a request when its key equals one configured key; every key is compared, always."""

    def __init__(self, keys: tuple[str, ...]) -> None:
        # Digests of equal length: the comparison time depends neither on where a guess first differs
        # nor on how long the configured keys are.
        self._keys = tuple(_digest(k) for k in keys)

    @property
    def enabled(self) -> bool:
        return bool(self._keys)

    def is_public(self, path: str) -> bool:
        return path in PUBLIC_PATHS

    def accepts(self, presented: str | None) -> bool:
        if not self._keys:
            return True
        if presented is None:
            return False
        given = _digest(presented)
        ok = False
        for key in self._keys:
            ok |= hmac.compare_digest(given, key)
        return ok

    def owner(self, presented: str | None) -> str:
        """The owner id of an accepted request (NO_OWNER when no keys are configured)."""
        return owner_of(presented) if self._keys else NO_OWNER


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


def is_playground(path: str) -> bool:
    return path == PLAYGROUND_PREFIX or path.startswith(PLAYGROUND_PREFIX + "/")
