"""Blocks of the engine's KV cache (`engine/kv_cache.py`) as the bytes a tier stores, and back.

A block's bytes are, for each cache kind in name order, `read(kind, [b])` laid out `[layers, planes,
block_size, *token_shape]`. `read` copies blocks out (a snapshot: the block may be reused right after);
`writes` turns loaded bytes into the `{kind: tensor}` that `KVCache.write` takes, which the model runner
applies on the model thread before the step that first reads those blocks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch


class DeviceBlocks:
    def __init__(self, kv_cache: Any) -> None:
        self.kv_cache = kv_cache
        self.kinds = sorted(kv_cache.tensors)
        self._shapes: dict[str, tuple[int, ...]] = {}
        self._dtypes: dict[str, torch.dtype] = {}
        self._spans: dict[str, tuple[int, int]] = {}
        at = 0
        for kind in self.kinds:
            t = kv_cache.tensors[kind]
            shape = (t.shape[0], t.shape[1], *t.shape[3:])  # one block: [layers, planes, block_size, ...]
            nbytes = int(np.prod(shape)) * t.element_size()
            self._shapes[kind], self._dtypes[kind] = shape, t.dtype
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

    def writes(self, blocks: Sequence[np.ndarray]) -> dict[str, torch.Tensor]:
        """`{kind: [layers, planes, n, ...]}` for `KVCache.write`, from n blocks' bytes."""
        stacked = np.stack([np.asarray(b, dtype=np.uint8).reshape(-1) for b in blocks])
        n = len(blocks)
        out = {}
        for kind in self.kinds:
            a, b = self._spans[kind]
            part = torch.from_numpy(np.ascontiguousarray(stacked[:, a:b])).view(self._dtypes[kind])
            out[kind] = part.view(n, *self._shapes[kind]).movedim(0, 2)
        return out
