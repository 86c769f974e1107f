"""Multi-head latent attention (DeepSeek-V2/V3) over a paged cache of compressed latents.

The cache holds, per token, the normalised KV latent (kv_lora_rank) and the rotated shared rope key
(qk_rope_head_dim): nothing is expanded per head. Attention runs in the absorbed form: each head's
no-position query is mapped into latent space through the key half of `kv_b_proj`, so a cache row is the
key itself ([latent, rope key], one shared head) and its latent part is the value; the per-head value
projection is applied to the attended latent afterwards. This equals expanding K and V first.
"""

from __future__ import annotations

import torch
from recipe.engine.kv_cache import CacheSpec
from recipe.engine.layers.attention import paged_attend
from recipe.engine.layers.attention_plan import AttentionPlan
from recipe.engine.layers.rmsnorm import RMSNorm
from recipe.engine.layers.rotary import RotaryEmbedding
from torch import nn


class MultiHeadLatentAttention(nn.Module):
    def __init__(
        self, hidden_size: int, num_heads: int, q_lora_rank: int | None, kv_lora_rank: int,
        qk_nope_head_dim: int, qk_rope_head_dim: int, v_head_dim: int, scale: float,
        rms_norm_eps: float, bias: bool,
    ) -> None:
        super().__init__()
        self.num_heads, self.kv_lora_rank = num_heads, kv_lora_rank
        self.nope, self.rope, self.v_dim = qk_nope_head_dim, qk_rope_head_dim, v_head_dim
        self.scale = scale
        q_out = num_heads * (qk_nope_head_dim + qk_rope_head_dim)
        self.q_lora_rank = q_lora_rank
        if q_lora_rank is None:
            self.q_proj = nn.Linear(hidden_size, q_out, bias=False)
        else:
            self.q_a_proj = nn.Linear(hidden_size, q_lora_rank, bias=bias)
            self.q_a_layernorm = RMSNorm(q_lora_rank, rms_norm_eps)
            self.q_b_proj = nn.Linear(q_lora_rank, q_out, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(hidden_size, kv_lora_rank + qk_rope_head_dim, bias=bias)
        self.kv_a_layernorm = RMSNorm(kv_lora_rank, rms_norm_eps)
        self.kv_b_proj = nn.Linear(kv_lora_rank, num_heads * (qk_nope_head_dim + v_head_dim), bias=False)
        self.o_proj = nn.Linear(num_heads * v_head_dim, hidden_size, bias=bias)
        self.cache: torch.Tensor | None = None

    @property
    def cache_row_size(self) -> int:
        return self.kv_lora_rank + self.rope

    def cache_spec(self, kind: str, num_layers: int) -> CacheSpec:
        return CacheSpec(kind, num_layers, planes=1, token_shape=(1, self.cache_row_size))

    def bind_cache(self, view: torch.Tensor) -> None:
        """Take this layer's view of the latent cache, [1, num_blocks, block_size, 1, kv_lora_rank + rope]."""
        assert view.shape[0] == 1 and tuple(view.shape[3:]) == (1, self.cache_row_size), view.shape
        self.cache = view[0]

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rotary: RotaryEmbedding, plan: AttentionPlan
    ) -> torch.Tensor:
        """x [N, hidden] -> [N, hidden]."""
        assert self.cache is not None, "no KV cache bound (bind_kv_cache)"
        n = x.shape[0]
        if self.q_lora_rank is None:
            q = self.q_proj(x)
        else:
            q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        q_nope, q_rope = q.view(n, self.num_heads, -1).split([self.nope, self.rope], dim=-1)
        latent, k_rope = self.kv_a_proj_with_mqa(x).split([self.kv_lora_rank, self.rope], dim=-1)
        latent = self.kv_a_layernorm(latent)
        q_rope = rotary.rotate(q_rope, cos, sin)
        k_rope = rotary.rotate(k_rope[:, None, :], cos, sin)
        row = torch.cat((latent[:, None, :], k_rope), dim=-1)
        self.cache.view(-1, 1, self.cache_row_size).index_copy_(0, plan.slot_mapping, row.to(self.cache.dtype))

        w = self.kv_b_proj.weight.view(self.num_heads, self.nope + self.v_dim, self.kv_lora_rank)
        w_uk, w_uv = w[:, : self.nope, :], w[:, self.nope :, :]
        q_latent = torch.bmm(q_nope.transpose(0, 1), w_uk).transpose(0, 1)  # [N, H, lora]
        query = torch.cat((q_latent, q_rope), dim=-1)
        o_latent = paged_attend(query, plan, self.cache, None, self.scale, self.kv_lora_rank, row, None)
        o = torch.bmm(o_latent.transpose(0, 1), w_uv.transpose(1, 2)).transpose(0, 1)  # [N, H, v]
        return self.o_proj(o.reshape(n, self.num_heads * self.v_dim))
