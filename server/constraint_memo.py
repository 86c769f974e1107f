"""The server's memo of compiled output constraints: bounded in bytes, and admitting a constraint only the
second time it is asked for.

Clients that repeat a schema or a tool list (every turn of an agent) get it compiled once more and then
served from here; a constraint asked for once (a per-request generated schema, a fuzzer's) is compiled,
used and dropped, so never-repeating ones cannot fill the memo. Entries are bounded by their estimated
size (`CompiledConstraint.size_bytes` plus the key's text), since one tool list's grammar can be a
thousand times another's; least recently used ones go first. The "asked for once" record keeps only
hashes of the last `seen_keys` keys (a hash collision only admits a key early). Capacity 0 turns the
memo off: every request compiles. The entries live in the compiler's `ByteBoundedCache` (LRU by bytes).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from recipe.constraints.limits import ByteBoundedCache


class ConstraintMemo:
    """A `ByteBoundedCache` of compiled constraints behind an admission rule: stored on the second ask."""

    def __init__(self, capacity_bytes: int, seen_keys: int = 4096) -> None:
        if capacity_bytes < 0:
            raise ValueError("the constraint memo's capacity must be 0 (off) or positive")
        self.capacity_bytes = capacity_bytes
        self.seen_keys = seen_keys
        self._cache = ByteBoundedCache(capacity_bytes)
        self._seen: OrderedDict[int, None] = OrderedDict()

    @property
    def size_bytes(self) -> int:
        return self._cache.size_bytes

    @property
    def hits(self) -> int:
        return self._cache.hits

    def __len__(self) -> int:
        return len(self._cache)

    def __contains__(self, key: Any) -> bool:
        return key in self._cache

    def get(self, key: Any) -> Any | None:
        return self._cache.get(key)

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
        self._cache.put(key, compiled, size)  # fits, so it stays; older entries go first
        return True

    def clear(self) -> None:
        self._cache.clear()
        self._seen.clear()
