"""Rotary position embeddings: inverse frequencies (default, llama3, yarn) and their application.

Two layouts of the rotated dimensions exist. Llama (and GGUF after un-permutation) rotates the pair
(x[i], x[i + d/2]) ("half-split"); DeepSeek checkpoints with `rope_interleave` rotate (x[2i], x[2i+1]) and,
like `transformers`, emit the result de-interleaved (evens first, then odds). Dot products only need Q and K
to share a layout, and the MLA cache stores the emitted layout.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn


class RopeConfigError(ValueError):
    """The checkpoint asks for a RoPE variant this engine does not implement."""


def _default_inv_freq(base: float, dim: int) -> torch.Tensor:
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float32) / dim))


def _llama3_inv_freq(base: float, dim: int, p: Mapping[str, Any]) -> torch.Tensor:
    inv_freq = _default_inv_freq(base, dim)
    factor = float(p["factor"])
    low, high = float(p["low_freq_factor"]), float(p["high_freq_factor"])
    old_len = float(p["original_max_position_embeddings"])
    low_wavelen, high_wavelen = old_len / low, old_len / high
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


def yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    """YaRN's magnitude correction 0.1 * mscale * ln(scale) + 1 (1 when not extending)."""
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn_inv_freq(base: float, dim: int, p: Mapping[str, Any], max_positions: int) -> tuple[torch.Tensor, float]:
    original = int(p.get("original_max_position_embeddings") or max_positions)
    factor = p.get("factor")
    factor = float(factor) if factor is not None else max_positions / original
    attention_factor = p.get("attention_factor")
    mscale, mscale_all_dim = p.get("mscale"), p.get("mscale_all_dim")
    if attention_factor is None:
        if mscale and mscale_all_dim:
            attention_factor = yarn_mscale(factor, float(mscale)) / yarn_mscale(factor, float(mscale_all_dim))
        else:
            attention_factor = yarn_mscale(factor)
    beta_fast = float(p.get("beta_fast") or 32)
    beta_slow = float(p.get("beta_slow") or 1)

    def correction_dim(rotations: float) -> float:
        return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if p.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    pos_freqs = base ** (torch.arange(0, dim, 2).to(torch.float32) / dim)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
    keep = 1 - ramp
    return interpolation * (1 - keep) + extrapolation * keep, float(attention_factor)


def rope_inv_freq(
    rope_parameters: Mapping[str, Any], dim: int, max_positions: int
) -> tuple[torch.Tensor, float]:
    """Inverse frequencies [dim/2] and the cos/sin scale for a `transformers`-style `rope_parameters` dict."""
    kind = rope_parameters.get("rope_type", rope_parameters.get("type", "default"))
    base = float(rope_parameters["rope_theta"])
    if kind == "default":
        return _default_inv_freq(base, dim), 1.0
    if kind == "llama3":
        return _llama3_inv_freq(base, dim, rope_parameters), 1.0
    if kind == "yarn":
        return _yarn_inv_freq(base, dim, rope_parameters, max_positions)
    raise RopeConfigError(f"unsupported rope_type {kind!r}; supported: default, llama3, yarn")


class RotaryEmbedding(nn.Module):
    """cos/sin for a step's positions, computed once per forward and shared by every layer."""

    def __init__(self, inv_freq: torch.Tensor, scale: float, interleaved: bool) -> None:
        super().__init__()
        self.inv_freq: torch.Tensor
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.scale = scale
        self.interleaved = interleaved

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """[N, 1, dim/2] cos and sin for `positions` [N], in `dtype` (computed in fp32), ready to broadcast
        over heads."""
        freqs = positions[:, None, None].to(torch.float32) * self.inv_freq.to(positions.device)
        return (freqs.cos() * self.scale).to(dtype), (freqs.sin() * self.scale).to(dtype)

    def rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """Rotate `x` [N, heads, dim] with per-token `cos`/`sin` [N, 1, dim/2] from `cos_sin`."""
        c, s = cos, sin
        if self.interleaved:
            x1, x2 = x[..., 0::2], x[..., 1::2]
        else:
            half = x.shape[-1] // 2
            x1, x2 = x[..., :half], x[..., half:]
        return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)
