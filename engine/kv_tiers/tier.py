"""What every lower KV tier offers the block manager, and the counters each one keeps.

A tier holds whole blocks keyed by their chained block hash (`block_manager.chain_hash`). The block manager
asks the tiers in order after its first miss in the device pool: `lookup` counts the leading hashes a tier
holds, `load` returns the leading run it could read back intact, `store` keeps blocks (a tier may drop
them), `evict(now)` applies the tier's retention and budget. Tiers move bytes, never tensors: the engine's
KV cache is read and written on the model thread by the caller.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np


@dataclass
class StoredBlock:
    """One block's KV as bytes, with the token ids its hash covers and the retention class it is kept under."""

    block_hash: bytes
    token_ids: np.ndarray  # int64 [block_size]
    kv: np.ndarray  # uint8, the block's KV in the engine's layout
    retention_class: str = "chat"
    tier: str = ""  # the tier it was loaded from (set by KVTiers.load; credits the tier when it is used)


@dataclass
class TierStats:
    """Counters of one tier (blocks and bytes; read by /metrics)."""

    name: str
    hits: int = 0  # blocks loaded (a load may be cut short, or serve a preempted sequence's re-admission)
    served_tokens: int = 0  # prompt tokens of admitted requests this tier supplied (its share of cached_tokens)
    misses: int = 0  # lookups that ended at this tier
    bytes_read: int = 0
    bytes_written: int = 0
    blocks_stored: int = 0
    blocks_evicted: int = 0
    write_drops: int = 0  # writes dropped because the write-behind queue was full
    corruptions: int = 0  # units that failed verification (quarantined, recomputed)
    enabled: bool = True
    used_bytes: int = 0
    capacity_bytes: int = 0
    extra: dict[str, int] = field(default_factory=dict)


class KVTier(Protocol):
    name: str
    stats: TierStats

    def lookup(self, hashes: Sequence[bytes]) -> int:
        """How many leading `hashes` this tier holds (a hint: `load` may still come back shorter)."""
        ...

    def load(self, hashes: Sequence[bytes]) -> list[StoredBlock]:
        """The leading run of `hashes` read back intact (stops at the first missing or corrupt block)."""
        ...

    def store(self, blocks: Sequence[StoredBlock]) -> None:
        """Keep these blocks if there is room (never raises for a full or failing tier)."""
        ...

    def evict(self, now: float) -> int:
        """Apply retention and the byte budget as of `now`; returns how many blocks went."""
        ...

    def close(self) -> None:
        ...
