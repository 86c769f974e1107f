"""Request errors: one exception for every rejected request body, with each API's own error shape.

Status and message equal the official reference's (deepseek-recipe 0.2.0) for every input it rejects;
`kind` says whether the body failed to parse ("parse": not JSON, or JSON of the wrong shape) or parsed
but could not be converted ("conversion"). The reference itself answers every API with the OpenAI
error body; Recipe keeps its status and message but wraps them in the error body of the API that was
called (`RequestError.body(api)`), as the official SDKs of each API expect.
"""

from __future__ import annotations

from typing import Any, Literal

Api = Literal["chat", "messages", "responses"]
ErrorKind = Literal["parse", "conversion"]


class RequestError(ValueError):
    """A request the codec rejects. `status` is the HTTP status, `message` the client-facing text."""

    def __init__(self, message: str, *, status: int = 400, kind: ErrorKind = "conversion", param: str | None = None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.kind: ErrorKind = kind
        self.param = param

    def body(self, api: str) -> dict[str, Any]:
        """The error body in the shape of `api` ("chat" and "responses": OpenAI; "messages": Anthropic)."""
        if api == "messages":
            return {"type": "error", "error": {"type": _anthropic_type(self.status), "message": self.message}}
        return {
            "error": {
                "message": self.message,
                "type": "invalid_request_error" if self.status < 500 else "server_error",
                "param": self.param,
                "code": "invalid_request_error" if self.status < 500 else "server_error",
            }
        }

    def __repr__(self) -> str:
        return f"RequestError(status={self.status}, kind={self.kind!r}, message={self.message!r})"


def _anthropic_type(status: int) -> str:
    return {
        400: "invalid_request_error",
        401: "authentication_error",
        403: "permission_error",
        404: "not_found_error",
        413: "request_too_large",
        429: "rate_limit_error",
        529: "overloaded_error",
    }.get(status, "api_error" if status >= 500 else "invalid_request_error")


def parse_error(message: str) -> RequestError:
    """A body that is not JSON of the request's shape (the reference's `ValueError`; HTTP 400)."""
    return RequestError(message, status=400, kind="parse")


def conversion_error(message: str) -> RequestError:
    """A well-formed body the conversion rules reject (the reference's `ConversionError`; HTTP 400)."""
    return RequestError(message, status=400, kind="conversion")
