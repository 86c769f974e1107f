"""Drives a model on a paged cache the way the engine's runner does (contiguous block tables, one
AttentionContext per step), and the `transformers` references the model tests compare against."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from recipe.engine.context import AttentionContext, reset_context, set_context


class PagedDriver:
    """Runs steps of several sequences; sequence i owns blocks [i * max_blocks, (i + 1) * max_blocks), or,
    with `shuffle_seed`, a random scattering of the pool's blocks (as a long-running block manager leaves them)."""

    def __init__(self, model: torch.nn.Module, *, num_seqs: int, max_len: int, block_size: int = 4,
                 cache_dtype: torch.dtype = torch.float32, shuffle_seed: int | None = None,
                 attention_backend: str = "batched") -> None:
        self.model, self.block_size, self.attention_backend = model, block_size, attention_backend
        self.max_blocks = (max_len + block_size - 1) // block_size
        total = num_seqs * self.max_blocks
        model.allocate_kv_cache(total, block_size, cache_dtype, "cpu")  # type: ignore[operator]
        order = list(range(total))
        if shuffle_seed is not None:
            order = torch.randperm(total, generator=torch.Generator().manual_seed(shuffle_seed)).tolist()
        self.tables = [order[i * self.max_blocks : (i + 1) * self.max_blocks] for i in range(num_seqs)]
        self.lens = [0] * num_seqs

    def table(self, seq: int) -> list[int]:
        return self.tables[seq]

    def step(self, batch: Sequence[tuple[int, Sequence[int]]]) -> torch.Tensor:
        """Feed new tokens per (sequence, token ids); return the fp32 logits of every new token, flat."""
        ids, pos, slots, qlens, clens, tables = [], [], [], [], [], []
        for seq, toks in batch:
            start = self.lens[seq]
            for j, t in enumerate(toks):
                p = start + j
                ids.append(t)
                pos.append(p)
                slots.append(self.table(seq)[p // self.block_size] * self.block_size + p % self.block_size)
            self.lens[seq] += len(toks)
            qlens.append(len(toks))
            clens.append(self.lens[seq])
            tables.append(self.table(seq))
        cu = torch.tensor([0, *torch.tensor(qlens).cumsum(0).tolist()], dtype=torch.int64)
        set_context(AttentionContext(
            query_lens=qlens, context_lens_list=clens, cu_seqlens_q=cu,
            context_lens=torch.tensor(clens, dtype=torch.int64), slot_mapping=torch.tensor(slots, dtype=torch.int64),
            block_tables=torch.tensor(tables, dtype=torch.int64), block_size=self.block_size,
            attention_backend=self.attention_backend,
        ))
        try:
            with torch.inference_mode():
                hidden = self.model(torch.tensor(ids, dtype=torch.int64), torch.tensor(pos, dtype=torch.int64))
                return self.model.compute_logits(hidden)  # type: ignore[operator]
        finally:
            reset_context()


def hf_logits(hf_model: torch.nn.Module, ids: Sequence[int]) -> torch.Tensor:
    """transformers' logits for a whole sequence, [len, V] fp32 (no cache: full recompute)."""
    with torch.inference_mode():
        return hf_model(torch.tensor([list(ids)])).logits[0].float()


def randomize_routing_bias(hf_model: torch.nn.Module, seed: int) -> None:
    """Give every router a non-zero score-correction bias, so grouped routing is exercised for real."""
    g = torch.Generator().manual_seed(seed)
    for name, buf in hf_model.named_buffers():
        if name.endswith("e_score_correction_bias"):
            buf.copy_(torch.randn(buf.shape, generator=g) * 0.05)


def hf_greedy(hf_model: torch.nn.Module, prompt: Sequence[int], n: int) -> list[int]:
    """`transformers.generate` greedy continuation of exactly `n` tokens."""
    with torch.inference_mode():
        out = hf_model.generate(  # type: ignore[operator]
            torch.tensor([list(prompt)]), max_new_tokens=n, min_new_tokens=n, do_sample=False,
            eos_token_id=None, pad_token_id=0,
        )
    return out[0, len(prompt):].tolist()


DEEPSEEK_SMALL = dict(
    vocab_size=256, hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=3,
    num_attention_heads=4, num_key_value_heads=4, n_shared_experts=1, n_routed_experts=8,
    kv_lora_rank=32, q_lora_rank=48, qk_rope_head_dim=8, v_head_dim=16, qk_nope_head_dim=16,
    n_group=4, topk_group=2, num_experts_per_tok=2, first_k_dense_replace=1, max_position_embeddings=512,
    routed_scaling_factor=2.5, bos_token_id=0, eos_token_id=1,
)


def paged_greedy(model: torch.nn.Module, prompt: Sequence[int], n: int, **driver: Any) -> list[int]:
    """The engine model's n greedy tokens after `prompt`, one sequence through a PagedDriver (hf_greedy's twin)."""
    drv = PagedDriver(model, num_seqs=1, max_len=64, **driver)
    nxt = int(drv.step([(0, list(prompt))])[-1].argmax())
    out = []
    for _ in range(n):
        out.append(nxt)
        nxt = int(drv.step([(0, [nxt])])[0].argmax())
    return out


def write_tiny_deepseek(path: Path, seed: int, **overrides: object) -> Path:
    """A DeepseekV3ForCausalLM with random weights (and random routing biases) saved to `path`."""
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    torch.manual_seed(seed)
    model = DeepseekV3ForCausalLM(DeepseekV3Config(**{**DEEPSEEK_SMALL, **overrides}))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0, 1.0 if "gate.weight" in name else 0.08)
    randomize_routing_bias(model, seed)
    model.save_pretrained(path)
    return path
