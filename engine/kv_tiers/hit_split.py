"""Where the cached prompt tokens came from: the device pool (L1), the host tier (L2), the directory tier (L3).

Definition. A tier's hit rate is the share of the prompt tokens of admitted requests that the tier supplied:
L1 is what the device pool already held (`prefix_cache_hits - restored_tokens`), L2 and L3 are what each lower
tier restored into the pool for those requests (`TierStats.served_tokens`, credited when the request is
admitted with the block). The three add up to the fraction of prompt tokens served from cache
(`cached_tokens / prompt tokens`). The conditional rate of a lower tier, `conditional`, is its share of the
prompt tokens that reached it (not served by the tiers above).

`TierStats.hits` is not this: it counts blocks a tier loaded, including loads cut short and a preempted
sequence's re-admission, which are not new prompt tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class HitSplit:
    """Prompt tokens served per tier (in tier order: "device" first), out of `prompt_tokens` looked up."""

    prompt_tokens: int
    served: tuple[tuple[str, int], ...]

    @classmethod
    def of(cls, stats: Any) -> HitSplit:
        """The split of an `EngineStats` (counters since the engine started)."""
        device = stats.prefix_cache_hits - stats.restored_tokens
        lower = () if stats.kv_tiers is None else tuple((t.name, t.served_tokens) for t in stats.kv_tiers.tiers)
        return cls(stats.prefix_cache_queries, (("device", device), *lower))

    def __sub__(self, before: HitSplit) -> HitSplit:
        """The split of what happened between two snapshots."""
        was = dict(before.served)
        return HitSplit(self.prompt_tokens - before.prompt_tokens,
                        tuple((name, n - was.get(name, 0)) for name, n in self.served))

    @property
    def cached_tokens(self) -> int:
        return sum(n for _, n in self.served)

    def rate(self, tier: str) -> float:
        """The tier's share of all prompt tokens (the rates of every tier add up to the cached fraction)."""
        return dict(self.served)[tier] / self.prompt_tokens if self.prompt_tokens else 0.0

    def conditional(self, tier: str) -> float:
        """The tier's share of the prompt tokens that reached it (missed by every tier above it)."""
        reached = self.prompt_tokens
        for name, n in self.served:
            if name == tier:
                return n / reached if reached else 0.0
            reached -= n
        raise KeyError(tier)
