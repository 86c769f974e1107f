"""One DeepSeek-V4 decoder layer: attention then a mixture of experts, each entered and left through a
hyper-connection over the `hc_mult` residual streams. The multi-token-prediction layers reuse it."""

from __future__ import annotations

import torch
from recipe.engine.layers.hyper_connections import HyperConnection, expand
from recipe.engine.layers.rmsnorm import RMSNorm
from recipe.engine.layers.v4_attention import SLIDING, V4Attention
from recipe.engine.layers.v4_kv import V4Plan
from recipe.engine.layers.v4_moe import V4MoE, V4Router
from recipe.engine.layers.v4_rope import V4Rotary
from recipe.engine.models.deepseek_v4_config import DeepseekV4Config
from torch import nn

WINDOW = "window"


def compressed_kind(rate: int) -> str:
    return f"compressed_{rate}"


class DeepseekV4DecoderLayer(nn.Module):
    """streams [N, hc, D] -> streams [N, hc, D]; `kind` is the attention layer type, `mlp_kind` "hash_moe"
    (routed by token id) or "moe" (routed by score)."""

    def __init__(self, c: DeepseekV4Config, kind: str, mlp_kind: str) -> None:
        super().__init__()
        self.layer_type = kind
        self.self_attn = V4Attention(
            kind, c.hidden_size, c.num_heads, c.head_dim, c.q_lora_rank, c.o_groups, c.o_lora_rank,
            c.sliding_window, c.rate(kind), c.index_n_heads, c.index_head_dim, c.index_topk, c.rms_norm_eps,
        )
        hash_vocab = c.vocab_size if mlp_kind == "hash_moe" else None
        router = V4Router(c.hidden_size, c.n_routed_experts, c.num_experts_per_tok, c.scoring_func,
                          c.routed_scaling_factor, hash_vocab)
        self.mlp = V4MoE(c.hidden_size, c.moe_intermediate_size, c.n_routed_experts, router, c.swiglu_limit)
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.attn_hc = HyperConnection(c.hidden_size, c.hc_mult, c.hc_sinkhorn_iters, c.hc_eps, c.rms_norm_eps)
        self.ffn_hc = HyperConnection(c.hidden_size, c.hc_mult, c.hc_sinkhorn_iters, c.hc_eps, c.rms_norm_eps)

    @property
    def compressed_kind(self) -> str | None:
        return None if self.layer_type == SLIDING else compressed_kind(self.self_attn.rate)

    def forward(self, streams: torch.Tensor, token_ids: torch.Tensor, positions: torch.Tensor,
                ropes: dict[str, tuple[torch.Tensor, torch.Tensor]], compress_rope: V4Rotary,
                plan: V4Plan) -> torch.Tensor:
        post, comb, collapsed = self.attn_hc(streams)
        out = self.self_attn(self.input_layernorm(collapsed), positions,
                             ropes["main" if self.layer_type == SLIDING else "compress"], plan, WINDOW,
                             self.compressed_kind, compress_rope)
        streams = expand(streams, out, post, comb)
        post, comb, collapsed = self.ffn_hc(streams)
        return expand(streams, self.mlp(self.post_attention_layernorm(collapsed), token_ids), post, comb)
