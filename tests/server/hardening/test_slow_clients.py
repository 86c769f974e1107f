"""Slow, silent and vanishing clients: headers must arrive in time, a stream nobody reads is dropped after
its stall timeout with its engine request aborted and its KV blocks back in the pool, oversized headers
are refused. Each test runs a real uvicorn server (or calls the ASGI app with a socket that never drains)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import orjson
import pytest
import uvicorn
from recipe.server.app import create_app
from recipe.server.backend import EchoBackend
from recipe.server.config import ServerConfig
from recipe.server.http_protocol import guarded_h11


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def guarded_server(backend: Any, **cfg: Any) -> Iterator[tuple[uvicorn.Server, int]]:
    config = ServerConfig(**cfg)
    port = _port()
    server = uvicorn.Server(uvicorn.Config(
        create_app(config, backend), host="127.0.0.1", port=port, log_level="warning", lifespan="on",
        timeout_graceful_shutdown=2, http=guarded_h11(config.header_timeout_s, config.stream_stall_timeout_s)))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 60
    while not server.started:
        assert time.time() < deadline and thread.is_alive(), "server did not start"
        time.sleep(0.02)
    try:
        yield server, port
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def _closed_by_server(sock: socket.socket, within_s: float) -> bool:
    """True when the server closes (EOF or reset) within `within_s`; whatever it sent first is ignored."""
    sock.settimeout(within_s)
    try:
        while sock.recv(65536):
            pass
        return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_a_connection_that_never_finishes_its_headers_is_closed() -> None:
    with guarded_server(EchoBackend(), header_timeout_s=1.0) as (server, port):
        idle = socket.create_connection(("127.0.0.1", port))
        trickle = socket.create_connection(("127.0.0.1", port))
        start = time.monotonic()
        trickle.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        for _ in range(3):  # slowloris: a header byte now and then (within the timeout), never the blank line
            time.sleep(0.25)
            trickle.sendall(b"X")
        assert _closed_by_server(trickle, 6.0)
        assert _closed_by_server(idle, 6.0)
        assert time.monotonic() - start < 8.0
        assert not server.server_state.connections
        idle.close()
        trickle.close()


def _ask_raw(port: int, request: bytes) -> bytes:
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(request)
    s.settimeout(10)
    got = b""
    while b"\r\n\r\n" not in got:
        got += s.recv(65536)
    head, _, body = got.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
    while len(body) < length:
        body += s.recv(65536)
    s.close()
    return got[: len(head) + 4] + body


def test_oversized_headers_are_refused_in_the_api_error_shape() -> None:
    with guarded_server(EchoBackend()) as (_server, port):
        # whole in one read (h11 would take it): the server's own limit, a 431 in the error shape
        head = _ask_raw(port, b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 40000 + b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 431"), head[:80]
        assert b'"code":"request_headers_too_large"' in head and b"Traceback" not in head
        many = b"".join(b"X-H%d: v\r\n" % i for i in range(150))
        assert _ask_raw(port, b"GET /health HTTP/1.1\r\nHost: x\r\n" + many + b"\r\n").startswith(b"HTTP/1.1 431")
        head = _ask_raw(port, b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nanthropic-version: 2023-06-01\r\n"
                              + many + b"\r\n")
        assert head.startswith(b"HTTP/1.1 431") and b'"type":"error"' in head
        # in pieces past h11's 16 KiB: a 400 and the connection closed
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000)
        s.settimeout(10)
        assert s.recv(4096).startswith(b"HTTP/1.1 400")
        assert _closed_by_server(s, 10)
        s.close()
        # normal headers still pass
        assert _ask_raw(port, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Ok: " + b"a" * 8000 + b"\r\n\r\n"
                        ).startswith(b"HTTP/1.1 200")


def _stream_request(port: int, body: dict[str, Any]) -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window fills fast
    s.connect(("127.0.0.1", port))
    raw = orjson.dumps(body)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(raw)).encode() + b"\r\n\r\n" + raw)
    s.settimeout(30)
    assert s.recv(256).startswith(b"HTTP/1.1 200")
    return s  # and never read again


def test_a_stream_nobody_reads_is_aborted_and_its_connection_dropped() -> None:
    echo = EchoBackend(chunk=8, token_delay_s=0.001)
    with guarded_server(echo, stream_stall_timeout_s=1.0) as (server, port):
        body = {"model": "echo", "stream": True, "max_tokens": 100_000, "logprobs": True, "top_logprobs": 20,
                "messages": [{"role": "user", "content": "a fairly long prompt to echo back " * 20}]}
        s = _stream_request(port, body)
        t0 = time.monotonic()
        deadline = t0 + 60  # finishing 100,000 tokens would take > 100 s of token delay alone
        while (echo._running or server.server_state.connections) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not echo._running, "the backend request still runs for a client that reads nothing"
        assert not server.server_state.connections, "the stalled connection is still held"
        s.close()
        # the server serves on
        ok = socket.create_connection(("127.0.0.1", port))
        ok.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        ok.settimeout(10)
        assert ok.recv(64).startswith(b"HTTP/1.1 200")
        ok.close()


class _NeverDrains:
    """An ASGI peer that sends a request, then neither reads nor disconnects (a half-open connection)."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = orjson.dumps(body)
        self.sent_body = False
        self.chunks = 0
        self.status = 0
        self.first = b""

    async def receive(self) -> dict[str, Any]:
        if not self.sent_body:
            self.sent_body = True
            return {"type": "http.request", "body": self.body, "more_body": False}
        await asyncio.Event().wait()  # no disconnect ever arrives
        raise AssertionError("unreachable")

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
        elif message["type"] == "http.response.body":
            self.chunks += 1
            self.first = self.first or message["body"]
            if self.chunks > 1:  # the socket buffer is full from here on
                await asyncio.Event().wait()

    def scope(self) -> dict[str, Any]:
        return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
                "scheme": "http", "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions",
                "query_string": b"", "root_path": "", "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 2),
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(self.body)).encode())]}


def test_a_stalled_stream_frees_its_kv_blocks_in_the_engine() -> None:
    torch = pytest.importorskip("torch")
    from recipe.engine import AsyncLLM
    from recipe.engine.models.registry import load_model
    from recipe.server.engine_backend import EngineBackend

    pair = load_model("smollm2", dtype=torch.float32, device="cpu")
    backend = EngineBackend(AsyncLLM(pair, num_kv_blocks=64, max_num_seqs=4, num_threads=1,
                                     enable_prefix_caching=False), name="m")
    app = create_app(ServerConfig(stream_stall_timeout_s=1.0), backend)
    peer = _NeverDrains({"model": "m", "stream": True, "max_tokens": 900, "ignore_eos": True,
                         "messages": [{"role": "user", "content": "Count from one to one thousand."}]})

    async def go() -> float:
        baseline = backend.stats()
        assert baseline.kv_usage == 0.0 and baseline.running == 0
        task = asyncio.ensure_future(app(peer.scope(), peer.receive, peer.send))
        deadline = time.monotonic() + 120
        while backend.stats().running == 0 and not task.done():  # the request reached the engine
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        assert not task.done(), (peer.status, peer.first[:300])
        assert backend.stats().kv_usage > 0.0
        t0 = time.monotonic()
        await asyncio.wait_for(task, 60)  # the route returns once the stall timeout has fired
        while backend.stats().running and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        return time.monotonic() - t0

    try:
        asyncio.run(go())
        stats = backend.stats()
        assert peer.status == 200 and peer.chunks == 2
        assert stats.running == 0 and stats.waiting == 0
        assert stats.kv_usage == 0.0, "KV blocks leaked"
        assert backend.engine.stats().output_tokens < 900, "the request ran to its end instead of being aborted"
    finally:
        asyncio.run(backend.shutdown())


def _read_until_closed(sock: socket.socket, within_s: float) -> tuple[bytes, bool]:
    """Everything the server sends, and whether it closed the connection within `within_s`."""
    sock.settimeout(within_s)
    got = b""
    try:
        while chunk := sock.recv(65536):
            got += chunk
        return got, True
    except ConnectionResetError:
        return got, True
    except TimeoutError:
        return got, False


@pytest.mark.parametrize(("path", "shape"), [("/v1/chat/completions", b'"code":"request_timeout"'),
                                             ("/v1/messages", b'"type":"timeout_error"'),
                                             ("/v1/responses", b'"code":"request_timeout"')])
def test_a_body_that_trickles_in_gets_408_and_the_connection_closed(path: str, shape: bytes) -> None:
    with guarded_server(EchoBackend(), body_timeout_s=1.0) as (server, port):
        body = orjson.dumps({"model": "echo", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]})
        s = socket.create_connection(("127.0.0.1", port))
        t0 = time.monotonic()
        s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  f"anthropic-version: 2023-06-01\r\nContent-Length: {len(body)}\r\n\r\n".encode())
        for b in body[:12]:  # a byte every 0.3 s: each read is "progress", the whole body never comes in time
            try:
                s.sendall(bytes([b]))
            except (BrokenPipeError, ConnectionResetError):
                break  # closed on us: what we want
            time.sleep(0.3)
        got, closed = _read_until_closed(s, 10.0)
        assert closed, "the server kept the connection of a client that never finished its body"
        assert got.startswith(b"HTTP/1.1 408"), got[:120]
        assert shape in got and b"Traceback" not in got
        assert time.monotonic() - t0 < 8.0
        s.close()
        deadline = time.monotonic() + 5
        while server.server_state.connections and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not server.server_state.connections


def test_a_client_that_vanishes_mid_body_does_not_hold_its_connection() -> None:
    """A half-open connection (the peer sent part of its body and is gone without a FIN) is released by the
    body deadline; a body that arrives in time, in pieces, is still served."""
    with guarded_server(EchoBackend(), body_timeout_s=1.5) as (server, port):
        half = socket.create_connection(("127.0.0.1", port))
        half.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 500\r\n\r\n{\"model\": ")
        ok = socket.create_connection(("127.0.0.1", port))
        body = orjson.dumps({"model": "echo", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]})
        ok.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body[:10])
        time.sleep(0.5)
        ok.sendall(body[10:])
        ok.settimeout(10)
        assert ok.recv(64).startswith(b"HTTP/1.1 200")
        ok.close()
        got, closed = _read_until_closed(half, 10.0)
        assert closed and got.startswith(b"HTTP/1.1 408"), got[:120]
        half.close()
        deadline = time.monotonic() + 5
        while server.server_state.connections and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not server.server_state.connections
