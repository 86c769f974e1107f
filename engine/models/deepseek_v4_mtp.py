"""DeepSeek-V4 multi-token prediction (the release's `mtp.{i}.*` layers), kept for speculative decoding.

An MTP layer predicts one token further than the main model. At position p it reads the main model's final
hyper-connection streams at p (before the main head collapses them: `DeepseekV4ForCausalLM.last_streams`)
and the embedding of the token at p + 1 (the one sampled from p's logits, or a draft):

    x = e_proj(enorm(embed(token[p+1]))) + h_proj(hnorm(streams[p]))    # per stream; e broadcast over hc
    x = block(x)                                                         # one V4 decoder layer, at position p
    logits[p+2] = lm_head(norm(hc_head(x)))                              # its own hc_head and norm, shared lm_head

The embedding and the LM head are the main model's. The block's attention is a real V4 attention over the
MTP layer's own earlier rows: they live in the window pool (own columns, same block tables), written at the
positions of each call, so a sequence's calls at [p0, p1) see its rows at positions < p0 that earlier calls
wrote (rows never written read as whatever the block held: drafts then degrade, verification keeps the output
exact). The returned streams feed the next MTP call when one layer is chained for several draft tokens.
"""

from __future__ import annotations

import torch
from recipe.engine.layers.hyper_connections import HyperHead
from recipe.engine.layers.rmsnorm import RMSNorm
from recipe.engine.layers.v4_kv import V4Plan
from recipe.engine.layers.v4_rope import V4Rotary
from recipe.engine.models.deepseek_v4_config import DeepseekV4Config
from recipe.engine.models.deepseek_v4_layer import DeepseekV4DecoderLayer
from torch import nn


class DeepseekV4MTP(nn.Module):
    """MTP layer `index`: (streams [N, hc, D], embedded next tokens [N, D]) -> streams [N, hc, D]; `hidden`
    collapses streams to the [N, D] rows the shared LM head reads."""

    def __init__(self, c: DeepseekV4Config, index: int) -> None:
        super().__init__()
        d = c.hidden_size
        self.enorm = RMSNorm(d, c.rms_norm_eps)
        self.hnorm = RMSNorm(d, c.rms_norm_eps)
        self.e_proj = nn.Linear(d, d, bias=False)
        self.h_proj = nn.Linear(d, d, bias=False)
        self.block = DeepseekV4DecoderLayer(c, c.mtp_layer_types[index], c.mtp_mlp_layer_types[index])
        self.hc_head = HyperHead(d, c.hc_mult, c.hc_eps, c.rms_norm_eps)
        self.norm = RMSNorm(d, c.rms_norm_eps)

    def forward(self, streams: torch.Tensor, embedded: torch.Tensor, next_ids: torch.Tensor, positions: torch.Tensor,
                ropes: dict[str, tuple[torch.Tensor, torch.Tensor]], compress_rope: V4Rotary,
                plan: V4Plan) -> torch.Tensor:
        x = self.e_proj(self.enorm(embedded)).unsqueeze(1) + self.h_proj(self.hnorm(streams))
        return self.block(x, next_ids, positions, ropes, compress_rope, plan)

    def hidden(self, streams: torch.Tensor) -> torch.Tensor:
        return self.norm(self.hc_head(streams))
