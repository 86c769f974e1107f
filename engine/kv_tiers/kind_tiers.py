"""The lower KV tiers for a model with several cache kinds (DeepSeek-V4): one tier stack per kind.

A kind's block is one unit, stored under the chained hash of the token block that completes it (the key the
multi-kind block manager registers it under in the device pool), with that token block's ids for
verification. Units of one kind have one size, so each kind keeps its own host tier (a shared-memory
segment) and its own folder of the directory tier, under a namespace that adds the kind's name to the
model's (`ROOT/<kind namespace>/...`): a unit can never be read back as another kind's.

- Compressed kinds (`compressed_<rate>`): every complete block, as the device pool registers it.
- The window kind: only the blocks of window state at grain boundaries (`engine/window_sessions.py`), so the
  directory holds about one window row per token next to the compressed rows, never a window per token.

Budgets (`kv_host_bytes`, `kv_disk_bytes`) are split between the kinds in proportion to the bytes per token
each one stores. Counters are summed per tier over the kinds, so `/metrics` and `hit_split.py` read them as
for a single-kind model.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from recipe.engine.kv_cache import KindPools
from recipe.engine.kv_tiers.device_blocks import DeviceBlocks
from recipe.engine.kv_tiers.tier import KVTier, StoredBlock, TierStats
from recipe.engine.kv_tiers.tiered import KVTiers, LatencyHistogram, TierSnapshot

if TYPE_CHECKING:
    from recipe.engine.config import EngineConfig


def kind_namespace(namespace: bytes, kind: str) -> bytes:
    return hashlib.blake2b(namespace + b"|kind=" + kind.encode(), digest_size=16).digest()


def budget_shares(total: int, weights: Mapping[str, float]) -> dict[str, int]:
    """`total` bytes split in proportion to `weights` (each kind's stored bytes per token)."""
    whole = sum(weights.values())
    return {k: int(total * w / whole) for k, w in weights.items()}


class KindTiers:
    """`tiers[kind]`: a `KVTiers` (host, then directory) per cache kind, and what spans them."""

    def __init__(self, tiers: Mapping[str, KVTiers]) -> None:
        assert tiers
        self.tiers = dict(tiers)
        self._loader = ThreadPoolExecutor(1, thread_name_prefix="recipe-kv-prefetch")
        self.restore_latency = LatencyHistogram()
        self.restored_blocks = 0

    def lookup(self, kind: str, hashes: Sequence[bytes]) -> int:
        return self.tiers[kind].lookup(hashes) if hashes else 0

    def prefetch(self, wanted: Mapping[str, Sequence[bytes]]) -> Future[dict[str, list[StoredBlock]]]:
        """Load every kind's `wanted` hashes on one thread (each kind's leading run that reads back intact)."""
        return self._loader.submit(self._load, {k: list(v) for k, v in wanted.items()})

    def _load(self, wanted: Mapping[str, list[bytes]]) -> dict[str, list[StoredBlock]]:
        start = time.perf_counter()
        out = {kind: self.tiers[kind].load(hashes) if hashes else [] for kind, hashes in wanted.items()}
        n = sum(len(v) for v in out.values())
        if n:
            self.restore_latency.observe(time.perf_counter() - start)
            self.restored_blocks += n
        return out

    def offload(self, kind: str, block_ids: Sequence[int], hashes: Sequence[bytes],
                chunks: Sequence[Sequence[int]], retention_class: str) -> None:
        if block_ids:
            self.tiers[kind].offload(block_ids, hashes, chunks, retention_class)

    def device_writer(self, kind: str, block_ids: Sequence[int], blocks: Sequence[StoredBlock]) -> Any:
        return self.tiers[kind].device_writer(block_ids, blocks)

    def credit(self, tier_name: str, tokens: int) -> None:
        """Prompt tokens a lower tier restored for an admitted request (counted once, on the first kind)."""
        next(iter(self.tiers.values())).credit(tier_name, tokens)

    def evict(self, now: float) -> int:
        return sum(t.evict(now) for t in self.tiers.values())

    def flush(self) -> None:
        for t in self.tiers.values():
            t.flush()

    def close(self) -> None:
        self._loader.shutdown(wait=True)
        for t in self.tiers.values():
            t.close()

    def snapshot(self) -> TierSnapshot:
        """Each tier's counters summed over the kinds (`capacity_bytes`, `used_bytes` included)."""
        merged: dict[str, TierStats] = {}
        for t in self.tiers.values():
            for s in (tier.stats for tier in t.tiers):
                m = merged.setdefault(s.name, TierStats(s.name, enabled=s.enabled))
                m.enabled = m.enabled and s.enabled
                for f in fields(TierStats):
                    value = getattr(s, f.name)
                    if isinstance(value, int) and not isinstance(value, bool):
                        setattr(m, f.name, getattr(m, f.name) + value)
                for key, value in s.extra.items():
                    m.extra[key] = m.extra.get(key, 0) + value
        h = self.restore_latency
        copy = LatencyHistogram(h.buckets, list(h.counts), h.total, h.n)
        return TierSnapshot(tuple(merged.values()), copy, self.restored_blocks)

    @classmethod
    def from_config(cls, config: EngineConfig, model: Any, info: Any, dtype: Any, window_per_token: float) -> KindTiers:
        """The tiers `EngineConfig` asks for, one stack per kind of `model.cache_specs()`; the window kind stores
        `window_per_token` rows per token (0 when window state is not persisted: no window stack)."""
        from recipe.engine.kv_kinds import rows_per_block, tokens_per_block
        from recipe.engine.kv_tiers.file_tier import FileTier
        from recipe.engine.kv_tiers.host_tier import HostTier
        from recipe.engine.kv_tiers.namespace import Namespace
        from recipe.engine.kv_tiers.retention import RetentionPolicy

        namespace = Namespace.of(model, info, dtype, config.kv.block_size).digest
        bs = config.kv.block_size
        weights: dict[str, float] = {}
        devices: dict[str, DeviceBlocks] = {}
        for spec in model.cache_specs():
            per_token = rows_per_block(spec, bs) * spec.row_width / tokens_per_block(spec, bs)
            if spec.tokens_per_row == 1:
                per_token *= window_per_token
            if per_token > 0:
                weights[spec.name] = per_token
                devices[spec.name] = DeviceBlocks(KindPools({spec.name: model.pools[spec.name]}))
        host = budget_shares(config.kv.kv_host_bytes, weights) if config.kv.kv_host_bytes is not None else {}
        disk = budget_shares(config.kv.kv_disk_bytes, weights) if config.kv.kv_disk_bytes is not None else {}
        stacks = {}
        for kind, device in devices.items():
            ns = kind_namespace(namespace, kind)
            tiers: list[KVTier] = []
            if config.kv.kv_host_bytes is not None:
                try:
                    tiers.append(HostTier(host[kind], ns, bs, device.kv_bytes))
                except ValueError as exc:
                    raise ValueError(f"kv_host_bytes: the {kind} cache's share ({host[kind]} bytes) {exc}") from None
            if config.kv.kv_dir is not None:
                tiers.append(FileTier(config.kv.kv_dir, ns, bs, device.kv_bytes, capacity_bytes=disk.get(kind),
                                      policy=RetentionPolicy(config.kv.kv_retention)))
            stacks[kind] = KVTiers(tiers, device)
        return cls(stacks)
