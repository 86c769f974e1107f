"""Stored Responses (`store: true`) in an embedded SQLite database, so `previous_response_id` works across
requests and across restarts of the server.

Each row keeps the full response object and the complete input that produced it (the input items of every
earlier turn, already expanded), so continuing a conversation is one lookup however long the chain is.

Rows belong to an owner (the digest of the API key that stored them, "" without keys): every read and delete
names its owner, so one key never sees another's responses. The file is in WAL mode, so a killed server
leaves it consistent (the last commits survive, a torn write is rolled back on open). A write that fails
(disk full, read-only file) raises `StoreWriteError`; reads go on.
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
    input_items BLOB NOT NULL,
    owner TEXT NOT NULL DEFAULT ''
)
"""


class StoreWriteError(Exception):
    """The store could not save (disk full, file not writable); its message is safe to show."""



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
            columns = {row[1] for row in self._db.execute("PRAGMA table_info(responses)")}
            if "owner" not in columns:  # a file written before responses were scoped to keys
                self._db.execute("ALTER TABLE responses ADD COLUMN owner TEXT NOT NULL DEFAULT ''")

    def put(self, response: dict[str, Any], input_items: list[Any], owner: str = "") -> None:
        row = (
            str(response["id"]),
            int(response.get("created_at") or 0),
            str(response.get("model") or ""),
            response.get("previous_response_id"),
            orjson.dumps(response),
            orjson.dumps(input_items),
            owner,
        )
        try:
            with self._lock:
                self._db.execute("INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?, ?, ?)", row)
        except (sqlite3.OperationalError, sqlite3.DatabaseError, OSError) as exc:
            raise StoreWriteError(f"the Responses store could not save this response ({_reason(exc)})") from exc

    def get(self, response_id: str, owner: str = "") -> StoredResponse | None:
        with self._lock:
            row = self._db.execute(
                "SELECT response, input_items FROM responses WHERE id = ? AND owner = ?", (response_id, owner)
            ).fetchone()
        if row is None:
            return None
        return StoredResponse(response_id, orjson.loads(row[0]), orjson.loads(row[1]))

    def delete(self, response_id: str, owner: str = "") -> bool:
        try:
            with self._lock:
                cur = self._db.execute("DELETE FROM responses WHERE id = ? AND owner = ?", (response_id, owner))
        except (sqlite3.OperationalError, sqlite3.DatabaseError, OSError) as exc:
            raise StoreWriteError(f"the Responses store could not delete this response ({_reason(exc)})") from exc
        return cur.rowcount > 0

    def integrity(self) -> str:
        """SQLite's own check of the file: "ok" when it is sound."""
        with self._lock:
            return str(self._db.execute("PRAGMA integrity_check").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()

    async def aput(self, response: dict[str, Any], input_items: list[Any], owner: str = "") -> None:
        await asyncio.to_thread(self.put, response, input_items, owner)

    async def aget(self, response_id: str, owner: str = "") -> StoredResponse | None:
        return await asyncio.to_thread(self.get, response_id, owner)

    async def adelete(self, response_id: str, owner: str = "") -> bool:
        return await asyncio.to_thread(self.delete, response_id, owner)


def _reason(exc: BaseException) -> str:
    text = str(exc).lower()
    if "full" in text or getattr(exc, "errno", None) == 28:
        return "disk full"
    if "readonly" in text or "read-only" in text or getattr(exc, "errno", None) in (13, 30):
        return "file not writable"
    return "write failed"
