"""Building the KV manager for a model's cache: the scheduler, prefix caching, the KV tiers, the session cache and
the KV connector talk to the one manager class, `block_manager.BlockManager`, whatever kinds its cache has.

A manager keeps, per sequence, one block table per cache kind (`tables_for`): a paged cache's kinds (Llama's
K/V "full", MLA's "latent") share the sequence's `block_table`; DeepSeek-V4's window kind is the
`block_table`, whose entries before the window may be `RELEASED`, and each compressed kind has its own table
growing at 1/rate. `complete_blocks` and `filled_blocks` say which leading entries of a kind's table a token
prefix fills, so a caller copies the right blocks of every kind without knowing the layout.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from recipe.engine.block_manager import BlockManager
from recipe.engine.layers.v4_kv import CacheSpec as KindSpec


def paged_kinds(specs: Sequence[Any]) -> tuple[str, ...]:
    """The kinds of a paged cache (`kv_cache.CacheSpec`s); "full" for a model that keeps its own cache."""
    return tuple(getattr(s, "kind", "full") for s in specs) or ("full",)


def build_kv_manager(specs: Sequence[Any], num_blocks: int, block_size: int, enable_prefix_caching: bool,
                     max_num_seqs: int, release_window_blocks: bool) -> BlockManager:
    """The manager for a model's `cache_specs()`: DeepSeek-V4's window and compressed kinds as they are, a paged
    cache as one windowless kind whose table all its kinds read."""
    if specs and all(isinstance(s, KindSpec) for s in specs):
        return BlockManager(list(specs), num_blocks, block_size, enable_prefix_caching, max_num_seqs,
                            release_window_blocks)
    return BlockManager.paged(num_blocks, block_size, enable_prefix_caching, kinds=paged_kinds(specs))
