"""EPLB's counters: per MoE layer, how many (token, chosen expert) pairs each logical expert received.

Installed as every MoE layer's `load_recorder`; it sees the router's logical choices, before dispatch, so
the counts do not depend on the current placement. `global_counts` sums them over the ranks (a collective:
every rank calls it at the same point).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from recipe.engine.expert_parallel.sharded_weights import moe_layers
from recipe.engine.layers.routed_experts import RoutedExperts
from torch import nn


class ExpertLoadRecorder:
    """counts [moe layers, experts] int64 on this rank, since the last `reset`."""

    def __init__(self, model: nn.Module) -> None:
        layers = moe_layers(model)
        self.layer_indices = list(layers)
        self._row = {id(m): r for r, m in enumerate(layers.values())}
        num = max((m.num_experts for m in layers.values()), default=0)
        self.counts = torch.zeros(len(layers), num, dtype=torch.int64)
        for m in layers.values():
            m.load_recorder = self

    def __call__(self, module: RoutedExperts, ids: torch.Tensor) -> None:
        row = self._row[id(module)]
        self.counts[row] += torch.bincount(ids.reshape(-1).cpu(), minlength=self.counts.shape[1])

    def global_counts(self) -> torch.Tensor:
        """The counts summed over every rank of the group (this rank's alone without a group)."""
        total = self.counts.clone()
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(total)
        return total

    def reset(self) -> None:
        self.counts.zero_()
