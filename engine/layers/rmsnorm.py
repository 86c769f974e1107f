"""RMSNorm computed in fp32 and cast back, as Llama and DeepSeek define it."""

from __future__ import annotations

import torch
from torch import nn


class RMSNorm(nn.Module):
    """`weight * (x / sqrt(mean(x^2) + eps))`, the normalisation done in fp32 whatever the input dtype."""

    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)
