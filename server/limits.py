"""Request limits: the body size (also for chunked uploads), the time the body may take to arrive, and how
many requests may be pending at once."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from recipe.server.errors import ApiError
from recipe.server.request_guard import body_too_large
from starlette.requests import Request


async def read_body(request: Request, limit: int, timeout_s: float) -> bytes:
    """The whole request body; 413 as soon as it grows past `limit` bytes, 408 (and the connection closed)
    when it has not all arrived `timeout_s` after the headers: a client trickling its body, or one that
    vanished mid-body leaving a half-open connection, holds a connection and a worker no longer than that."""
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise body_too_large(limit)
                chunks.append(chunk)
    except TimeoutError:
        raise body_timeout(timeout_s) from None
    return b"".join(chunks)


def body_timeout(timeout_s: float) -> ApiError:
    return ApiError(408, f"The request body did not arrive within the server's limit of {timeout_s:g} s.",
                    headers={"connection": "close"})


@dataclass
class Admission:
    """Counts generation requests in the server; beyond `limit` new ones get 429 with `retry-after`."""

    limit: int
    retry_after_s: int = 1
    pending: int = 0

    def enter(self) -> None:
        if self.pending >= self.limit:
            raise queue_full(self.retry_after_s)
        self.pending += 1

    def leave(self) -> None:
        assert self.pending > 0
        self.pending -= 1


def queue_full(retry_after_s: int) -> ApiError:
    return ApiError(
        429,
        "The server is at capacity (request queue full); retry after a moment.",
        headers={"retry-after": str(retry_after_s)},
    )
