"""The server's memo of compiled output constraints: bounded in bytes, and admitting a constraint only the
second time it is asked for.

Clients that repeat a schema or a tool list (every turn of an agent) get it compiled once more and then
served from here; a constraint asked for once (a per-request generated schema, a fuzzer's) is compiled,
used and dropped, so never-repeating ones cannot fill the memo. Entries are bounded by their estimated
size (`CompiledConstraint.size_bytes` plus the key's text), since one tool list's grammar can be a
thousand times another's; least recently used ones go first. The "asked for once" record keeps only
hashes of the last `seen_keys` keys (a hash collision only admits a key early). Capacity 0 turns the
memo off: every request compiles. Used from the event loop only (no lock).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any


class ConstraintMemo:
    def __init__(self, capacity_bytes: int, seen_keys: int = 4096) -> None:
        if capacity_bytes < 0:
            raise ValueError("the constraint memo's capacity must be 0 (off) or positive")
        self.capacity_bytes = capacity_bytes
        self.seen_keys = seen_keys
        self._items: OrderedDict[Any, tuple[Any, int]] = OrderedDict()
        self._seen: OrderedDict[int, None] = OrderedDict()
        self.size_bytes = 0
        self.hits = 0

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: Any) -> bool:
        return key in self._items

    def get(self, key: Any) -> Any | None:
        item = self._items.get(key)
        if item is None:
            return None
        self._items.move_to_end(key)
        self.hits += 1
        return item[0]

    def put(self, key: Any, compiled: Any, key_bytes: int) -> bool:
        """Remember `compiled` (sized `compiled.size_bytes + key_bytes`) if `key` was asked for before
        (within the last `seen_keys` keys) and fits; True if stored."""
        if not self.capacity_bytes:
            return False
        h = hash(key)
        if h not in self._seen:
            self._seen[h] = None
            if len(self._seen) > self.seen_keys:
                self._seen.popitem(last=False)
            return False
        size = int(compiled.size_bytes) + key_bytes
        if size > self.capacity_bytes:
            return False
        old = self._items.pop(key, None)
        if old is not None:
            self.size_bytes -= old[1]
        self._items[key] = (compiled, size)
        self.size_bytes += size
        while self.size_bytes > self.capacity_bytes:
            _, (_, dropped) = self._items.popitem(last=False)
            self.size_bytes -= dropped
        return True

    def clear(self) -> None:
        self._items.clear()
        self._seen.clear()
        self.size_bytes = 0
