"""The KV block manager: block tables, reference counts and the prefix cache of every cache kind, one pool
(`block_pool.BlockPool`) per kind (`kv_kinds` has their geometry).

The first kind is token-indexed and is the sequence's `block_table`: a paged cache's one kind ("full": Llama's
K/V, "latent": MLA's; `paged`), with `shared_kinds` naming further caches read through the same table, or
DeepSeek-V4's window kind, followed by its compressed kinds, each with its own table growing at 1/rate.

- Every block is free (in its pool's LRU free queue) or used. A full token block whose KV is computed is
  registered under a chained hash (parent hash + its token ids, a 128-bit BLAKE2b); a lookup must match the
  hash *and* the stored token ids. A freed block stays registered, and a hit, until it is handed out again:
  the free queue hands out the least recently freed block first, and a sequence's blocks are freed tail
  first, so a prompt's deepest blocks are evicted before its shared prefix. A compressed block is registered
  under the hash of the token block completing it.
- A window kind (`CacheSpec.window` not None) releases a block whose tokens all lie before the window still
  needed (`window` tokens before the next step's first token): its table entry becomes `RELEASED` and the
  block returns to the free queue. A prefix hit of h tokens needs only the window blocks of the trailing
  `window` tokens before h plus every compressed block covering entries [0, h // m).
- With the sliding-window session cache (`sessions`, `engine/window_sessions.py`), a sequence's window rows
  are copied out at every grain boundary it crosses, and window blocks no live sequence holds leave the
  prefix cache (as in vLLM's V4.1 port: the session cache holds windows, in host memory). A prompt whose
  compressed blocks are cached up to a grain boundary g past the best ordinary hit gets its window back from
  the session cache (new window blocks written before the step), or on a miss replays only its last
  `sessions.replay` tokens before g (bounded replay: window rows below the replay are never read, restored
  compressed entries never rewritten, and the replayed window blocks are not registered).
- Lower KV tiers (`engine/kv_tiers`, `tiers`): for one windowless kind (`kv_tiers.KVTiers`) a prefix lookup
  continues past the device pool's last hit into them, block by block; with several kinds
  (`kv_tiers.kind_tiers.KindTiers`) they need the session cache and serve whole grain boundaries. Loads run
  on their prefetch thread while the sequence waits, land in newly allocated blocks registered like computed
  ones, and their KV is queued in `pending_writes`, which the next step writes before it runs. `offload`
  hands blocks whose KV is written to the tiers (write-through).
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from recipe.engine.block_pool import BlockPool
from recipe.engine.kv_kinds import (
    TIERS_NEED_SESSIONS,
    blocks_for,
    kind_block_counts,
    owner_block,
    paged_spec,
    rows_per_block,
)
from recipe.engine.layers.v4_kv import RELEASED, REPLAY_BOUNDS, CacheSpec
from recipe.engine.sequence import Sequence

_ROOT = b""
_WAIT = object()  # the lower tiers are still loading a prefix


def chain_hash(parent: bytes, token_ids: list[int]) -> bytes:
    """The prefix-cache key of a full block: depends on every token before it and in it."""
    return hashlib.blake2b(parent + array("q", token_ids).tobytes(), digest_size=16).digest()


class BlockManager:
    def __init__(self, specs: list[CacheSpec], num_blocks: int, block_size: int,
                 enable_prefix_caching: bool = True, max_seqs: int = 64, release_window: bool = True,
                 shared_kinds: tuple[str, ...] = ()) -> None:
        assert num_blocks >= 1 and block_size >= 1 and specs
        assert specs[0].tokens_per_row == 1, "the first kind is token-indexed"
        assert len(specs) == 1 or specs[0].window is not None, "compressed kinds follow a window kind"
        for s in specs[1:]:
            m = s.tokens_per_row
            assert block_size % m == 0 or m % block_size == 0, f"rate {m} and block size {block_size} do not nest"
        self.specs, self.block_size, self.num_blocks = specs, block_size, num_blocks
        self.shared_kinds = shared_kinds
        self.window = specs[0].window
        self.enable_prefix_caching = enable_prefix_caching
        self.release_window = release_window
        self.counts = kind_block_counts(specs, num_blocks, block_size, max_seqs)
        self.pools = {s.name: BlockPool(self.counts[s.name]) for s in specs}
        self.pool = self.pools[specs[0].name]  # the token-indexed kind's: `block_table` indexes it
        self.token_ids: list[tuple[int, ...]] = [()] * num_blocks  # what a registered block holds (checked on a hit)
        self.tables: dict[int, dict[str, list[int]]] = {}  # seq_id -> compressed kind -> blocks
        self.prefix_queries = 0  # prompt tokens looked up
        self.prefix_hits = 0  # of which served from the cache
        self.released_blocks = 0  # window blocks given back as the window slid past them
        self.restored_tokens = 0  # prompt tokens of admitted requests restored from the lower tiers
        self._matched: dict[int, dict[str, list[int]]] = {}
        self._window_of: dict[int, list[int]] = {}  # seq_id -> its token-kind table (to share a forked prefix)
        self.sessions: Any = None  # window_sessions.WindowSessions, or None (off)
        self.pending_writes: list[Callable[[], None]] = []  # restored KV not yet written (model thread)
        self._window_source: dict[int, tuple[str, int, int]] = {}  # seq_id -> ("hit"|"miss"|"replay", r, g)
        self._replay: dict[int, tuple[int, int]] = {}  # seq_id -> (window_from, compressed_until)
        self._next_grain: dict[int, int] = {}  # seq_id -> next grain boundary to copy its window at
        self._tiers: Any = None  # kv_tiers.KVTiers (one windowless kind) or kv_tiers.KindTiers, or None (off)
        self._loading: dict[int, tuple[int, Future[dict[str, list[Any]]], dict[str, list[int]]]] = {}
        self._restoring: dict[int, tuple[bytes, Future[Any]]] = {}  # seq_id -> (first hash, load) (block tiers)
        self._stored: dict[int, dict[str, int]] = {}  # seq_id -> compressed kind -> leading blocks handed down
        self._restored_from: dict[int, str] = {}  # seq_id -> the lowest tier its matched prefix came from
        self._restored_block: dict[int, str] = {}  # restored block not yet used by a request -> its tier

    @classmethod
    def paged(cls, num_blocks: int, block_size: int, enable_prefix_caching: bool = True,
              kinds: tuple[str, ...] = ("full",)) -> BlockManager:
        """A paged cache: one windowless kind whose table every kind in `kinds` reads."""
        return cls([paged_spec(kinds[0])], num_blocks, block_size, enable_prefix_caching, shared_kinds=kinds[1:])

    # ----- accounting -----------------------------------------------------------------------------------
    @property
    def kinds(self) -> tuple[str, ...]:
        return (self.specs[0].name, *self.shared_kinds, *(s.name for s in self.specs[1:]))

    @property
    def per_kind_tables(self) -> bool:
        """Whether the model reads tables of its own per kind (a window, compressed kinds), not one table."""
        return self.window is not None

    @property
    def free(self) -> OrderedDict[int, None]:
        return self.pool.free

    @property
    def cached(self) -> dict[bytes, int]:
        return self.pool.cached

    @property
    def num_free_blocks(self) -> int:
        return min(len(p.free) * self.num_blocks // self.counts[n] for n, p in self.pools.items())

    @property
    def usage(self) -> float:
        """Fraction of the fullest pool held by live sequences (free cached blocks count as free)."""
        return max(1.0 - len(p.free) / self.counts[n] for n, p in self.pools.items())

    def blocks_needed(self, num_tokens: int) -> int:
        return (num_tokens + self.block_size - 1) // self.block_size

    def _needed(self, spec: CacheSpec, num_tokens: int) -> int:
        return blocks_for(spec, self.block_size, num_tokens)

    def free_blocks_beside(self, prefix_block_ids: list[int]) -> int:
        return len(self.pool.free) - sum(1 for b in prefix_block_ids if b != RELEASED and self.pool.ref[b] == 0)

    def complete_blocks(self, kind: str, num_tokens: int) -> int:
        spec = self._spec(kind)
        return (num_tokens // spec.tokens_per_row) // rows_per_block(spec, self.block_size)

    def filled_blocks(self, kind: str, num_tokens: int) -> int:
        return self._needed(self._spec(kind), num_tokens)

    def _spec(self, kind: str) -> CacheSpec:
        if kind in self.shared_kinds:  # read through the first kind's table
            return self.specs[0]
        return next(s for s in self.specs if s.name == kind)

    def _owner_block(self, spec: CacheSpec, j: int) -> int:
        return owner_block(spec, self.block_size, j)

    def release_slid(self, seq: Sequence, kind: str, positions: list[int]) -> None:
        assert (kind == self.specs[0].name and self.window is not None) or not positions, \
            f"{kind} has no window to slide out of"
        for b in positions:
            block = seq.block_table[b]
            assert block != RELEASED and self.pool.hash_of[block] is None, (b, block)  # never registered: no KV
            self.pool.release(block)
            seq.block_table[b] = RELEASED
            self.released_blocks += 1

    def tables_for(self, seq: Sequence) -> dict[str, list[int]]:
        """Every kind's block table (copies), a window kind's with `RELEASED` entries."""
        out = {kind: list(seq.block_table) for kind in (self.specs[0].name, *self.shared_kinds)}
        out.update({k: list(v) for k, v in self.tables.get(seq.seq_id, {}).items()})
        if self.sessions is not None:
            out[REPLAY_BOUNDS] = list(self._replay.get(seq.seq_id, (0, 0)))
        return out

    # ----- lower KV tiers --------------------------------------------------------------------------------
    @property
    def tiers(self) -> Any:
        return self._tiers

    @tiers.setter
    def tiers(self, value: Any) -> None:
        if value is not None and self.per_kind_tables and self.sessions is None:
            raise ValueError(TIERS_NEED_SESSIONS)
        self._tiers = value

    def take_pending_writes(self) -> list[Callable[[], None]]:
        """Restored KV the next step must write before it runs (in order)."""
        writes, self.pending_writes = self.pending_writes, []
        return writes

    def offload(self, seq: Sequence, num_written_tokens: int) -> None:
        """Hand the tiers `seq`'s registered blocks whose KV is written (its first `num_written_tokens`).

        With the session cache: copy its window state out at each grain boundary crossed (to the session cache,
        and to the lower tiers' window kind), and hand its newly complete compressed blocks to the lower tiers.
        A sequence rebuilt by an inexact (bounded) replay hands the tiers nothing: they would persist an
        approximation under the exact prefix's keys."""
        if self.sessions is None:
            self._offload_blocks(seq, num_written_tokens)
            return
        s = self.sessions
        nxt = self._next_grain.get(seq.seq_id)
        if nxt is None:
            return
        bs, hashes = self.block_size, seq.block_hashes
        persist = self._tiers is not None and (s.exact or seq.seq_id not in self._replay)
        retention = seq.params.kv_retention or "chat"
        wname = self.specs[0].name
        while nxt <= num_written_tokens and nxt // bs <= len(hashes):
            first = (nxt - s.rows) // bs
            blocks = seq.block_table[first : nxt // bs]
            if RELEASED not in blocks:
                s.snapshot(blocks, hashes[nxt // bs - 1], nxt, seq.params.session_key)
                if persist and wname in self._tiers.tiers:
                    owners = range(first, nxt // bs)
                    self._tiers.offload(wname, blocks, [hashes[i] for i in owners],
                                        [self._tokens(seq, i, bs) for i in owners], retention)
            nxt += s.grain
        self._next_grain[seq.seq_id] = nxt
        if persist:
            self._offload_compressed(seq, num_written_tokens, hashes, retention)

    def _offload_blocks(self, seq: Sequence, num_written_tokens: int) -> None:
        """Hand one windowless kind's registered, written blocks to its tiers (`kv_tiers.KVTiers`)."""
        if self._tiers is None:
            return
        bs = self.block_size
        end = min(seq.num_hashed_blocks, num_written_tokens // bs, len(seq.block_table))
        start = seq.num_stored_blocks
        if end <= start:
            return
        chunks = [self._tokens(seq, i, bs) for i in range(start, end)]
        self._tiers.offload(seq.block_table[start:end], seq.block_hashes[start:end], chunks,
                            seq.params.kv_retention or "chat")
        seq.num_stored_blocks = end

    def _offload_compressed(self, seq: Sequence, written: int, hashes: list[bytes], retention: str) -> None:
        """Hand the lower tiers each compressed block completed (and written) since the last call."""
        bs, done = self.block_size, self._stored.setdefault(seq.seq_id, {})
        for spec in self.specs[1:]:
            table = self.tables[seq.seq_id][spec.name]
            start = end = done.get(spec.name, 0)
            while end < len(table):
                owner = self._owner_block(spec, end)
                if owner >= len(hashes) or (owner + 1) * bs > written:
                    break
                end += 1
            if end > start:
                owners = [self._owner_block(spec, j) for j in range(start, end)]
                self._tiers.offload(spec.name, table[start:end], [hashes[o] for o in owners],
                                    [self._tokens(seq, o, bs) for o in owners], retention)
                done[spec.name] = end

    # ----- prefix cache ---------------------------------------------------------------------------------
    def match_prefix(self, seq: Sequence, wait: bool = True) -> list[int] | None:
        """Token-kind blocks (`RELEASED` before a window) of the longest prefix whose every kind is cached,
        leaving at least one token to compute.

        With the lower tiers on, blocks past the device pool are loaded on their prefetch thread: while they
        load this is None (wait) unless `wait` is set."""
        self._matched.pop(seq.seq_id, None)
        self._window_source.pop(seq.seq_id, None)
        if not self.enable_prefix_caching:
            return []
        bs, tokens = self.block_size, seq.token_ids
        hashes: list[bytes] = []
        present: list[int | None] = []
        h = _ROOT
        for i in range((len(tokens) - 1) // bs):
            chunk = tokens[i * bs : (i + 1) * bs]
            h = chain_hash(h, chunk)
            hashes.append(h)
            block = self.pool.cached.get(h)
            present.append(None if block is None or self.token_ids[block] != tuple(chunk) else block)
        best: tuple[int, list[int], dict[str, list[int]]] | None = None
        last_miss = -1  # the deepest token block absent so far
        for i in range(len(hashes)):
            if present[i] is None:
                last_miss = i
            end = (i + 1) * bs
            first = 0 if self.window is None else max(0, end - self.window) // bs
            if last_miss >= first:
                if self.window is None:
                    break
                continue
            kinds = self._compressed_blocks(hashes, end)
            if kinds is not None:
                window = [RELEASED] * first + [b for b in present[first : i + 1] if b is not None]
                best = (i, window, kinds)
        if self.sessions is not None:
            session = self._session_prefix(seq, hashes, 0 if best is None else (best[0] + 1) * bs, wait)
            if session is _WAIT:
                return None
            if isinstance(session, list):
                return session
        matched = [] if best is None else best[1]
        if best is not None:
            self._matched[seq.seq_id] = best[2]
        if self.sessions is None and self._tiers is not None and len(matched) < len(hashes):
            restored = self._restore(seq, matched, hashes[len(matched):], wait)
            return None if restored is None else matched + restored
        return matched

    def _restore(self, seq: Sequence, matched: list[int], hashes: list[bytes], wait: bool) -> list[int] | None:
        """New blocks of the one windowless kind holding the leading `hashes` the tiers could load (None while
        they are loading)."""
        bs, first = self.block_size, len(matched)
        pending = self._restoring.get(seq.seq_id)
        if pending is None or pending[0] != hashes[0]:
            n = self._tiers.lookup(hashes)
            if n == 0:
                return []
            pending = self._restoring[seq.seq_id] = (hashes[0], self._tiers.prefetch(hashes[:n]))
        if not wait and not pending[1].done():
            return None
        del self._restoring[seq.seq_id]
        loaded = pending[1].result()
        chunks = [self._tokens(seq, first + i, bs) for i in range(len(loaded))]
        ok = 0
        for stored, chunk in zip(loaded, chunks, strict=True):
            if stored.token_ids.tolist() != chunk:
                break
            ok += 1
        held = [b for b in matched if self.pool.ref[b] == 0]
        loaded = loaded[: max(0, min(ok, len(self.pool.free) - len(held)))]
        if not loaded:
            return []
        for b in held:  # keep the matched prefix out of the allocator's reach
            self.pool.take(b)
        ids = [self._allocate() for _ in loaded]
        for b in held:
            self.pool.release(b)
        for block_id, stored, chunk in zip(ids, loaded, chunks, strict=False):
            self._register(block_id, stored.block_hash, chunk)
            self.pool.release(block_id)  # a cached free block, most recently used: admit() takes it
            self._restored_block[block_id] = stored.tier
        self.pending_writes.append(self._tiers.device_writer(ids, loaded))
        return ids

    def _compressed_slots(self, hashes: list[bytes], end: int) -> dict[str, list[int | None]]:
        """Every compressed kind's blocks for the first `end` tokens in the device pool (None where absent)."""
        return {spec.name: [self.pools[spec.name].cached.get(hashes[self._owner_block(spec, j)])
                            for j in range(self._needed(spec, end))] for spec in self.specs[1:]}

    def _compressed_blocks(self, hashes: list[bytes], end: int) -> dict[str, list[int]] | None:
        """Every compressed kind's cached blocks for the first `end` tokens (None if one is missing)."""
        kinds: dict[str, list[int]] = {}
        for name, slots in self._compressed_slots(hashes, end).items():
            if any(b is None for b in slots):
                return None
            kinds[name] = [b for b in slots if b is not None]
        return kinds

    def _session_prefix(self, seq: Sequence, hashes: list[bytes], best_end: int, wait: bool) -> object:
        """A prefix past `best_end` from the session cache (or a bounded replay), None for the ordinary one, or
        `_WAIT` while the lower tiers load.

        The deepest grain boundary g with every compressed block cached (in the device pool, else in the lower
        tiers) decides: its window state comes from the session cache, else from the lower tiers, into new
        window blocks (a hit), else the sequence starts `replay` tokens before g with g's compressed blocks (a
        miss, replayed when that still beats `best_end`)."""
        s, bs = self.sessions, self.block_size
        window = self.pool
        wname, n = self.specs[0].name, s.rows // bs
        for g in range(len(hashes) * bs // s.grain * s.grain, best_end, -s.grain):
            slots = self._compressed_slots(hashes, g)
            wanted = {k: [j for j, b in enumerate(v) if b is None] for k, v in slots.items()}
            wanted = {k: v for k, v in wanted.items() if v}
            if wanted and (self._tiers is None or not all(
                    self._tiers.lookup(k, self._kind_hashes(k, hashes, v)) == len(v) for k, v in wanted.items())):
                continue
            state = s.cache.get(hashes[g // bs - 1]) if len(window.free) >= n else None
            tier_window = (state is None and len(window.free) >= n and self._tiers is not None
                           and wname in self._tiers.tiers
                           and self._tiers.lookup(wname, hashes[g // bs - n : g // bs]) == n)
            if tier_window:
                wanted[wname] = list(range(g // bs - n, g // bs))
            window_blocks: list[int] | None = None
            if wanted:
                got = self._load(seq, hashes, g, wanted, wait)
                if got is None:
                    return _WAIT
                installed = self._install(seq, hashes, slots, wanted, got)
                if installed is None:
                    continue  # a unit failed to read back: try a shallower boundary
                window_blocks = installed
            kinds = {k: [b for b in v if b is not None] for k, v in slots.items()}
            if state is not None:
                first = g // bs - n
                blocks = [self._allocate() for _ in range(n)]
                for i, b in enumerate(blocks):
                    self._register(b, hashes[first + i], self._tokens(seq, first + i, bs))
                    window.release(b)  # a cached free block, most recently used: admit() takes it
                self.pending_writes.append(s.writer(blocks, state))
                self._matched[seq.seq_id] = kinds
                self._window_source[seq.seq_id] = ("hit", g, g)
                return [RELEASED] * first + blocks
            if window_blocks:
                self._matched[seq.seq_id] = kinds
                self._window_source[seq.seq_id] = ("tier", g, g)
                return [RELEASED] * (g // bs - n) + window_blocks
            if s.replay is not None and g - s.replay > best_end:
                r = g - s.replay
                self._matched[seq.seq_id] = kinds
                self._window_source[seq.seq_id] = ("replay", r, g)
                return [RELEASED] * (r // bs)
            self._window_source[seq.seq_id] = ("miss", g, g)
            return None
        return None

    def _kind_hashes(self, kind: str, hashes: list[bytes], index: list[int]) -> list[bytes]:
        """The keys of `kind`'s blocks `index` (compressed: the hash of the token block completing each)."""
        if kind == self.specs[0].name:
            return [hashes[i] for i in index]
        spec = self._spec(kind)
        return [hashes[self._owner_block(spec, j)] for j in index]

    def _load(self, seq: Sequence, hashes: list[bytes], g: int, wanted: dict[str, list[int]], wait: bool
              ) -> dict[str, list[Any]] | None:
        """The lower tiers' units of `wanted` blocks (kind -> indices), loaded on their thread; None while
        loading unless `wait`."""
        pending = self._loading.get(seq.seq_id)
        if pending is None or pending[0] != g or pending[2] != wanted:
            keys = {k: self._kind_hashes(k, hashes, v) for k, v in wanted.items()}
            pending = self._loading[seq.seq_id] = (g, self._tiers.prefetch(keys), wanted)
        if not wait and not pending[1].done():
            return None
        del self._loading[seq.seq_id]
        return pending[1].result()

    def _install(self, seq: Sequence, hashes: list[bytes], slots: dict[str, list[int | None]],
                 wanted: dict[str, list[int]], got: dict[str, list[Any]]) -> list[int] | None:
        """Put loaded units into new blocks of their kinds (registered, free and cached: admit() takes them; the
        KV is written before the next step), filling `slots`. Returns the window blocks loaded ([] if none),
        or None (nothing changed) when a compressed unit is missing, damaged or has no room."""
        bs, wname = self.block_size, self.specs[0].name
        spec_of = {sp.name: sp for sp in self.specs}
        ok: dict[str, list[Any]] = {}
        for kind, index in wanted.items():
            owners = index if kind == wname else [self._owner_block(spec_of[kind], j) for j in index]
            good = []
            for unit, owner in zip(got.get(kind, []), owners, strict=False):
                if unit.token_ids.tolist() != list(self._tokens(seq, owner, bs)):
                    break
                good.append(unit)
            held = [b for b in (slots.get(kind) or []) if b is not None and self.pools[kind].ref[b] == 0]
            room = len(self.pools[kind].free) - len(held) >= len(index)
            if len(good) == len(index) and room:
                ok[kind] = good
            elif kind != wname:
                return None
        if wname in wanted and wname not in ok:
            wanted = {k: v for k, v in wanted.items() if k != wname}  # the window state did not come back
        window_blocks: list[int] = []
        for kind, index in wanted.items():
            pool = self.pools[kind]
            held = [b for b in (slots.get(kind) or []) if b is not None and pool.ref[b] == 0]
            for b in held:  # keep the device's blocks of this prefix out of the allocator's reach
                pool.take(b)
            ids = [self._allocate(kind) for _ in index]
            for b in held:
                pool.release(b)
            for j, b, key in zip(index, ids, self._kind_hashes(kind, hashes, index), strict=True):
                if kind == wname:
                    self._register(b, key, self._tokens(seq, j, bs))
                else:
                    pool.register(b, key)
                pool.release(b)
            self.pending_writes.append(self._tiers.device_writer(kind, ids, ok[kind]))
            if kind == wname:
                window_blocks = ids
            else:
                for j, b in zip(index, ids, strict=True):
                    slots[kind][j] = b
        tiers = {u.tier for kind in wanted for u in ok[kind]}
        if tiers:
            self._restored_from[seq.seq_id] = "disk" if "disk" in tiers else "host"
        return window_blocks

    @staticmethod
    def _tokens(seq: Sequence, block: int, bs: int) -> list[int]:
        return seq.token_ids[block * bs : (block + 1) * bs]

    # ----- blocks -----------------------------------------------------------------------------------------
    def admit(self, seq: Sequence, prefix_block_ids: list[int], num_tokens: int) -> bool:
        """Give a sequence with no blocks the shared `prefix_block_ids` (from `match_prefix`, or a live
        sequence's leading blocks) plus fresh blocks of every kind up to `num_tokens`.

        Returns False, changing nothing, when a pool cannot supply them.
        """
        assert not seq.block_table
        kinds = self._matched.pop(seq.seq_id, None)
        if kinds is None:
            kinds = self._shared_kinds(prefix_block_ids)
        assert kinds is not None, "a prefix must come from match_prefix or a live sequence's blocks"
        if not self._fits(prefix_block_ids, kinds, num_tokens):
            return False
        for b in prefix_block_ids:
            if b != RELEASED:
                self.pool.take(b)
        for name, blocks in kinds.items():
            for b in blocks:
                self.pools[name].take(b)
        seq.block_table = list(prefix_block_ids)
        self.tables[seq.seq_id] = {s.name: list(kinds.get(s.name, [])) for s in self.specs[1:]}
        cached = len(prefix_block_ids) * self.block_size
        restored = [self._restored_block.pop(b) for b in prefix_block_ids if b in self._restored_block]
        tier = self._restored_from.pop(seq.seq_id, None)
        if seq.num_preemptions == 0:  # a preempted sequence's re-admission is not a new lookup
            self.prefix_queries += len(seq.token_ids)
            self.prefix_hits += cached
            # counted when used, as prefix_hits: a restored block is served once
            for block_tier in restored:
                self.restored_tokens += self.block_size
                self._tiers.credit(block_tier, self.block_size)
            if tier is not None and prefix_block_ids:
                self.restored_tokens += cached
                self._tiers.credit(tier, cached)
        # a forked prefix may not be registered yet: commit() finishes it
        hashed = next((i for i, b in enumerate(prefix_block_ids) if b == RELEASED or self.pool.hash_of[b] is None),
                      len(prefix_block_ids))
        seq.block_hashes = []
        seq.num_hashed_blocks = 0
        seq.num_stored_blocks = hashed  # a prefix hit is already in the tiers (or was dropped)
        if self.sessions is not None:
            self._admitted_session(seq, cached)
        if self._tiers is not None:  # the prefix's compressed blocks are in the tiers already (or were dropped)
            self._stored[seq.seq_id] = {name: len(blocks) for name, blocks in kinds.items()}
        ok = self.ensure(seq, num_tokens)
        assert ok
        return True

    def _admitted_session(self, seq: Sequence, cached: int) -> None:
        """Count where `seq`'s window came from and set the grain boundary its window is next copied at."""
        s = self.sessions
        source, r, g = self._window_source.pop(seq.seq_id, ("", 0, 0))
        nxt = (cached // s.grain + 1) * s.grain
        if source in ("hit", "tier"):
            s.stats.hits += 1
            s.stats.tier_hits += source == "tier"
        elif source:
            s.stats.misses += 1
        if source == "replay":
            s.stats.replays += 1
            s.stats.replay_tokens += g - r
            self._replay[seq.seq_id] = (r, g)
            nxt = g  # the rebuilt window is the session's state at g
        self._next_grain[seq.seq_id] = nxt

    def _shared_kinds(self, prefix: list[int]) -> dict[str, list[int]] | None:
        """A forked prefix (the parent's leading token blocks): the parent's compressed blocks for it."""
        if not prefix or len(self.specs) == 1:
            return {}
        end = len(prefix) * self.block_size
        for seq_id, kinds in self.tables.items():
            owner = self._window_of.get(seq_id)
            if owner is not None and owner[: len(prefix)] == prefix:
                return {s.name: kinds[s.name][: self._needed(s, end)] for s in self.specs[1:]}
        return None

    def _fits(self, prefix: list[int], kinds: dict[str, list[int]], num_tokens: int) -> bool:
        for spec in self.specs:
            pool = self.pools[spec.name]
            have = prefix if spec is self.specs[0] else kinds.get(spec.name, [])
            from_free = sum(1 for b in have if b != RELEASED and pool.ref[b] == 0)
            if self._needed(spec, num_tokens) - len(have) > len(pool.free) - from_free:
                return False
        return True

    def ensure(self, seq: Sequence, num_tokens: int) -> bool:
        """Grow every kind's table to hold `num_tokens` tokens (False, nothing changed, if a pool runs out);
        release the window blocks that slid out before this step."""
        kinds = self.tables[seq.seq_id]
        grow = {self.specs[0].name: self.blocks_needed(num_tokens) - len(seq.block_table)}
        for spec in self.specs[1:]:
            grow[spec.name] = self._needed(spec, num_tokens) - len(kinds[spec.name])
        if any(n > len(self.pools[k].free) for k, n in grow.items()):
            return False
        for name, n in grow.items():
            table = seq.block_table if name == self.specs[0].name else kinds[name]
            for _ in range(max(0, n)):
                table.append(self._allocate(name))
        self._window_of[seq.seq_id] = seq.block_table
        if self.window is not None:
            self._release_slid(seq)
        return True

    def truncate(self, seq: Sequence, num_tokens: int) -> None:
        """Give back `seq`'s blocks of every kind past the first `num_tokens` tokens (rejected speculative tokens'
        KV: never registered, since only computed real tokens are hashed; a compressed entry pooled from draft
        rows sits in a kept block only if its window's last position is kept, which is then recomputed)."""
        keep = self.blocks_needed(num_tokens)
        assert keep >= seq.num_hashed_blocks, (keep, seq.num_hashed_blocks)
        while len(seq.block_table) > keep:
            block = seq.block_table.pop()
            if block != RELEASED:
                self.pool.release(block)
        kinds = self.tables[seq.seq_id]
        for spec in self.specs[1:]:
            table = kinds[spec.name]
            while len(table) > self._needed(spec, num_tokens):
                self.pools[spec.name].release(table.pop())

    def _release_slid(self, seq: Sequence) -> None:
        self.commit(seq)
        if not self.release_window or self.window is None:
            return
        end = max(0, seq.num_computed_tokens - self.window) // self.block_size
        nxt = self._next_grain.get(seq.seq_id)
        if nxt is not None:  # rows not yet copied to the session cache stay held
            end = min(end, max(0, nxt - self.sessions.rows) // self.block_size)
        for b in range(end):
            block = seq.block_table[b]
            if block != RELEASED:
                self._release_token_block(block)
                seq.block_table[b] = RELEASED
                self.released_blocks += 1

    def _release_token_block(self, block: int) -> None:
        self.pool.release(block)
        if self.sessions is not None and self.pool.ref[block] == 0:
            self.pool.unregister(block)  # kept out of the prefix cache: the session cache holds windows

    def commit(self, seq: Sequence) -> None:
        """Register `seq`'s newly full blocks of every kind (KV computed, token ids known) in the prefix cache,
        under their token block's chained hash."""
        if not self.enable_prefix_caching or seq.seq_id not in self.tables:
            return
        bs = self.block_size
        hashes = seq.block_hashes
        limit = min(seq.num_computed_tokens, len(seq.token_ids)) // bs
        replayed_until = self._replay.get(seq.seq_id, (0, 0))[1] // bs  # rebuilt rows: not shared
        while len(hashes) < min(limit, len(seq.block_table)):
            i = len(hashes)
            chunk = self._tokens(seq, i, bs)
            hashes.append(chain_hash(hashes[-1] if hashes else _ROOT, chunk))
            if seq.block_table[i] != RELEASED and i >= replayed_until:
                self._register(seq.block_table[i], hashes[i], chunk)
        seq.num_hashed_blocks = len(hashes)
        kinds = self.tables[seq.seq_id]
        for spec in self.specs[1:]:
            for j, block in enumerate(kinds[spec.name]):
                owner = self._owner_block(spec, j)
                if owner < len(hashes):
                    self.pools[spec.name].register(block, hashes[owner])

    def free_sequence(self, seq: Sequence) -> None:
        """Release `seq`'s blocks (tail first, so the deepest blocks are evicted first).

        Blocks completed by the sequence's last step are committed first: a finished turn's prompt and
        output stay in the prefix cache for the next turn of the conversation.
        """
        self.commit(seq)
        for block in reversed(seq.block_table):
            if block != RELEASED:
                self._release_token_block(block)
        for name, blocks in self.tables.pop(seq.seq_id, {}).items():
            for block in reversed(blocks):
                self.pools[name].release(block)
        for state in (self._matched, self._window_of, self._window_source, self._replay, self._next_grain, self._loading, self._stored,
                      self._restored_from, self._restoring):
            state.pop(seq.seq_id, None)
        seq.block_table = []
        seq.block_hashes = []
        seq.num_hashed_blocks = 0
        seq.num_stored_blocks = 0

    # ----- internals ------------------------------------------------------------------------------------
    def _allocate(self, kind: str | None = None) -> int:
        """A fresh block of `kind` (the token kind by default): the least recently freed, unregistered."""
        if kind is not None and kind != self.specs[0].name:
            return self.pools[kind].allocate()
        block = self.pool.allocate()
        self._restored_block.pop(block, None)
        self.token_ids[block] = ()
        return block

    def _register(self, block: int, h: bytes, tokens: list[int]) -> None:
        """Register a token block under `h`, remembering its tokens (a hit checks them)."""
        if self.pool.register(block, h):
            self.token_ids[block] = tuple(tokens)

    def check_invariants(self) -> None:
        for pool in self.pools.values():
            pool.check_invariants()
