"""The lower tiers behind the device pool, in order (host, then directory), as the block manager sees them.

`lookup` continues from tier to tier: the host tier's leading hits, then the directory tier's from there.
`prefetch` loads that run on a thread; blocks found only in the directory tier are promoted into the host
tier. `store` is write-through: the host tier copies at once, the directory tier queues (write-behind).
Counters and the restore-latency histogram are read by `/metrics`. Each loaded block names the tier it came
from; the block manager `credit`s that tier when a request is admitted with it, so the tiers' `served_tokens`
plus the device pool's own hits add up to the requests' `cached_tokens` (`hit_split.py`).
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from recipe.engine.kv_tiers.device_blocks import DeviceBlocks
from recipe.engine.kv_tiers.tier import KVTier, StoredBlock, TierStats

if TYPE_CHECKING:
    from recipe.engine.config import EngineConfig

RESTORE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass
class LatencyHistogram:
    buckets: tuple[float, ...] = RESTORE_BUCKETS
    counts: list[int] = field(default_factory=lambda: [0] * (len(RESTORE_BUCKETS) + 1))
    total: float = 0.0
    n: int = 0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, seconds)] += 1
        self.total += seconds
        self.n += 1


@dataclass(frozen=True)
class TierSnapshot:
    """A consistent copy of every tier's counters (for stats() and /metrics)."""

    tiers: tuple[TierStats, ...]
    restore_latency: LatencyHistogram
    restored_blocks: int


class KVTiers:
    def __init__(self, tiers: Sequence[KVTier], device: DeviceBlocks | None = None) -> None:
        assert tiers, "KVTiers needs at least one tier"
        self.tiers = list(tiers)
        self.device = device
        self._loader = ThreadPoolExecutor(1, thread_name_prefix="recipe-kv-prefetch")
        self.restore_latency = LatencyHistogram()
        self.restored_blocks = 0

    def lookup(self, hashes: Sequence[bytes]) -> int:
        """Leading `hashes` found in the tiers, each tier continuing where the one above it stopped."""
        found = 0
        for tier in self.tiers:
            if found == len(hashes):
                break
            n = tier.lookup(hashes[found:])
            if n == 0:
                tier.stats.misses += 1
            found += n
        return found

    def load(self, hashes: Sequence[bytes]) -> list[StoredBlock]:
        """The leading run of `hashes` read back intact from the tiers (may be shorter than `lookup` said)."""
        start = time.perf_counter()
        got: list[StoredBlock] = []
        for i, tier in enumerate(self.tiers):
            if len(got) == len(hashes):
                break
            blocks = tier.load(hashes[len(got):])
            for b in blocks:
                b.tier = tier.name
            if blocks and i > 0:
                self.tiers[0].store(blocks)  # promote into the fastest lower tier
            got.extend(blocks)
        if got:
            self.restore_latency.observe(time.perf_counter() - start)
            self.restored_blocks += len(got)
        return got

    def prefetch(self, hashes: Sequence[bytes]) -> Future[list[StoredBlock]]:
        return self._loader.submit(self.load, list(hashes))

    def credit(self, tier_name: str, tokens: int) -> None:
        """A request was admitted with `tokens` prompt tokens that `tier_name` restored."""
        for tier in self.tiers:
            if tier.name == tier_name:
                tier.stats.served_tokens += tokens

    def store(self, blocks: Sequence[StoredBlock]) -> None:
        for tier in self.tiers:
            tier.store(blocks)

    def offload(self, block_ids: Sequence[int], hashes: Sequence[bytes], chunks: Sequence[Sequence[int]],
                retention_class: str) -> None:
        """Copy these device blocks (KV computed, hashes registered) out and store them in every tier."""
        assert self.device is not None
        data = self.device.read(block_ids)
        self.store([StoredBlock(h, np.asarray(c, dtype=np.int64), data[i], retention_class)
                    for i, (h, c) in enumerate(zip(hashes, chunks, strict=True))])

    def device_writer(self, block_ids: Sequence[int], blocks: Sequence[StoredBlock]) -> Callable[[], None]:
        """The write of `blocks` into device blocks `block_ids`, for the model thread to run before its step."""
        assert self.device is not None
        return self.device.writer(block_ids, [b.kv for b in blocks])

    def evict(self, now: float) -> int:
        return sum(tier.evict(now) for tier in self.tiers)

    def snapshot(self) -> TierSnapshot:
        h = self.restore_latency
        copy = LatencyHistogram(h.buckets, list(h.counts), h.total, h.n)
        return TierSnapshot(tuple(TierStats(**t.stats.__dict__) for t in self.tiers), copy, self.restored_blocks)

    @classmethod
    def from_config(cls, config: EngineConfig, model: Any, info: Any, dtype: Any, kv_cache: Any) -> KVTiers:
        """The tiers `EngineConfig` asks for (`kv_host_bytes`, `kv_dir`, `kv_disk_bytes`, `kv_retention`)."""
        from recipe.engine.kv_tiers.file_tier import FileTier
        from recipe.engine.kv_tiers.host_tier import HostTier
        from recipe.engine.kv_tiers.namespace import Namespace
        from recipe.engine.kv_tiers.retention import RetentionPolicy

        if kv_cache is None:  # the attention layers still own their caches
            from recipe.engine.kv_tiers.layer_caches import LayerCaches

            kv_cache = LayerCaches(model)
        device = DeviceBlocks(kv_cache)
        namespace = Namespace.of(model, info, dtype, config.kv.block_size).digest
        tiers: list[KVTier] = []
        if config.kv.kv_host_bytes is not None:
            tiers.append(HostTier(config.kv.kv_host_bytes, namespace, config.kv.block_size, device.kv_bytes))
        if config.kv.kv_dir is not None:
            tiers.append(FileTier(config.kv.kv_dir, namespace, config.kv.block_size, device.kv_bytes,
                                  capacity_bytes=config.kv.kv_disk_bytes, policy=RetentionPolicy(config.kv.kv_retention)))
        return cls(tiers, device)

    def flush(self) -> None:
        """Wait for queued directory writes (tests, benchmarks, shutdown)."""
        for tier in self.tiers:
            flush = getattr(tier, "flush", None)
            if flush is not None:
                flush()

    def close(self) -> None:
        self._loader.shutdown(wait=True)
        for tier in self.tiers:
            tier.close()
