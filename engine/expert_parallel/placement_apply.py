"""Applying a new placement to a rank's MoE layers, between steps (no forward in flight).

Slots whose expert stays on this rank are copied from the current weights; experts new to this rank are
read through `fetch_expert(layer, expert) -> (gate_up [2I, H], down [H, I])` (the checkpoint). The replica
tables switch together with the weights, so the next step routes by the new placement; outputs do not
change, because every replica of an expert holds the same weights.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from recipe.engine.expert_parallel.eplb_planner import plan_placement
from recipe.engine.expert_parallel.load_recorder import ExpertLoadRecorder
from recipe.engine.expert_parallel.placement import Placement
from recipe.engine.expert_parallel.sharded_weights import moe_layers
from recipe.engine.layers.routed_experts import RoutedExperts
from torch import nn

FetchExpert = Callable[[int, int], tuple[torch.Tensor, torch.Tensor]]


def apply_placement(module: RoutedExperts, layer: int, placement: Placement, rank: int,
                    fetch_expert: FetchExpert) -> int:
    """Swap `module`'s slots for `placement`'s shard of `rank`; returns how many experts were fetched."""
    assert module.slot_experts is not None and module.expert_parallel is not None, "not an expert-parallel layer"
    here = {e: s for s, e in enumerate(module.slot_experts) if e >= 0}
    new = placement.slots[rank]
    gu, down = module.w_gate_up, module.w_down
    new_gu = gu.new_zeros(len(new), *gu.shape[1:])
    new_down = down.new_zeros(len(new), *down.shape[1:])
    fetched = 0
    with torch.no_grad():
        for s, e in enumerate(new):
            if e < 0:
                continue
            if e in here:
                new_gu[s], new_down[s] = gu[here[e]], down[here[e]]
            else:
                g, d = fetch_expert(layer, e)
                new_gu[s], new_down[s] = g.to(new_gu.dtype), d.to(new_down.dtype)
                fetched += 1
    module.w_gate_up = nn.Parameter(new_gu, requires_grad=False)
    module.w_down = nn.Parameter(new_down, requires_grad=False)
    module.slot_experts = new
    module.expert_parallel.set_placement(placement)
    return fetched


def rebalance(model: nn.Module, recorder: ExpertLoadRecorder, rank: int, world_size: int, num_redundant: int,
              fetch_expert: FetchExpert) -> dict[int, Placement]:
    """EPLB at a safe point: sum the recorded loads over the ranks (a collective), plan every layer's
    placement (the same pure function on every rank, so the plans agree), apply them, reset the counts."""
    loads = recorder.global_counts()
    plans = {}
    for row, (layer, module) in enumerate(moe_layers(model).items()):
        plans[layer] = plan_placement(loads[row, : module.num_experts].tolist(), world_size, num_redundant)
        apply_placement(module, layer, plans[layer], rank, fetch_expert)
    recorder.reset()
    return plans
