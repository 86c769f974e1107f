"""Block-quantised linear layers in GGUF's own layouts, run by the native CPU kernels (`engine/kernels`).

- `Q8_0Linear`: blocks of 32 input features, int8 q and one scale d per block, w = d * q.
- `Q4_1Linear`: blocks of 32, 4-bit q in 0..15 with a scale d and a minimum m per block, w = d * q + m; byte j
  of a block packs q[j] (low nibble) and q[j + 16] (high nibble), as GGUF does. Quantising a GGUF Q4_1 weight
  that was dequantised to fp32 gives back its own q (min/max per block: Q4_1's quantiser uses q = 0 and 15).
Scales are kept in fp32. As in llama.cpp, the activations are rounded to Q8_0 blocks of 32 (`round_activations`)
so that the kernel's block products are exact integer dot products; the layer computes
`round_activations(x) @ dequantized().T` (fp32, summation order aside). Another activation dtype runs
through fp32 and is cast back.

Every batch goes through the kernel's product, each row computed alone (its result does not depend on the
batch); batches of four rows and more share each unpacked weight block. Measured on this machine (one thread,
3072 x 576 and 49152 x 576): faster than dequantising the weight and taking torch's fp32 matmul at every batch
from 16 to 2048 rows (1.1-1.7x on the layer, 1.3-5x on the LM head), so there is no dequantising path. Without
the native library it is pure torch (same values to rounding, slower).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from recipe.engine.kernels.native import library
from torch import nn

QK = 32


def q8_0_quantize(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(q int8 [n, k], d fp32 [n, k/32]) with w ~ d * q, |q| <= 127."""
    n, k = weight.shape
    w = weight.detach().to(torch.float32).reshape(n, k // QK, QK)
    d = w.abs().amax(dim=-1) / 127.0
    q = torch.round(w / torch.where(d > 0, d, 1.0)[..., None]).clamp(-127, 127).to(torch.int8)
    return q.reshape(n, k).contiguous(), d.contiguous()


def round_activations(x: torch.Tensor) -> torch.Tensor:
    """x [M, K] fp32 rounded through Q8_0 blocks, as the kernels see it: d = max|x| / 127 per block of 32,
    q = round-half-even(x * (1 / d)), value d * q."""
    m, k = x.shape
    b = x.reshape(m, k // QK, QK)
    d = b.abs().amax(dim=-1, keepdim=True) / 127.0
    inv = torch.where(d > 0, 1.0 / torch.where(d > 0, d, 1.0), 0.0)
    return (torch.round(b * inv).clamp(-127, 127) * d).reshape(m, k)


def q4_1_quantize(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(packed uint8 [n, k/2], d fp32 [n, k/32], m fp32 [n, k/32]) with w ~ d * q + m, q in 0..15."""
    n, k = weight.shape
    w = weight.detach().to(torch.float32).reshape(n, k // QK, QK)
    lo, hi = w.amin(dim=-1), w.amax(dim=-1)
    d = (hi - lo) / 15.0
    q = torch.round((w - lo[..., None]) / torch.where(d > 0, d, 1.0)[..., None]).clamp(0, 15).to(torch.uint8)
    packed = q[..., : QK // 2] | (q[..., QK // 2 :] << 4)
    return packed.reshape(n, k // 2).contiguous(), d.contiguous(), lo.contiguous()


class _BlockQuantLinear(nn.Module):
    in_features: int
    out_features: int
    bias: torch.Tensor | None

    def dequantized(self) -> torch.Tensor:
        raise NotImplementedError

    def _native_matmul(self, x: torch.Tensor, y: torch.Tensor) -> None:
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features).to(torch.float32).contiguous()
        if library() is None:
            y = F.linear(round_activations(flat), self.dequantized())
        else:
            y = flat.new_empty(flat.shape[0], self.out_features)
            self._native_matmul(flat, y)
        if self.bias is not None:
            y = y + self.bias.to(torch.float32)
        return y.to(x.dtype).view(*x.shape[:-1], self.out_features)


class Q8_0Linear(_BlockQuantLinear):
    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        super().__init__()
        self.out_features, self.in_features = weight.shape
        assert self.in_features % QK == 0, f"q8_0 needs in_features % {QK} == 0, got {self.in_features}"
        q, d = q8_0_quantize(weight)
        self.qweight: torch.Tensor
        self.d: torch.Tensor
        self.register_buffer("qweight", q)
        self.register_buffer("d", d)
        self.bias = bias

    def dequantized(self) -> torch.Tensor:
        n, k = self.qweight.shape
        return (self.qweight.view(n, k // QK, QK).to(torch.float32) * self.d[..., None]).view(n, k)

    def _native_matmul(self, x: torch.Tensor, y: torch.Tensor) -> None:
        lib = library()
        assert lib is not None
        lib.q8_0_matmul(x.data_ptr(), x.shape[0], self.in_features, self.qweight.data_ptr(), self.d.data_ptr(),
                        self.out_features, y.data_ptr())



class Q4_1Linear(_BlockQuantLinear):
    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        super().__init__()
        self.out_features, self.in_features = weight.shape
        assert self.in_features % QK == 0, f"q4_1 needs in_features % {QK} == 0, got {self.in_features}"
        packed, d, m = q4_1_quantize(weight)
        self.packed: torch.Tensor
        self.d: torch.Tensor
        self.m: torch.Tensor
        self.register_buffer("packed", packed)
        self.register_buffer("d", d)
        self.register_buffer("m", m)
        self.bias = bias

    def dequantized(self) -> torch.Tensor:
        n, k = self.out_features, self.in_features
        p = self.packed.view(n, k // QK, QK // 2)
        q = torch.cat((p & 0x0F, p >> 4), dim=-1).to(torch.float32)
        return (q * self.d[..., None] + self.m[..., None]).view(n, k)

    def _native_matmul(self, x: torch.Tensor, y: torch.Tensor) -> None:
        lib = library()
        assert lib is not None
        lib.q4_1_matmul(x.data_ptr(), x.shape[0], self.in_features, self.packed.data_ptr(), self.d.data_ptr(),
                        self.m.data_ptr(), self.out_features, y.data_ptr())

