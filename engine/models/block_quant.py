"""Block-quantised checkpoint weights (the FP8 / FP4 releases of DeepSeek-V4), dequantised on load.

A quantised weight `X.weight` comes with a scale tensor `X.scale` (DeepSeek's name) or `X.weight_scale_inv`
(`transformers`' name) holding one scale per block; the block shape is the weight's shape divided by the
scale grid's (FP8 dense layers use 128 x 128 blocks, FP4 experts 1 x 32). FP8 weights are
`float8_e4m3fn`; FP4 weights pack two e2m1 values per byte (low nibble first) in `int8`/`uint8`, so the
unpacked matrix is twice as wide. Scales are fp32/bf16, or UE8M0 exponents (`float8_e8m0fnu`, or `uint8`
meaning 2^(byte - 127)).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import torch
from recipe.engine.models.weights import CheckpointError

SCALE_SUFFIXES = ("scale", "weight_scale_inv")
FP4_E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def unpack_fp4(packed: torch.Tensor) -> torch.Tensor:
    """[..., K/2] bytes -> [..., K] fp32 (low nibble is the even element)."""
    lut = torch.tensor(FP4_E2M1, dtype=torch.float32)
    u8 = packed.contiguous().view(torch.uint8).long()
    return torch.stack((lut[u8 & 0xF], lut[(u8 >> 4) & 0xF]), dim=-1).reshape(*packed.shape[:-1], -1)


def scale_values(scale: torch.Tensor) -> torch.Tensor:
    if scale.dtype == torch.uint8:
        return (scale.to(torch.float32) - 127.0).exp2()
    return scale.to(torch.float32)


def dequantize(weight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """A block-quantised 2-D (or stacked 3-D) weight and its scale grid -> fp32."""
    values = unpack_fp4(weight) if weight.dtype in (torch.int8, torch.uint8) else weight.to(torch.float32)
    rows, cols = values.shape[-2:]
    grid = scale.reshape(-1, *scale.shape[-2:]) if scale.dim() >= 2 else scale.reshape(1, 1, 1)
    srows, scols = grid.shape[-2:]
    if rows % srows or cols % scols:
        raise CheckpointError(f"weight of shape {tuple(values.shape)} does not split into a {srows}x{scols} scale grid")
    q = values.reshape(-1, srows, rows // srows, scols, cols // scols)
    s = scale_values(grid).reshape(-1, srows, 1, scols, 1)
    return (q * s).reshape(values.shape)


class DequantizedCheckpoint(Mapping[str, torch.Tensor]):
    """A checkpoint's tensors with every quantised weight dequantised (fp32) and the scales hidden."""

    def __init__(self, source: Mapping[str, torch.Tensor]) -> None:
        self.source = source
        self._scale_of: dict[str, str] = {}
        names = set(source)
        for name in names:
            if not name.endswith(".weight"):
                continue
            stem = name[: -len("weight")]
            for suffix in SCALE_SUFFIXES:
                if stem + suffix in names:
                    self._scale_of[name] = stem + suffix
        hidden = set(self._scale_of.values())
        self._names = sorted(n for n in names if n not in hidden)

    @property
    def num_quantized(self) -> int:
        return len(self._scale_of)

    def __getitem__(self, name: str) -> torch.Tensor:
        if name in self._scale_of:
            return dequantize(self.source[name], self.source[self._scale_of[name]])
        if name not in self._names:
            raise KeyError(name)
        return self.source[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)
