"""Stored Responses (`store: true`) in an embedded SQLite database, so `previous_response_id` works across
requests and across restarts of the server.

Each row keeps the full response object and the complete input that produced it (the input items of every
earlier turn, already expanded), so continuing a conversation is one lookup however long the chain is.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    created_at INTEGER NOT NULL,
    model TEXT NOT NULL,
    previous_response_id TEXT,
    response BLOB NOT NULL,
    input_items BLOB NOT NULL
)
"""


@dataclass(frozen=True)
class StoredResponse:
    """A response object as returned to the client and the input items it answered."""

    id: str
    response: dict[str, Any]
    input_items: list[Any]


class ResponseStore:
    """A SQLite-backed map from response id to `StoredResponse`. Thread-safe; async methods run off the loop."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        with self._lock:
            if self.path != ":memory:":
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(_SCHEMA)

    def put(self, response: dict[str, Any], input_items: list[Any]) -> None:
        row = (
            str(response["id"]),
            int(response.get("created_at") or 0),
            str(response.get("model") or ""),
            response.get("previous_response_id"),
            orjson.dumps(response),
            orjson.dumps(input_items),
        )
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?, ?)", row)

    def get(self, response_id: str) -> StoredResponse | None:
        with self._lock:
            row = self._db.execute(
                "SELECT response, input_items FROM responses WHERE id = ?", (response_id,)
            ).fetchone()
        if row is None:
            return None
        return StoredResponse(response_id, orjson.loads(row[0]), orjson.loads(row[1]))

    def delete(self, response_id: str) -> bool:
        with self._lock:
            cur = self._db.execute("DELETE FROM responses WHERE id = ?", (response_id,))
        return cur.rowcount > 0

    def close(self) -> None:
        with self._lock:
            self._db.close()

    async def aput(self, response: dict[str, Any], input_items: list[Any]) -> None:
        await asyncio.to_thread(self.put, response, input_items)

    async def aget(self, response_id: str) -> StoredResponse | None:
        return await asyncio.to_thread(self.get, response_id)

    async def adelete(self, response_id: str) -> bool:
        return await asyncio.to_thread(self.delete, response_id)
