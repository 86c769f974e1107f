"""A step's attention plan: the context's block tables turned into per-sequence gather indices once per forward
and shared by every layer.

Sequences split in two kinds: decode rows (one new token) and prefill spans (a prompt or a chunk of one,
attending causally with an offset when part of the context is cached).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from recipe.engine.context import AttentionContext


@dataclass(frozen=True)
class DecodeRow:
    """One new token at flat row `row`, attending to the first `context_len` tokens of `blocks`."""

    row: int
    context_len: int
    blocks: torch.Tensor  # int64 [ceil(context_len / block_size)]


@dataclass(frozen=True)
class PrefillSpan:
    """Flat rows [start, end) of one sequence, attending to the first `context_len` tokens of `blocks`;
    `mask` is None when nothing is cached (plain causal)."""

    start: int
    end: int
    context_len: int
    blocks: torch.Tensor  # int64 [ceil(context_len / block_size)]
    mask: torch.Tensor | None  # bool [query_len, context_len], True = may attend


@dataclass(frozen=True)
class DecodeBatch:
    """Every decode row of the step at once, for one batched attention call per layer: row `i` is flat
    row `rows[i]` and reads cache slots `slots[i, :context_lens[i]]` (padding reads slot 0, masked off)."""

    rows: torch.Tensor  # int64 [B]
    slots: torch.Tensor  # int64 [B, max_context]
    mask: torch.Tensor | None  # bool [B, 1, 1, max_context], True = may attend; None when all lengths agree


@dataclass(frozen=True)
class PagedDecode:
    """Every decode row of the step for the native kernel, which reads K/V in place through the block tables:
    row `i` is flat row `rows[i]`, attending to the first `context_lens[i]` tokens of `tables[i]`."""

    rows: torch.Tensor  # int64 [B]
    tables: torch.Tensor  # int64 [B, max_blocks], contiguous
    context_lens: torch.Tensor  # int64 [B]
    in_order: bool  # rows are 0..B-1 (a decode-only step): no gather of queries or scatter of outputs


@dataclass(frozen=True)
class AttentionPlan:
    slot_mapping: torch.Tensor
    block_size: int
    num_tokens: int
    decodes: tuple[DecodeRow, ...]
    prefills: tuple[PrefillSpan, ...]
    backend: str = "reference"  # "batched": one call per layer for the decode rows (`decode_batch`)
    decode_batch: DecodeBatch | None = None
    paged_decode: PagedDecode | None = None  # backend "native": the decode rows for the native kernel


def build_attention_plan(ctx: AttentionContext) -> AttentionPlan:
    """Derive the per-step block lists and masks from the runner's context."""
    assert len(ctx.query_lens) == len(ctx.context_lens_list), "query_lens and context_lens disagree"
    device = ctx.slot_mapping.device
    bs = ctx.block_size
    decodes, prefills, decode_seqs = [], [], []
    start = 0
    for i, (q, c) in enumerate(zip(ctx.query_lens, ctx.context_lens_list, strict=True)):
        assert 1 <= q <= c, f"sequence {i}: {q} new tokens with a context of {c}"
        blocks = ctx.block_tables[i, : (c + bs - 1) // bs]
        if q == 1:
            decodes.append(DecodeRow(start, c, blocks))
            decode_seqs.append(i)
        else:
            mask = None
            if c > q:
                qpos = torch.arange(c - q, c, device=device)
                mask = torch.arange(c, device=device)[None, :] <= qpos[:, None]
            prefills.append(PrefillSpan(start, start + q, c, blocks, mask))
        start += q
    assert start == ctx.slot_mapping.shape[0], "slot_mapping must hold one slot per new token"
    backend = ctx.attention_backend
    batch = _decode_batch(ctx, decodes, decode_seqs) if backend == "batched" and decodes else None
    paged = _paged_decode(ctx, decodes, decode_seqs) if backend == "native" and decodes else None
    return AttentionPlan(ctx.slot_mapping, bs, start, tuple(decodes), tuple(prefills), backend, batch, paged)


def _paged_decode(ctx: AttentionContext, decodes: list[DecodeRow], seqs: list[int]) -> PagedDecode:
    device = ctx.slot_mapping.device
    rows = [d.row for d in decodes]
    tables = ctx.block_tables.index_select(0, torch.tensor(seqs, dtype=torch.int64, device=device)).contiguous()
    lens = torch.tensor([d.context_len for d in decodes], dtype=torch.int64, device=device)
    return PagedDecode(torch.tensor(rows, dtype=torch.int64, device=device), tables, lens,
                       rows == list(range(len(rows))))


def _decode_batch(ctx: AttentionContext, decodes: list[DecodeRow], seqs: list[int]) -> DecodeBatch:
    """The slots each decode row reads, padded to the longest context: built once per step, shared by layers."""
    device, bs = ctx.slot_mapping.device, ctx.block_size
    lens = torch.tensor([d.context_len for d in decodes], device=device)
    longest = max(d.context_len for d in decodes)
    idx = torch.tensor(seqs, dtype=torch.int64, device=device)
    tables = ctx.block_tables.index_select(0, idx)[:, : (longest + bs - 1) // bs].clamp_min(0)
    pos = torch.arange(longest, device=device)
    valid = pos[None, :] < lens[:, None]
    slots = torch.where(valid, tables[:, pos // bs] * bs + pos % bs, 0)
    uniform = all(d.context_len == longest for d in decodes)
    rows = torch.tensor([d.row for d in decodes], dtype=torch.int64, device=device)
    return DecodeBatch(rows, slots, None if uniform else valid[:, None, None, :])
