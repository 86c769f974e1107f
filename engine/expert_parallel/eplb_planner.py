"""EPLB's planner: a pure function from per-expert loads and a replica budget to a placement.

Two steps, as in DeepSeek's EPLB and DeepInfer's `policy.py`:
1. replication: each redundant replica goes to the expert whose per-replica load is highest (which
   minimises the largest per-replica load); an expert never gets more replicas than there are ranks;
2. packing: replicas sorted by per-replica load are dealt in rounds of one per rank, the heaviest of a
   round to the lightest rank. Every rank then holds ceil or floor of (replicas / ranks) slots, and the
   spread between the heaviest and the lightest rank stays within the largest per-replica load. A rank
   already holding an expert is skipped for its other replicas when another rank of the round is free.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from recipe.engine.expert_parallel.placement import EMPTY, Placement


def replica_counts(load: Sequence[float], num_ranks: int, num_redundant: int) -> list[int]:
    """Replicas per expert: one each, plus up to `num_redundant` more to the hottest per-replica loads."""
    count = [1] * len(load)
    heap = [(-float(w), e) for e, w in enumerate(load) if num_ranks > 1]
    heapq.heapify(heap)
    for _ in range(num_redundant):
        if not heap:
            break
        _, e = heapq.heappop(heap)
        count[e] += 1
        if count[e] < num_ranks:
            heapq.heappush(heap, (-float(load[e]) / count[e], e))
    return count


def plan_placement(load: Sequence[float], num_ranks: int, num_redundant: int) -> Placement:
    """A placement of `len(load)` experts on `num_ranks` ranks using at most `len(load) + num_redundant` slots.

    `load[e]` is expert e's recorded token count (any non-negative numbers)."""
    if num_ranks < 1:
        raise ValueError("num_ranks must be >= 1")
    if num_redundant < 0:
        raise ValueError("num_redundant must be >= 0")
    if any(w < 0 for w in load):
        raise ValueError("loads must be >= 0")
    count = replica_counts(load, num_ranks, num_redundant)
    items = sorted(((float(load[e]) / c, e) for e, c in enumerate(count) for _ in range(c)),
                   key=lambda item: (-item[0], item[1]))
    rank_load = [0.0] * num_ranks
    hosted: list[list[int]] = [[] for _ in range(num_ranks)]
    for start in range(0, len(items), num_ranks):
        free = sorted(range(num_ranks), key=lambda r: (rank_load[r], r))
        for share, e in items[start : start + num_ranks]:
            r = next((r for r in free if e not in hosted[r]), free[0])
            free.remove(r)
            hosted[r].append(e)
            rank_load[r] += share
    per = max(len(h) for h in hosted)
    return Placement(len(load), tuple(tuple(h + [EMPTY] * (per - len(h))) for h in hosted))
