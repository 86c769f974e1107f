"""One KV manager interface over every cache layout: the scheduler, prefix caching, the KV tiers, the session
cache and the KV connector talk to this, whatever kinds a model's cache has.

A manager keeps, per sequence, one block table per cache kind (`tables_for`). The paged manager
(`block_manager.BlockManager`) gives every kind of one model (Llama's K/V "full", MLA's "latent") the same
table; the multi-kind manager (`kv_kinds.MultiKindBlockManager`, DeepSeek-V4) gives its window kind the
sequence's `block_table`, whose entries before the window may be `RELEASED`, and each compressed kind its own
table growing at 1/rate. `complete_blocks` and `filled_blocks` say which leading entries of a kind's table a
token prefix fills, so a caller copies the right blocks of every kind without knowing the layout.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from recipe.engine.block_manager import BlockManager
from recipe.engine.kv_kinds import MultiKindBlockManager
from recipe.engine.layers.v4_kv import CacheSpec as KindSpec
from recipe.engine.sequence import Sequence as Seq


class KVManager(Protocol):
    """Block accounting for one KV pool of one or more cache kinds."""

    block_size: int
    num_blocks: int
    enable_prefix_caching: bool
    prefix_queries: int
    prefix_hits: int
    restored_tokens: int
    pending_writes: list[Callable[[], None]]

    @property
    def kinds(self) -> tuple[str, ...]: ...

    @property
    def tiers(self) -> Any: ...

    @tiers.setter
    def tiers(self, value: Any) -> None: ...

    @property
    def num_free_blocks(self) -> int: ...

    @property
    def usage(self) -> float: ...

    def blocks_needed(self, num_tokens: int) -> int: ...

    def free_blocks_beside(self, prefix_block_ids: list[int]) -> int:
        """Blocks (of the first kind) still free once `prefix_block_ids` are taken: what fresh blocks may use."""
        ...

    def match_prefix(self, seq: Seq, wait: bool = True) -> list[int] | None: ...

    def admit(self, seq: Seq, prefix_block_ids: list[int], num_tokens: int) -> bool: ...

    def ensure(self, seq: Seq, num_tokens: int) -> bool: ...

    def truncate(self, seq: Seq, num_tokens: int) -> None: ...

    def commit(self, seq: Seq) -> None: ...

    def free_sequence(self, seq: Seq) -> None: ...

    def offload(self, seq: Seq, num_written_tokens: int) -> None: ...

    def take_pending_writes(self) -> list[Callable[[], None]]: ...

    def check_invariants(self) -> None: ...

    def tables_for(self, seq: Seq) -> dict[str, list[int]]:
        """Every kind's block table of `seq` (copies)."""
        ...

    def complete_blocks(self, kind: str, num_tokens: int) -> int:
        """Leading blocks of `kind` that the first `num_tokens` tokens fill completely (a prefix hit holds these)."""
        ...

    def filled_blocks(self, kind: str, num_tokens: int) -> int:
        """Leading blocks of `kind` holding any KV of the first `num_tokens` tokens."""
        ...

    def release_slid(self, seq: Seq, kind: str, positions: list[int]) -> None:
        """Give back `seq`'s blocks of a window kind at table `positions`, which hold no KV the sequence will
        read (before its window); they become `RELEASED`."""
        ...


def paged_kinds(specs: Sequence[Any]) -> tuple[str, ...]:
    """The kinds of a paged cache (`kv_cache.CacheSpec`s); "full" for a model that keeps its own cache."""
    return tuple(getattr(s, "kind", "full") for s in specs) or ("full",)


def build_kv_manager(specs: Sequence[Any], num_blocks: int, block_size: int, enable_prefix_caching: bool,
                     max_num_seqs: int, release_window_blocks: bool) -> KVManager:
    """The manager for a model's `cache_specs()`: one table per sequence for a paged cache, one per kind for
    DeepSeek-V4's window and compressed kinds."""
    if specs and all(isinstance(s, KindSpec) for s in specs):
        return MultiKindBlockManager(list(specs), num_blocks, block_size, enable_prefix_caching, max_num_seqs,
                                     release_window_blocks)
    return BlockManager(num_blocks, block_size, enable_prefix_caching, kinds=paged_kinds(specs))
