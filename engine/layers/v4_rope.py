"""DeepSeek-V4 rotary embedding: interleaved pairs (x[2i], x[2i+1]) rotated on the trailing `rope_dim` channels
of each head, the leading channels left as they are; the output stays interleaved. Two tables exist: "main"
(sliding-window layers) and "compress" (compressed layers, their compressors and indexers). A step makes each
table's complex factors once (`V4Rotary.factors`: forward and back) and every rotation of the step reuses them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from recipe.engine.layers.cast import as_dtype
from recipe.engine.layers.rotary import rope_inv_freq
from torch import nn


class V4Rotary(nn.Module):
    """cos/sin [N, rope_dim/2] for positions, from one `rope_parameters` entry."""

    def __init__(self, params: Mapping[str, Any], rope_dim: int, max_positions: int) -> None:
        super().__init__()
        inv_freq, scale = rope_inv_freq(params, rope_dim, max_positions)
        self.inv_freq: torch.Tensor
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.scale = scale

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        inv_freq = self.inv_freq if self.inv_freq.device == positions.device else self.inv_freq.to(positions.device)
        freqs = as_dtype(positions[:, None], torch.float32) * inv_freq
        return as_dtype(freqs.cos() * self.scale, dtype), as_dtype(freqs.sin() * self.scale, dtype)

    def cis(self, positions: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """cos + i sin [N, rope_dim/2], complex64, from `cos_sin` in `dtype` (so rounded as the tables are)."""
        cos, sin = self.cos_sin(positions, dtype)
        return torch.complex(as_dtype(cos, torch.float32), as_dtype(sin, torch.float32))

    def factors(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """(cis, its conjugate): the rotation to `positions` and back, for a whole step."""
        cis = self.cis(positions, dtype)
        return cis, torch.conj_physical(cis)


def rotate_tail(x: torch.Tensor, cis: torch.Tensor) -> torch.Tensor:
    """Rotate the last 2 * cis.shape[-1] channels of x [N, ..., D] by per-token factors cis [N, rope_dim/2]
    (`V4Rotary.cis`; its conjugate rotates back). Computed in fp32 as one complex product per pair (a few ops
    per call where the pairwise formula took twenty: a V4 decode step makes dozens of these calls), returned
    in x's dtype."""
    half = cis.shape[-1]
    split = x.shape[-1] - 2 * half
    if x.dim() > 2:
        cis = cis.view(cis.shape[0], *([1] * (x.dim() - 2)), half)
    pairs = torch.view_as_complex(as_dtype(x[..., split:], torch.float32).unflatten(-1, (half, 2)))
    rotated = torch.view_as_real(pairs * cis).flatten(-2)
    return torch.cat((x[..., :split], as_dtype(rotated, x.dtype)), dim=-1)
