"""Blocks of the engine's KV cache as the bytes a tier stores, and back.

The cache is anything with `kinds` (or `tensors` keyed by kind), `read(kind, block_ids) -> [layers, planes,
n, block_size, *token_shape]` and `write(kind, block_ids, data)`: `engine/kv_cache.py`, or `LayerCaches`
over layer-owned caches. A block's bytes are, for each kind in name order, its `[layers, planes,
block_size, ...]` slice. `read` copies blocks out (a snapshot: the block may be reused right after);
`writer` returns the copy back in, which the model runner runs on the model thread before the step that
first reads those blocks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch


class DeviceBlocks:
    def __init__(self, kv_cache: Any) -> None:
        self.kv_cache = kv_cache
        self.kinds: list[str] = sorted(getattr(kv_cache, "kinds", None) or kv_cache.tensors)
        self._shapes: dict[str, tuple[int, ...]] = {}
        self._dtypes: dict[str, torch.dtype] = {}
        self._spans: dict[str, tuple[int, int]] = {}
        at = 0
        for kind in self.kinds:
            probe = kv_cache.read(kind, [0])  # [layers, planes, 1, block_size, ...]
            shape = (probe.shape[0], probe.shape[1], *probe.shape[3:])
            nbytes = int(np.prod(shape)) * probe.element_size()
            self._shapes[kind], self._dtypes[kind] = shape, probe.dtype
            self._spans[kind] = (at, at + nbytes)
            at += nbytes
        self.kv_bytes = at

    def read(self, block_ids: Sequence[int]) -> np.ndarray:
        """uint8 [n, kv_bytes]: a copy of these blocks' KV."""
        n = len(block_ids)
        out = np.empty((n, self.kv_bytes), dtype=np.uint8)
        for kind in self.kinds:
            a, b = self._spans[kind]
            data = self.kv_cache.read(kind, list(block_ids))  # [layers, planes, n, ...]
            dst = torch.from_numpy(out[:, a:b]).view(self._dtypes[kind]).view(n, *self._shapes[kind])
            dst.copy_(data.movedim(2, 0))
        return out

    def writer(self, block_ids: Sequence[int], blocks: Sequence[np.ndarray]) -> Callable[[], None]:
        """The copy of n blocks' bytes into device blocks `block_ids` (run it on the model thread)."""
        stacked = np.stack([np.asarray(b, dtype=np.uint8).reshape(-1) for b in blocks])
        ids, n = list(block_ids), len(blocks)
        data = {}
        for kind in self.kinds:
            a, b = self._spans[kind]
            part = torch.from_numpy(np.ascontiguousarray(stacked[:, a:b])).view(self._dtypes[kind])
            data[kind] = part.view(n, *self._shapes[kind]).movedim(0, 2)

        def write() -> None:
            for kind, tensor in data.items():
                self.kv_cache.write(kind, ids, tensor)

        return write
