"""The geometry of a cache's kinds (DeepSeek-V4: a sliding window and compressed kinds; a paged cache: one "full"
kind): rows per block, blocks per kind, which token block completes a compressed block.

A compressed kind of rate m has `max(1, block_size // m)` rows per block, so each of its blocks is complete
exactly when a token block is (one token block for m <= block_size, m / block_size of them otherwise); a
complete block is registered under the chained hash of that token block. `block_manager.BlockManager` accounts
the blocks.
"""

from __future__ import annotations

from recipe.engine.layers.v4_kv import CacheSpec

TIERS_NEED_SESSIONS = ("the lower KV tiers (kv_host_bytes, kv_dir) with several cache kinds (DeepSeek-V4) need the "
                       "sliding-window session cache (swa_session_bytes): window state is persisted at its grain")


def paged_spec(kind: str = "full") -> CacheSpec:
    """The one token-indexed kind of a paged cache: no window, every token its own row."""
    return CacheSpec(kind, 1, None, 0)


def rows_per_block(spec: CacheSpec, block_size: int) -> int:
    return max(1, block_size // spec.tokens_per_row)


def tokens_per_block(spec: CacheSpec, block_size: int) -> int:
    return max(block_size, spec.tokens_per_row)


def blocks_for(spec: CacheSpec, block_size: int, num_tokens: int) -> int:
    """Leading blocks of `spec` holding any KV of the first `num_tokens` tokens."""
    rows = num_tokens // spec.tokens_per_row
    per = rows_per_block(spec, block_size)
    return (rows + per - 1) // per


def owner_block(spec: CacheSpec, block_size: int, j: int) -> int:
    """The token block whose completion completes block j of `spec`."""
    m = spec.tokens_per_row
    return j if m <= block_size else (j + 1) * m // block_size - 1


def kind_block_counts(specs: list[CacheSpec], num_blocks: int, block_size: int, max_seqs: int) -> dict[str, int]:
    """Blocks per kind for a pool of `num_blocks` token blocks: the same token capacity in every kind, plus
    one partly filled compressed block per sequence."""
    counts = {}
    for s in specs:
        if s.tokens_per_row == 1:
            counts[s.name] = num_blocks
        else:
            counts[s.name] = -(-num_blocks * block_size // tokens_per_block(s, block_size)) + max_seqs
    return counts
