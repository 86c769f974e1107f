"""RMSNorm as Llama and DeepSeek define it, through torch's fused kernel (bit-identical to the unfused
fp32 formula of `transformers`; in bf16 it rounds once instead of twice)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    """`weight * (x / sqrt(mean(x^2) + eps))` over the last dimension."""

    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
