"""The expert-parallel routed-experts computation of one MoE layer on one rank.

The rank holds `slots_per_rank` expert slots (its shard of the placement). For a step's tokens it:
1. maps each (token, chosen expert) pair to one replica of that expert (replicas take turns), hence to a
   (rank, slot);
2. dispatches the rows to their ranks (all-to-all of counts, rows and slot ids);
3. runs its local slots over the rows it received (`expert_rows`, the one-rank arithmetic);
4. combines: sends the outputs back (all-to-all) and adds them, weighted, into each token's row.
A rank with no tokens runs the same four collectives with empty splits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from recipe.engine.expert_parallel.all_to_all import CommTimer, exchange_counts, exchange_rows
from recipe.engine.expert_parallel.placement import Placement
from recipe.engine.layers.routed_experts import RoutedExperts, expert_rows


@dataclass
class ReplicaTable:
    """A placement as lookup tensors: expert e's replicas are entries offset[e] .. offset[e] + count[e] of
    (rank, slot)."""

    count: torch.Tensor
    offset: torch.Tensor
    rank: torch.Tensor
    slot: torch.Tensor

    @classmethod
    def of(cls, placement: Placement, device: torch.device | str = "cpu") -> ReplicaTable:
        hosts = placement.hosts()
        count = torch.tensor([len(h) for h in hosts], dtype=torch.int64, device=device)
        flat = [rs for h in hosts for rs in h]
        return cls(count, count.cumsum(0) - count,
                   torch.tensor([r for r, _ in flat], dtype=torch.int64, device=device),
                   torch.tensor([s for _, s in flat], dtype=torch.int64, device=device))


@dataclass
class LayerTraffic:
    """What this rank's layer moved and computed since the last reset."""

    rows_computed: int = 0  # (token, expert) rows this rank's slots ran: its expert load
    rows_sent: int = 0
    slot_rows: list[int] = field(default_factory=list)  # rows per local slot
    timer: CommTimer = field(default_factory=CommTimer)


class ExpertParallelMoE:
    """Installed as `RoutedExperts.expert_parallel` of one layer; `placement` is the layer's current one."""

    def __init__(self, rank: int, world_size: int, placement: Placement, device: torch.device | str = "cpu") -> None:
        self.rank, self.world_size, self.device = rank, world_size, device
        self.traffic = LayerTraffic()
        self.calls = 0  # forwards this layer has entered (the engine's "did this step run the model" check)
        self.set_placement(placement)

    def set_placement(self, placement: Placement) -> None:
        assert placement.num_ranks == self.world_size, "placement is for another rank count"
        self.placement = placement
        self.table = ReplicaTable.of(placement, self.device)
        self.traffic.slot_rows = [0] * placement.slots_per_rank

    def __call__(self, module: RoutedExperts, x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        n, k = ids.shape
        t = self.table
        flat = ids.reshape(-1)
        token = torch.arange(n, device=x.device).repeat_interleave(k)
        pick = (torch.arange(n * k, device=x.device) + self.rank) % t.count[flat]
        replica = t.offset[flat] + pick
        dest = t.rank[replica]
        order = dest.argsort(stable=True)
        timer = self.traffic.timer
        send = torch.bincount(dest, minlength=self.world_size)
        recv = exchange_counts(send, timer)
        send_counts, recv_counts = send.tolist(), recv.tolist()
        rows = exchange_rows(x.index_select(0, token[order]), send_counts, recv_counts, timer)
        slots = exchange_rows(t.slot[replica][order], send_counts, recv_counts, timer)
        h = expert_rows(rows, slots, module.w_gate_up, module.w_down, module.activation, module.backend)
        back = exchange_rows(h, recv_counts, send_counts, timer)
        self.traffic.rows_computed += rows.shape[0]
        self.traffic.rows_sent += n * k
        for s, c in enumerate(torch.bincount(slots, minlength=self.placement.slots_per_rank).tolist()):
            self.traffic.slot_rows[s] += c
        out = torch.zeros_like(x)
        return out.index_add_(0, token[order], (back * weights.reshape(-1)[order, None]).to(out.dtype))


def enter_collectives_without_tokens(model: torch.nn.Module) -> int:
    """Run every expert-parallel MoE layer's collectives with zero tokens, in layer order (what a rank with
    no work this step does while the others run a forward). Returns the number of layers entered."""
    entered = 0
    for module in model.modules():
        if isinstance(module, RoutedExperts) and module.expert_parallel is not None:
            hidden = module.w_down.shape[1]
            x = module.w_down.new_zeros(0, hidden)
            ids = torch.zeros(0, 1, dtype=torch.int64, device=x.device)
            module.routed(x, x.new_zeros(0, 1), ids)
            entered += 1
    return entered
