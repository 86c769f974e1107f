"""Helpers of the real-client tests: `recipe serve` subprocesses (ended by their own pids) and where the
clients are. scripts/setup.sh installs the clients: npm's Claude Code and Codex CLI into .clients/
(where node exists), the Python client libraries into .venv-clients/. A test whose client is missing skips
and says which set-up step installs it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
CLIENTS_PYTHON = ROOT / ".venv-clients" / "bin" / "python"
NPM_BIN = ROOT / ".clients" / "node_modules" / ".bin"
SCRIPTS = Path(__file__).parent / "scripts"
ECHO_MODEL = "DeepSeek-V4-Pro"
DEMO_MODEL = "SmolLM2-135M-Instruct"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RecipeServer:
    """`recipe serve ARGS` on a free loopback port; `base` is its URL. Ended (SIGTERM, then SIGKILL) by pid."""

    def __init__(self, *args: str) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = open(os.devnull, "wb")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "recipe"), "serve", "--port", str(self.port), "--responses-db", ":memory:",
             "--log-level", "warning", *args],
            stdout=self.log, stderr=subprocess.STDOUT, cwd=ROOT)

    def wait(self, timeout: float = 180.0) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"recipe serve exited with {self.proc.returncode}")
            try:
                if httpx.get(self.base + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise AssertionError("recipe serve did not come up")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def serving(*args: str) -> Iterator[RecipeServer]:
    srv = RecipeServer(*args)
    try:
        srv.wait()
        yield srv
    finally:
        srv.stop()



def npm_client(name: str) -> Path:
    path = NPM_BIN / name
    if not path.exists():
        pytest.skip(f"{name} is not installed: scripts/setup.sh installs it with npm where node exists "
                    f"(tests/clients/npm-clients.txt)")
    return path


def run_python_client(script: str, server: RecipeServer, model: str, timeout: float = 300) -> dict[str, Any]:
    """Run tests/clients/scripts/SCRIPT in the clients' environment; its last stdout line is a JSON object."""
    if not CLIENTS_PYTHON.exists():
        pytest.skip("the Python agent clients are not installed: scripts/setup.sh puts them in .venv-clients "
                    "(tests/clients/requirements.txt)")
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "NO_PROXY": "127.0.0.1,localhost"}
    done = subprocess.run([str(CLIENTS_PYTHON), str(SCRIPTS / script), server.base, model], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=ROOT)
    assert done.returncode == 0, f"{script} failed:\n{done.stderr[-4000:]}"
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))
