"""A token embedding whose table is a GGUF file's own block-quantised rows: a lookup dequantises the rows it
reads, so the table takes its file size (a 7B's 152,064 x 3,584 Q4_K table: 306 MB, against 2.2 GB in fp32).

Each row is dequantised by `gguf_blocks.dequantize`, which computes every value with the fp32 operations of
gguf-py's `dequantize` (tests/engine/models/test_gguf_blocks.py), so a lookup equals the row of the fp32 table
the exact path loads, bit for bit, then cast to `dtype` as that table is.
"""

from __future__ import annotations

import torch
from recipe.engine.layers.gguf_blocks import NAMES, SIZES, dequantize, row_bytes
from torch import nn


class GGUFEmbedding(nn.Module):
    """forward(ids [...]) -> [..., dim] in `dtype`; `raw` is [vocab, row_bytes] uint8 rows of type `qtype`."""

    raw: torch.Tensor

    def __init__(self, raw: torch.Tensor, qtype: int, dim: int, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        assert qtype in SIZES, f"GGUF type {qtype} is not one of {sorted(NAMES.values())}"
        assert raw.dtype == torch.uint8 and raw.dim() == 2 and raw.shape[1] == row_bytes(qtype, dim)
        self.register_buffer("raw", raw)
        self.qtype, self.embedding_dim, self.num_embeddings, self.dtype = qtype, dim, raw.shape[0], dtype

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        flat = ids.reshape(-1)
        rows = dequantize(self.raw.index_select(0, flat), self.qtype, self.embedding_dim)
        return rows.to(self.dtype).view(*ids.shape, self.embedding_dim)

    @property
    def weight(self) -> torch.Tensor:
        """The whole table dequantised (a new [vocab, dim] tensor each call): for the rare caller that needs the
        matrix (a speculative draft head's tied LM head); lookups never build it."""
        return dequantize(self.raw, self.qtype, self.embedding_dim).to(self.dtype)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, blocks={NAMES[self.qtype]}, dtype={self.dtype}"
