"""Request limits: the body size (also for chunked uploads) and how many requests may be pending at once."""

from __future__ import annotations

from dataclasses import dataclass

from recipe.server.errors import ApiError
from recipe.server.request_guard import body_too_large
from starlette.requests import Request


async def read_body(request: Request, limit: int) -> bytes:
    """The whole request body, or 413 as soon as it grows past `limit` bytes."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise body_too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


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
