"""Scheduler and block manager on their own: budgets, FCFS order, preemption victims, LRU eviction."""

from __future__ import annotations

from recipe.engine.block_manager import BlockManager
from recipe.engine.sampling_params import SamplingParams
from recipe.engine.scheduler import Scheduler
from recipe.engine.sequence import Sequence, SequenceStatus


def make(num_blocks: int, budget: int = 64, max_seqs: int = 8, block_size: int = 4) -> Scheduler:
    return Scheduler(BlockManager.paged(num_blocks, block_size), max_num_seqs=max_seqs, max_num_batched_tokens=budget,
                     max_model_len=10_000)


def seq(name: str, length: int, max_tokens: int = 8, first: int = 0) -> Sequence:
    return Sequence(name, 0, list(range(first, first + length)), SamplingParams(temperature=0.0, max_tokens=max_tokens))


def run_step(s: Scheduler, finished: list[str]) -> list[tuple[str, int]]:
    """One synchronous step: schedule, 'sample' token 7 for sampling sequences, finish at max_tokens."""
    out = s.schedule()
    for item in out.scheduled:
        if item.sample:
            q = item.seq
            q.num_pending -= 1
            q.token_ids.append(7)
            s.block_manager.commit(q)
            if len(q.token_ids) - q.num_prompt_tokens >= q.params.max_tokens:
                s.finish(q, "length")
                finished.append(q.request_id)
        else:
            s.block_manager.commit(item.seq)
    return [(i.seq.request_id, i.num_tokens) for i in out.scheduled]


def test_token_budget_chunks_prefill_and_admits_in_arrival_order() -> None:
    s = make(num_blocks=100, budget=10)
    for name, n in [("long", 25), ("a", 3), ("b", 3)]:
        s.add(seq(name, n))
    done: list[str] = []
    assert run_step(s, done) == [("long", 10)]
    assert run_step(s, done) == [("long", 10)]
    assert run_step(s, done) == [("long", 5), ("a", 3), ("b", 2)]  # nobody overtakes the long prompt
    assert run_step(s, done) == [("long", 1), ("a", 1), ("b", 1)]


def test_under_block_pressure_the_youngest_is_preempted_and_the_oldest_finishes_first() -> None:
    s = make(num_blocks=6, budget=64)
    seqs = [seq(f"r{i}", 6, max_tokens=6, first=100 * i) for i in range(3)]
    for q in seqs:
        s.add(q)
    done: list[str] = []
    for _ in range(200):
        if not s.has_work():
            break
        run_step(s, done)
    assert done == ["r0", "r1", "r2"]
    assert seqs[0].num_preemptions == 0 and seqs[1].num_preemptions + seqs[2].num_preemptions > 0
    assert s.block_manager.num_free_blocks == 6
    s.block_manager.check_invariants()


def test_free_cached_blocks_are_evicted_least_recently_freed_first_and_tail_first() -> None:
    bm = BlockManager.paged(num_blocks=4, block_size=2)
    a = seq("a", 4, first=0)  # 2 full blocks
    assert bm.admit(a, [], 4)
    a.num_computed_tokens = 4
    bm.commit(a)
    head, tail = a.block_table
    bm.free_sequence(a)
    assert bm.num_free_blocks == 4 and len(bm.cached) == 2
    b = seq("b", 3, first=50)
    assert bm.admit(b, [], 3)  # needs 2 blocks: the two never-used ones go first
    assert set(b.block_table).isdisjoint({head, tail})
    c = seq("c", 1, first=90)
    assert bm.admit(c, [], 1)  # the next victim is a's tail block (freed first), not its head
    assert c.block_table == [tail]
    again = seq("again", 5, first=0)
    assert bm.match_prefix(again) == [head]
    bm.check_invariants()


def test_prefix_match_follows_the_chain_not_block_contents_alone() -> None:
    bm = BlockManager.paged(num_blocks=8, block_size=2)
    a = Sequence("a", 0, [1, 2, 3, 4, 9], SamplingParams())
    assert bm.admit(a, [], 5)
    a.num_computed_tokens = 5
    bm.commit(a)
    same_second_block = Sequence("b", 0, [5, 6, 3, 4, 9], SamplingParams())
    assert bm.match_prefix(same_second_block) == []  # [3, 4] is cached, but after a different prefix
    assert bm.match_prefix(Sequence("c", 0, [1, 2, 3, 4, 0, 0], SamplingParams())) == a.block_table[:2]


def test_a_sequence_that_cannot_fit_waits_without_changing_anything() -> None:
    s = make(num_blocks=4, budget=64)
    s.add(seq("big", 12))
    s.add(seq("next", 9))
    done: list[str] = []
    assert run_step(s, done) == [("big", 12)]
    assert run_step(s, done) == [("big", 1)]
    assert [q.request_id for q in s.waiting] == ["next"]
    assert s.waiting[0].status == SequenceStatus.WAITING and not s.waiting[0].block_table


def test_prefix_cache_lookups_are_counted_once_per_sequence_even_after_preemption() -> None:
    s = make(num_blocks=6, budget=64)
    seqs = [seq(f"r{i}", 6, max_tokens=6, first=100 * i) for i in range(3)]
    for q in seqs:
        s.add(q)
    done: list[str] = []
    for _ in range(200):
        if not s.has_work():
            break
        run_step(s, done)
    assert sum(q.num_preemptions for q in seqs) > 0  # re-admissions happened ...
    bm = s.block_manager
    assert bm.prefix_queries == 3 * 6  # ... but each sequence's prompt was looked up once
    assert bm.prefix_hits == 0
