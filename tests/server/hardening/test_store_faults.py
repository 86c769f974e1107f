"""Responses store faults: a full disk fails only the writes (507 in the API's error shape, serving goes on),
and a server killed with SIGKILL mid-stream restarts with every stored response intact and the file sound."""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from recipe.server.app import create_app
from recipe.server.backend import EchoBackend
from recipe.server.config import ServerConfig
from recipe.server.storage import ResponseStore, StoreWriteError
from serve_process import wait_healthy
from starlette.testclient import TestClient


def port_of() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _fill_disk(store: ResponseStore) -> None:
    """SQLite's own quota: the file may not grow past the pages it has, so the next insert gets SQLITE_FULL."""
    db = store._db
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    db.execute(f"PRAGMA max_page_count = {pages}")


def _ask(c: TestClient, **extra: Any) -> Any:
    return c.post("/v1/responses", json={"model": "echo", "input": "x" * 20000, "max_output_tokens": 8, **extra})


def test_full_disk_fails_writes_with_507_and_serving_goes_on(tmp_path: Path) -> None:
    c = TestClient(create_app(ServerConfig(responses_db=str(tmp_path / "r.sqlite3")), EchoBackend()),
                   raise_server_exceptions=False)
    kept = _ask(c).json()["id"]
    _fill_disk(c.app.state.recipe.store)  # type: ignore[attr-defined]
    r = _ask(c)
    assert r.status_code == 507, r.text
    err = r.json()["error"]
    assert err["code"] == "storage_unavailable" and "disk full" in err["message"] and err["type"] == "server_error"
    with c.stream("POST", "/v1/responses", json={"model": "echo", "input": "x" * 20000, "max_output_tokens": 8,
                                                 "stream": True}) as s:
        text = "".join(s.iter_text())
    assert "event: error" in text and "disk full" in text and "Traceback" not in text
    assert _ask(c, store=False).status_code == 200  # not storing: fine
    assert c.get(f"/v1/responses/{kept}").status_code == 200  # reads: fine
    r = c.post("/v1/chat/completions", json={"model": "echo", "max_tokens": 4, "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 200
    assert c.get("/health").status_code == 200


def test_an_os_error_on_write_is_a_store_write_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = ResponseStore(tmp_path / "r.sqlite3")
    store.put({"id": "resp_1"}, [])

    class Broken:
        def __init__(self, real: sqlite3.Connection) -> None:
            self.real = real

        def execute(self, sql: str, *args: Any) -> Any:
            if sql.startswith(("INSERT", "DELETE")):
                raise OSError(28, "No space left on device")
            return self.real.execute(sql, *args)

        def close(self) -> None:
            self.real.close()

    store._db = Broken(store._db)  # type: ignore[assignment]
    with pytest.raises(StoreWriteError, match="disk full"):
        store.put({"id": "resp_2"}, [])
    with pytest.raises(StoreWriteError, match="disk full"):
        store.delete("resp_1")
    assert store.get("resp_1") is not None
    store.close()


def test_wal_mode_is_on_for_a_file_store(tmp_path: Path) -> None:
    store = ResponseStore(tmp_path / "r.sqlite3")
    assert store._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    store.close()


def _serve(port: int, db: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "recipe.cli", "serve", "--backend", "echo", "--echo-token-delay", "0.002",
         "--port", str(port), "--responses-db", str(db), "--log-level", "warning"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


def test_sigkill_mid_stream_keeps_every_stored_response(tmp_path: Path) -> None:
    db = tmp_path / "responses.sqlite3"
    port = port_of()
    base = f"http://127.0.0.1:{port}"
    proc = _serve(port, db)
    try:
        wait_healthy(base, proc)
        stored: dict[str, str] = {}
        with httpx.Client(base_url=base, timeout=60) as h:
            for i in range(40):
                r = h.post("/v1/responses", json={"model": "echo", "input": f"turn {i} " * 50, "max_output_tokens": 16})
                assert r.status_code == 200
                stored[r.json()["id"]] = r.json()["output"][-1]["content"][0]["text"]
            # streams that store at their end, one of them cut by the kill
            with h.stream("POST", "/v1/responses", json={"model": "echo", "input": "long " * 400,
                                                         "max_output_tokens": 5000, "stream": True}) as s:
                for n, _ in enumerate(s.iter_lines()):
                    if n == 50:
                        os.kill(proc.pid, signal.SIGKILL)
                        break
        proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)

    check = sqlite3.connect(db)
    assert check.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    check.close()
    port = port_of()
    base = f"http://127.0.0.1:{port}"
    proc = _serve(port, db)
    try:
        wait_healthy(base, proc)
        with httpx.Client(base_url=base, timeout=60) as h:
            for rid, text in stored.items():
                r = h.get(f"/v1/responses/{rid}")
                assert r.status_code == 200 and r.json()["output"][-1]["content"][0]["text"] == text
            r = h.post("/v1/responses", json={"model": "echo", "input": "and again", "max_output_tokens": 4,
                                              "previous_response_id": next(iter(stored))})
            assert r.status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


def test_input_nested_too_deeply_to_store_is_a_400_before_generating(tmp_path: Path) -> None:
    c = TestClient(create_app(ServerConfig(responses_db=str(tmp_path / "r.sqlite3")), EchoBackend()),
                   raise_server_exceptions=False)
    deep: Any = "x"
    for _ in range(300):
        deep = [deep]
    body = {"model": "echo", "max_output_tokens": 4, "input": [
        {"role": "user", "type": "message", "content": [{"type": "input_text", "text": "hi", "extra": deep}]}]}
    r = c.post("/v1/responses", json=body)
    assert r.status_code in (400, 200), r.text  # conversion may refuse it first; never a 500
    if r.status_code == 400:
        assert set(r.json()) == {"error"}
    r = c.post("/v1/responses", json={**body, "metadata_x": deep})
    assert r.status_code == 400 and "too deeply" in r.json()["error"]["message"], r.text
    assert c.post("/v1/responses", json={**body, "metadata_x": deep, "store": False}).status_code in (200, 400)
