"""Lower KV tiers behind the engine's paged pool: L2 host memory (shared segment), L3 a directory.

The block manager is their only user (`BlockManager.match_prefix` asks them after its first miss,
`commit` hands them newly full blocks); the model runner never imports this package.
"""

from recipe.engine.kv_tiers.file_tier import FileTier
from recipe.engine.kv_tiers.host_tier import HostTier, HostTierReader
from recipe.engine.kv_tiers.namespace import Namespace
from recipe.engine.kv_tiers.retention import RetentionPolicy, parse_duration, parse_retention
from recipe.engine.kv_tiers.tier import KVTier, StoredBlock, TierStats
from recipe.engine.kv_tiers.tiered import KVTiers

__all__ = ["FileTier", "HostTier", "HostTierReader", "KVTier", "KVTiers", "Namespace", "RetentionPolicy",
           "StoredBlock", "TierStats", "parse_duration", "parse_retention"]
