"""Errors on the wire: one exception carrying a status, rendered in each API's own error shape.

OpenAI routes (Chat, Responses, utilities): `{"error": {"message", "type", "param", "code"}}`.
Anthropic routes (`/v1/messages*`): `{"type": "error", "error": {"type", "message"}, "request_id"}`.
No traceback or exception text from unexpected failures ever goes into these bodies.
"""

from __future__ import annotations

from typing import Any, Literal

import orjson
from starlette.responses import Response

Api = Literal["chat", "messages", "responses"]
ErrorShape = Literal["openai", "anthropic"]

# status -> (OpenAI error type, OpenAI code, Anthropic error type)
_KINDS: dict[int, tuple[str, str | None, str]] = {
    400: ("invalid_request_error", "invalid_request_error", "invalid_request_error"),
    401: ("invalid_request_error", "invalid_api_key", "authentication_error"),
    403: ("invalid_request_error", "permission_denied", "permission_error"),
    404: ("invalid_request_error", "not_found", "not_found_error"),
    405: ("invalid_request_error", "method_not_allowed", "invalid_request_error"),
    408: ("invalid_request_error", "request_timeout", "timeout_error"),
    413: ("invalid_request_error", "request_too_large", "request_too_large"),
    431: ("invalid_request_error", "request_headers_too_large", "request_too_large"),
    429: ("rate_limit_error", "rate_limit_exceeded", "rate_limit_error"),
    500: ("server_error", None, "api_error"),
    503: ("server_error", "service_unavailable", "overloaded_error"),
    504: ("server_error", "timeout", "timeout_error"),
}


def shape_for(api: Api | None) -> ErrorShape:
    return "anthropic" if api == "messages" else "openai"


def shape_for_path(path: str, headers: dict[str, str] | None = None) -> ErrorShape:
    """The error shape a route answers in: Anthropic under /v1/messages (and /v1/models asked Anthropic-style)."""
    if path.startswith("/v1/messages"):
        return "anthropic"
    if path.startswith("/v1/models") and headers and "anthropic-version" in headers:
        return "anthropic"
    return "openai"


class ApiError(Exception):
    """A failure to report to the client with `status`; `message` must be safe to show."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
        body: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.param = param
        self.headers = dict(headers or {})
        self.prebuilt_body = body  # an error body already in the right shape (from conversion)

    def body(self, shape: ErrorShape, request_id: str | None = None) -> dict[str, Any]:
        if self.prebuilt_body is not None:
            if shape == "anthropic" and request_id and self.prebuilt_body.get("type") == "error":
                return {**self.prebuilt_body, "request_id": request_id}
            return self.prebuilt_body
        oa_type, oa_code, an_type = _KINDS.get(self.status, _KINDS[500 if self.status >= 500 else 400])
        if shape == "anthropic":
            out: dict[str, Any] = {"type": "error", "error": {"type": an_type, "message": self.message}}
            if request_id:
                out["request_id"] = request_id
            return out
        return {
            "error": {
                "message": self.message,
                "type": oa_type,
                "param": self.param,
                "code": self.code if self.code is not None else oa_code,
            }
        }

    def response(self, shape: ErrorShape, request_id: str | None = None) -> Response:
        headers = dict(self.headers)
        if self.status in (400, 401, 403, 404, 413, 431) and "x-should-retry" not in headers:
            headers["x-should-retry"] = "false"
        return Response(
            orjson.dumps(self.body(shape, request_id)),
            status_code=self.status,
            media_type="application/json",
            headers=headers,
        )


def internal_error() -> ApiError:
    return ApiError(500, "The server had an error while processing your request; see the server log for this request id.")
