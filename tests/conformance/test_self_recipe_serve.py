"""Self-test: `recipe serve` on the demo model passes every required conformance check (auth included)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from recipe.conformance import run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))
from serve_process import wait_healthy

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
        wait_healthy(url, proc, timeout=180)
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
