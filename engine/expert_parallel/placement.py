"""An expert placement: which logical expert each physical slot of each rank holds.

Every rank has the same number of slots (so its stacked expert weights have one shape); a slot may be
empty (-1). An expert with several replicas has its tokens split evenly over them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

EMPTY = -1


@dataclass(frozen=True)
class Placement:
    """`slots[r][s]` is the logical expert in slot s of rank r (EMPTY for none)."""

    num_experts: int
    slots: tuple[tuple[int, ...], ...]

    @property
    def num_ranks(self) -> int:
        return len(self.slots)

    @property
    def slots_per_rank(self) -> int:
        return len(self.slots[0]) if self.slots else 0

    @property
    def num_physical(self) -> int:
        """Occupied slots over all ranks (the replica count the budget bounds)."""
        return sum(e != EMPTY for rank in self.slots for e in rank)

    def replicas(self) -> list[int]:
        """How many slots hold each logical expert."""
        count = [0] * self.num_experts
        for rank in self.slots:
            for e in rank:
                if e != EMPTY:
                    count[e] += 1
        return count

    def hosts(self) -> list[list[tuple[int, int]]]:
        """For each logical expert, its (rank, slot) replicas in rank-major order."""
        where: list[list[tuple[int, int]]] = [[] for _ in range(self.num_experts)]
        for r, rank in enumerate(self.slots):
            for s, e in enumerate(rank):
                if e != EMPTY:
                    where[e].append((r, s))
        return where

    def rank_loads(self, load: Sequence[float]) -> list[float]:
        """Each rank's share of `load` (per logical expert) when an expert's load splits evenly over its replicas."""
        reps = self.replicas()
        return [sum(load[e] / reps[e] for e in rank if e != EMPTY) for rank in self.slots]

    def imbalance(self, load: Sequence[float]) -> float:
        """max / mean rank load (1.0 is perfect; 1.0 for no load at all)."""
        loads = self.rank_loads(load)
        mean = sum(loads) / len(loads)
        return max(loads) / mean if mean > 0 else 1.0

    def check(self, max_physical: int | None = None) -> None:
        """Every expert hosted at least once, slots rectangular and in range, within `max_physical` replicas."""
        assert all(len(rank) == self.slots_per_rank for rank in self.slots), "ranks differ in slot count"
        assert all(EMPTY <= e < self.num_experts for rank in self.slots for e in rank), "expert id out of range"
        assert min(self.replicas(), default=1) >= 1, "an expert has no replica"
        assert max_physical is None or self.num_physical <= max_physical, "placement exceeds the replica budget"


def default_placement(num_experts: int, num_ranks: int) -> Placement:
    """No redundancy: experts in contiguous runs of ceil(E / R) per rank, as a checkpoint's order gives them."""
    per = -(-num_experts // num_ranks)
    slots = []
    for r in range(num_ranks):
        own = list(range(r * per, min((r + 1) * per, num_experts)))
        slots.append(tuple(own + [EMPTY] * (per - len(own))))
    return Placement(num_experts, tuple(slots))
