"""The SQLite Responses store keeps what it is given, across connections (a server restart)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from recipe.server.storage import ResponseStore


def _response(rid: str, text: str) -> dict:
    return {"id": rid, "object": "response", "created_at": 1, "model": "m", "previous_response_id": None,
            "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}]}


def test_put_get_delete_and_survive_reopen(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "responses.sqlite3"
    store = ResponseStore(path)
    items = [{"type": "message", "role": "user", "content": "héllo"}]
    store.put(_response("resp_1", "one"), items)
    store.put(_response("resp_2", "two"), items * 2)
    assert store.get("resp_1").response["output"][0]["content"][0]["text"] == "one"  # type: ignore[union-attr]
    assert store.delete("resp_2") is True
    assert store.delete("resp_2") is False
    store.close()

    reopened = ResponseStore(path)
    got = reopened.get("resp_1")
    assert got is not None and got.input_items == items and got.response == _response("resp_1", "one")
    assert reopened.get("resp_2") is None
    assert reopened.get("missing") is None
    reopened.close()


def test_async_methods_and_memory_store() -> None:
    store = ResponseStore(":memory:")

    async def go() -> None:
        await store.aput(_response("r", "x"), [])
        assert (await store.aget("r")) is not None
        assert await store.adelete("r")
        assert (await store.aget("r")) is None

    asyncio.run(go())
