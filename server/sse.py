"""Server-sent events: frames are flushed one by one, and a client that goes away stops the producer at once.

`SSEResponse` runs the frame iterator and a watcher of the ASGI receive channel side by side; on
`http.disconnect` (or a failed send) the iterator is cancelled and closed, so its `finally` blocks (which
abort the engine request) run immediately rather than at the next token. A client that stops reading
(each `send` waits while the socket's buffers are full) is dropped the same way once one frame has waited
`stall_timeout_s`: back pressure reaches the engine only that far, then its request is aborted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable
from typing import TypeVar

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

T = TypeVar("T")
log = logging.getLogger("recipe.server")

SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no", "connection": "keep-alive"}


class SSEResponse(Response):
    media_type = "text/event-stream"

    def __init__(self, frames: AsyncIterator[bytes], headers: dict[str, str] | None = None,
                 stall_timeout_s: float | None = None) -> None:
        super().__init__(content=None, status_code=200, headers={**SSE_HEADERS, **(headers or {})})
        self.raw_headers = [(k, v) for k, v in self.raw_headers if k != b"content-length"]
        self.frames = frames
        self.stall_timeout_s = stall_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})

        async def write(body: bytes, more: bool) -> None:
            message = {"type": "http.response.body", "body": body, "more_body": more}
            # asyncio.timeout, not wait_for: before Python 3.12 wait_for can swallow a cancellation that
            # arrives as `send` completes, and a pump that missed its cancellation runs on for ever.
            try:
                async with asyncio.timeout(self.stall_timeout_s):
                    await send(message)
            except TimeoutError:
                raise ClientStalled() from None

        async def pump() -> None:
            async for frame in self.frames:
                await write(frame, True)
            await write(b"", False)

        try:
            await until_disconnect(receive, pump())
        except ClientStalled:
            log.warning("dropping a stream: its client read nothing for %g s", self.stall_timeout_s)
        except (OSError, ClientDisconnected):  # the client went away; the frames' cleanup runs below
            pass
        finally:
            aclose = getattr(self.frames, "aclose", None)
            if aclose is not None:
                await aclose()


class ClientDisconnected(Exception):
    """The client closed the connection before the work finished."""


class ClientStalled(Exception):
    """The client took nothing from a stream for longer than its stall timeout."""


async def until_disconnect(receive: Receive, work: Awaitable[T]) -> T:
    """Run `work`, cancelling it if the client disconnects first (then raise `ClientDisconnected`)."""
    task = asyncio.ensure_future(work)

    async def watch() -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return

    watcher = asyncio.ensure_future(watch())
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        watcher.cancel()
        raise
    if task in done:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
    raise ClientDisconnected()


