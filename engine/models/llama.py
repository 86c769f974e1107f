"""The Llama architecture (Llama 2/3, SmolLM2) on the paged KV cache; weights named as in `transformers`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import torch
import torch.nn.functional as F
from recipe.engine.context import get_context
from recipe.engine.layers.attention import PagedAttention
from recipe.engine.layers.attention_plan import AttentionPlan, build_attention_plan
from recipe.engine.layers.gated_mlp import GatedMLP
from recipe.engine.layers.rmsnorm import RMSNorm
from recipe.engine.layers.rotary import RotaryEmbedding, rope_inv_freq
from recipe.engine.models.weights import CheckpointError, assign, assign_cat, check_all_used, fetch
from torch import nn


@dataclass(frozen=True)
class LlamaConfig:
    """The shape of a Llama model, read from a `transformers` config.json or GGUF metadata."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    max_positions: int
    tie_word_embeddings: bool
    rope_parameters: dict[str, Any] = field(default_factory=lambda: {"rope_type": "default", "rope_theta": 10000.0})
    attention_bias: bool = False
    mlp_bias: bool = False

    @classmethod
    def from_hf(cls, cfg: Mapping[str, Any]) -> LlamaConfig:
        heads = int(cfg["num_attention_heads"])
        rope = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
        rope.setdefault("rope_type", rope.pop("type", "default"))
        rope.setdefault("rope_theta", float(cfg.get("rope_theta", 10000.0)))
        if rope["rope_type"] in ("llama3", "yarn"):
            rope.setdefault("original_max_position_embeddings", cfg.get("max_position_embeddings"))
        if cfg.get("hidden_act", "silu") != "silu":
            raise CheckpointError(f"unsupported hidden_act {cfg.get('hidden_act')!r}; Llama models use silu")
        return cls(
            vocab_size=int(cfg["vocab_size"]),
            hidden_size=int(cfg["hidden_size"]),
            intermediate_size=int(cfg["intermediate_size"]),
            num_layers=int(cfg["num_hidden_layers"]),
            num_heads=heads,
            num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=int(cfg.get("head_dim") or int(cfg["hidden_size"]) // heads),
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            max_positions=int(cfg.get("max_position_embeddings", 2048)),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            rope_parameters=rope,
            attention_bias=bool(cfg.get("attention_bias", False)),
            mlp_bias=bool(cfg.get("mlp_bias", False)),
        )


class LlamaAttention(nn.Module):
    def __init__(self, c: LlamaConfig) -> None:
        super().__init__()
        self.q_size, self.kv_size = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
        self.num_heads, self.num_kv_heads, self.head_dim = c.num_heads, c.num_kv_heads, c.head_dim
        self.qkv = nn.Linear(c.hidden_size, self.q_size + 2 * self.kv_size, bias=c.attention_bias)
        self.o_proj = nn.Linear(self.q_size, c.hidden_size, bias=c.attention_bias)
        self.attn = PagedAttention(c.num_heads, c.num_kv_heads, c.head_dim, c.head_dim**-0.5)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rotary: RotaryEmbedding, plan: AttentionPlan
    ) -> torch.Tensor:
        n, h = x.shape[0], self.num_heads
        qkv = self.qkv(x).view(n, h + 2 * self.num_kv_heads, self.head_dim)
        qk = rotary.rotate(qkv[:, : h + self.num_kv_heads], cos, sin)  # q and k heads in one rotation
        o = self.attn(qk[:, :h], qk[:, h:], qkv[:, h + self.num_kv_heads :], plan)
        return self.o_proj(o.reshape(n, self.q_size))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, c: LlamaConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = LlamaAttention(c)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mlp = GatedMLP(c.hidden_size, c.intermediate_size, bias=c.mlp_bias)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rotary: RotaryEmbedding, plan: AttentionPlan
    ) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, rotary, plan)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaForCausalLM(nn.Module):
    """forward(input_ids [N], positions [N]) -> hidden [N, H] under the runner's attention context."""

    def __init__(self, c: LlamaConfig) -> None:
        super().__init__()
        self.config = c
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(LlamaDecoderLayer(c) for _ in range(c.num_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.rotary = self.make_rotary()
        self.lm_head = None if c.tie_word_embeddings else nn.Linear(c.hidden_size, c.vocab_size, bias=False)

    def make_rotary(self) -> RotaryEmbedding:
        """The rotary embedding of this config (rebuilt after materialising a model made on the meta device)."""
        c = self.config
        inv_freq, scale = rope_inv_freq(c.rope_parameters, c.head_dim, c.max_positions)
        return RotaryEmbedding(inv_freq, scale, interleaved=False)

    def decoder_layers(self) -> list[LlamaDecoderLayer]:
        return [cast(LlamaDecoderLayer, layer) for layer in self.layers]

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
        return sum(layer.self_attn.attn.kv_bytes_per_block(block_size, dtype) for layer in self.decoder_layers())

    def allocate_kv_cache(
        self, num_blocks: int, block_size: int, dtype: torch.dtype, device: torch.device | str
    ) -> None:
        for layer in self.decoder_layers():
            layer.self_attn.attn.allocate(num_blocks, block_size, dtype, device)

    def load_weights(self, source: Mapping[str, torch.Tensor]) -> None:
        """Load `transformers`-named tensors (q/k/v and gate/up are fused here); every tensor must be used."""
        used: set[str] = set()

        def one(param: torch.Tensor, name: str) -> None:
            assign(param, fetch(source, name), name)
            used.add(name)

        def cat(param: torch.Tensor, names: list[str]) -> None:
            assign_cat(param, source, names)
            used.update(names)

        one(self.embed_tokens.weight, "model.embed_tokens.weight")
        one(self.norm.weight, "model.norm.weight")
        if self.lm_head is not None:
            one(self.lm_head.weight, "lm_head.weight")
        for i, layer in enumerate(self.decoder_layers()):
            p = f"model.layers.{i}."
            one(layer.input_layernorm.weight, p + "input_layernorm.weight")
            one(layer.post_attention_layernorm.weight, p + "post_attention_layernorm.weight")
            a, m = layer.self_attn, layer.mlp
            cat(a.qkv.weight, [p + f"self_attn.{x}_proj.weight" for x in "qkv"])
            one(a.o_proj.weight, p + "self_attn.o_proj.weight")
            if a.qkv.bias is not None:
                cat(a.qkv.bias, [p + f"self_attn.{x}_proj.bias" for x in "qkv"])
                one(a.o_proj.bias, p + "self_attn.o_proj.bias")
            cat(m.gate_up.weight, [p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"])
            one(m.down.weight, p + "mlp.down_proj.weight")
            if m.gate_up.bias is not None:
                cat(m.gate_up.bias, [p + "mlp.gate_proj.bias", p + "mlp.up_proj.bias"])
                one(m.down.bias, p + "mlp.down_proj.bias")
        # A tied checkpoint may still carry a copy of the embedding as lm_head.
        check_all_used(source, used | {"lm_head.weight"} if self.lm_head is None else used)
