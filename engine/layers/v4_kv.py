"""DeepSeek-V4's KV layout: several cache kinds per sequence, each a paged pool with its own block table.

- `window`: one row per token (the sliding-window key, which is also the value, plus, on compressed layers,
  the compressors' per-token projections of the window still being filled). Only the last
  `CacheSpec.window` tokens are ever read, so blocks that slid out may be released (their table entry
  becomes `RELEASED`).
- `compressed_<rate>`: one row per compressed entry (one entry per `rate` tokens): the compressed key/value
  and, for compressed sparse attention, the lightning indexer's compressed key. Grows at 1/rate.

A pool is one tensor [num_blocks, block_size, row_width] per kind; each layer owns a column slice of it, so
copying block b of every layer is one indexed copy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

RELEASED = -1  # a window block that slid out of the window and was given back


@dataclass(frozen=True)
class CacheSpec:
    """One cache kind: `tokens_per_row` tokens share one row (1, or the compression rate); `window` is how
    many trailing tokens a sequence must keep (None: the whole history); `row_width` elements per row."""

    name: str
    tokens_per_row: int
    window: int | None
    row_width: int

    def rows_for(self, num_tokens: int) -> int:
        return num_tokens // self.tokens_per_row if self.tokens_per_row > 1 else num_tokens


REPLAY_BOUNDS = "replay_bounds"  # not a cache kind: the [window_from, compressed_until] of a replaying sequence


@dataclass(frozen=True)
class V4Span:
    """Flat rows [start, end) of one sequence: its tokens at positions [pos0, pos0 + end - start), with the
    block table of every cache kind.

    A sequence rebuilding its window by bounded replay (`engine/session_cache.py`) has no window rows below
    `window_from` (they are never read: keys there are invisible) and restored compressed entries for its
    first `compressed_until` tokens (entries of windows ending at or before it are read, never recomputed).
    """

    start: int
    end: int
    pos0: int
    tables: Mapping[str, torch.Tensor]  # kind -> int64 block ids
    window_from: int = 0
    compressed_until: int = 0


@dataclass(frozen=True)
class V4Plan:
    """One step's spans. `batched`: the decode rows attend in one batched call per layer (`v4_decode_rows.py`,
    `attention_backend="batched"`) instead of the per-sequence reference loop; `tables`: every kind's block
    tables stacked [len(spans), max_blocks] (-1 padded), row i span i's (None: stacked from the spans when
    needed); `memo` keeps what the layers share within the step (the decode rows' slots)."""

    spans: tuple[V4Span, ...]
    block_size: int
    batched: bool = False
    tables: Mapping[str, torch.Tensor] | None = None
    memo: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)


class PagedRows:
    """A layer's column slice [offset, offset + width) of one kind's pool, addressed by row index."""

    def __init__(self, pool: torch.Tensor, offset: int, width: int) -> None:
        nb, bs, total = pool.shape
        self.block_size = bs
        self.flat = pool.view(nb * bs, total)[:, offset : offset + width]

    def _slots(self, table: torch.Tensor, start: int, end: int) -> torch.Tensor:
        rows = torch.arange(start, end, device=table.device)
        blocks = table[rows // self.block_size]
        assert bool((blocks >= 0).all()), "read or write of a released block"
        return blocks * self.block_size + rows % self.block_size

    def read(self, table: torch.Tensor, start: int, end: int) -> torch.Tensor:
        """Rows [start, end) -> [end - start, width]."""
        if end <= start:
            return self.flat[:0]
        return self.flat.index_select(0, self._slots(table, start, end))

    def write(self, table: torch.Tensor, start: int, values: torch.Tensor) -> None:
        if values.shape[0]:
            self.flat.index_copy_(0, self._slots(table, start, start + values.shape[0]), values.to(self.flat.dtype))


def allocate_pools(specs: list[CacheSpec], num_blocks: Mapping[str, int], block_size: int, dtype: torch.dtype,
                   device: torch.device | str) -> dict[str, torch.Tensor]:
    return {s.name: torch.zeros((num_blocks[s.name], block_size, s.row_width), dtype=dtype, device=device)
            for s in specs}
