"""Block reads and writes over caches that attention layers own (until `engine/kv_cache.py` owns them).

Same contract as `KVCache.read/write`: kind "full" (a K and a V plane per layer, Llama) or "latent" (one
plane per layer, MLA); `read(kind, block_ids)` is `[layers, planes, n, block_size, *token_shape]`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


class LayerCaches:
    def __init__(self, model: Any) -> None:
        from recipe.engine.layers.attention import PagedAttention
        from recipe.engine.layers.mla_attention import MultiHeadLatentAttention

        self.planes: dict[str, list[list[torch.Tensor]]] = {}
        for module in model.modules():
            if isinstance(module, PagedAttention) and module.k_cache is not None and module.v_cache is not None:
                self.planes.setdefault("full", []).append([module.k_cache, module.v_cache])
            elif isinstance(module, MultiHeadLatentAttention) and module.cache is not None:
                self.planes.setdefault("latent", []).append([module.cache])
        other = hasattr(model, "cache_specs")  # several cache kinds (DeepSeek-V4): not supported yet
        if not self.planes or other:
            raise ValueError("the lower KV tiers support Llama and DeepSeek-V3 (MLA) caches, not this model's")
        self.kinds = sorted(self.planes)

    def read(self, kind: str, block_ids: Sequence[int]) -> torch.Tensor:
        layers = self.planes[kind]
        ids = torch.as_tensor(list(block_ids), dtype=torch.int64, device=layers[0][0].device)
        return torch.stack([torch.stack([p.index_select(0, ids) for p in planes]) for planes in layers])

    def write(self, kind: str, block_ids: Sequence[int], data: torch.Tensor) -> None:
        layers = self.planes[kind]
        ids = torch.as_tensor(list(block_ids), dtype=torch.int64, device=layers[0][0].device)
        for layer, planes in enumerate(layers):
            for plane, p in enumerate(planes):
                p.index_copy_(0, ids, data[layer, plane].to(device=p.device, dtype=p.dtype))
