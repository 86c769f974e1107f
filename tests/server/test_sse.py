"""SSE delivery: frames are flushed as produced, and a client that disconnects stops the producer at once."""

from __future__ import annotations

import asyncio
import threading

import httpx
from recipe.server.sse import SSEResponse
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route


def test_disconnect_runs_the_producers_cleanup_immediately(serve) -> None:  # type: ignore[no-untyped-def]
    cleaned = threading.Event()
    sent: list[int] = []

    async def endless(request: Request) -> SSEResponse:
        async def frames():  # type: ignore[no-untyped-def]
            try:
                i = 0
                while True:
                    sent.append(i)
                    yield f"data: {i}\n\n".encode()
                    i += 1
                    await asyncio.sleep(5 if i > 2 else 0)  # then stall, like a slow engine step
            finally:
                cleaned.set()

        return SSEResponse(frames())

    app = Starlette(routes=[Route("/s", endless)])
    with serve(app) as srv, httpx.Client(timeout=10) as c:
        with c.stream("GET", srv.base + "/s") as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            assert r.headers["cache-control"] == "no-cache"
            lines = r.iter_lines()
            got = [next(lines) for _ in range(6)]
            assert got[0] == "data: 0" and got[2] == "data: 1"
        # the producer is asleep for 5 s; cleanup must not wait for it
        assert cleaned.wait(2.0), "producer was not closed when the client went away"
        assert len(sent) <= 4


def test_stream_ends_normally(serve) -> None:  # type: ignore[no-untyped-def]
    async def three(request: Request) -> SSEResponse:
        async def frames():  # type: ignore[no-untyped-def]
            for i in range(3):
                yield f"event: e\ndata: {i}\n\n".encode()

        return SSEResponse(frames())

    app = Starlette(routes=[Route("/s", three)])
    with serve(app) as srv:
        r = httpx.get(srv.base + "/s")
        assert r.text == "".join(f"event: e\ndata: {i}\n\n" for i in range(3))
