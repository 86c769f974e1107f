"""Routed experts shared by the DeepSeek MoE layers: stacked expert weights, a gated activation, and the
two ways to run them (one batched matmul pair, or the per-expert reference loop).

An expert-parallel layer (`engine/expert_parallel`) reuses `expert_rows` on the rows it received, so the
one-rank and many-rank paths run the same expert arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from recipe.engine.layers.cast import as_dtype
from torch import nn

Activation = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
_SMALL_GATHER = 1 << 20  # bytes of gathered expert weights below which gathering beats grouping


def silu_and_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """SwiGLU: silu(gate) * up (DeepSeek-V3)."""
    return F.silu(gate) * up


def expert_rows(rows: torch.Tensor, experts: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor,
                activation: Activation, backend: str = "grouped") -> torch.Tensor:
    """rows [M, H], experts [M] (indices into the stacked weights [E, 2I, H] / [E, H, I]) -> [M, H]:
    row m through expert `experts[m]`, unweighted, in the input order. M may be 0."""
    inter = w_down.shape[2]
    if rows.shape[0] == 0:
        return rows.new_zeros(0, w_down.shape[1])
    if backend == "loop":
        return _loop_rows(rows, experts, w_gate_up, w_down, activation, inter)
    num = w_gate_up.shape[0]
    m = rows.shape[0]
    gathered = m * (w_gate_up.shape[1] * w_gate_up.shape[2] + w_down.shape[1] * w_down.shape[2]) * w_gate_up.element_size()
    if 2 * m <= num or gathered <= _SMALL_GATHER:  # each row through its own expert's weights, gathered, in 14
        # ops instead of the grouping's 30: a few rows (at most half the experts: no more weight bytes than the
        # grouping copies when few experts are active), or small experts (a copy that costs less than the ops)
        gate, up = torch.bmm(w_gate_up.index_select(0, experts), rows.unsqueeze(2)).squeeze(2).split(inter, dim=-1)
        return torch.bmm(w_down.index_select(0, experts), activation(gate, up).unsqueeze(2)).squeeze(2)
    order = experts.argsort(stable=True)
    by_expert = experts[order]
    counts = torch.bincount(experts, minlength=num)
    active = counts.nonzero().squeeze(1)
    capacity = int(counts.max())
    group = torch.full((num,), -1, dtype=torch.int64, device=rows.device)
    group[active] = torch.arange(active.numel(), device=rows.device)
    slot = torch.arange(experts.numel(), device=rows.device) - (counts.cumsum(0) - counts)[by_expert]
    g = group[by_expert]
    batch = rows.new_zeros(active.numel(), capacity, rows.shape[1])
    batch[g, slot] = rows.index_select(0, order)
    every = active.numel() == num
    wgu = w_gate_up if every else w_gate_up.index_select(0, active)
    wd = w_down if every else w_down.index_select(0, active)
    gate, up = torch.bmm(batch, wgu.transpose(1, 2)).split(inter, dim=-1)
    h = torch.bmm(activation(gate, up), wd.transpose(1, 2))[g, slot]
    out = torch.empty_like(h)
    out[order] = h
    return out


def _loop_rows(rows: torch.Tensor, experts: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor,
               activation: Activation, inter: int) -> torch.Tensor:
    """The reference: one matmul pair per expert that has rows (walks a host copy of the counts)."""
    out = rows.new_zeros(rows.shape[0], w_down.shape[1])
    for e in sorted(set(experts.tolist())):
        sel = (experts == e).nonzero().squeeze(1)
        gate, up = F.linear(rows[sel], w_gate_up[e]).split(inter, dim=-1)
        out[sel] = F.linear(activation(gate, up), w_down[e])
    return out


class RoutedExperts(nn.Module):
    """Stacked routed-expert weights ([E, 2I, H] gate|up rows, [E, H, I] down) and the weighted sum of the
    chosen experts' outputs. `backend` is "grouped" (two batched matmuls) or "loop" (the reference).

    `expert_parallel`, when set (by `engine/expert_parallel`), replaces the local computation with a
    dispatch / local experts / combine over the ranks; `load_recorder`, when set, is handed the expert ids
    of every forward (EPLB's load counts)."""

    def __init__(self, hidden_size: int, inter: int, num_experts: int, activation: Activation) -> None:
        super().__init__()
        self.num_experts, self.inter, self.activation = num_experts, inter, activation
        self.w_gate_up = nn.Parameter(torch.empty(num_experts, 2 * inter, hidden_size))
        self.w_down = nn.Parameter(torch.empty(num_experts, hidden_size, inter))
        self.backend = "grouped"  # or "loop" (EngineConfig.moe_backend)
        self.expert_parallel: Any = None
        self.load_recorder: Any = None
        self.slot_experts: tuple[int, ...] | None = None  # a rank's shard: logical expert of each slot (-1 empty)

    def expert_slots(self) -> list[tuple[int, int]]:
        """(slot, logical expert) of every stacked weight to load: all experts, or this rank's shard."""
        if self.slot_experts is None:
            return [(e, e) for e in range(self.num_experts)]
        return [(s, e) for s, e in enumerate(self.slot_experts) if e >= 0]

    def routed(self, x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """x [N, H], weights [N, k], ids [N, k] (logical expert ids) -> sum_k weights * expert_ids(x)."""
        if self.load_recorder is not None:
            self.load_recorder(self, ids)
        if self.expert_parallel is not None:
            return self.expert_parallel(self, x, weights, ids)
        n, k = ids.shape
        token = torch.arange(n, device=x.device).repeat_interleave(k)
        h = expert_rows(x.index_select(0, token), ids.reshape(-1), self.w_gate_up, self.w_down, self.activation,
                        self.backend)
        out = torch.zeros_like(x)
        return out.index_add_(0, token, as_dtype(h * weights.reshape(-1, 1), out.dtype))
