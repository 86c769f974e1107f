"""The KV cache: one tensor per cache kind, owned here; attention layers get views, block copies go through here.

Contract
- A model declares its caches with `cache_specs() -> list[CacheSpec]`. Each kind ("full" for Llama K/V,
  "latent" for MLA; V4 adds its window / compressed / state kinds) becomes one tensor laid out
  `[num_layers, planes, num_blocks, block_size, *token_shape]`: plane 0/1 are K/V for a K/V cache, a
  single plane for a latent cache. Block `b` of every layer is `tensor[:, :, b]`.
- `layer_view(kind, layer)` is `[planes, num_blocks, block_size, *token_shape]`, a view (no copy) that the
  layer writes new tokens into and attends over; the model gets its views once, through
  `bind_kv_cache(cache)`.
- `read(kind, block_ids) -> Tensor` copies those blocks of every layer out, `[num_layers, planes, n,
  block_size, *token_shape]`; `write(kind, block_ids, data)` copies such a tensor back in. These are the
  only block copies (tiers, hand-off, swap): one indexed copy per kind, never a walk over the modules.
- The block manager owns block ids; this class never decides which block holds what.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch


@dataclass(frozen=True)
class CacheSpec:
    """One cache kind: `num_layers` layers, each storing `planes` tensors of `token_shape` per token slot.
    `dtype` None = the engine's KV dtype."""

    kind: str
    num_layers: int
    planes: int
    token_shape: tuple[int, ...]
    dtype: torch.dtype | None = None

    def __post_init__(self) -> None:
        assert self.num_layers >= 1 and self.planes >= 1 and all(d >= 1 for d in self.token_shape), self

    def block_numel(self, block_size: int) -> int:
        """Elements of one block of one layer."""
        n = self.planes * block_size
        for d in self.token_shape:
            n *= d
        return n

    def bytes_per_block(self, block_size: int, dtype: torch.dtype) -> int:
        """Bytes of one block across all layers of this kind."""
        size = torch.empty((), dtype=self.dtype or dtype).element_size()
        return self.num_layers * self.block_numel(block_size) * size


def kv_bytes_per_block(specs: Sequence[CacheSpec], block_size: int, dtype: torch.dtype) -> int:
    """Bytes that one block id costs over every kind and layer (the pool's sizing unit)."""
    return sum(s.bytes_per_block(block_size, dtype) for s in specs)


class BlockStore(Protocol):
    """Block copies of every cache kind, `[num_layers, planes, n, rows per block, *row_shape]` per kind: what the
    tiers and the hand-off read and write (`KVCache`, or `KindPools` over a model's own pools)."""

    @property
    def kinds(self) -> list[str]: ...

    def read(self, kind: str, block_ids: Sequence[int]) -> torch.Tensor: ...

    def write(self, kind: str, block_ids: Sequence[int], data: torch.Tensor) -> None: ...


class KVCache:
    """The allocated caches of one model: `tensors[kind]` as laid out in the module docstring."""

    def __init__(self, specs: Sequence[CacheSpec], num_blocks: int, block_size: int, dtype: torch.dtype,
                 device: torch.device | str) -> None:
        kinds = [s.kind for s in specs]
        assert len(set(kinds)) == len(kinds), f"duplicate cache kinds {kinds}"
        assert num_blocks >= 1 and block_size >= 1
        self.specs = {s.kind: s for s in specs}
        self.num_blocks, self.block_size = num_blocks, block_size
        self.tensors = {
            s.kind: _zeros((s.num_layers, s.planes, num_blocks, block_size, *s.token_shape), s.dtype or dtype, device)
            for s in specs
        }

    @property
    def kinds(self) -> list[str]:
        return list(self.tensors)

    def layer_view(self, kind: str, layer: int) -> torch.Tensor:
        """`[planes, num_blocks, block_size, *token_shape]`: the live cache of one layer (a view)."""
        return self.tensors[kind][layer]

    def read(self, kind: str, block_ids: Sequence[int] | torch.Tensor) -> torch.Tensor:
        """A copy of blocks `block_ids` of every layer: `[num_layers, planes, n, block_size, *token_shape]`."""
        t = self.tensors[kind]
        return t.index_select(2, self._ids(block_ids, t.device))

    def write(self, kind: str, block_ids: Sequence[int] | torch.Tensor, data: torch.Tensor) -> None:
        """Copy `data` (as `read` returns it) into blocks `block_ids` of every layer."""
        t = self.tensors[kind]
        ids = self._ids(block_ids, t.device)
        expected = (*t.shape[:2], ids.numel(), *t.shape[3:])
        assert tuple(data.shape) == expected, f"{kind}: data {tuple(data.shape)} for blocks {expected}"
        t.index_copy_(2, ids, data.to(device=t.device, dtype=t.dtype))

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors.values())

    def _ids(self, block_ids: Sequence[int] | torch.Tensor, device: torch.device) -> torch.Tensor:
        ids = torch.as_tensor(block_ids, dtype=torch.int64).to(device).reshape(-1)
        assert ids.numel() == 0 or (int(ids.min()) >= 0 and int(ids.max()) < self.num_blocks), "block id out of range"
        return ids


class KindPools:
    """A model's own per-kind pools `[num_blocks, rows_per_block, row_width]` (DeepSeek-V4, each kind with its
    own block count) read and written as `KVCache` lays blocks out: one layer, one plane, `[1, 1, n, rows,
    width]`."""

    def __init__(self, pools: Mapping[str, torch.Tensor]) -> None:
        self.pools = dict(pools)

    @property
    def kinds(self) -> list[str]:
        return list(self.pools)

    def read(self, kind: str, block_ids: Sequence[int]) -> torch.Tensor:
        pool = self.pools[kind]
        return pool.index_select(0, torch.as_tensor(list(block_ids), dtype=torch.int64, device=pool.device))[None, None]

    def write(self, kind: str, block_ids: Sequence[int], data: torch.Tensor) -> None:
        pool = self.pools[kind]
        ids = torch.as_tensor(list(block_ids), dtype=torch.int64, device=pool.device)
        pool.index_copy_(0, ids, data[0, 0].to(pool.device, pool.dtype))


def _zeros(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """A zeroed cache tensor. On the CPU its pages come from calloc (numpy) and are resident only once written,
    so a pool sized for the worst case costs memory as blocks are used, not at start; same zeros either way."""
    if torch.device(device).type != "cpu":
        return torch.zeros(shape, dtype=dtype, device=device)
    nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    return torch.from_numpy(np.zeros(nbytes, dtype=np.uint8)).view(dtype).view(shape)
