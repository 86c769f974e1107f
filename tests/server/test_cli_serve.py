"""`recipe serve` as a process: the startup banner, the exposure rule, and draining on SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import httpx


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "RECIPE_API_KEYS": ""}
    return subprocess.Popen([sys.executable, "-m", "recipe.cli", "serve", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)


def test_no_key_refuses_a_public_address() -> None:
    p = _serve("--host", "0.0.0.0", "--backend", "echo", "--port", str(_free_port()))
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 2 and "--allow-unauthenticated" in out


def test_banner_then_sigterm_drains_the_stream_in_flight() -> None:
    port = _free_port()
    p = _serve("--backend", "echo", "--model", "DeepSeek-V4-Pro", "--port", str(port), "--responses-db", ":memory:",
               "--echo-token-delay", "0.05", "--log-level", "warning")
    try:
        assert p.stdout is not None
        seen = []
        while not (seen and seen[-1].startswith("Recipe is serving")):
            line = p.stdout.readline()
            assert line, f"the server exited before its banner: {seen}"
            seen.append(line)
        assert f"http://127.0.0.1:{port}" in seen[-1] and "DeepSeek-V4-Pro" in seen[-1]
        body = {"model": "DeepSeek-V4-Pro", "messages": [{"role": "user", "content": "drain me"}], "max_tokens": 30,
                "stream": True, "thinking": {"type": "disabled"}}
        with httpx.stream("POST", f"http://127.0.0.1:{port}/v1/chat/completions", json=body, timeout=30) as r:
            lines = r.iter_lines()
            assert next(lines).startswith("data: ")
            p.send_signal(signal.SIGTERM)
            rest = [line for line in lines if line]
        assert rest[-1] == "data: [DONE]"  # the request in flight finished normally
        assert any('"finish_reason":"length"' in line for line in rest)
        assert p.wait(timeout=30) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    deadline = time.time() + 1
    while time.time() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=0.2)
        except httpx.HTTPError:
            break
    else:
        raise AssertionError("the server still answers after shutdown")
