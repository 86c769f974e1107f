"""Blocks with random KV bytes for the tier tests (no model needed)."""

from __future__ import annotations

import hashlib

import numpy as np
from recipe.engine.kv_tiers import StoredBlock

NS = hashlib.blake2b(b"test-namespace", digest_size=16).digest()
OTHER_NS = hashlib.blake2b(b"other-namespace", digest_size=16).digest()
BLOCK = 4
KV = 256


def block(i: int, cls: str = "chat", kv_bytes: int = KV, seed: int = 0) -> StoredBlock:
    rng = np.random.default_rng(seed * 100003 + i)
    h = hashlib.blake2b(f"block-{seed}-{i}".encode(), digest_size=16).digest()
    return StoredBlock(h, rng.integers(0, 1000, BLOCK).astype(np.int64),
                       rng.integers(0, 256, kv_bytes, dtype=np.uint8), cls)


def same(a: StoredBlock, b: StoredBlock) -> bool:
    return (a.block_hash == b.block_hash and np.array_equal(a.token_ids, b.token_ids)
            and np.array_equal(a.kv, b.kv))
