"""Block accounting for a model with several cache kinds (DeepSeek-V4): the same calls as `BlockManager`
(`match_prefix`, `admit`, `ensure`, `commit`, `free_sequence`), one pool per kind.

- The window kind is token-indexed like the full cache and is the sequence's `block_table`. A block
  whose tokens all lie before the window still needed (`CacheSpec.window` tokens before the next step's
  first token) is released: its table entry becomes `RELEASED` and the block returns to the free queue,
  still registered in the prefix cache until it is handed out again.
- A compressed kind of rate m has `max(1, block_size // m)` rows per block, so each of its blocks is
  complete exactly when a token block is (one token block for m <= block_size, m / block_size of them
  otherwise); a complete block is registered under the chained hash of that token block.
- A prefix hit of h tokens needs only the window blocks of the trailing `window` tokens before h plus
  every compressed block covering entries [0, h // m): then the next token has everything it reads.
- With the sliding-window session cache (`sessions`, `engine/window_sessions.py`), a sequence's window rows
  are copied out at every grain boundary it crosses, and window blocks no live sequence holds leave the
  prefix cache (as in vLLM's V4.1 port, window KV is kept out of prefix caching: the session cache holds
  windows, in host memory). A prompt whose compressed blocks are cached up
  to a grain boundary g past the best ordinary hit gets its window back from the session cache (new window
  blocks written before the step), or on a miss replays only its last `sessions.replay` tokens before g
  (bounded replay: window rows below the replay are never read, restored compressed entries never rewritten,
  and the replayed window blocks are not registered).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from recipe.engine.block_manager import chain_hash
from recipe.engine.block_pool import BlockPool
from recipe.engine.layers.v4_kv import RELEASED, REPLAY_BOUNDS, CacheSpec
from recipe.engine.sequence import Sequence

_ROOT = b""
_WAIT = object()  # the lower tiers are still loading a prefix
TIERS_NEED_SESSIONS = ("the lower KV tiers (kv_host_bytes, kv_dir) with several cache kinds (DeepSeek-V4) need the "
                       "sliding-window session cache (swa_session_bytes): window state is persisted at its grain")


def rows_per_block(spec: CacheSpec, block_size: int) -> int:
    return max(1, block_size // spec.tokens_per_row)


def tokens_per_block(spec: CacheSpec, block_size: int) -> int:
    return max(block_size, spec.tokens_per_row)


def kind_block_counts(specs: list[CacheSpec], num_blocks: int, block_size: int, max_seqs: int) -> dict[str, int]:
    """Blocks per kind for a pool of `num_blocks` window blocks: the same token capacity in every kind, plus
    one partly filled compressed block per sequence."""
    counts = {}
    for s in specs:
        if s.tokens_per_row == 1:
            counts[s.name] = num_blocks
        else:
            counts[s.name] = -(-num_blocks * block_size // tokens_per_block(s, block_size)) + max_seqs
    return counts


class MultiKindBlockManager:
    def __init__(self, specs: list[CacheSpec], num_blocks: int, block_size: int,
                 enable_prefix_caching: bool = True, max_seqs: int = 64, release_window: bool = True) -> None:
        assert specs[0].tokens_per_row == 1 and specs[0].window is not None, "the first kind is the window"
        for s in specs[1:]:
            m = s.tokens_per_row
            assert block_size % m == 0 or m % block_size == 0, f"rate {m} and block size {block_size} do not nest"
        self.specs, self.block_size, self.num_blocks = specs, block_size, num_blocks
        self.window = specs[0].window
        self.enable_prefix_caching = enable_prefix_caching
        self.release_window = release_window
        self.counts = kind_block_counts(specs, num_blocks, block_size, max_seqs)
        self.pools = {s.name: BlockPool(self.counts[s.name]) for s in specs}
        self.tables: dict[int, dict[str, list[int]]] = {}  # seq_id -> compressed kind -> blocks
        self.hashes: dict[int, list[bytes]] = {}  # seq_id -> chained hash of each committed token block
        self.prefix_queries = 0
        self.prefix_hits = 0
        self.released_blocks = 0  # window blocks given back as the window slid past them
        self.restored_tokens = 0  # lower KV tiers are not used with several kinds: always 0
        self._matched: dict[int, dict[str, list[int]]] = {}
        self._window_of: dict[int, list[int]] = {}  # seq_id -> its window table (to share a forked prefix)
        self.sessions: Any = None  # window_sessions.WindowSessions, or None (off)
        self.pending_writes: list[Callable[[], None]] = []  # window states to write before the next step
        self._window_source: dict[int, tuple[str, int, int]] = {}  # seq_id -> ("hit"|"miss"|"replay", r, g)
        self._replay: dict[int, tuple[int, int]] = {}  # seq_id -> (window_from, compressed_until)
        self._next_grain: dict[int, int] = {}  # seq_id -> next grain boundary to copy its window at
        self._tiers: Any = None  # kv_tiers.KindTiers, or None (off)
        self._loading: dict[int, tuple[int, Future[dict[str, list[Any]]], dict[str, list[int]]]] = {}
        self._stored: dict[int, dict[str, int]] = {}  # seq_id -> kind -> leading blocks handed to the tiers
        self._restored_from: dict[int, str] = {}  # seq_id -> the lowest tier its matched prefix came from

    # ----- lower KV tiers --------------------------------------------------------------------------------
    @property
    def tiers(self) -> Any:
        return self._tiers

    @tiers.setter
    def tiers(self, value: Any) -> None:
        if value is not None and self.sessions is None:
            raise ValueError(TIERS_NEED_SESSIONS)
        self._tiers = value

    def take_pending_writes(self) -> list[Callable[[], None]]:
        writes, self.pending_writes = self.pending_writes, []
        return writes

    def offload(self, seq: Sequence, num_written_tokens: int) -> None:
        """Copy `seq`'s window state out at each grain boundary its written KV (`num_written_tokens`) crossed
        (to the session cache, and to the lower tiers' window kind), and hand its newly complete compressed
        blocks to the lower tiers. A sequence rebuilt by an inexact (bounded) replay hands the tiers nothing:
        they would persist an approximation under the exact prefix's keys."""
        s = self.sessions
        nxt = self._next_grain.get(seq.seq_id)
        if s is None or nxt is None:
            return
        bs, hashes = self.block_size, self.hashes.get(seq.seq_id, [])
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

    # ----- accounting -----------------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        return min(len(p.free) * self.num_blocks // self.counts[n] for n, p in self.pools.items())

    @property
    def usage(self) -> float:
        return max(1.0 - len(p.free) / self.counts[n] for n, p in self.pools.items())

    def blocks_needed(self, num_tokens: int) -> int:
        return (num_tokens + self.block_size - 1) // self.block_size

    def _needed(self, spec: CacheSpec, num_tokens: int) -> int:
        rows = num_tokens // spec.tokens_per_row
        per = rows_per_block(spec, self.block_size)
        return (rows + per - 1) // per

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.specs)

    def free_blocks_beside(self, prefix_block_ids: list[int]) -> int:
        window = self.pools[self.specs[0].name]
        return len(window.free) - sum(1 for b in prefix_block_ids if b != RELEASED and window.ref[b] == 0)

    def complete_blocks(self, kind: str, num_tokens: int) -> int:
        spec = self._spec(kind)
        return (num_tokens // spec.tokens_per_row) // rows_per_block(spec, self.block_size)

    def filled_blocks(self, kind: str, num_tokens: int) -> int:
        return self._needed(self._spec(kind), num_tokens)

    def _spec(self, kind: str) -> CacheSpec:
        return next(s for s in self.specs if s.name == kind)

    def release_slid(self, seq: Sequence, kind: str, positions: list[int]) -> None:
        assert kind == self.specs[0].name or not positions, f"{kind} has no window to slide out of"
        window = self.pools[kind]
        for b in positions:
            block = seq.block_table[b]
            assert block != RELEASED and window.hash_of[block] is None, (b, block)  # never registered: no KV
            window.release(block)
            seq.block_table[b] = RELEASED
            self.released_blocks += 1

    def tables_for(self, seq: Sequence) -> dict[str, list[int]]:
        """Every kind's block table (copies), the window kind's with `RELEASED` entries."""
        out = {self.specs[0].name: list(seq.block_table)}
        out.update({k: list(v) for k, v in self.tables.get(seq.seq_id, {}).items()})
        if self.sessions is not None:
            out[REPLAY_BOUNDS] = list(self._replay.get(seq.seq_id, (0, 0)))
        return out

    # ----- prefix cache ---------------------------------------------------------------------------------
    def _owner_block(self, spec: CacheSpec, j: int) -> int:
        """The token block whose completion completes compressed block j."""
        bs, m = self.block_size, spec.tokens_per_row
        return j if m <= bs else (j + 1) * m // bs - 1

    def match_prefix(self, seq: Sequence, wait: bool = True) -> list[int] | None:
        """Window blocks (`RELEASED` before the window) of the longest prefix whose every kind is cached.

        With the lower tiers on, blocks past the device pool are loaded on their prefetch thread: while they
        load this is None (wait) unless `wait` is set."""
        self._matched.pop(seq.seq_id, None)
        self._window_source.pop(seq.seq_id, None)
        if not self.enable_prefix_caching:
            return []
        bs, tokens = self.block_size, seq.token_ids
        window_pool = self.pools[self.specs[0].name]
        hashes: list[bytes] = []
        present: list[int | None] = []
        h = _ROOT
        for i in range((len(tokens) - 1) // bs):
            h = chain_hash(h, tokens[i * bs : (i + 1) * bs])
            hashes.append(h)
            present.append(window_pool.cached.get(h))
        best: tuple[int, list[int], dict[str, list[int]]] | None = None
        for i in range(len(hashes)):
            end = (i + 1) * bs
            first = max(0, end - self.window) // bs
            if any(present[b] is None for b in range(first, i + 1)):
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
        if best is None:
            return []
        self._matched[seq.seq_id] = best[2]
        return best[1]

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
        window = self.pools[self.specs[0].name]
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
                blocks = [window.allocate() for _ in range(n)]
                for i, b in enumerate(blocks):
                    window.register(b, hashes[first + i])
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
        spec = next(sp for sp in self.specs if sp.name == kind)
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
            ids = [pool.allocate() for _ in index]
            for b in held:
                pool.release(b)
            for b, key in zip(ids, self._kind_hashes(kind, hashes, index), strict=True):
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
        assert not seq.block_table
        kinds = self._matched.pop(seq.seq_id, None)
        if kinds is None:
            kinds = self._shared_kinds(prefix_block_ids)
        assert kinds is not None, "a prefix must come from match_prefix or a live sequence's blocks"
        if not self._fits(prefix_block_ids, kinds, num_tokens):
            return False
        window = self.pools[self.specs[0].name]
        for b in prefix_block_ids:
            if b != RELEASED:
                window.take(b)
        for name, blocks in kinds.items():
            for b in blocks:
                self.pools[name].take(b)
        seq.block_table = list(prefix_block_ids)
        self.tables[seq.seq_id] = {s.name: list(kinds.get(s.name, [])) for s in self.specs[1:]}
        self.hashes[seq.seq_id] = []
        self.prefix_queries += len(seq.token_ids)
        self.prefix_hits += len(prefix_block_ids) * self.block_size
        if self.sessions is not None:
            self._admitted_session(seq, len(prefix_block_ids) * self.block_size)
        if self._tiers is not None:  # the prefix's compressed blocks are in the tiers already (or were dropped)
            self._stored[seq.seq_id] = {name: len(blocks) for name, blocks in kinds.items()}
            tier = self._restored_from.pop(seq.seq_id, None)
            if tier is not None and prefix_block_ids:
                self.restored_tokens += len(prefix_block_ids) * self.block_size
                self._tiers.credit(tier, len(prefix_block_ids) * self.block_size)
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
        """A forked prefix (the parent's leading window blocks): the parent's compressed blocks for it."""
        if not prefix:
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
            need = (self.blocks_needed(num_tokens) if spec is self.specs[0] else self._needed(spec, num_tokens))
            if need - len(have) > len(pool.free) - from_free:
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
                table.append(self.pools[name].allocate())
        self._window_of[seq.seq_id] = seq.block_table
        self._release_slid(seq)
        return True

    def truncate(self, seq: Sequence, num_tokens: int) -> None:
        """Give back `seq`'s blocks of every kind past the first `num_tokens` tokens (rejected speculative tokens'
        KV: never registered, since only computed real tokens are hashed; a compressed entry pooled from draft
        rows sits in a kept block only if its window's last position is kept, which is then recomputed)."""
        window = self.pools[self.specs[0].name]
        keep = self.blocks_needed(num_tokens)
        assert keep >= len(self.hashes.get(seq.seq_id, [])), (keep, seq)
        while len(seq.block_table) > keep:
            block = seq.block_table.pop()
            if block != RELEASED:
                window.release(block)
        kinds = self.tables[seq.seq_id]
        for spec in self.specs[1:]:
            table = kinds[spec.name]
            while len(table) > self._needed(spec, num_tokens):
                self.pools[spec.name].release(table.pop())

    def _release_slid(self, seq: Sequence) -> None:
        self.commit(seq)
        if not self.release_window:
            return
        window = self.pools[self.specs[0].name]
        end = max(0, seq.num_computed_tokens - self.window) // self.block_size
        nxt = self._next_grain.get(seq.seq_id)
        if nxt is not None:  # rows not yet copied to the session cache stay held
            end = min(end, max(0, nxt - self.sessions.rows) // self.block_size)
        for b in range(end):
            block = seq.block_table[b]
            if block != RELEASED:
                window.release(block)
                if self.sessions is not None and window.ref[block] == 0:
                    window.unregister(block)  # kept out of the prefix cache: the session cache holds windows
                seq.block_table[b] = RELEASED
                self.released_blocks += 1

    def commit(self, seq: Sequence) -> None:
        """Register newly computed full blocks of every kind under their token block's chained hash."""
        if not self.enable_prefix_caching or seq.seq_id not in self.tables:
            return
        bs = self.block_size
        hashes = self.hashes[seq.seq_id]
        limit = min(seq.num_computed_tokens, len(seq.token_ids)) // bs
        while len(hashes) < min(limit, len(seq.block_table)):
            i = len(hashes)
            hashes.append(chain_hash(hashes[-1] if hashes else _ROOT, seq.token_ids[i * bs : (i + 1) * bs]))
            replayed = i < self._replay.get(seq.seq_id, (0, 0))[1] // bs  # rebuilt rows: not shared
            if seq.block_table[i] != RELEASED and not replayed:
                self.pools[self.specs[0].name].register(seq.block_table[i], hashes[i])
        kinds = self.tables[seq.seq_id]
        for spec in self.specs[1:]:
            for j, block in enumerate(kinds[spec.name]):
                owner = self._owner_block(spec, j)
                if owner < len(hashes):
                    self.pools[spec.name].register(block, hashes[owner])

    def free_sequence(self, seq: Sequence) -> None:
        self.commit(seq)
        window = self.pools[self.specs[0].name]
        for block in reversed(seq.block_table):
            if block != RELEASED:
                window.release(block)
                if self.sessions is not None and window.ref[block] == 0:
                    window.unregister(block)  # the session cache holds the window now
        for name, blocks in self.tables.pop(seq.seq_id, {}).items():
            for block in reversed(blocks):
                self.pools[name].release(block)
        self.hashes.pop(seq.seq_id, None)
        self._window_of.pop(seq.seq_id, None)
        for state in (self._window_source, self._replay, self._next_grain, self._loading, self._stored,
                      self._restored_from):
            state.pop(seq.seq_id, None)
        seq.block_table = []
        seq.block_hashes = []
        seq.num_hashed_blocks = 0

    def check_invariants(self) -> None:
        for pool in self.pools.values():
            pool.check_invariants()
