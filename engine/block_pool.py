"""One pool of KV blocks of one cache kind: reference counts, the least-recently-freed queue, and prefix-cache
registrations. The KV manager (`block_manager.BlockManager`) keeps one per cache kind (a paged cache: one,
whose table every kind of the cache reads).

Every block is free (reference count 0, in `free`) or used; `allocate` hands out the least recently freed
block and ends its registration. A freed block keeps its registration, and stays a prefix-cache hit, until
it is handed out again.
"""

from __future__ import annotations

from collections import OrderedDict


class BlockPool:
    def __init__(self, num_blocks: int) -> None:
        self.ref = [0] * num_blocks
        self.hash_of: list[bytes | None] = [None] * num_blocks
        self.free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self.cached: dict[bytes, int] = {}

    def take(self, block: int) -> None:
        if self.ref[block] == 0:
            del self.free[block]
        self.ref[block] += 1

    def allocate(self) -> int:
        block, _ = self.free.popitem(last=False)
        self.unregister(block)
        self.ref[block] = 1
        return block

    def release(self, block: int) -> None:
        assert self.ref[block] > 0, f"double free of block {block}"
        self.ref[block] -= 1
        if self.ref[block] == 0:
            self.free[block] = None

    def register(self, block: int, h: bytes) -> bool:
        """Register `block` under `h` unless it or `h` is registered already; whether it was."""
        if self.hash_of[block] is not None or h in self.cached:
            return False
        self.hash_of[block] = h
        self.cached[h] = block
        return True

    def unregister(self, block: int) -> None:
        h = self.hash_of[block]
        if h is not None:
            if self.cached.get(h) == block:
                del self.cached[h]
            self.hash_of[block] = None

    def check_invariants(self) -> None:
        """Every block is free xor referenced; every registration points at a block carrying that hash."""
        for b, r in enumerate(self.ref):
            assert r >= 0 and (r == 0) == (b in self.free), b
        for h, b in self.cached.items():
            assert self.hash_of[b] == h
