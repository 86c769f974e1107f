"""Expert-parallel metrics: expert rows computed per rank, imbalance (max / mean), all-to-all time, and
replicas per expert. `collect` is a collective (every rank calls it); it reads and resets the layers'
traffic counters."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from recipe.engine.expert_parallel.sharded_weights import moe_layers
from torch import nn


def imbalance(values: list[float]) -> float:
    """max / mean (1.0 when all are zero)."""
    mean = sum(values) / len(values) if values else 0.0
    return max(values) / mean if mean > 0 else 1.0


@dataclass(frozen=True)
class EPMetrics:
    rank_tokens: list[int]  # (token, expert) rows each rank's experts computed, over all MoE layers
    imbalance: float  # max / mean of rank_tokens
    layer_imbalance: dict[int, float]  # the same, per MoE layer
    all_to_all_s: list[float]  # seconds each rank spent in dispatch / combine collectives
    all_to_all_calls: int  # collectives per rank
    replicas: dict[int, list[int]]  # per MoE layer, replicas of each logical expert


def collect(model: nn.Module, reset: bool = True) -> EPMetrics:
    layers = {i: m for i, m in moe_layers(model).items() if m.expert_parallel is not None}
    world = dist.get_world_size()
    mine = torch.tensor([[float(m.expert_parallel.traffic.rows_computed) for m in layers.values()]
                         + [sum(m.expert_parallel.traffic.timer.seconds for m in layers.values())]],
                        dtype=torch.float64)
    everyone = [torch.zeros_like(mine) for _ in range(world)]
    dist.all_gather(everyone, mine)
    table = torch.cat(everyone)  # [world, layers + 1]
    rows = table[:, :-1]
    calls = sum(m.expert_parallel.traffic.timer.calls for m in layers.values())
    result = EPMetrics(
        rank_tokens=[int(v) for v in rows.sum(dim=1).tolist()],
        imbalance=imbalance(rows.sum(dim=1).tolist()),
        layer_imbalance={i: imbalance(rows[:, j].tolist()) for j, i in enumerate(layers)},
        all_to_all_s=table[:, -1].tolist(),
        all_to_all_calls=calls,
        replicas={i: m.expert_parallel.placement.replicas() for i, m in layers.items()},
    )
    if reset:
        for m in layers.values():
            t = m.expert_parallel.traffic
            t.rows_computed = t.rows_sent = 0
            t.slot_rows = [0] * len(t.slot_rows)
            t.timer.seconds, t.timer.calls = 0.0, 0
    return result
