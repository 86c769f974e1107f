"""The Llama architecture (Llama 2/3, SmolLM2) and Qwen2 (Llama with q/k/v biases and no o_proj bias, as the
DeepSeek-R1-Distill-Qwen models) on the paged KV cache; weights named as in `transformers`.

What it shares with the other models (decoder loop, logits, KV sizing, loading) lives in `base.py`."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from recipe.engine.context import get_context
from recipe.engine.kernels.fused_llama import FusedLlamaDecoder
from recipe.engine.kv_cache import CacheSpec, KVCache
from recipe.engine.layers.attention import PagedAttention
from recipe.engine.layers.gated_mlp import GatedMLP
from recipe.engine.layers.rmsnorm import RMSNorm
from recipe.engine.layers.rotary import RotaryEmbedding, rope_inv_freq
from recipe.engine.models.base import CacheUser, DecoderLM, ForwardBatch
from recipe.engine.models.weights import CheckpointError, WeightLoader
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
    attention_bias: bool = False  # biases on q, k, v and o (Llama's `attention_bias`)
    mlp_bias: bool = False
    qkv_bias: bool = False  # biases on q, k, v only (Qwen2)

    @classmethod
    def from_hf(cls, cfg: Mapping[str, Any]) -> LlamaConfig:
        """A Llama or Qwen2 (`model_type` "qwen2") config.json; Qwen2's sliding window is not supported."""
        heads = int(cfg["num_attention_heads"])
        qwen2 = cfg.get("model_type") == "qwen2"
        if qwen2 and cfg.get("use_sliding_window"):
            raise CheckpointError("Qwen2 with use_sliding_window is not supported")
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
            qkv_bias=qwen2,
        )


class LlamaAttention(nn.Module):
    def __init__(self, c: LlamaConfig) -> None:
        super().__init__()
        self.q_size, self.kv_size = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
        self.num_heads, self.num_kv_heads, self.head_dim = c.num_heads, c.num_kv_heads, c.head_dim
        self.qkv = nn.Linear(c.hidden_size, self.q_size + 2 * self.kv_size, bias=c.attention_bias or c.qkv_bias)
        self.o_proj = nn.Linear(self.q_size, c.hidden_size, bias=c.attention_bias)
        self.attn = PagedAttention(c.num_heads, c.num_kv_heads, c.head_dim, c.head_dim**-0.5)

    def forward(self, x: torch.Tensor, batch: ForwardBatch) -> torch.Tensor:
        n, h = x.shape[0], self.num_heads
        qkv = self.qkv(x).view(n, h + 2 * self.num_kv_heads, self.head_dim)
        qk = batch.rotary.rotate(qkv[:, : h + self.num_kv_heads], batch.cos, batch.sin)  # q and k in one rotation
        o = self.attn(qk[:, :h], qk[:, h:], qkv[:, h + self.num_kv_heads :], batch.plan)
        return self.o_proj(o.reshape(n, self.q_size))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, c: LlamaConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = LlamaAttention(c)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mlp = GatedMLP(c.hidden_size, c.intermediate_size, bias=c.mlp_bias)

    def forward(self, x: torch.Tensor, batch: ForwardBatch) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), batch)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaForCausalLM(DecoderLM):
    """forward(input_ids [N], positions [N]) -> hidden [N, H] under the runner's attention context.

    With `decode_backend = "fused"` (set by the model runner from `EngineConfig.decode_backend`), a decode-only
    step, or one of at most `MAX_SHARED_ROWS` tokens (a verify step, a short prefill), runs all layers in one
    native call (`engine/kernels/fused_llama.py`) where that applies, and an fp32 LM head runs through the same
    kernel's product on every step; every other step, and every model it cannot read, takes the layered path and
    torch's head."""

    def __init__(self, c: LlamaConfig) -> None:
        self.config = c
        super().__init__(c.vocab_size, c.hidden_size, c.rms_norm_eps, c.tie_word_embeddings,
                         (LlamaDecoderLayer(c) for _ in range(c.num_layers)))
        self.decode_backend = "layers"
        self._fused: FusedLlamaDecoder | bool | None = False  # False: not built yet; None: does not apply
        self.gguf_blocks: Any = None  # the file's block-quantised tensors, where loaded from a GGUF

    def _fused_decoder(self) -> FusedLlamaDecoder | None:
        """The fused step's descriptors, built on first use; None with `decode_backend="layers"` or where it does
        not apply."""
        if self.decode_backend != "fused":
            return None
        if self._fused is False:
            self._fused = FusedLlamaDecoder.build(self)
        return self._fused if isinstance(self._fused, FusedLlamaDecoder) else None

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        fused = self._fused_decoder()
        if fused is not None and fused.applies(ctx := get_context()):
            x = self.embed_tokens(input_ids)
            cos, sin = self.rotary.cos_sin(positions, x.dtype)
            return fused(x, cos, sin, positions, ctx)
        return super().forward(input_ids, positions)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """With the fused step, an fp32 LM head runs through its native product on every step (prefill rows
        too), so a row's logits never depend on the rest of the batch; otherwise the base class's head."""
        fused = self._fused_decoder()
        if fused is not None and fused.has_head and hidden.dtype == torch.float32:
            return fused.logits(hidden)
        return super().compute_logits(hidden)

    def bind_kv_cache(self, cache: KVCache) -> None:
        super().bind_kv_cache(cache)
        self._fused = False  # the descriptors point at the cache: rebuilt on the next fused step

    def quantize_weights(self, weight_format: str) -> int:
        """"gguf" / "gguf_q8": the GGUF file's own blocks (`gguf_weights.py`); else the base class's formats."""
        self._fused = False
        if weight_format in ("gguf", "gguf_q8"):
            from recipe.engine.models.gguf_weights import use_file_blocks

            return use_file_blocks(self, round_x=weight_format == "gguf_q8")
        return super().quantize_weights(weight_format)

    def make_rotary(self) -> RotaryEmbedding:
        """`rope_parameters["freq_factors"]` (a GGUF's `rope_freqs.weight`, as llama.cpp writes llama3 scaling)
        divides each default inverse frequency, as llama.cpp does."""
        c = self.config
        params = {k: v for k, v in c.rope_parameters.items() if k != "freq_factors"}
        inv_freq, scale = rope_inv_freq(params, c.head_dim, c.max_positions)
        if "freq_factors" in c.rope_parameters:
            factors = torch.tensor(c.rope_parameters["freq_factors"], dtype=torch.float32)
            if factors.shape != inv_freq.shape:
                raise CheckpointError(f"rope_freqs has {factors.numel()} factors, head_dim {c.head_dim} needs "
                                      f"{inv_freq.numel()}")
            inv_freq = inv_freq / factors
        return RotaryEmbedding(inv_freq, scale, interleaved=False)

    def decoder_layers(self) -> list[LlamaDecoderLayer]:
        return [layer for layer in self.layers if isinstance(layer, LlamaDecoderLayer)]

    def cache_specs(self) -> list[CacheSpec]:
        return [self.decoder_layers()[0].self_attn.attn.cache_spec("full", self.config.num_layers)]

    def cache_users(self) -> Iterator[tuple[str, int, CacheUser]]:
        for i, layer in enumerate(self.decoder_layers()):
            yield "full", i, layer.self_attn.attn

    def load_layer(self, w: WeightLoader, index: int, layer: nn.Module, prefix: str) -> None:
        """q/k/v and gate/up are fused here."""
        assert isinstance(layer, LlamaDecoderLayer)
        p = prefix
        w.one(layer.input_layernorm.weight, p + "input_layernorm.weight")
        w.one(layer.post_attention_layernorm.weight, p + "post_attention_layernorm.weight")
        a, m = layer.self_attn, layer.mlp
        w.cat(a.qkv.weight, [p + f"self_attn.{x}_proj.weight" for x in "qkv"])
        w.one(a.o_proj.weight, p + "self_attn.o_proj.weight")
        if a.qkv.bias is not None:
            w.cat(a.qkv.bias, [p + f"self_attn.{x}_proj.bias" for x in "qkv"])
        if a.o_proj.bias is not None:
            w.one(a.o_proj.bias, p + "self_attn.o_proj.bias")
        w.cat(m.gate_up.weight, [p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"])
        w.one(m.down.weight, p + "mlp.down_proj.weight")
        if m.gate_up.bias is not None:
            w.cat(m.gate_up.bias, [p + "mlp.gate_proj.bias", p + "mlp.up_proj.bias"])
            w.one(m.down.bias, p + "mlp.down_proj.bias")
