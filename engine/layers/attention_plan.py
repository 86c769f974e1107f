"""A step's attention plan: the context's block tables turned into gather indices once, used by every layer.

The runner's `AttentionContext` says where new tokens' K/V go and which blocks each sequence reads. Every
layer needs the same derived indices, so the model builds this plan once per forward. Sequences split in
two groups: decode rows (one new token each), attended together with one padded, masked SDPA call, and
prefill rows (a prompt or a chunk of one), attended one sequence at a time with a causal mask offset by
the cached tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from recipe.engine.context import AttentionContext


@dataclass(frozen=True)
class PrefillSpan:
    """One sequence with several new tokens: rows [start, end) of the flat batch, attending to the first
    `context_len` tokens of `blocks`; `mask` is None when nothing is cached (plain causal)."""

    start: int
    end: int
    context_len: int
    blocks: torch.Tensor  # int64 [ceil(context_len / block_size)]
    mask: torch.Tensor | None  # bool [query_len, context_len], True = may attend


@dataclass(frozen=True)
class DecodeGroup:
    """Sequences with one new token each: their flat rows, block tables and key-validity mask."""

    rows: torch.Tensor  # int64 [B]
    block_tables: torch.Tensor  # int64 [B, max_blocks], padding replaced by block 0
    key_mask: torch.Tensor  # bool [B, 1, 1, max_blocks * block_size]
    all_rows: bool  # the group is the whole batch, in order


@dataclass(frozen=True)
class AttentionPlan:
    slot_mapping: torch.Tensor
    block_size: int
    num_tokens: int
    decode: DecodeGroup | None
    prefills: tuple[PrefillSpan, ...]


def build_attention_plan(ctx: AttentionContext) -> AttentionPlan:
    """Derive the per-step gather indices and masks from the runner's context."""
    device = ctx.slot_mapping.device
    bs = ctx.block_size
    cu = [0]
    for q in ctx.query_lens:
        cu.append(cu[-1] + q)
    assert len(ctx.query_lens) == len(ctx.context_lens_list), "query_lens and context_lens disagree"
    decode_idx = [i for i, q in enumerate(ctx.query_lens) if q == 1]
    decode: DecodeGroup | None = None
    if decode_idx:
        n_blocks = max((ctx.context_lens_list[i] + bs - 1) // bs for i in decode_idx)
        if len(decode_idx) == len(ctx.query_lens):
            tables = ctx.block_tables[:, :n_blocks]
            lens = ctx.context_lens
        else:
            sel = torch.tensor(decode_idx, dtype=torch.int64, device=device)
            tables = ctx.block_tables.index_select(0, sel)[:, :n_blocks]
            lens = ctx.context_lens.index_select(0, sel)
        key_pos = torch.arange(n_blocks * bs, device=device)
        key_mask = (key_pos[None, :] < lens[:, None])[:, None, None, :]
        rows = torch.tensor([cu[i] for i in decode_idx], dtype=torch.int64, device=device)
        decode = DecodeGroup(rows, tables.clamp(min=0), key_mask, len(decode_idx) == len(ctx.query_lens))
    prefills = []
    for i, q in enumerate(ctx.query_lens):
        if q == 1:
            continue
        c = ctx.context_lens_list[i]
        assert q <= c, f"sequence {i}: {q} new tokens but a context of only {c}"
        blocks = ctx.block_tables[i, : (c + bs - 1) // bs]
        mask = None
        if c > q:
            qpos = torch.arange(c - q, c, device=device)
            mask = torch.arange(c, device=device)[None, :] <= qpos[:, None]
        prefills.append(PrefillSpan(cu[i], cu[i + 1], c, blocks, mask))
    return AttentionPlan(ctx.slot_mapping, bs, cu[-1], decode, tuple(prefills))
