"""A sequence's KV payload (`kv_connector/kv_payload.py`) restores identical bytes in every cache kind, for
any prompt length, block size and prefix the receiver already holds: a paged cache (one table for "full"
and "latent") and DeepSeek-V4's layout (a window kind whose slid-out blocks are released, compressed kinds
at several rates)."""

from __future__ import annotations

from typing import Any

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from recipe.engine.block_manager import BlockManager
from recipe.engine.kv_cache import CacheSpec, KindPools, KVCache
from recipe.engine.kv_connector.kv_payload import load_blocks, save_blocks
from recipe.engine.kv_kinds import rows_per_block
from recipe.engine.kv_manager import paged_kinds
from recipe.engine.layers.v4_kv import RELEASED
from recipe.engine.layers.v4_kv import CacheSpec as KindSpec
from recipe.engine.sampling_params import SamplingParams
from recipe.engine.sequence import Sequence


def build(layout: dict[str, Any], num_blocks: int, fill: bool) -> tuple[BlockManager, Any]:
    """A manager and its block store (random contents when `fill`, else zeros)."""
    bs, dtype = layout["block_size"], layout["dtype"]
    manager: BlockManager
    if layout["v4"]:
        specs = [KindSpec("window", 1, layout["window"], 5)] + [KindSpec(f"compressed_{m}", m, None, 3 + m % 5)
                                                                 for m in layout["rates"]]
        v4 = BlockManager(specs, num_blocks, bs, True, max_seqs=2)
        store: Any = KindPools({s.name: torch.zeros(v4.counts[s.name], rows_per_block(s, bs), s.row_width, dtype=dtype)
                                for s in specs})
        manager, tensors = v4, store.pools
    else:
        paged = [CacheSpec("full", 2, 2, (2, 3)), CacheSpec("latent", 1, 1, (4,))]
        manager = BlockManager.paged(num_blocks, bs, kinds=paged_kinds(paged))
        store = KVCache(paged, num_blocks, bs, dtype, "cpu")
        tensors = store.tensors
    if fill:
        for t in tensors.values():
            t.copy_(torch.randn(t.shape))
    return manager, store


layouts = st.fixed_dictionaries({
    "v4": st.booleans(),
    "block_size": st.sampled_from([1, 2, 4, 8]),
    "window": st.integers(1, 12),
    "rates": st.lists(st.sampled_from([2, 4, 8, 16]), min_size=1, max_size=3, unique=True).map(sorted),
    "dtype": st.sampled_from([torch.float32, torch.bfloat16]),
})


@settings(max_examples=150, deadline=None)
@given(layout=layouts, num_tokens=st.integers(1, 70), skip_fraction=st.floats(0, 1), seed=st.integers(0, 2**16))
def test_payload_round_trip_restores_every_kinds_bytes(layout: dict[str, Any], num_tokens: int, skip_fraction: float,
                                                       seed: int) -> None:
    torch.manual_seed(seed)
    bs = layout["block_size"]
    blocks = (num_tokens + bs) // bs + 2
    sender, src = build(layout, blocks, fill=True)
    receiver, dst = build(layout, blocks, fill=False)
    skip = int(skip_fraction * ((num_tokens - 1) // bs)) * bs  # whole blocks the receiver would hold
    a = Sequence("a", 0, list(range(3, 3 + num_tokens)), SamplingParams(max_tokens=1))
    b = Sequence("b", 0, list(a.token_ids), SamplingParams(max_tokens=1))
    assert sender.admit(a, [], num_tokens) and receiver.admit(b, [], num_tokens + 1)
    a.num_computed_tokens = num_tokens
    assert sender.ensure(a, num_tokens + 1)  # releases the window blocks that slid out (DeepSeek-V4)

    arrays = save_blocks(src, sender, a, skip, num_tokens, "0")
    released = load_blocks(dst, receiver, b, {k: v.copy() for k, v in arrays.items()}, skip, num_tokens, "0")

    sent_tables, got_tables = sender.tables_for(a), receiver.tables_for(b)
    for kind in sender.kinds:
        first, end = sender.complete_blocks(kind, skip), sender.filled_blocks(kind, num_tokens)
        at = arrays[f"0/{kind}/at"].tolist()
        assert at == [i for i in range(first, end) if sent_tables[kind][i] != RELEASED]
        for i in at:
            want, got = src.read(kind, [sent_tables[kind][i]]), dst.read(kind, [got_tables[kind][i]])
            assert torch.equal(got.view(torch.uint8), want.view(torch.uint8)), (kind, i)
        assert released[kind] == [i for i in range(first, end) if i not in at]
        assert all(got_tables[kind][i] == RELEASED for i in released[kind])
    receiver.check_invariants()
    receiver.free_sequence(b)
    receiver.check_invariants()
    assert receiver.usage == 0.0
