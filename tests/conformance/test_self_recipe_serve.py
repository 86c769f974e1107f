"""Self-test: `recipe serve` on the demo model passes every required conformance check (auth included)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from recipe.conformance import run

KEY = "self-test-key"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def recipe_server() -> Iterator[str]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "recipe.cli", "serve", "--port", str(port), "--api-key", KEY, "--responses-db", ":memory:",
         "--log-level", "warning"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 180
        while time.time() < deadline:
            assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else "server exited"
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        else:
            raise AssertionError("recipe serve did not become healthy in 180 s")
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_every_required_check_passes_against_recipe_serve(recipe_server: str) -> None:
    report = run(recipe_server, api_key=KEY, concurrency=4)
    required_failures = [(r.id, r.reason) for r in report.results if r.status == "fail" and r.level == "required"]
    assert required_failures == []
    assert report.summary["passed"] >= 110
    skipped = {r.id for r in report.results if r.status == "skip"}
    # only thinking is skipped: the demo model has no reasoning markup (the runner says so, it does not pass)
    assert skipped == {"messages.thinking.block"}
