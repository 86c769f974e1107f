"""What every decoder-only model of the engine shares: embedding, the decoder loop, final norm, logits, KV
sizing and binding, and the common part of weight loading. A model file keeps only what differs.

The engine's model contract (what `ModelRunner` calls):
- `forward(input_ids [N], positions [N]) -> hidden [N, H]` under the runner's attention context;
- `compute_logits(hidden [M, H]) -> fp32 logits [M, V]`;
- `cache_specs() -> list[CacheSpec]` and `bind_kv_cache(KVCache)` (the cache itself lives in
  `engine/kv_cache.py`); `kv_bytes_per_block` sizes the pool from the specs.

A subclass builds its layers, then implements `make_rotary`, `cache_specs`, `cache_users` (which module
takes which layer's view) and `load_layer`. Each layer is called as `layer(x, batch)` with the
`ForwardBatch` of the step; a model whose residual is not a single stream (V4's hyper-connections)
overrides `run_layers`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from recipe.engine.context import get_context
from recipe.engine.kv_cache import CacheSpec, KVCache, kv_bytes_per_block
from recipe.engine.layers.attention_plan import AttentionPlan, build_attention_plan
from recipe.engine.layers.few_rows_linear import few_rows_linear
from recipe.engine.layers.quantized_linear import GROUP, quantize_linears, quantized_linear
from recipe.engine.layers.rmsnorm import RMSNorm
from recipe.engine.layers.rotary import RotaryEmbedding
from recipe.engine.models.weights import WeightLoader
from torch import nn


@dataclass(frozen=True)
class ForwardBatch:
    """Everything a decoder layer reads besides its hidden states; built once per forward."""

    input_ids: torch.Tensor  # int64 [N] (hash-routed MoE routes by token id)
    positions: torch.Tensor  # int64 [N]
    plan: AttentionPlan
    rotary: RotaryEmbedding
    cos: torch.Tensor
    sin: torch.Tensor


class CacheUser(Protocol):
    def bind_cache(self, view: torch.Tensor) -> None: ...


class DecoderLM(nn.Module):
    """Embedding -> layers -> RMSNorm -> (tied or separate) LM head."""

    config: Any

    def __init__(self, vocab_size: int, hidden_size: int, rms_norm_eps: float, tie_word_embeddings: bool,
                 layers: Iterable[nn.Module]) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab_size, hidden_size)
        self.layers = nn.ModuleList(layers)
        self.norm = RMSNorm(hidden_size, rms_norm_eps)
        self.rotary = self.make_rotary()
        self.lm_head = None if tie_word_embeddings else nn.Linear(hidden_size, vocab_size, bias=False)
        self.kv_cache: KVCache | None = None
        self.logits_head: nn.Module | None = None  # a quantised LM head (`quantize_weights`)
        self.few_rows_logits = False  # LM head through `few_rows_linear` (EngineConfig.linear_backend)

    # ----- what a model defines -----
    def make_rotary(self) -> RotaryEmbedding:
        """The rotary embedding of this config (rebuilt after materialising a model made on the meta device)."""
        raise NotImplementedError

    def cache_specs(self) -> list[CacheSpec]:
        raise NotImplementedError

    def cache_users(self) -> Iterator[tuple[str, int, CacheUser]]:
        """(kind, layer index within that kind, module) for every module that holds a cache view."""
        raise NotImplementedError

    def load_layer(self, w: WeightLoader, index: int, layer: nn.Module, prefix: str) -> None:
        raise NotImplementedError

    # ----- shared -----
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        x = self.embed_tokens(input_ids)
        cos, sin = self.rotary.cos_sin(positions, x.dtype)
        batch = ForwardBatch(input_ids, positions, build_attention_plan(get_context()), self.rotary, cos, sin)
        return self.norm(self.run_layers(x, batch))

    def run_layers(self, x: torch.Tensor, batch: ForwardBatch) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, batch)
        return x

    @property
    def head_weight(self) -> torch.Tensor:
        """The LM head's [V, H] weight: `lm_head`'s, or the embedding table where the two are tied."""
        return self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [M, H] -> fp32 logits [M, V]."""
        if self.logits_head is not None:
            return self.logits_head(hidden).float()
        return (few_rows_linear if self.few_rows_logits else F.linear)(hidden, self.head_weight).float()

    def quantize_weights(self, weight_format: str) -> int:
        """Swap the decoder layers' linears for weight-only quantised ones and give the LM head a quantised
        copy (the embedding lookup keeps its `dtype` table): "int8" / "int4" give an int8 head, the block
        formats "q8_0" / "q4_1" a q8_0 head (as the demo GGUF stores its tied head), or none when its width is
        not a multiple of 32; "dtype" changes nothing."""
        if weight_format == "dtype":
            return 0
        swapped = quantize_linears(self.layers, weight_format)
        head = self.head_weight
        if weight_format in ("int8", "int4"):
            self.logits_head = quantized_linear("int8", head)
        elif head.shape[1] % GROUP == 0:
            self.logits_head = quantized_linear("q8_0", head)
        return swapped + (self.logits_head is not None)

    def kv_bytes_per_block(self, block_size: int, dtype: torch.dtype) -> int:
        return kv_bytes_per_block(self.cache_specs(), block_size, dtype)

    def bind_kv_cache(self, cache: KVCache) -> None:
        """Hand every cache-holding module its layer's view of `cache`."""
        for kind, index, user in self.cache_users():
            user.bind_cache(cache.layer_view(kind, index))
        self.kv_cache = cache

    def allocate_kv_cache(self, num_blocks: int, block_size: int, dtype: torch.dtype,
                          device: torch.device | str) -> KVCache:
        """Allocate a `KVCache` for this model and bind it (for drivers without a `ModelRunner`)."""
        cache = KVCache(self.cache_specs(), num_blocks, block_size, dtype, device)
        self.bind_kv_cache(cache)
        return cache

    def load_weights(self, source: Mapping[str, torch.Tensor]) -> None:
        """Load `transformers`-named tensors; every tensor must be used (a tied checkpoint may still carry
        `lm_head.weight`)."""
        w = WeightLoader(source)
        w.one(self.embed_tokens.weight, "model.embed_tokens.weight")
        w.one(self.norm.weight, "model.norm.weight")
        if self.lm_head is not None:
            w.one(self.lm_head.weight, "lm_head.weight")
        for i, layer in enumerate(self.layers):
            self.load_layer(w, i, layer, f"model.layers.{i}.")
        w.finish({"lm_head.weight"} if self.lm_head is None else set(), self.ignored_weight_prefixes())

    def ignored_weight_prefixes(self) -> tuple[str, ...]:
        """Checkpoint tensors under these prefixes may go unused (e.g. multi-token-prediction layers)."""
        return ()
