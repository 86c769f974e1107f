"""EPLB's planner: a pure function from per-expert loads and a replica budget to a placement.

Two steps, as in DeepSeek's EPLB and DeepInfer's `policy.py`:
1. replication: each redundant replica goes to the expert whose per-replica load is highest (which
   minimises the largest per-replica load); an expert never gets more replicas than there are ranks;
2. packing: replicas sorted by per-replica load are dealt in rounds of one per rank, the heaviest of a
   round to the lightest rank. Every rank then holds ceil or floor of (replicas / ranks) slots, and the
   spread between the heaviest and the lightest rank stays within the largest per-replica load. A rank
   already holding an expert is skipped for its other replicas when another rank of the round is free;
3. refinement: while swapping one replica of the heaviest rank with a lighter one of another rank (or moving
   it to a rank with one slot fewer) lowers the heavier of the two, the best such swap is made. Each swap moves
   less than the two ranks' gap, so the spread never grows, and it strictly lowers the sum of squared rank
   loads, so the refinement ends.
"""

from __future__ import annotations

import bisect
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
    _refine_by_swaps(hosted, rank_load, [float(load[e]) / c for e, c in enumerate(count)])
    per = max(len(h) for h in hosted)
    return Placement(len(load), tuple(tuple(h + [EMPTY] * (per - len(h))) for h in hosted))


def _refine_by_swaps(hosted: list[list[int]], rank_load: list[float], share: list[float],
                     max_swaps: int = 10_000) -> None:
    """Step 3 in place: swaps replicas between the heaviest rank and the others while that helps."""
    num_ranks = len(hosted)
    for _ in range(max_swaps):
        h = max(range(num_ranks), key=lambda r: (rank_load[r], -r))
        best: tuple[float, int, int, int] | None = None  # (new heavier of the pair, rank, a, b or -1 for a move)
        for r in range(num_ranks):
            gap = rank_load[h] - rank_load[r]
            if r == h or gap <= 0:
                continue
            others = sorted((share[b], b) for b in hosted[r] if b not in hosted[h])
            if len(hosted[r]) < len(hosted[h]):
                others.insert(0, (0.0, -1))  # a move: rank r has a free slot to take
            keys = [w for w, _ in others]
            for a in hosted[h]:
                if a in hosted[r]:
                    continue
                want = share[a] - gap / 2  # the swap that evens the pair exactly
                i = bisect.bisect_left(keys, want)
                for j in (i - 1, i):
                    if 0 <= j < len(others):
                        delta = share[a] - others[j][0]
                        if 0 < delta < gap:
                            heavier = max(rank_load[h] - delta, rank_load[r] + delta)
                            if best is None or heavier < best[0]:
                                best = (heavier, r, a, others[j][1])
        if best is None or best[0] >= rank_load[h]:
            return
        _, r, a, b = best
        delta = share[a] - (share[b] if b >= 0 else 0.0)
        hosted[h].remove(a)
        hosted[r].append(a)
        if b >= 0:
            hosted[r].remove(b)
            hosted[h].append(b)
        rank_load[h] -= delta
        rank_load[r] += delta
