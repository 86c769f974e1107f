"""A tiny Llama-like model honouring the engine's model contract, with a naive paged attention.

It lets the engine's machinery be tested on its real code paths without the models part: `forward` reads
the attention context (writes new K/V into the paged cache through `slot_mapping`, attends through the
block tables), and `full_logits` computes the same network without any cache, as the recompute oracle.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from recipe.engine.context import get_context
from torch import nn

VOCAB = 97
EOS = 96


@dataclass(frozen=True)
class TinyInfo:
    name: str = "tiny"
    architecture: str = "llama"
    vocab_size: int = VOCAB
    context_length: int = 512
    eos_token_ids: tuple[int, ...] = (EOS,)
    bos_token_id: int | None = None
    tokenizer_json: str = ""
    chat_format: str = "chatml"
    num_layers: int = 2
    hidden_size: int = 32
    num_kv_heads: int = 2
    head_dim: int = 16


class TinyPagedLM(nn.Module):
    def __init__(self, seed: int = 0, dtype: torch.dtype = torch.float64, layers: int = 2, hidden: int = 32,
                 heads: int = 2, max_pos: int = 512) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.hidden, self.heads, self.head_dim = hidden, heads, hidden // heads

        def w(*shape: int, scale: float = 1.0) -> nn.Parameter:
            return nn.Parameter(torch.randn(*shape, generator=g, dtype=dtype) * scale, requires_grad=False)

        self.embed = w(VOCAB, hidden)
        self.pos = w(max_pos, hidden, scale=0.5)
        self.qkv = nn.ParameterList([w(hidden, 3 * hidden, scale=hidden ** -0.5) for _ in range(layers)])
        self.o = nn.ParameterList([w(hidden, hidden, scale=hidden ** -0.5) for _ in range(layers)])
        self.mlp = nn.ParameterList([w(hidden, hidden, scale=hidden ** -0.5) for _ in range(layers)])
        self.head = w(hidden, VOCAB, scale=3 * hidden ** -0.5)
        self.caches: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.forward_calls = 0
        self.forward_tokens = 0

    # ----- the engine's contract -----
    def kv_bytes_per_block(self, block_size: int, dtype: torch.dtype) -> int:
        return 2 * len(self.qkv) * block_size * self.hidden * torch.empty((), dtype=dtype).element_size()

    def allocate_kv_cache(self, num_blocks: int, block_size: int, dtype: torch.dtype, device: object) -> None:
        shape = (num_blocks, block_size, self.heads, self.head_dim)
        self.caches = [(torch.zeros(shape, dtype=dtype), torch.zeros(shape, dtype=dtype)) for _ in self.qkv]

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        ctx = get_context()
        self.forward_calls += 1
        self.forward_tokens += int(input_ids.numel())
        x = self.embed[input_ids] + self.pos[positions]
        cu = ctx.cu_seqlens_q.tolist()
        for layer, (k_cache, v_cache) in enumerate(self.caches):
            q, k, v = (x @ self.qkv[layer]).view(-1, 3, self.heads, self.head_dim).unbind(1)
            k_cache.view(-1, self.heads, self.head_dim)[ctx.slot_mapping] = k.to(k_cache.dtype)
            v_cache.view(-1, self.heads, self.head_dim)[ctx.slot_mapping] = v.to(v_cache.dtype)
            out = torch.empty_like(q)
            for b, (qlen, clen) in enumerate(zip(ctx.query_lens, ctx.context_lens_list, strict=True)):
                table = ctx.block_tables[b]
                table = table[table >= 0]
                keys = k_cache[table].flatten(0, 1)[:clen]
                vals = v_cache[table].flatten(0, 1)[:clen]
                out[cu[b]:cu[b + 1]] = _attend(q[cu[b]:cu[b + 1]], keys, vals, clen - qlen)
            x = x + out.reshape(-1, self.hidden) @ self.o[layer]
            x = x + torch.tanh(x @ self.mlp[layer])
        return x

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return (hidden @ self.head).float()

    # ----- the oracle: the same network without any cache -----
    @torch.inference_mode()
    def full_logits(self, ids: list[int]) -> torch.Tensor:
        t = torch.tensor(ids)
        x = self.embed[t] + self.pos[torch.arange(len(ids))]
        for layer in range(len(self.qkv)):
            q, k, v = (x @ self.qkv[layer]).view(-1, 3, self.heads, self.head_dim).unbind(1)
            x = x + _attend(q, k, v, 0).reshape(-1, self.hidden) @ self.o[layer]
            x = x + torch.tanh(x @ self.mlp[layer])
        return self.compute_logits(x)


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, offset: int) -> torch.Tensor:
    """Causal attention of queries at positions offset.. over keys at positions 0.."""
    scores = torch.einsum("qhd,khd->hqk", q, k) / q.shape[-1] ** 0.5
    qpos = torch.arange(q.shape[0]).unsqueeze(1) + offset
    kpos = torch.arange(k.shape[0]).unsqueeze(0)
    scores = scores.masked_fill(kpos > qpos, float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v)


def greedy_by_recompute(model: TinyPagedLM, prompt: list[int], max_tokens: int, eos: int | None = EOS) -> list[int]:
    """Greedy continuation recomputing the whole sequence at every step (no cache, batch of one)."""
    ids = list(prompt)
    out: list[int] = []
    for _ in range(max_tokens):
        tok = int(model.full_logits(ids)[-1].argmax())
        if tok == eos:
            break
        out.append(tok)
        ids.append(tok)
    return out


def make_prompts(n: int, lo: int, hi: int, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(lo, hi + 1, (n,), generator=g).tolist()
    return [torch.randint(0, EOS, (length,), generator=g).tolist() for length in lengths]
