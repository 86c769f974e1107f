"""DeepSeek-V4 mixture of experts: routed experts with clamped SwiGLU plus one shared expert.

Two routers: score-routed (sqrt-softplus scores, top-k over bias-corrected scores) and hash-routed (a frozen
token id -> experts table, `tid2eid`; the learned scores still weight the chosen experts). Either way the
chosen scores are normalised to sum to one and scaled by `routed_scaling_factor`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
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
        scores = self.score(F.linear(x, self.weight.to(x.dtype)))
        if self.is_hash:
            ids = self.tid2eid[token_ids].long()
        else:
            ids = torch.topk(scores + self.e_score_correction_bias, self.top_k, dim=-1, sorted=False).indices
        weights = scores.gather(1, ids)
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        return weights * self.scaling, ids


class V4MoE(nn.Module):
    """Routed experts (stacked [E, 2I, D] gate|up and [E, D, I] down) plus the shared expert."""

    def __init__(self, hidden_size: int, inter: int, num_experts: int, router: V4Router, swiglu_limit: float) -> None:
        super().__init__()
        self.num_experts, self.inter, self.limit = num_experts, inter, swiglu_limit
        self.gate = router
        self.w_gate_up = nn.Parameter(torch.empty(num_experts, 2 * inter, hidden_size))
        self.w_down = nn.Parameter(torch.empty(num_experts, hidden_size, inter))
        self.shared_gate_up = nn.Linear(hidden_size, 2 * inter, bias=False)
        self.shared_down = nn.Linear(inter, hidden_size, bias=False)

    def forward(self, x: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
        weights, ids = self.gate(x, token_ids)
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
            sel, tok = order[start : start + c], token_of[start : start + c]
            start += c
            gate, up = F.linear(x[tok], self.w_gate_up[e]).split(self.inter, dim=-1)
            h = F.linear(clamped_swiglu(gate, up, self.limit), self.w_down[e])
            out.index_add_(0, tok, (h * weights.view(-1)[sel, None].to(h.dtype)).to(out.dtype))
        gate, up = self.shared_gate_up(x).split(self.inter, dim=-1)
        return out + self.shared_down(clamped_swiglu(gate, up, self.limit))
