"""The attention context of one forward step, shared by the model runner (writer) and attention layers (readers).

One step runs a batch of sequences; sequence i contributes `query_lens[i]` new tokens (a whole prompt, a
prefill chunk, or one decode token) and attends to `context_lens[i]` tokens in total (cached + new). The
new tokens are laid out flat, sequence after sequence, so `cu_seqlens_q` indexes them.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import torch


@dataclass
class AttentionContext:
    """Where each new token's K/V goes (`slot_mapping`: block_id * block_size + offset) and what each
    sequence reads (`block_tables`, padded with -1; `context_lens` includes this step's tokens)."""

    query_lens: list[int]
    context_lens_list: list[int]
    cu_seqlens_q: torch.Tensor  # int64 [B + 1]
    context_lens: torch.Tensor  # int64 [B]
    slot_mapping: torch.Tensor  # int64 [N]
    block_tables: torch.Tensor  # int64 [B, max_blocks]
    block_size: int
    kind_tables: dict[str, torch.Tensor] | None = None  # models with several cache kinds: kind -> [B, max_blocks]
    attention_backend: str = "batched"  # "reference": one attention call per sequence (EngineConfig)

    @property
    def is_decode_only(self) -> bool:
        return all(q == 1 for q in self.query_lens)


class _StepContext(threading.local):
    ctx: AttentionContext | None = None


# per thread: each engine runs its steps on its own model thread, and two engines may share a process
_CONTEXT = _StepContext()


def set_context(ctx: AttentionContext | None) -> None:
    _CONTEXT.ctx = ctx


def get_context() -> AttentionContext:
    ctx = _CONTEXT.ctx
    assert ctx is not None, "attention context not set for this step"
    return ctx


def reset_context() -> None:
    set_context(None)
