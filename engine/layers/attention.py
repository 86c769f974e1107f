"""Paged attention over a block cache, one code path for prefill, prefill chunks and decode.

A layer's K (and V) cache is [num_blocks, block_size, kv_heads, dim], a view of the tensor that
`engine/kv_cache.py` owns; a token's slot is block_id * block_size + offset. Each step first writes the new
tokens' K/V to their slots, then every sequence attends to its whole context read back through its block
table, so a prefix-cache hit and a fresh prefill compute on identical values. `paged_attend` is shared with MLA, whose single latent cache serves as both key and value.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from recipe.engine.kernels.native import library
from recipe.engine.kv_cache import CacheSpec
from recipe.engine.layers.attention_plan import AttentionPlan, PagedDecode, PrefillSpan
from torch import nn


def _gather(cache: torch.Tensor, blocks: torch.Tensor, length: int, dtype: torch.dtype) -> torch.Tensor:
    """[length, kv_heads, dim]: the first `length` tokens of one sequence's blocks (index_select: on the CPU
    far faster than advanced indexing)."""
    g = cache.index_select(0, blocks)
    return g.view(-1, g.shape[-2], g.shape[-1])[:length].to(dtype)


def _context_kv(k_cache: torch.Tensor, v_cache: torch.Tensor | None, blocks: torch.Tensor, length: int,
                dtype: torch.dtype, value_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One sequence's keys and values [kv_heads, length, dim] read back through its blocks (with no V
    cache, the values are the keys' first `value_dim` features: MLA's latent cache)."""
    k = _gather(k_cache, blocks, length, dtype).transpose(0, 1)
    v = k[..., :value_dim] if v_cache is None else _gather(v_cache, blocks, length, dtype).transpose(0, 1)
    return k, v


def _attend_span(q: torch.Tensor, p: PrefillSpan, k: torch.Tensor, v: torch.Tensor, scale: float, group: int) -> torch.Tensor:
    """A prefill span's queries q[p.start:p.end] over k/v [kv_heads, L, D] -> [span, heads, value_dim]:
    causal, or under the span's mask when it has a cached prefix; one 4-D SDPA call."""
    o = F.scaled_dot_product_attention(
        q[p.start : p.end].transpose(0, 1)[None], k[None], v[None], attn_mask=p.mask,
        is_causal=p.mask is None, scale=scale, enable_gqa=group > 1,
    )
    return o[0].transpose(0, 1)


def paged_attend(
    q: torch.Tensor,
    plan: AttentionPlan,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor | None,
    scale: float,
    value_dim: int,
    k_new: torch.Tensor | None = None,
    v_new: torch.Tensor | None = None,
) -> torch.Tensor:
    """Causal attention of the step's queries q [N, H, Dk] over the paged cache -> [N, H, value_dim].

    With `v_cache` None the values are the first `value_dim` features of the keys (MLA's latent cache).
    One SDPA call per sequence, always 4-D so that the CPU's fused (flash) kernel runs rather than the math
    fallback. A decode row's query heads that share a KV head act as that head's queries (no mask, no
    repeated K/V). Measured on this CPU (32 rows, contexts 50-2000), one padded, masked call over the batch
    was several times slower than this loop: padding and large temporaries cost more than the loop, and
    every extra op is a parallel region that a busy machine makes expensive.

    That loop is the reference backend. With `plan.backend == "batched"`, see `_attend_batched`; `k_new` /
    `v_new` ([N, Hkv, D], this step's keys/values as written to the cache) let it skip the cache read for
    prefill spans with nothing cached.
    """
    if plan.backend == "batched":
        return _attend_batched(q, plan, k_cache, v_cache, scale, value_dim, k_new, v_new)
    n, heads, dk = q.shape
    kv_heads = k_cache.shape[2]
    group = heads // kv_heads
    dtype = q.dtype
    out = q.new_empty(n, heads, value_dim)
    native = plan.paged_decode is not None and _native_decode(q, plan.paged_decode, k_cache, v_cache, scale,
                                                              value_dim, out)
    for d in () if native else plan.decodes:
        # The query heads sharing a KV head act as that head's queries: no mask, no repeated K/V.
        k, v = _context_kv(k_cache, v_cache, d.blocks, d.context_len, dtype, value_dim)  # [Hkv, L, D]
        o = F.scaled_dot_product_attention(q[d.row].view(1, kv_heads, group, dk), k[None], v[None], scale=scale)
        out[d.row] = o.reshape(heads, value_dim)
    for p in plan.prefills:
        k, v = _context_kv(k_cache, v_cache, p.blocks, p.context_len, dtype, value_dim)
        out[p.start : p.end] = _attend_span(q, p, k, v, scale, group)
    return out


def _native_decode(q: torch.Tensor, d: PagedDecode, k_cache: torch.Tensor, v_cache: torch.Tensor | None,
                   scale: float, value_dim: int, out: torch.Tensor) -> bool:
    """Backend "native": every decode row in one kernel call that reads K/V in place through the block tables
    (no gathered copy), each (row, KV head) computed alone, so a row's result does not depend on the batch.
    False (nothing done) where the kernel does not apply: no native library, not fp32, or a cache layout
    that is not [blocks, block_size, kv_heads, dim] with contiguous tokens."""
    lib = library()
    caches = [k_cache] if v_cache is None else [k_cache, v_cache]
    if lib is None or q.dtype != torch.float32 or any(c.dtype != torch.float32 or c.stride(-1) != 1
                                                      or c.stride(0) != c.shape[1] * c.stride(1) for c in caches):
        return False
    b = d.rows.shape[0]
    heads, dk = q.shape[1:]
    qd = (q[:b] if d.in_order else q.index_select(0, d.rows)).contiguous()
    o = out[:b] if d.in_order else q.new_empty(b, heads, value_dim)
    v = k_cache if v_cache is None else v_cache
    lib.paged_decode_attention(
        qd.data_ptr(), k_cache.data_ptr(), v.data_ptr(), d.tables.data_ptr(), d.tables.shape[1],
        d.context_lens.data_ptr(), b, heads, k_cache.shape[2], dk, value_dim, k_cache.shape[1],
        k_cache.stride(1), k_cache.stride(2), v.stride(1), v.stride(2), scale, o.data_ptr())
    if not d.in_order:
        out.index_copy_(0, d.rows, o)
    return True


def _attend_batched(
    q: torch.Tensor, plan: AttentionPlan, k_cache: torch.Tensor, v_cache: torch.Tensor | None, scale: float,
    value_dim: int, k_new: torch.Tensor | None, v_new: torch.Tensor | None,
) -> torch.Tensor:
    """All decode rows in one SDPA call over the slots the plan gathered once per step (padded, masked);
    a prefill span with nothing cached attends to its own new K/V without reading the cache back; a span
    with a cached prefix reads its blocks as the reference does."""
    n, heads, dk = q.shape
    kv_heads = k_cache.shape[2]
    group = heads // kv_heads
    dtype = q.dtype
    out = q.new_empty(n, heads, value_dim)
    d = plan.decode_batch
    if d is not None:
        b, width = d.slots.shape
        flat = d.slots.reshape(-1)
        k = k_cache.view(-1, kv_heads, dk).index_select(0, flat).view(b, width, kv_heads, dk).to(dtype).transpose(1, 2)
        if v_cache is None:
            v = k[..., :value_dim]
        else:
            v = v_cache.view(-1, kv_heads, value_dim).index_select(0, flat).view(b, width, kv_heads, value_dim)
            v = v.to(dtype).transpose(1, 2)
        qd = q.index_select(0, d.rows).view(b, kv_heads, group, dk)
        o = F.scaled_dot_product_attention(qd, k, v, attn_mask=d.mask, scale=scale)
        out.index_copy_(0, d.rows, o.reshape(b, heads, value_dim))
    fresh = k_new is not None and k_new.dtype == k_cache.dtype == dtype
    for p in plan.prefills:
        if fresh and p.mask is None:
            assert k_new is not None
            k = k_new[p.start : p.end].transpose(0, 1)
            v = k[..., :value_dim] if v_new is None else v_new[p.start : p.end].transpose(0, 1)
        else:
            k, v = _context_kv(k_cache, v_cache, p.blocks, p.context_len, dtype, value_dim)
        out[p.start : p.end] = _attend_span(q, p, k, v, scale, group)
    return out


class PagedAttention(nn.Module):
    """Causal multi-head (grouped-query) attention with a paged K and V cache."""

    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int, scale: float) -> None:
        super().__init__()
        assert num_heads % num_kv_heads == 0, "query heads must be a multiple of KV heads"
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.scale = scale
        self.k_cache: torch.Tensor | None = None
        self.v_cache: torch.Tensor | None = None
        self._k_slots = self._v_slots = torch.empty(0)  # [num_blocks * block_size, kv_heads, dim] views

    def cache_spec(self, kind: str, num_layers: int) -> CacheSpec:
        return CacheSpec(kind, num_layers, planes=2, token_shape=(self.num_kv_heads, self.head_dim))

    def bind_cache(self, view: torch.Tensor) -> None:
        """Take this layer's view of the KV cache, [2, num_blocks, block_size, kv_heads, dim] (K then V)."""
        assert view.shape[0] == 2 and tuple(view.shape[3:]) == (self.num_kv_heads, self.head_dim), view.shape
        self.k_cache, self.v_cache = view[0], view[1]
        self._k_slots = self.k_cache.view(-1, self.num_kv_heads, self.head_dim)
        self._v_slots = self.v_cache.view(-1, self.num_kv_heads, self.head_dim)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: AttentionPlan) -> torch.Tensor:
        """q [N, H, D], k/v [N, Hkv, D] for the step's new tokens -> attention output [N, H, D]."""
        assert self.k_cache is not None and self.v_cache is not None, "no KV cache bound (bind_kv_cache)"
        self._k_slots.index_copy_(0, plan.slot_mapping, k.to(self.k_cache.dtype))
        self._v_slots.index_copy_(0, plan.slot_mapping, v.to(self.v_cache.dtype))
        return paged_attend(q, plan, self.k_cache, self.v_cache, self.scale, self.head_dim, k, v)
