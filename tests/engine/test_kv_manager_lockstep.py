"""The one KV manager's one-kind ("full") case is the paged block manager it replaced: the same operations on
random prompts sharing prefixes give the same block tables, free queue (LRU order), prefix hits and counters."""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence as Seq
from concurrent.futures import Future

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st
from recipe.engine.block_manager import BlockManager
from recipe.engine.kv_tiers import StoredBlock
from recipe.engine.sampling_params import SamplingParams
from recipe.engine.sequence import Sequence
from reference_block_manager import ReferenceBlockManager

BS = 2
again = st.tuples(st.just("again"), st.integers(0, 7), st.integers(1, 12))  # an earlier prompt (a next turn)
step = st.tuples(st.just("step"), st.integers(0, 7), st.integers(1, 12))
free = st.tuples(st.just("free"), st.integers(0, 7))
op = st.one_of(  # steps and frees weighted up: finished turns fill the tiers, later turns restore from them
    step, step, free, free,
    st.tuples(st.just("admit"), st.integers(0, 3), st.lists(st.integers(0, 2), min_size=1, max_size=9),
              st.integers(1, 12)),
    again, again,
    st.tuples(st.just("decode"), st.integers(0, 7), st.integers(0, 2)),
    st.tuples(st.just("preempt"), st.integers(0, 7)),
    st.tuples(st.just("fork"), st.integers(0, 7), st.integers(1, 4)),
    st.tuples(st.just("truncate"), st.integers(0, 7), st.integers(0, 3)),
)
BASES = [[0, 1, 0, 1, 2, 2], [0, 1, 0, 1, 1, 1], [2, 2, 2, 2], []]


class MemoryTiers:
    """A lower tier in a dict, loading at once; it logs what it is asked to write back and whom it credits."""

    def __init__(self) -> None:
        self.blocks: dict[bytes, StoredBlock] = {}
        self.log: list[tuple[object, ...]] = []

    def lookup(self, hashes: Seq[bytes]) -> int:
        return next((i for i, h in enumerate(hashes) if h not in self.blocks), len(hashes))

    def prefetch(self, hashes: Seq[bytes]) -> Future[list[StoredBlock]]:
        done: Future[list[StoredBlock]] = Future()
        b = self.blocks
        done.set_result([StoredBlock(h, b[h].token_ids, b[h].kv, b[h].retention_class, "host") for h in hashes])
        return done

    def offload(self, block_ids: Seq[int], hashes: Seq[bytes], chunks: Seq[Seq[int]], retention: str) -> None:
        self.log.append(("offload", list(block_ids)))
        for h, c in zip(hashes, chunks, strict=True):
            self.blocks[h] = StoredBlock(h, np.asarray(c, dtype=np.int64), np.zeros(1, np.uint8), retention)

    def device_writer(self, block_ids: Seq[int], blocks: Seq[StoredBlock]) -> Callable[[], None]:
        self.log.append(("write", list(block_ids), [b.block_hash for b in blocks]))
        return lambda: None

    def credit(self, tier_name: str, tokens: int) -> None:
        self.log.append(("credit", tier_name, tokens))


def state(m: ReferenceBlockManager | BlockManager, seqs: list[Sequence]) -> tuple[object, ...]:
    return ([list(s.block_table) for s in seqs], [s.num_stored_blocks for s in seqs], m.num_free_blocks,
            list(m.free), dict(m.cached), m.prefix_hits, m.prefix_queries, m.usage, m.restored_tokens,
            None if m.tiers is None else m.tiers.log, len(m.take_pending_writes()))


@settings(max_examples=400, deadline=None)
@given(st.lists(op, max_size=60), st.integers(3, 12), st.booleans())
@example([("admit", 0, [1], 12), ("step", 0, 12), ("free", 0), ("admit", 2, [1] * 5, 12), ("step", 0, 12),
          ("free", 0), ("again", 0, 12)], 6, True)  # a turn evicted from the device comes back from the tier
def test_one_kind_manager_matches_the_paged_manager(ops: list[tuple], num_blocks: int, tiers: bool) -> None:
    a = ReferenceBlockManager(num_blocks, BS, tiers=MemoryTiers() if tiers else None)
    b = BlockManager.paged(num_blocks, BS)
    b.tiers = MemoryTiers() if tiers else None
    live: list[tuple[Sequence, Sequence]] = []
    seen: list[list[int]] = []  # prompts admitted so far
    for o in ops:
        if o[0] in ("admit", "again"):
            if o[0] == "again" and not seen:
                continue
            prompt = BASES[o[1]] + o[2] if o[0] == "admit" else seen[o[1] % len(seen)]
            seen.append(prompt)
            sa = Sequence("r", 0, prompt, SamplingParams(max_tokens=4))
            sb = Sequence("r", 0, prompt, SamplingParams(max_tokens=4))
            pa, pb = a.match_prefix(sa), b.match_prefix(sb)
            assert pa == pb
            n = min(len(prompt), len(pa) * BS + o[-1])
            ra, rb = a.admit(sa, pa, n), b.admit(sb, pb, n)
            assert ra == rb
            if ra:
                sa.num_computed_tokens = sb.num_computed_tokens = len(pa) * BS
                live.append((sa, sb))
        elif live:
            sa, sb = live[o[1] % len(live)]
            if o[0] == "free":
                a.free_sequence(sa)
                b.free_sequence(sb)
                live.remove((sa, sb))
            elif o[0] == "step":
                n = min(o[2], len(sa.token_ids) - sa.num_computed_tokens)
                if n <= 0:
                    continue
                ra, rb = a.ensure(sa, sa.num_computed_tokens + n), b.ensure(sb, sb.num_computed_tokens + n)
                assert ra == rb
                if ra:
                    sa.num_computed_tokens += n
                    sb.num_computed_tokens += n
                    a.commit(sa)
                    b.commit(sb)
                    a.offload(sa, sa.num_computed_tokens)
                    b.offload(sb, sb.num_computed_tokens)
            elif o[0] == "preempt":
                a.free_sequence(sa)
                b.free_sequence(sb)
                for s in (sa, sb):
                    s.num_computed_tokens = 0
                    s.num_preemptions += 1
                pa, pb = a.match_prefix(sa), b.match_prefix(sb)
                assert pa == pb
                ra, rb = a.admit(sa, pa, len(pa) * BS + 1), b.admit(sb, pb, len(pb) * BS + 1)
                assert ra == rb
                if ra:
                    sa.num_computed_tokens = sb.num_computed_tokens = len(pa) * BS
                else:
                    live.remove((sa, sb))
            elif o[0] == "fork":
                k = min(o[2], sa.num_computed_tokens // BS, (len(sa.token_ids) - 1) // BS)
                if k == 0:
                    continue
                ca = Sequence("c", 1, list(sa.token_ids), SamplingParams(max_tokens=4))
                cb = Sequence("c", 1, list(sb.token_ids), SamplingParams(max_tokens=4))
                ra, rb = a.admit(ca, sa.block_table[:k], k * BS + 1), b.admit(cb, sb.block_table[:k], k * BS + 1)
                assert ra == rb
                if ra:
                    ca.num_computed_tokens = cb.num_computed_tokens = k * BS
                    live.append((ca, cb))
            elif o[0] == "truncate":
                keep = max(sa.num_hashed_blocks * BS, sa.num_computed_tokens - o[2])
                a.truncate(sa, keep)
                b.truncate(sb, keep)
                sa.num_computed_tokens = sb.num_computed_tokens = min(keep, sa.num_computed_tokens)
            elif o[0] == "decode" and sa.num_computed_tokens == len(sa.token_ids):
                sa.token_ids.append(o[2])
                sb.token_ids.append(o[2])
        assert state(a, [s for s, _ in live]) == state(b, [s for _, s in live])
        a.check_invariants()
        b.check_invariants()
