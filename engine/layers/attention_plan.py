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
class AttentionPlan:
    slot_mapping: torch.Tensor
    block_size: int
    num_tokens: int
    decodes: tuple[DecodeRow, ...]
    prefills: tuple[PrefillSpan, ...]


def build_attention_plan(ctx: AttentionContext) -> AttentionPlan:
    """Derive the per-step block lists and masks from the runner's context."""
    assert len(ctx.query_lens) == len(ctx.context_lens_list), "query_lens and context_lens disagree"
    device = ctx.slot_mapping.device
    bs = ctx.block_size
    decodes, prefills = [], []
    start = 0
    for i, (q, c) in enumerate(zip(ctx.query_lens, ctx.context_lens_list, strict=True)):
        assert 1 <= q <= c, f"sequence {i}: {q} new tokens with a context of {c}"
        blocks = ctx.block_tables[i, : (c + bs - 1) // bs]
        if q == 1:
            decodes.append(DecodeRow(start, c, blocks))
        else:
            mask = None
            if c > q:
                qpos = torch.arange(c - q, c, device=device)
                mask = torch.arange(c, device=device)[None, :] <= qpos[:, None]
            prefills.append(PrefillSpan(start, start + q, c, blocks, mask))
        start += q
    assert start == ctx.slot_mapping.shape[0], "slot_mapping must hold one slot per new token"
    return AttentionPlan(ctx.slot_mapping, bs, start, tuple(decodes), tuple(prefills))
