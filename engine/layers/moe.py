"""DeepSeek-V3 mixture of experts: sigmoid scores, grouped top-k routing, routed experts plus shared experts."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from recipe.engine.layers.gated_mlp import GatedMLP
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


class MoE(nn.Module):
    """Routed experts (stacked weights [E, 2I, H] and [E, H, I]) plus always-on shared experts.

    `backend` "grouped" computes the routed experts in two batched matmuls; "loop" (the reference) walks
    the experts from a host copy of the counts."""

    def __init__(
        self, hidden_size: int, moe_intermediate_size: int, num_experts: int, num_shared_experts: int,
        router: GroupedTopKRouter,
    ) -> None:
        super().__init__()
        self.num_experts, self.inter = num_experts, moe_intermediate_size
        self.gate = router
        self.w_gate_up = nn.Parameter(torch.empty(num_experts, 2 * moe_intermediate_size, hidden_size))
        self.w_down = nn.Parameter(torch.empty(num_experts, hidden_size, moe_intermediate_size))
        self.shared = GatedMLP(hidden_size, moe_intermediate_size * num_shared_experts)
        self.backend = "grouped"  # or "loop" (EngineConfig.moe_backend)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights, ids = self.gate(x)
        routed = self._loop(x, weights, ids) if self.backend == "loop" else self._grouped(x, weights, ids)
        return routed + self.shared(x)

    def _grouped(self, x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """Sort the (token, expert) pairs by expert, lay each active expert's tokens out as one row of a
        padded [experts, capacity, H] batch, and run the two expert matmuls as two batched matmuls."""
        n, k = ids.shape
        flat = ids.reshape(-1)
        order = flat.argsort(stable=True)
        by_expert = flat[order]
        counts = torch.bincount(flat, minlength=self.num_experts)
        active = counts.nonzero().squeeze(1)
        capacity = int(counts.max())
        group = torch.full((self.num_experts,), -1, dtype=torch.int64, device=x.device)
        group[active] = torch.arange(active.numel(), device=x.device)
        slot = torch.arange(n * k, device=x.device) - (counts.cumsum(0) - counts)[by_expert]
        g = group[by_expert]
        token = order // k
        batch = x.new_zeros(active.numel(), capacity, x.shape[1])
        batch[g, slot] = x.index_select(0, token)
        every = active.numel() == self.num_experts
        w_gate_up = self.w_gate_up if every else self.w_gate_up.index_select(0, active)
        w_down = self.w_down if every else self.w_down.index_select(0, active)
        gate, up = torch.bmm(batch, w_gate_up.transpose(1, 2)).split(self.inter, dim=-1)
        h = torch.bmm(F.silu(gate) * up, w_down.transpose(1, 2))[g, slot]
        out = torch.zeros_like(x)
        return out.index_add_(0, token, (h * weights.view(-1)[order, None]).to(out.dtype))

    def _loop(self, x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """The reference: one matmul pair per expert that has tokens."""
        k = ids.shape[1]
        flat = ids.reshape(-1)
        order = flat.argsort(stable=True)
        counts = torch.bincount(flat, minlength=self.num_experts).tolist()
        token_of = order // k
        out = torch.zeros_like(x)
        start = 0
        for e, c in enumerate(counts):
            if c == 0:
                continue
            sel = order[start : start + c]
            tok = token_of[start : start + c]
            start += c
            gate, up = F.linear(x[tok], self.w_gate_up[e]).split(self.inter, dim=-1)
            h = F.linear(F.silu(gate) * up, self.w_down[e])
            out.index_add_(0, tok, (h * weights.view(-1)[sel, None]).to(out.dtype))
        return out
