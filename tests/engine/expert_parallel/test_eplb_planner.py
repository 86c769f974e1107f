"""EPLB's planner, on its own: for any loads, rank count and replica budget, the placement stays within
the budget, hosts every expert, and keeps the ranks within one replica's share of each other."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from recipe.engine.expert_parallel.eplb_planner import plan_placement, replica_counts
from recipe.engine.expert_parallel.placement import EMPTY, default_placement

loads = st.one_of(
    st.lists(st.integers(0, 10**6), min_size=1, max_size=300),
    st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=300),
    st.integers(1, 300).map(lambda n: [10**6 // (k + 1) ** 2 for k in range(n)]),  # very skewed (Zipf, s=2)
)


@settings(max_examples=300, deadline=None)
@given(load=loads, ranks=st.integers(1, 160), budget=st.integers(0, 400))
def test_placement_is_within_budget_hosts_every_expert_and_is_balanced(load: list[float], ranks: int,
                                                                      budget: int) -> None:
    p = plan_placement(load, ranks, budget)
    n = len(load)
    p.check(max_physical=n + budget)
    assert p.num_ranks == ranks
    assert p.slots_per_rank == -(-p.num_physical // ranks)  # slots dealt evenly: the weights stay rectangular
    reps = p.replicas()
    assert all(1 <= c <= max(1, ranks) for c in reps)
    for rank in p.slots:  # no rank holds the same expert twice (a useless replica)
        held = [e for e in rank if e != EMPTY]
        assert len(held) == len(set(held))
    assert p.num_physical == n + min(budget, n * (ranks - 1))  # the budget is spent where it can help
    rank_loads = p.rank_loads(load)
    largest_share = max(load[e] / reps[e] for e in range(n))
    assert max(rank_loads) - min(rank_loads) <= largest_share * (1 + 1e-9) + 1e-9
    assert sum(rank_loads) == pytest.approx(sum(load), rel=1e-9, abs=1e-6)


@settings(max_examples=150, deadline=None)
@given(load=st.lists(st.integers(0, 10**4), min_size=1, max_size=40), ranks=st.integers(2, 64), budget=st.integers(0, 200))
def test_replication_minimises_the_largest_per_replica_load(load: list[float], ranks: int, budget: int) -> None:
    count = replica_counts(load, ranks, budget)
    worst = max(w / c for w, c in zip(load, count, strict=True))
    # moving any one replica from one expert to another cannot lower the largest per-replica load
    for a in range(len(load)):
        if count[a] == 1:
            continue
        for b in range(len(load)):
            if b == a or count[b] >= ranks:
                continue
            moved = list(count)
            moved[a] -= 1
            moved[b] += 1
            assert max(w / c for w, c in zip(load, moved, strict=True)) >= worst * (1 - 1e-12)


def test_hot_experts_get_replicas_and_balance_reaches_the_goal() -> None:
    load = [1000 // (k + 1) for k in range(64)]  # Zipf s=1 over 64 experts
    before = default_placement(64, 8).imbalance(load)
    p = plan_placement(load, 8, 32)
    assert p.replicas()[0] > 1 and p.replicas()[-1] == 1
    assert before > 2.0 and p.imbalance(load) <= 1.10


@pytest.mark.parametrize(("load", "ranks", "budget"), [([1.0], 0, 0), ([1.0], 2, -1), ([-1.0], 2, 0)])
def test_bad_arguments_are_refused(load: list[float], ranks: int, budget: int) -> None:
    with pytest.raises(ValueError):
        plan_placement(load, ranks, budget)


def test_default_placement_is_contiguous_and_padded() -> None:
    p = default_placement(5, 2)
    assert p.slots == ((0, 1, 2), (3, 4, EMPTY))
    p.check(max_physical=5)


@settings(max_examples=200, deadline=None)
@given(load=st.lists(st.integers(0, 10**4), min_size=2, max_size=48), ranks=st.integers(2, 12), budget=st.integers(0, 24))
def test_no_single_swap_with_the_heaviest_rank_helps(load: list[float], ranks: int, budget: int) -> None:
    """Brute force over every swap (and every move to a rank with a slot fewer) between the heaviest rank and
    another: none lowers the heavier of the two below the heaviest rank's load (the refinement's end state)."""
    p = plan_placement(load, ranks, budget)
    reps = p.replicas()
    held = [[e for e in rank if e != EMPTY] for rank in p.slots]
    loads = p.rank_loads(load)
    h = max(range(ranks), key=lambda r: loads[r])
    for r in range(ranks):
        if r == h:
            continue
        candidates = [b for b in held[r] if b not in held[h]] + ([None] if len(held[r]) < len(held[h]) else [])
        for a in held[h]:
            if a in held[r]:
                continue
            for b in candidates:
                delta = load[a] / reps[a] - (load[b] / reps[b] if b is not None else 0.0)
                if 0 < delta < loads[h] - loads[r]:
                    assert max(loads[h] - delta, loads[r] + delta) >= loads[h] * (1 - 1e-9) - 1e-9
