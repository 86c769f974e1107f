"""The DeepSeek-V4 architecture (as `transformers` 5.24 defines `DeepseekV4ForCausalLM`).

Each token carries `hc_mult` residual streams (hyper-connections). A layer is attention (sliding window,
plus compressed sparse or heavily compressed entries of the whole history, per `layer_types`) then a
mixture of experts (hash-routed by token id or score-routed, per `mlp_layer_types`), each entered and left
through a hyper-connection. The KV layout is several cache kinds (`cache_specs`): the window kind keeps
the last tokens only, the compressed kinds one row per `rate` tokens. Multi-token-prediction layers, when
the checkpoint has them, are loaded (`mtp`) and run by `mtp_forward` for a speculative drafter
(`deepseek_v4_mtp.py` states the contract).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F
from recipe.engine.kv_kinds import rows_per_block, tokens_per_block
from recipe.engine.layers.hyper_connections import HyperHead
from recipe.engine.layers.rmsnorm import RMSNorm
from recipe.engine.layers.v4_attention import CSA, HCA, SLIDING
from recipe.engine.layers.v4_kv import CacheSpec, PagedRows, V4Plan, V4Span
from recipe.engine.layers.v4_rope import V4Rotary
from recipe.engine.models.deepseek_v4_config import DeepseekV4Config
from recipe.engine.models.deepseek_v4_layer import WINDOW, DeepseekV4DecoderLayer, compressed_kind
from recipe.engine.models.deepseek_v4_mtp import DeepseekV4MTP
from recipe.engine.models.deepseek_v4_weights import load_v4_weights
from torch import nn


class DeepseekV4ForCausalLM(nn.Module):
    """forward(input_ids [N], positions [N], plan) -> hidden [N, H]."""

    # EngineConfig.attention_backend=None picks this: one attention call per layer for a step's decode rows
    default_attention_backend = "batched"

    def __init__(self, c: DeepseekV4Config) -> None:
        super().__init__()
        self.config = c
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(DeepseekV4DecoderLayer(c, c.layer_types[i], c.mlp_layer_types[i])
                                    for i in range(c.num_layers))
        self.hc_head = HyperHead(c.hidden_size, c.hc_mult, c.hc_eps, c.rms_norm_eps)
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.lm_head = None if c.tie_word_embeddings else nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        self.rotary = self.make_rotary()
        # built from the config; the loader empties it when the checkpoint has no `mtp.*` tensors (as one
        # `transformers` writes), so size the KV cache after loading
        self.mtp = nn.ModuleList(DeepseekV4MTP(c, i) for i in range(c.num_mtp_layers))
        self.last_streams: torch.Tensor | None = None  # [N, hc, D] of the last forward, kept when `mtp` is loaded
        self.pools: dict[str, torch.Tensor] = {}

    def make_rotary(self) -> nn.ModuleDict:
        """The "main" and "compress" RoPE tables (rebuilt after materialising a model made on the meta device)."""
        c = self.config
        return nn.ModuleDict({name: V4Rotary(p, c.rope_head_dim, c.max_positions)
                              for name, p in c.rope_parameters.items()})

    def decoder_layers(self) -> list[DeepseekV4DecoderLayer]:
        return [layer for layer in self.layers if isinstance(layer, DeepseekV4DecoderLayer)]

    def cache_layers(self) -> list[DeepseekV4DecoderLayer]:
        """Every layer that keeps cache rows: the decoder layers, then the MTP layers' blocks."""
        return self.decoder_layers() + [m.block for m in self.mtp if isinstance(m, DeepseekV4MTP)]

    # ----- KV layout ------------------------------------------------------------------------------------
    def cache_specs(self) -> list[CacheSpec]:
        """The window kind, then one compressed kind per compression rate in use."""
        layers = self.cache_layers()
        lookback = max(layer.self_attn.lookback for layer in layers)
        specs = [CacheSpec(WINDOW, 1, lookback, sum(layer.self_attn.window_row_width for layer in layers))]
        widths: dict[int, int] = {}
        for layer in layers:
            if layer.layer_type != SLIDING:
                rate = layer.self_attn.rate
                widths[rate] = widths.get(rate, 0) + layer.self_attn.compressed_row_width
        specs += [CacheSpec(compressed_kind(rate), rate, None, w) for rate, w in sorted(widths.items())]
        return specs

    def exact_replay_tokens(self) -> int:
        """Tokens to replay before a point whose compressed entries are restored, so that every layer's window
        rows (and compressor records) at the point are exactly those of an uninterrupted run.

        Layer L's rows at position p depend on layer L-1's rows at [p - W + 1, p] (sliding window W) and on
        compressed entries, which are restored; MoE, hyper-connections and norms are per token. So a replay
        from r is exact at layer L for p >= r + sum of (W - 1) over the layers below L, and the next token
        reads layer L's rows [point - lookback_L, point): the replay must start `max_L (lookback_L + sum_{j<L}
        (W_j - 1))` tokens back. Stacked window layers widen it by W - 1 each: 7 + 3 * 7 = 28 for four layers
        of window 8; 127 + 42 * 127 = 5,461 for 43 layers of window 128."""
        need, below = 0, 0
        for layer in self.decoder_layers():
            a = layer.self_attn
            need = max(need, a.lookback + below)
            below += a.window - 1
        return need

    def kv_bytes_per_block(self, block_size: int, dtype: torch.dtype) -> int:
        """Bytes per window block's worth of tokens: one window block plus each compressed kind's share."""
        size = torch.empty((), dtype=dtype).element_size()
        total = 0.0
        for s in self.cache_specs():
            rows = rows_per_block(s, block_size)
            total += rows * s.row_width * size * block_size / tokens_per_block(s, block_size)
        return int(total)

    def attach_pools(self, pools: Mapping[str, torch.Tensor]) -> None:
        """Give each layer its column slices of the per-kind pools [num_blocks, rows_per_block, row_width]."""
        self.pools = dict(pools)
        offsets: dict[str, int] = {}
        for layer in self.cache_layers():
            a = layer.self_attn
            off = offsets.get(WINDOW, 0)
            a.window_rows = PagedRows(self.pools[WINDOW], off, a.window_row_width)
            offsets[WINDOW] = off + a.window_row_width
            kind = layer.compressed_kind
            if kind is not None:
                off = offsets.get(kind, 0)
                a.compressed_rows = PagedRows(self.pools[kind], off, a.compressed_row_width)
                offsets[kind] = off + a.compressed_row_width

    def allocate_kv_cache(self, num_blocks: int | Mapping[str, int], block_size: int, dtype: torch.dtype,
                          device: torch.device | str) -> None:
        """One pool per kind; `num_blocks` per kind, or one number for every kind."""
        specs = self.cache_specs()
        counts = num_blocks if isinstance(num_blocks, Mapping) else {s.name: num_blocks for s in specs}
        self.attach_pools({s.name: torch.zeros((counts[s.name], rows_per_block(s, block_size), s.row_width),
                                               dtype=dtype, device=device) for s in specs})

    # ----- forward --------------------------------------------------------------------------------------
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, plan: V4Plan | None = None) -> torch.Tensor:
        plan = self._plan(plan)
        x = self.embed_tokens(input_ids)
        ropes = self._ropes(positions, x.dtype)
        compress_rope = self.rotary["compress"]
        assert isinstance(compress_rope, V4Rotary)
        streams = x.unsqueeze(1).expand(-1, self.config.hc_mult, -1).contiguous()
        for layer in self.decoder_layers():
            streams = layer(streams, input_ids, positions, ropes, compress_rope, plan)
        self.last_streams = streams if len(self.mtp) else None
        return self.norm(self.hc_head(streams))

    def mtp_forward(self, streams: torch.Tensor, next_ids: torch.Tensor, positions: torch.Tensor,
                    plan: V4Plan | None = None, depth: int = 0, logits_rows: torch.Tensor | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        """MTP layer `depth` at `positions` [N]: streams [N, hc, D] (`last_streams` rows at those positions,
        or a previous call's output) and the tokens at positions + 1 `next_ids` [N] -> (fp32 logits [N, V]
        for the tokens at positions + 2, the layer's output streams [N, hc, D]). Writes the layer's cache rows
        at `positions` through `plan`'s block tables (default: the runner's current step). `logits_rows`: only
        those rows' logits (a drafter's catch-up over a prefill needs the last row's, not [N, V])."""
        assert depth < len(self.mtp), "this checkpoint has no multi-token-prediction layer here"
        mtp = self.mtp[depth]
        assert isinstance(mtp, DeepseekV4MTP)
        plan = self._plan(plan)
        embedded = self.embed_tokens(next_ids)
        compress_rope = self.rotary["compress"]
        assert isinstance(compress_rope, V4Rotary)
        out = mtp(streams, embedded, next_ids, positions, self._ropes(positions, embedded.dtype), compress_rope, plan)
        return self.compute_logits(mtp.hidden(out if logits_rows is None else out.index_select(0, logits_rows))), out

    def _plan(self, plan: V4Plan | None) -> V4Plan:
        if plan is None:
            from recipe.engine.layers.v4_plan import plan_from_context

            plan = plan_from_context()
        return plan

    def _ropes(self, positions: torch.Tensor, dtype: torch.dtype) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        ropes = {}
        for name, rope in self.rotary.items():
            assert isinstance(rope, V4Rotary)
            ropes[name] = rope.factors(positions, dtype)
        return ropes

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [M, H] -> fp32 logits [M, V]."""
        weight = self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        return F.linear(hidden, weight).float()

    def load_weights(self, source: Mapping[str, torch.Tensor]) -> None:
        load_v4_weights(self, source)


__all__ = ["CSA", "HCA", "SLIDING", "WINDOW", "DeepseekV4Config", "DeepseekV4DecoderLayer", "DeepseekV4ForCausalLM",
           "DeepseekV4MTP", "V4Span", "compressed_kind"]
