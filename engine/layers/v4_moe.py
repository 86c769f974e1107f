"""DeepSeek-V4 mixture of experts: routed experts with clamped SwiGLU plus one shared expert.

Two routers: score-routed (sqrt-softplus scores, top-k over bias-corrected scores) and hash-routed (a frozen
token id -> experts table, `tid2eid`; the learned scores still weight the chosen experts). Either way the
chosen scores are normalised to sum to one and scaled by `routed_scaling_factor`.
"""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from recipe.engine.layers.cast import as_dtype
from recipe.engine.layers.routed_experts import RoutedExperts
from torch import nn

SCORE_FUNCTIONS = {
    "sqrtsoftplus": lambda x: F.softplus(x).sqrt(),
    "sigmoid": torch.sigmoid,
    "softmax": lambda x: torch.softmax(x, dim=-1),
}


def clamped_swiglu(gate: torch.Tensor, up: torch.Tensor, limit: float) -> torch.Tensor:
    return F.silu(gate.clamp(max=limit)) * up.clamp(min=-limit, max=limit)


class V4Router(nn.Module):
    """x [N, D] (and token ids [N] when hash-routed) -> (weights [N, k], expert ids [N, k])."""

    def __init__(self, hidden_size: int, num_experts: int, top_k: int, scoring_func: str,
                 routed_scaling_factor: float, vocab_size: int | None) -> None:
        super().__init__()
        if scoring_func not in SCORE_FUNCTIONS:
            raise ValueError(f"unsupported scoring_func {scoring_func!r}; supported: {sorted(SCORE_FUNCTIONS)}")
        self.top_k, self.scaling = top_k, routed_scaling_factor
        self.score = SCORE_FUNCTIONS[scoring_func]
        self.weight = nn.Parameter(torch.empty(num_experts, hidden_size, dtype=torch.float32))
        self.is_hash = vocab_size is not None
        self.tid2eid: torch.Tensor
        self.e_score_correction_bias: torch.Tensor
        if vocab_size is not None:
            self.register_buffer("tid2eid", torch.zeros(vocab_size, top_k, dtype=torch.int64))
        else:
            self.register_buffer("e_score_correction_bias", torch.zeros(num_experts, dtype=torch.float32))

    def forward(self, x: torch.Tensor, token_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scores = self.score(F.linear(x, as_dtype(self.weight, x.dtype)))
        if self.is_hash:
            ids = as_dtype(self.tid2eid[token_ids], torch.int64)
        else:
            ids = torch.topk(scores + self.e_score_correction_bias, self.top_k, dim=-1, sorted=False).indices
        weights = scores.gather(1, ids)
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        return weights * self.scaling, ids


class V4MoE(RoutedExperts):
    """Routed experts (see `RoutedExperts`, clamped SwiGLU) plus the shared expert."""

    def __init__(self, hidden_size: int, inter: int, num_experts: int, router: V4Router, swiglu_limit: float) -> None:
        super().__init__(hidden_size, inter, num_experts, partial(clamped_swiglu, limit=swiglu_limit))
        self.limit = swiglu_limit
        self.gate = router
        self.shared_gate_up = nn.Linear(hidden_size, 2 * inter, bias=False)
        self.shared_down = nn.Linear(inter, hidden_size, bias=False)

    def forward(self, x: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
        weights, ids = self.gate(x, token_ids)
        gate, up = self.shared_gate_up(x).split(self.inter, dim=-1)
        return self.routed(x, weights, ids) + self.shared_down(clamped_swiglu(gate, up, self.limit))
