"""The outermost ASGI layer: request ids, authentication, the body-size limit and the last-resort error net.

Every response carries `x-request-id` (OpenAI SDK) and `request-id` (Anthropic SDK); an incoming
`x-request-id` of sane form is echoed. Any exception escaping a route becomes a 500 in the route's error
shape with no detail, and is logged with its request id and traceback.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable, MutableMapping
from typing import Any

from recipe.server.auth import KeyChecker, is_playground, presented_key
from recipe.server.errors import ApiError, internal_error, shape_for_path
from recipe.server.sse import ClientDisconnected
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("recipe.server")

_SANE_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")
# Request headers past these are refused with 431 before anything reads them. (h11 caps only headers that
# arrive in pieces, at 16 KiB; headers arriving in one read of up to 256 KiB would pass.)
MAX_HEADER_BYTES = 32 * 1024
MAX_HEADER_COUNT = 100


def new_request_id() -> str:
    return f"req_{uuid.uuid4().hex}"


class RequestGuard:
    def __init__(self, app: ASGIApp, *, keys: KeyChecker, max_body_bytes: int,
                 on_done: Callable[[], None] | None = None) -> None:
        self.app = app
        self.keys = keys
        self.max_body_bytes = max_body_bytes
        self.on_done = on_done  # called once each request has been answered (the heap trimmer counts them)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        raw_headers = scope["headers"]
        oversized = (len(raw_headers) > MAX_HEADER_COUNT
                     or sum(len(k) + len(v) + 4 for k, v in raw_headers) > MAX_HEADER_BYTES)
        if oversized:
            raw_headers = [(k, v) for k, v in raw_headers if k.lower() == b"anthropic-version"][:1]
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in raw_headers}
        incoming = headers.get("x-request-id", "")
        request_id = incoming if _SANE_ID.match(incoming) else new_request_id()
        scope.setdefault("state", {})["request_id"] = request_id
        path: str = scope["path"]
        shape = shape_for_path(path, headers)
        id_headers = [(b"x-request-id", request_id.encode()), (b"request-id", request_id.encode())]
        started = False
        status = 0

        async def send_with_ids(message: Message) -> None:
            nonlocal started, status
            if message["type"] == "http.response.start":
                started = True
                status = message["status"]
                message = dict(message)
                message["headers"] = [*message.get("headers", []), *id_headers]
                if status >= 500:
                    log.error("request %s: %s %s -> %d", request_id, scope["method"], path, status)
            await send(message)

        async def reply(err: ApiError) -> None:
            await err.response(shape, request_id)(scope, receive, send_with_ids)

        if oversized:
            await reply(ApiError(431, f"Request headers are larger than the server's limit of {MAX_HEADER_BYTES} "
                                 f"bytes or {MAX_HEADER_COUNT} fields."))
            return
        key = presented_key(headers)
        if self.keys.enabled and not self.keys.is_public(path) and not self.keys.accepts(key):
            # A browser opening the playground is asked for the key (any user name, the key as password).
            challenge = {"www-authenticate": 'Basic realm="recipe", charset="UTF-8"'} if is_playground(path) else None
            await reply(ApiError(401, "Invalid or missing API key: send it as 'Authorization: Bearer KEY' or "
                                 "'x-api-key: KEY'.", headers=challenge))
            return
        scope["state"]["key_owner"] = self.keys.owner(key)
        length = headers.get("content-length")
        if length is not None:
            if not length.isdigit():
                await reply(ApiError(400, "Invalid Content-Length header."))
                return
            if int(length) > self.max_body_bytes:
                await reply(body_too_large(self.max_body_bytes))
                return
        try:
            await self.app(scope, receive, send_with_ids)
        except ClientDisconnected:  # the client left before its answer; the route aborted its generation
            log.info("request %s %s %s: the client disconnected before the answer", request_id, scope["method"], path)
        except Exception:
            log.exception("request %s %s %s failed", request_id, scope["method"], path)
            if not started:
                await reply(internal_error())
        finally:
            if self.on_done is not None:
                self.on_done()


def body_too_large(limit: int) -> ApiError:
    return ApiError(413, f"Request body is larger than the server's limit of {limit} bytes.")


def key_owner_of(scope: MutableMapping[str, Any]) -> str:
    """The owner id RequestGuard gave the request's key (stored Responses are scoped to it)."""
    return str(scope.get("state", {}).get("key_owner") or "")


def request_id_of(scope: dict[str, Any]) -> str:
    return str(scope.get("state", {}).get("request_id") or new_request_id())
