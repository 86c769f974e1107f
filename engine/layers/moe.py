"""DeepSeek-V3 mixture of experts: sigmoid scores, grouped top-k routing, routed experts plus shared experts."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from recipe.engine.layers.gated_mlp import GatedMLP
from recipe.engine.layers.routed_experts import Activation, RoutedExperts, silu_and_mul
from torch import nn


class GroupedTopKRouter(nn.Module):
    """Picks `top_k` experts per token among the `topk_group` best of `n_group` expert groups.

    A group's score is the sum of its two best bias-corrected scores; the bias only steers the choice,
    the weights come from the uncorrected sigmoid scores (normalised if `norm_topk_prob`), times
    `routed_scaling_factor`. Routing runs in fp32.
    """

    def __init__(
        self, hidden_size: int, num_experts: int, top_k: int, n_group: int, topk_group: int,
        norm_topk_prob: bool, routed_scaling_factor: float,
    ) -> None:
        super().__init__()
        assert num_experts % n_group == 0, "experts must split evenly into groups"
        self.num_experts, self.top_k = num_experts, top_k
        self.n_group, self.topk_group = n_group, topk_group
        self.norm_topk_prob, self.routed_scaling_factor = norm_topk_prob, routed_scaling_factor
        self.weight = nn.Parameter(torch.zeros(num_experts, hidden_size, dtype=torch.float32))
        self.e_score_correction_bias: torch.Tensor
        self.register_buffer("e_score_correction_bias", torch.zeros(num_experts, dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [N, H] -> (weights [N, top_k] fp32, expert ids [N, top_k])."""
        scores = F.linear(x.to(torch.float32), self.weight.to(torch.float32)).sigmoid()
        choice = scores + self.e_score_correction_bias
        per_group = self.num_experts // self.n_group
        group_scores = choice.view(-1, self.n_group, per_group).topk(2, dim=-1)[0].sum(dim=-1)
        group_idx = group_scores.topk(self.topk_group, dim=-1, sorted=False)[1]
        group_mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1.0)
        expert_mask = group_mask[:, :, None].expand(-1, -1, per_group).reshape(-1, self.num_experts)
        choice = choice.masked_fill(expert_mask == 0, float("-inf"))
        ids = choice.topk(self.top_k, dim=-1, sorted=False)[1]
        weights = scores.gather(1, ids)
        if self.norm_topk_prob:
            weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        return weights * self.routed_scaling_factor, ids


class MoE(RoutedExperts):
    """Routed experts (see `RoutedExperts`) plus always-on shared experts, routed by grouped top-k."""

    def __init__(
        self, hidden_size: int, moe_intermediate_size: int, num_experts: int, num_shared_experts: int,
        router: GroupedTopKRouter, activation: Activation = silu_and_mul,
    ) -> None:
        super().__init__(hidden_size, moe_intermediate_size, num_experts, activation)
        self.gate = router
        self.shared = GatedMLP(hidden_size, moe_intermediate_size * num_shared_experts)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights, ids = self.gate(x)
        return self.routed(x, weights, ids) + self.shared(x)
