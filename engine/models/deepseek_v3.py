"""The DeepSeek-V3 architecture: MLA attention with the compressed cache, dense first layers, then MoE layers
with shared experts and grouped top-k routing. Weights named as in `transformers` (per-expert tensors)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from recipe.engine.kv_cache import CacheSpec
from recipe.engine.layers.gated_mlp import GatedMLP
from recipe.engine.layers.mla_attention import MultiHeadLatentAttention
from recipe.engine.layers.moe import GroupedTopKRouter, MoE
from recipe.engine.layers.rmsnorm import RMSNorm
from recipe.engine.layers.rotary import RotaryEmbedding, rope_inv_freq, yarn_mscale
from recipe.engine.models.base import CacheUser, DecoderLM, ForwardBatch
from recipe.engine.models.weights import CheckpointError, WeightLoader
from torch import nn


@dataclass(frozen=True)
class DeepseekV3Config:
    """The shape of a DeepSeek-V3 model, read from a `transformers` config.json."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    moe_intermediate_size: int
    num_layers: int
    num_heads: int
    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    n_routed_experts: int
    n_shared_experts: int
    num_experts_per_tok: int
    n_group: int
    topk_group: int
    first_k_dense_replace: int
    norm_topk_prob: bool
    routed_scaling_factor: float
    rms_norm_eps: float
    max_positions: int
    tie_word_embeddings: bool
    rope_interleave: bool
    attention_bias: bool
    rope_parameters: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_hf(cls, cfg: Mapping[str, Any]) -> DeepseekV3Config:
        if cfg.get("quantization_config"):
            raise CheckpointError(
                "quantized DeepSeek-V3 checkpoints (e.g. fp8 with weight_scale_inv) are not supported; "
                "convert the checkpoint to bf16 first"
            )
        if cfg.get("hidden_act", "silu") != "silu":
            raise CheckpointError(f"unsupported hidden_act {cfg.get('hidden_act')!r}; DeepSeek-V3 uses silu")
        if cfg.get("topk_method", "noaux_tc") != "noaux_tc" or cfg.get("scoring_func", "sigmoid") != "sigmoid":
            raise CheckpointError("only sigmoid scoring with noaux_tc grouped top-k routing (DeepSeek-V3) is supported")
        rope = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
        rope.setdefault("rope_type", rope.pop("type", "default"))
        rope.setdefault("rope_theta", float(cfg.get("rope_theta", 10000.0)))
        if rope["rope_type"] == "yarn":
            rope.setdefault("original_max_position_embeddings", cfg.get("max_position_embeddings"))
        q_lora = cfg.get("q_lora_rank")
        return cls(
            vocab_size=int(cfg["vocab_size"]),
            hidden_size=int(cfg["hidden_size"]),
            intermediate_size=int(cfg["intermediate_size"]),
            moe_intermediate_size=int(cfg["moe_intermediate_size"]),
            num_layers=int(cfg["num_hidden_layers"]),
            num_heads=int(cfg["num_attention_heads"]),
            q_lora_rank=None if q_lora is None else int(q_lora),
            kv_lora_rank=int(cfg["kv_lora_rank"]),
            qk_nope_head_dim=int(cfg["qk_nope_head_dim"]),
            qk_rope_head_dim=int(cfg["qk_rope_head_dim"]),
            v_head_dim=int(cfg["v_head_dim"]),
            n_routed_experts=int(cfg["n_routed_experts"]),
            n_shared_experts=int(cfg.get("n_shared_experts") or 0),
            num_experts_per_tok=int(cfg["num_experts_per_tok"]),
            n_group=int(cfg.get("n_group") or 1),
            topk_group=int(cfg.get("topk_group") or 1),
            first_k_dense_replace=int(cfg.get("first_k_dense_replace") or 0),
            norm_topk_prob=bool(cfg.get("norm_topk_prob", True)),
            routed_scaling_factor=float(cfg.get("routed_scaling_factor", 1.0)),
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            max_positions=int(cfg.get("max_position_embeddings", 4096)),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            rope_interleave=bool(cfg.get("rope_interleave", True)),
            attention_bias=bool(cfg.get("attention_bias", False)),
            rope_parameters=rope,
        )

    @property
    def softmax_scale(self) -> float:
        """qk_head_dim^-0.5, times YaRN's mscale(factor, mscale_all_dim)^2 when the context is extended."""
        scale = (self.qk_nope_head_dim + self.qk_rope_head_dim) ** -0.5
        p = self.rope_parameters
        if p.get("rope_type", "default") != "default" and p.get("mscale_all_dim"):
            m = yarn_mscale(float(p["factor"]), float(p["mscale_all_dim"]))
            scale = scale * m * m
        return scale


class DeepseekV3DecoderLayer(nn.Module):
    def __init__(self, c: DeepseekV3Config, index: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = MultiHeadLatentAttention(
            c.hidden_size, c.num_heads, c.q_lora_rank, c.kv_lora_rank, c.qk_nope_head_dim,
            c.qk_rope_head_dim, c.v_head_dim, c.softmax_scale, c.rms_norm_eps, c.attention_bias,
        )
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mlp: nn.Module
        if index < c.first_k_dense_replace:
            self.mlp = GatedMLP(c.hidden_size, c.intermediate_size)
        else:
            router = GroupedTopKRouter(
                c.hidden_size, c.n_routed_experts, c.num_experts_per_tok, c.n_group, c.topk_group,
                c.norm_topk_prob, c.routed_scaling_factor,
            )
            self.mlp = MoE(c.hidden_size, c.moe_intermediate_size, c.n_routed_experts, c.n_shared_experts, router)

    def forward(self, x: torch.Tensor, batch: ForwardBatch) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), batch.cos, batch.sin, batch.rotary, batch.plan)
        return x + self.mlp(self.post_attention_layernorm(x))


class DeepseekV3ForCausalLM(DecoderLM):
    """forward(input_ids [N], positions [N]) -> hidden [N, H] under the runner's attention context."""

    def __init__(self, c: DeepseekV3Config) -> None:
        self.config = c
        super().__init__(c.vocab_size, c.hidden_size, c.rms_norm_eps, c.tie_word_embeddings,
                         (DeepseekV3DecoderLayer(c, i) for i in range(c.num_layers)))

    def make_rotary(self) -> RotaryEmbedding:
        c = self.config
        inv_freq, scale = rope_inv_freq(c.rope_parameters, c.qk_rope_head_dim, c.max_positions)
        return RotaryEmbedding(inv_freq, scale, interleaved=c.rope_interleave)

    def decoder_layers(self) -> list[DeepseekV3DecoderLayer]:
        return [layer for layer in self.layers if isinstance(layer, DeepseekV3DecoderLayer)]

    def cache_specs(self) -> list[CacheSpec]:
        return [self.decoder_layers()[0].self_attn.cache_spec("latent", self.config.num_layers)]

    def cache_users(self) -> Iterator[tuple[str, int, CacheUser]]:
        for i, layer in enumerate(self.decoder_layers()):
            yield "latent", i, layer.self_attn

    def ignored_weight_prefixes(self) -> tuple[str, ...]:
        """Multi-token-prediction layers (index >= num_layers) are not loaded."""
        n = self.config.num_layers
        return tuple(f"model.layers.{j}." for j in range(n, n + 8))

    def load_layer(self, w: WeightLoader, index: int, layer: nn.Module, prefix: str) -> None:
        assert isinstance(layer, DeepseekV3DecoderLayer)
        p = prefix
        w.one(layer.input_layernorm.weight, p + "input_layernorm.weight")
        w.one(layer.post_attention_layernorm.weight, p + "post_attention_layernorm.weight")
        a = layer.self_attn
        names = ["kv_a_proj_with_mqa", "kv_a_layernorm", "kv_b_proj", "o_proj"]
        names += ["q_proj"] if self.config.q_lora_rank is None else ["q_a_proj", "q_a_layernorm", "q_b_proj"]
        for n in names:
            mod = getattr(a, n)
            w.one(mod.weight, f"{p}self_attn.{n}.weight")
            if getattr(mod, "bias", None) is not None:
                w.one(mod.bias, f"{p}self_attn.{n}.bias")
        m = layer.mlp
        if isinstance(m, GatedMLP):
            _load_mlp(w, m, p + "mlp.")
            return
        assert isinstance(m, MoE)
        w.one(m.gate.weight, p + "mlp.gate.weight")
        w.one(m.gate.e_score_correction_bias, p + "mlp.gate.e_score_correction_bias")
        ex = p + "mlp.experts."
        for slot, e in m.expert_slots():  # every expert, or an expert-parallel rank's own
            w.cat(m.w_gate_up[slot], [f"{ex}{e}.gate_proj.weight", f"{ex}{e}.up_proj.weight"])
            w.cat(m.w_down[slot], [f"{ex}{e}.down_proj.weight"])
        _load_mlp(w, m.shared, p + "mlp.shared_experts.")


def _load_mlp(w: WeightLoader, m: GatedMLP, prefix: str) -> None:
    w.cat(m.gate_up.weight, [prefix + "gate_proj.weight", prefix + "up_proj.weight"])
    w.one(m.down.weight, prefix + "down_proj.weight")
