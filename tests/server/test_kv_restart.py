"""Restarts keep the directory tier: a real `recipe serve --kv-dir` is used, stopped and started again, and
the second run serves the same prompt's prefix from the directory (usage and /metrics say so)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.slow  # two starts of the 135M demo model: run with -m slow

SYSTEM = " ".join(f"Rule {i}: answer briefly and cite the rule number when it applies." for i in range(30))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(kv_dir: Path, port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "recipe.cli", "serve", "--port", str(port), "--responses-db", ":memory:",
         "--log-level", "warning", "--kv-dir", str(kv_dir), "--kv-host-bytes", "64MiB"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.time() + 300
    while time.time() < deadline:
        if proc.poll() is not None:
            raise AssertionError(proc.stdout.read().decode() if proc.stdout else "server exited")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.kill()
    raise AssertionError("recipe serve did not become healthy in 300 s")


def _stop(proc: subprocess.Popen[bytes]) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise


def _ask(port: int) -> tuple[str, dict]:
    body = {"model": "SmolLM2-135M-Instruct", "temperature": 0, "max_tokens": 8,
            "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Which rule is first?"}]}
    r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    data = r.json()
    return data["choices"][0]["message"]["content"], data["usage"]


def _metric(port: int, name: str) -> float:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def test_a_restart_serves_the_prefix_from_the_directory_tier(tmp_path: Path) -> None:
    kv_dir = tmp_path / "kv"
    port = _free_port()
    proc = _serve(kv_dir, port)
    try:
        first, usage = _ask(port)
        assert usage["prompt_tokens"] > 300 and usage["prompt_tokens_details"]["cached_tokens"] == 0
    finally:
        assert _stop(proc) == 0
    stored = list(kv_dir.rglob("*.kv"))
    assert len(stored) >= usage["prompt_tokens"] // 16 - 1  # shutdown wrote what was queued

    port = _free_port()
    proc = _serve(kv_dir, port)
    try:
        again, usage2 = _ask(port)
        assert again == first
        cached = usage2["prompt_tokens_details"]["cached_tokens"]
        assert cached >= (usage["prompt_tokens"] - 1) // 16 * 16 - 16  # every full block but the last
        assert _metric(port, 'recipe:kv_tier_hits_total{model_name="SmolLM2-135M-Instruct",tier="disk"}') > 0
        assert _metric(port, "recipe:external_prefix_cache_hits_total") == cached
        assert _metric(port, 'recipe:kv_tier_enabled{model_name="SmolLM2-135M-Instruct",tier="disk"}') == 1
    finally:
        assert _stop(proc) == 0
