"""Sharded expert weights: a rank builds only its own slots and reads only its own experts' tensors.

`shard_for_rank(...)` is the `shard` hook of `load_model`: it gives every MoE layer `slots_per_rank` stacked
slots, installs the layer's `ExpertParallelMoE`, and returns a view of the checkpoint that hides the other
ranks' expert tensors (so they are never read, and the loader's "every tensor used" check still holds).
`CheckpointExperts` reads one expert's weights again later, when a new placement moves an expert here.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from recipe.engine.expert_parallel.ep_moe import ExpertParallelMoE
from recipe.engine.expert_parallel.placement import Placement, default_placement
from recipe.engine.layers.routed_experts import RoutedExperts
from recipe.engine.models.block_quant import DequantizedCheckpoint
from torch import nn

# one routed expert's tensors (weights and, for a block-quantised release, their scales): DeepSeek-V3's
# `model.layers.L.mlp.experts.E.`, DeepSeek-V4's `[model.]layers.L.ffn.experts.E.`
_EXPERT = re.compile(r"^(?:model\.layers\.(\d+)\.mlp|(?:model\.)?layers\.(\d+)\.ffn)\.experts\.(\d+)\.")


def expert_of(name: str) -> tuple[int, int] | None:
    """(layer, expert) of a routed expert's tensor name, None for any other tensor."""
    m = _EXPERT.match(name)
    return None if m is None else (int(m.group(1) or m.group(2)), int(m.group(3)))


def moe_layers(model: nn.Module) -> dict[int, RoutedExperts]:
    """Decoder layer index -> its routed-experts module (the layers whose MLP is a MoE)."""
    layers = getattr(model, "layers", [])
    return {i: layer.mlp for i, layer in enumerate(layers) if isinstance(getattr(layer, "mlp", None), RoutedExperts)}


def default_placements(model: nn.Module, world_size: int) -> dict[int, Placement]:
    return {i: default_placement(m.num_experts, world_size) for i, m in moe_layers(model).items()}


def resize_slots(module: RoutedExperts, slot_experts: tuple[int, ...]) -> None:
    """Give `module` one (uninitialised; empty slots zeroed) stacked weight per slot of its shard."""
    gu, down = module.w_gate_up, module.w_down
    n = len(slot_experts)
    module.w_gate_up = nn.Parameter(torch.zeros(n, *gu.shape[1:], dtype=gu.dtype, device=gu.device),
                                    requires_grad=False)
    module.w_down = nn.Parameter(torch.zeros(n, *down.shape[1:], dtype=down.dtype, device=down.device),
                                 requires_grad=False)
    module.slot_experts = slot_experts


class LocalExperts(Mapping[str, torch.Tensor]):
    """A checkpoint without the routed-expert tensors of experts this rank does not hold."""

    def __init__(self, source: Mapping[str, torch.Tensor], local: dict[int, set[int]]) -> None:
        self.source = source
        self.names = [n for n in source if self._mine(n, local)]
        self._known = set(self.names)

    @staticmethod
    def _mine(name: str, local: dict[int, set[int]]) -> bool:
        le = expert_of(name)
        return le is None or le[1] in local.get(le[0], set())

    def __getitem__(self, name: str) -> torch.Tensor:
        if name not in self._known:
            raise KeyError(name)
        return self.source[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)


def shard_model(model: nn.Module, rank: int, world_size: int, placements: dict[int, Placement] | None = None,
                device: torch.device | str = "cpu") -> dict[int, set[int]]:
    """Shrink every MoE layer to this rank's slots and install its expert-parallel computation; returns
    {layer: logical experts held here}."""
    placements = placements or default_placements(model, world_size)
    local = {}
    for i, module in moe_layers(model).items():
        p = placements[i]
        resize_slots(module, p.slots[rank])
        module.expert_parallel = ExpertParallelMoE(rank, world_size, p, device)
        local[i] = {e for e in p.slots[rank] if e >= 0}
    return local


def shard_for_rank(rank: int, world_size: int, placements: dict[int, Placement] | None = None,
                   device: torch.device | str = "cpu") -> Any:
    """The `load_model(shard=...)` hook for one rank."""

    def shard(model: nn.Module, source: Mapping[str, torch.Tensor]) -> Mapping[str, torch.Tensor]:
        layers = moe_layers(model)
        if not layers:
            raise ValueError("expert parallelism needs a mixture-of-experts model (DeepSeek-V3 or DeepSeek-V4)")
        return LocalExperts(source, shard_model(model, rank, world_size, placements, device))

    return shard


class CheckpointExperts:
    """Reads one logical expert's stacked weights ([2I, H] gate|up, [H, I] down) from a DeepSeek-V3
    (`gate_proj`/`up_proj`/`down_proj`) or DeepSeek-V4 (`w1`/`w3`/`w2`, block-quantised ones dequantised)
    checkpoint."""

    def __init__(self, source: Mapping[str, torch.Tensor]) -> None:
        self.source = DequantizedCheckpoint(source)
        self._prefix: dict[int, str] = {}
        for name in self.source:
            le = expert_of(name)
            if le is not None and le[0] not in self._prefix:
                self._prefix[le[0]] = name[: name.index(".experts.")] + ".experts."

    def __call__(self, layer: int, expert: int) -> tuple[torch.Tensor, torch.Tensor]:
        p = f"{self._prefix[layer]}{expert}."
        if p + "w1.weight" in self.source:
            gate, up, down = "w1", "w3", "w2"
        else:
            gate, up, down = "gate_proj", "up_proj", "down_proj"
        gate_up = torch.cat([self.source[f"{p}{gate}.weight"], self.source[f"{p}{up}.weight"]], dim=0)
        return gate_up, self.source[f"{p}{down}.weight"]
