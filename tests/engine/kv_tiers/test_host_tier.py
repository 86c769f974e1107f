"""The host tier: bytes back as stored, LRU within its budget, readable from another process by name."""

from __future__ import annotations

import subprocess
import sys
from multiprocessing import shared_memory

import pytest
from helpers import BLOCK, KV, NS, OTHER_NS, block, same
from recipe.engine.kv_tiers import HostTier, HostTierReader, unit

SLOT = (unit.unit_size(BLOCK, KV) + 63) // 64 * 64


def make(slots: int) -> HostTier:
    return HostTier(64 + slots * (SLOT + 32), NS, BLOCK, KV)


def test_store_lookup_load_round_trip_and_leading_run() -> None:
    tier = make(8)
    try:
        blocks = [block(i) for i in range(5)]
        tier.store(blocks[:3] + blocks[4:])
        hashes = [b.block_hash for b in blocks]
        assert tier.lookup(hashes) == 3
        got = tier.load(hashes)
        assert len(got) == 3 and all(same(a, b) for a, b in zip(got, blocks, strict=False))
        assert tier.stats.hits == 3 and tier.stats.bytes_read == 3 * tier.unit_bytes
    finally:
        tier.close()


def test_lru_eviction_keeps_the_budget_and_the_recently_used() -> None:
    tier = make(3)
    try:
        assert tier.num_slots == 3
        b = [block(i) for i in range(5)]
        tier.store(b[:3])
        tier.load([b[0].block_hash])  # b0 is now the most recently used
        tier.store([b[3]])  # evicts b1
        assert [x.block_hash in tier for x in b] == [True, False, True, True, False]
        tier.store([b[4]])  # evicts b2
        assert [x.block_hash in tier for x in b] == [True, False, False, True, True]
        assert tier.stats.blocks_evicted == 2 and len(tier) == 3
        assert tier.stats.used_bytes <= tier.stats.capacity_bytes
    finally:
        tier.close()


def test_budget_too_small_for_one_block_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="holds no block"):
        HostTier(100, NS, BLOCK, KV)


_READER = """
import sys
sys.path.insert(0, {here!r})
from helpers import NS, block
from recipe.engine.kv_tiers import HostTierReader
r = HostTierReader({name!r}, NS)
b = block(2)
tokens, kv = r.get(b.block_hash)
assert tokens.tolist() == b.token_ids.tolist() and kv.tobytes() == b.kv.tobytes()
assert r.get(block(99).block_hash) is None
r.close()
print("ok")
"""


def test_another_process_maps_the_segment_and_reads_a_block() -> None:
    import helpers

    tier = make(4)
    try:
        tier.store([block(i) for i in range(3)])
        code = _READER.format(here=str(__import__("pathlib").Path(helpers.__file__).parent), name=tier.segment_name)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "ok"
        with pytest.raises(ValueError, match="another model"):
            HostTierReader(tier.segment_name, OTHER_NS)
        # the reader's exit did not unlink the owner's segment
        shared_memory.SharedMemory(name=tier.segment_name).close()
    finally:
        tier.close()
    with pytest.raises(FileNotFoundError):
        shared_memory.SharedMemory(name=tier.segment_name)
