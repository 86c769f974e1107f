"""RMSNorm as Llama and DeepSeek define it, through torch's fused kernel (bit-identical to the unfused
fp32 formula of `transformers`; in bf16 it rounds once instead of twice), or, with `backend = "native"`
(`EngineConfig.norm_backend`), through one native kernel call for fp32 rows (same formula, another
summation order; on the CPU torch's version is several small ops per call)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from recipe.engine.kernels.native import library
from torch import nn


class RMSNorm(nn.Module):
    """`weight * (x / sqrt(mean(x^2) + eps))` over the last dimension."""

    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(size))
        self.backend = "torch"  # "native": the native kernel where it applies (set by the model runner)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.backend == "native" and x.dtype == self.weight.dtype == torch.float32 and x.device.type == "cpu":
            lib = library()
            if lib is not None:
                flat = x.reshape(-1, x.shape[-1]).contiguous()
                out = torch.empty_like(flat)
                lib.rms_norm(flat.data_ptr(), self.weight.data_ptr(), flat.shape[0], flat.shape[1], self.eps,
                             out.data_ptr())
                return out.view(x.shape)
        return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
