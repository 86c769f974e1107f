"""A `recipe serve` subprocess started by a test: wait until its /health answers (or fail if it exits)."""

from __future__ import annotations

import subprocess
import time

import httpx


def wait_healthy(base: str, proc: subprocess.Popen[bytes], timeout: float = 120.0) -> None:
    """Poll `base`/health until 200; AssertionError if `proc` exits (with its output, when piped) or `timeout`
    seconds pass first."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            out = proc.stdout.read() if proc.stdout is not None else b""  # piped: its output says why
            raise AssertionError("server exited: " + out.decode(errors="replace"))
        try:
            if httpx.get(base + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError("server did not come up")
