"""The SwiGLU feed-forward block, gate and up projections fused into one matmul."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class GatedMLP(nn.Module):
    """down(silu(gate(x)) * up(x)); `gate_up.weight` holds gate rows then up rows."""

    def __init__(self, hidden_size: int, intermediate_size: int, bias: bool = False) -> None:
        super().__init__()
        self.intermediate_size = intermediate_size
        self.gate_up = nn.Linear(hidden_size, 2 * intermediate_size, bias=bias)
        self.down = nn.Linear(intermediate_size, hidden_size, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(x).split(self.intermediate_size, dim=-1)
        return self.down(F.silu(gate) * up)
