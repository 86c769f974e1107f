"""The paged block manager as it was before the kinds were unified (`engine/block_manager.py`): the reference
`test_kv_manager_lockstep.py` drives in lock-step with the one manager, whose one-kind case must match it.

The paged KV block pool: block tables, reference counts, and the prefix cache.

Every cache kind of the model (`kinds`: Llama's K/V "full", MLA's "latent") is indexed by the one block
table of a sequence.

Every block is either free (reference count 0, in the LRU free queue) or used by one or more sequences.
A full block whose KV is computed is registered under a chained hash (parent hash + its token ids, a
128-bit BLAKE2b); a lookup must match the hash *and* the stored token ids. A freed block keeps its
registration and stays reusable until it is handed out again: the free queue hands out the least
recently freed block first, and a sequence's blocks are freed tail first, so a prompt's deepest blocks
are evicted before its shared prefix.

With lower KV tiers (`engine/kv_tiers`, `tiers` not None) a prefix lookup continues past the first miss
into them: the blocks they hold are loaded on their prefetch thread while the sequence waits, then land in
newly allocated blocks registered like computed ones; their KV is queued in `pending_writes`, which the
next step writes before it runs. `offload` hands blocks whose KV is written to the tiers (write-through).
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from recipe.engine.block_pool import BlockPool
from recipe.engine.sequence import Sequence

_ROOT = b""


def chain_hash(parent: bytes, token_ids: list[int]) -> bytes:
    """The prefix-cache key of a full block: depends on every token before it and in it."""
    return hashlib.blake2b(parent + array("q", token_ids).tobytes(), digest_size=16).digest()


class ReferenceBlockManager:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True,
                 tiers: Any = None, kinds: tuple[str, ...] = ("full",)) -> None:
        assert num_blocks >= 1 and block_size >= 1 and kinds
        self.kinds = kinds
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.enable_prefix_caching = enable_prefix_caching
        self.pool = BlockPool(num_blocks)
        self.token_ids: list[tuple[int, ...]] = [()] * num_blocks  # what a registered block holds (checked on a hit)
        self.prefix_queries = 0  # prompt tokens looked up
        self.prefix_hits = 0  # of which served from the cache
        self.tiers = tiers  # kv_tiers.KVTiers or None
        self.pending_writes: list[Callable[[], None]] = []  # restored KV not yet written (model thread)
        self.restored_tokens = 0  # prompt tokens of admitted requests restored from the lower tiers
        self._restored_from: dict[int, str] = {}  # restored block not yet used by a request -> its tier
        self._restoring: dict[int, tuple[bytes, Future[Any]]] = {}  # seq_id -> (first hash, load)

    # ----- accounting -----------------------------------------------------------------------------------
    @property
    def free(self) -> OrderedDict[int, None]:
        return self.pool.free

    @property
    def cached(self) -> dict[bytes, int]:
        return self.pool.cached

    @property
    def num_free_blocks(self) -> int:
        return len(self.free)

    @property
    def usage(self) -> float:
        """Fraction of the pool held by live sequences (free cached blocks count as free)."""
        return 1.0 - len(self.free) / self.num_blocks

    def blocks_needed(self, num_tokens: int) -> int:
        return (num_tokens + self.block_size - 1) // self.block_size

    def free_blocks_beside(self, prefix_block_ids: list[int]) -> int:
        return len(self.free) - sum(1 for b in prefix_block_ids if self.pool.ref[b] == 0)

    def tables_for(self, seq: Sequence) -> dict[str, list[int]]:
        """Every kind's block table: the sequence's one table."""
        return {kind: list(seq.block_table) for kind in self.kinds}

    def complete_blocks(self, kind: str, num_tokens: int) -> int:
        return num_tokens // self.block_size

    def filled_blocks(self, kind: str, num_tokens: int) -> int:
        return self.blocks_needed(num_tokens)

    def release_slid(self, seq: Sequence, kind: str, positions: list[int]) -> None:
        assert not positions, "a paged cache has no window to slide out of"

    # ----- prefix cache ---------------------------------------------------------------------------------
    def match_prefix(self, seq: Sequence, wait: bool = True) -> list[int] | None:
        """Block ids caching the longest prefix of `seq`'s known tokens, leaving at least one token to compute.

        Past the first miss the lower tiers are asked; while they load, None (wait) unless `wait` is set.
        """
        if not self.enable_prefix_caching:
            return []
        bs = self.block_size
        tokens = seq.token_ids
        matched: list[int] = []
        h = _ROOT
        full = (len(tokens) - 1) // bs
        for i in range(full):
            chunk = tokens[i * bs:(i + 1) * bs]
            h = chain_hash(h, chunk)
            block_id = self.cached.get(h)
            if block_id is None or self.token_ids[block_id] != tuple(chunk):
                if self.tiers is None:
                    break
                chunks = [tokens[j * bs:(j + 1) * bs] for j in range(i, full)]
                hashes = [h]
                for c in chunks[1:]:
                    hashes.append(chain_hash(hashes[-1], c))
                restored = self._restore(seq, matched, hashes, chunks, wait)
                return None if restored is None else matched + restored
            matched.append(block_id)
        return matched

    def _restore(self, seq: Sequence, matched: list[int], hashes: list[bytes], chunks: list[list[int]],
                 wait: bool) -> list[int] | None:
        """New blocks holding the leading `hashes` the tiers could load (None while they are loading)."""
        pending = self._restoring.get(seq.seq_id)
        if pending is None or pending[0] != hashes[0]:
            n = self.tiers.lookup(hashes)
            if n == 0:
                return []
            pending = self._restoring[seq.seq_id] = (hashes[0], self.tiers.prefetch(hashes[:n]))
        if not wait and not pending[1].done():
            return None
        del self._restoring[seq.seq_id]
        loaded = pending[1].result()
        ok = 0
        for stored, chunk in zip(loaded, chunks, strict=False):
            if stored.token_ids.tolist() != list(chunk):
                break
            ok += 1
        held = [b for b in matched if self.pool.ref[b] == 0]
        loaded = loaded[: max(0, min(ok, len(self.free) - len(held)))]
        if not loaded:
            return []
        for b in held:  # keep the matched prefix out of the allocator's reach
            self.pool.take(b)
        ids = [self._allocate() for _ in loaded]
        for b in held:
            self.pool.release(b)
        for block_id, stored, chunk in zip(ids, loaded, chunks, strict=False):
            if self.pool.register(block_id, stored.block_hash):
                self.token_ids[block_id] = tuple(chunk)
            self.pool.release(block_id)  # a cached free block, most recently used: admit() takes it
            self._restored_from[block_id] = stored.tier
        self.pending_writes.append(self.tiers.device_writer(ids, loaded))
        return ids

    def take_pending_writes(self) -> list[Callable[[], None]]:
        """Restored KV the next step must write before it runs (in order)."""
        writes, self.pending_writes = self.pending_writes, []
        return writes

    def offload(self, seq: Sequence, num_written_tokens: int) -> None:
        """Hand `seq`'s registered blocks whose KV is written (first `num_written_tokens`) to the tiers."""
        if self.tiers is None:
            return
        bs = self.block_size
        end = min(seq.num_hashed_blocks, num_written_tokens // bs, len(seq.block_table))
        start = seq.num_stored_blocks
        if end <= start:
            return
        chunks = [seq.token_ids[i * bs:(i + 1) * bs] for i in range(start, end)]
        self.tiers.offload(seq.block_table[start:end], seq.block_hashes[start:end], chunks,
                           seq.params.kv_retention or "chat")
        seq.num_stored_blocks = end

    def admit(self, seq: Sequence, prefix_block_ids: list[int], num_tokens: int) -> bool:
        """Give a sequence with no blocks the shared `prefix_block_ids` plus fresh blocks up to `num_tokens`.

        Returns False, changing nothing, when the pool cannot supply them.
        """
        assert not seq.block_table
        needed = self.blocks_needed(num_tokens) - len(prefix_block_ids)
        if needed > self.free_blocks_beside(prefix_block_ids):
            return False
        for block_id in prefix_block_ids:
            self.pool.take(block_id)
        seq.block_table = list(prefix_block_ids)
        restored = [self._restored_from.pop(b) for b in prefix_block_ids if b in self._restored_from]
        if seq.num_preemptions == 0:  # a preempted sequence's re-admission is not a new lookup
            self.prefix_queries += len(seq.token_ids)
            self.prefix_hits += len(prefix_block_ids) * self.block_size
            for tier in restored:  # counted when used, as prefix_hits: a restored block is served once
                self.restored_tokens += self.block_size
                self.tiers.credit(tier, self.block_size)
        if self.enable_prefix_caching:  # a forked prefix may not be registered yet: commit() finishes it
            hashes: list[bytes] = []
            for block_id in prefix_block_ids:
                h = self.pool.hash_of[block_id]
                if h is None:
                    break
                hashes.append(h)
            seq.block_hashes = hashes
            seq.num_hashed_blocks = len(hashes)
            seq.num_stored_blocks = len(hashes)  # a prefix hit is already in the tiers (or was dropped)
        ok = self.ensure(seq, num_tokens)
        assert ok
        return True

    def ensure(self, seq: Sequence, num_tokens: int) -> bool:
        """Grow `seq`'s block table to hold `num_tokens` tokens; False (nothing changed) if blocks run out."""
        needed = self.blocks_needed(num_tokens) - len(seq.block_table)
        if needed <= 0:
            return True
        if needed > len(self.free):
            return False
        for _ in range(needed):
            seq.block_table.append(self._allocate())
        return True

    def truncate(self, seq: Sequence, num_tokens: int) -> None:
        """Give back `seq`'s blocks past the first `num_tokens` tokens (rejected speculative tokens' KV)."""
        keep = self.blocks_needed(num_tokens)
        assert keep >= seq.num_hashed_blocks, (keep, seq.num_hashed_blocks)
        while len(seq.block_table) > keep:
            self.pool.release(seq.block_table.pop())

    def commit(self, seq: Sequence) -> None:
        """Register `seq`'s newly full blocks (KV computed, token ids known) in the prefix cache."""
        if not self.enable_prefix_caching:
            return
        bs = self.block_size
        limit = min(seq.num_computed_tokens, len(seq.token_ids)) // bs
        while seq.num_hashed_blocks < min(limit, len(seq.block_table)):
            i = seq.num_hashed_blocks
            chunk = seq.token_ids[i * bs:(i + 1) * bs]
            parent = seq.block_hashes[i - 1] if i else _ROOT
            h = chain_hash(parent, chunk)
            if self.pool.register(seq.block_table[i], h):
                self.token_ids[seq.block_table[i]] = tuple(chunk)
            seq.block_hashes.append(h)
            seq.num_hashed_blocks += 1

    def free_sequence(self, seq: Sequence) -> None:
        """Release `seq`'s blocks (tail first, so the deepest blocks are evicted first).

        Blocks completed by the sequence's last step are committed first: a finished turn's prompt and
        output stay in the prefix cache for the next turn of the conversation.
        """
        self.commit(seq)
        for block_id in reversed(seq.block_table):
            self.pool.release(block_id)
        seq.block_table = []
        seq.block_hashes = []
        seq.num_hashed_blocks = 0
        seq.num_stored_blocks = 0
        self._restoring.pop(seq.seq_id, None)

    # ----- internals ------------------------------------------------------------------------------------
    def _allocate(self) -> int:
        block_id = self.pool.allocate()
        self._restored_from.pop(block_id, None)
        self.token_ids[block_id] = ()
        return block_id

    def check_invariants(self) -> None:
        self.pool.check_invariants()
