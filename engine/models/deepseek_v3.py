"""The DeepSeek-V3 architecture: MLA attention with the compressed cache, dense first layers, then MoE layers
with shared experts and grouped top-k routing. Weights named as in `transformers` (per-expert tensors)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import torch
import torch.nn.functional as F
from recipe.engine.context import get_context
from recipe.engine.layers.attention_plan import AttentionPlan, build_attention_plan
from recipe.engine.layers.gated_mlp import GatedMLP
from recipe.engine.layers.mla_attention import MultiHeadLatentAttention
from recipe.engine.layers.moe import GroupedTopKRouter, MoE
from recipe.engine.layers.rmsnorm import RMSNorm
from recipe.engine.layers.rotary import RotaryEmbedding, rope_inv_freq, yarn_mscale
from recipe.engine.models.weights import CheckpointError, assign, assign_cat, check_all_used, fetch
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

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rotary: RotaryEmbedding, plan: AttentionPlan
    ) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, rotary, plan)
        return x + self.mlp(self.post_attention_layernorm(x))


class DeepseekV3ForCausalLM(nn.Module):
    """forward(input_ids [N], positions [N]) -> hidden [N, H] under the runner's attention context."""

    def __init__(self, c: DeepseekV3Config) -> None:
        super().__init__()
        self.config = c
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(DeepseekV3DecoderLayer(c, i) for i in range(c.num_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.rotary = self.make_rotary()
        self.lm_head = None if c.tie_word_embeddings else nn.Linear(c.hidden_size, c.vocab_size, bias=False)

    def make_rotary(self) -> RotaryEmbedding:
        """The rotary embedding of this config (rebuilt after materialising a model made on the meta device)."""
        c = self.config
        inv_freq, scale = rope_inv_freq(c.rope_parameters, c.qk_rope_head_dim, c.max_positions)
        return RotaryEmbedding(inv_freq, scale, interleaved=c.rope_interleave)

    def decoder_layers(self) -> list[DeepseekV3DecoderLayer]:
        return [cast(DeepseekV3DecoderLayer, layer) for layer in self.layers]

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        plan = build_attention_plan(get_context())
        x = self.embed_tokens(input_ids)
        cos, sin = self.rotary.cos_sin(positions, x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin, self.rotary, plan)
        return self.norm(x)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [M, H] -> fp32 logits [M, V]."""
        weight = self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        return F.linear(hidden, weight).float()

    def kv_bytes_per_block(self, block_size: int, dtype: torch.dtype) -> int:
        return sum(layer.self_attn.kv_bytes_per_block(block_size, dtype) for layer in self.decoder_layers())

    def allocate_kv_cache(
        self, num_blocks: int, block_size: int, dtype: torch.dtype, device: torch.device | str
    ) -> None:
        for layer in self.decoder_layers():
            layer.self_attn.allocate(num_blocks, block_size, dtype, device)

    def load_weights(self, source: Mapping[str, torch.Tensor]) -> None:
        """Load `transformers`-named tensors; multi-token-prediction layers (index >= num_layers) are skipped."""
        used: set[str] = set()
        c = self.config

        def one(param: torch.Tensor, name: str) -> None:
            assign(param, fetch(source, name), name)
            used.add(name)

        def stack(param: torch.Tensor, names_per_expert: list[list[str]]) -> None:
            for e, names in enumerate(names_per_expert):
                assign_cat(param[e], source, names)
                used.update(names)

        one(self.embed_tokens.weight, "model.embed_tokens.weight")
        one(self.norm.weight, "model.norm.weight")
        if self.lm_head is not None:
            one(self.lm_head.weight, "lm_head.weight")
        for i, layer in enumerate(self.decoder_layers()):
            p = f"model.layers.{i}."
            one(layer.input_layernorm.weight, p + "input_layernorm.weight")
            one(layer.post_attention_layernorm.weight, p + "post_attention_layernorm.weight")
            a = layer.self_attn
            names = ["kv_a_proj_with_mqa", "kv_a_layernorm", "kv_b_proj", "o_proj"]
            names += ["q_proj"] if c.q_lora_rank is None else ["q_a_proj", "q_a_layernorm", "q_b_proj"]
            for n in names:
                mod = getattr(a, n)
                one(mod.weight, f"{p}self_attn.{n}.weight")
                if getattr(mod, "bias", None) is not None:
                    one(mod.bias, f"{p}self_attn.{n}.bias")
            m = layer.mlp
            if isinstance(m, GatedMLP):
                self._load_mlp(m, p + "mlp.", source, used)
            else:
                assert isinstance(m, MoE)
                one(m.gate.weight, p + "mlp.gate.weight")
                one(m.gate.e_score_correction_bias, p + "mlp.gate.e_score_correction_bias")
                ex = p + "mlp.experts."
                stack(m.w_gate_up, [[f"{ex}{e}.gate_proj.weight", f"{ex}{e}.up_proj.weight"] for e in range(m.num_experts)])
                stack(m.w_down, [[f"{ex}{e}.down_proj.weight"] for e in range(m.num_experts)])
                self._load_mlp(m.shared, p + "mlp.shared_experts.", source, used)
        ignored = tuple(f"model.layers.{j}." for j in range(c.num_layers, c.num_layers + 8))
        check_all_used(source, used | ({"lm_head.weight"} if self.lm_head is None else set()), ignored)

    @staticmethod
    def _load_mlp(m: GatedMLP, prefix: str, source: Mapping[str, torch.Tensor], used: set[str]) -> None:
        names = [prefix + "gate_proj.weight", prefix + "up_proj.weight"]
        assign_cat(m.gate_up.weight, source, names)
        assign(m.down.weight, fetch(source, prefix + "down_proj.weight"), prefix + "down_proj.weight")
        used.update([*names, prefix + "down_proj.weight"])
