"""The engine's optimisations change nothing: each test compares against an oracle that lacks the optimisation."""

from __future__ import annotations

import pytest
from recipe.engine import LLM, SamplingParams
from tiny_paged_model import EOS, TinyInfo, TinyPagedLM, greedy_by_recompute, make_prompts

GREEDY = SamplingParams(temperature=0.0, max_tokens=24)


def make_llm(model: TinyPagedLM, **config: object) -> LLM:
    config = {"dtype": "float64", "num_kv_blocks": 256, "block_size": 4, "max_num_batched_tokens": 48, "num_threads": 1, **config}
    return LLM((model, TinyInfo()), **config)


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_batched_paged_decoding_equals_single_sequence_full_recompute(async_scheduling: bool) -> None:
    model = TinyPagedLM(seed=1)
    prompts = make_prompts(10, 1, 60, seed=1)
    llm = make_llm(model, async_scheduling=async_scheduling)
    outs = llm.generate(prompts, GREEDY)
    for prompt, out in zip(prompts, outs, strict=True):
        expected = greedy_by_recompute(model, prompt, GREEDY.max_tokens)
        assert list(out.new_token_ids) == expected
        assert out.finish_reason == ("length" if len(expected) == GREEDY.max_tokens else "stop")
    assert llm.engine.block_manager.num_free_blocks == llm.engine.block_manager.num_blocks
    llm.engine.block_manager.check_invariants()
    llm.shutdown()


def test_chunked_prefill_respects_token_budget_and_equals_one_shot() -> None:
    model = TinyPagedLM(seed=2)
    prompts = make_prompts(4, 30, 90, seed=2)
    small = make_llm(model, max_num_batched_tokens=7, async_scheduling=False)
    budgets: list[int] = []
    original = small.engine.scheduler.schedule

    def spy():  # type: ignore[no-untyped-def]
        out = original()
        budgets.append(out.num_tokens)
        return out

    small.engine.scheduler.schedule = spy  # type: ignore[method-assign]
    chunked = small.generate(prompts, GREEDY)
    assert max(budgets) <= 7
    big = make_llm(model, max_num_batched_tokens=4096, async_scheduling=False)
    whole = big.generate(prompts, GREEDY)
    assert [o.new_token_ids for o in chunked] == [o.new_token_ids for o in whole]


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_prefix_cache_hit_gives_the_same_tokens_as_a_miss(async_scheduling: bool) -> None:
    model = TinyPagedLM(seed=3)
    shared = make_prompts(1, 45, 45, seed=3)[0]
    tails = make_prompts(4, 1, 9, seed=4)
    prompts = [shared + t for t in tails]
    cold = make_llm(model, enable_prefix_caching=False, async_scheduling=async_scheduling)
    miss = [cold.generate(p, GREEDY)[0] for p in prompts]
    warm = make_llm(model, async_scheduling=async_scheduling)
    tokens_before = model.forward_tokens
    hit = [warm.generate(p, GREEDY)[0] for p in prompts]
    assert [o.new_token_ids for o in hit] == [o.new_token_ids for o in miss]
    assert all(o.cached_tokens == 0 for o in miss)
    assert hit[0].cached_tokens == 0
    assert all(o.cached_tokens == 44 for o in hit[1:])  # 11 full blocks of 4 shared tokens
    stats = warm.engine.stats()
    assert stats.prefix_cache_hits == 3 * 44
    computed = model.forward_tokens - tokens_before
    assert computed < sum(len(p) for p in prompts) + 4 * GREEDY.max_tokens - 3 * 44 + 1


def test_a_full_prompt_hit_still_computes_its_last_token() -> None:
    model = TinyPagedLM(seed=5)
    prompt = make_prompts(1, 16, 16, seed=5)[0]  # exactly 4 blocks
    llm = make_llm(model, async_scheduling=False)
    first = llm.generate(prompt, GREEDY)[0]
    again = llm.generate(prompt, GREEDY)[0]
    assert again.cached_tokens == 12
    assert again.new_token_ids == first.new_token_ids == tuple(greedy_by_recompute(model, prompt, 24))


def test_prefix_cache_verifies_tokens_not_just_hashes() -> None:
    model = TinyPagedLM(seed=6)
    prompt = make_prompts(1, 20, 20, seed=6)[0]
    llm = make_llm(model, async_scheduling=False)
    llm.generate(prompt, GREEDY)
    bm = llm.engine.block_manager
    for block in bm.cached.values():  # corrupt every stored token record: a hash match alone must not be trusted
        bm.token_ids[block] = tuple(t + 1 for t in bm.token_ids[block])
    again = llm.generate(prompt, GREEDY)[0]
    assert again.cached_tokens == 0
    assert list(again.new_token_ids) == greedy_by_recompute(model, prompt, 24)


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_preemption_and_resumption_give_the_same_tokens(async_scheduling: bool) -> None:
    model = TinyPagedLM(seed=7)
    prompts = make_prompts(8, 10, 30, seed=7)
    params = SamplingParams(temperature=0.0, max_tokens=30, ignore_eos=True)
    tight = make_llm(model, num_kv_blocks=24, async_scheduling=async_scheduling)
    outs = tight.generate(prompts, params)
    preempted = sum(s.num_preemptions for s in _all_sequences(tight))
    assert preempted > 0, "the pool was meant to be too small for all sequences at once"
    for prompt, out in zip(prompts, outs, strict=True):
        assert list(out.new_token_ids) == greedy_by_recompute(model, prompt, 30, eos=None)
    assert tight.engine.block_manager.num_free_blocks == 24


def _all_sequences(llm: LLM) -> list:  # sequences seen by the scheduler, recorded by the spy below
    return getattr(llm.engine.scheduler, "seen", [])


@pytest.fixture(autouse=True)
def record_sequences(monkeypatch: pytest.MonkeyPatch) -> None:
    from recipe.engine.scheduler import Scheduler

    original = Scheduler.add

    def add(self, seq):  # type: ignore[no-untyped-def]
        self.__dict__.setdefault("seen", []).append(seq)
        original(self, seq)

    monkeypatch.setattr(Scheduler, "add", add)


def test_async_equals_sync_with_sampling_penalties_and_logprobs() -> None:
    model = TinyPagedLM(seed=8)
    prompts = make_prompts(12, 1, 50, seed=8)
    params = [
        SamplingParams(temperature=0.9, top_p=0.9, top_k=20, min_p=0.02, presence_penalty=0.5,
                       frequency_penalty=0.3, repetition_penalty=1.2, seed=100 + i, max_tokens=5 + 3 * i,
                       logprobs=3, n=1 + i % 3)
        for i in range(len(prompts))
    ]
    runs = []
    for mode in (False, True):
        llm = make_llm(model, async_scheduling=mode, max_num_seqs=5)
        runs.append(llm.generate(prompts, params))
        assert llm.engine.block_manager.num_free_blocks == 256
        llm.shutdown()
    sync, asyn = runs
    assert [(o.new_token_ids, o.finish_reason) for o in sync] == [(o.new_token_ids, o.finish_reason) for o in asyn]
    for a, b in zip(sync, asyn, strict=True):
        assert a.new_logprobs is not None and b.new_logprobs is not None
        for x, y in zip(a.new_logprobs, b.new_logprobs, strict=True):
            assert x is not None and y is not None
            assert x[0] == pytest.approx(y[0], abs=1e-5)
            assert [t for t, _ in x[1]] == [t for t, _ in y[1]]


def test_seeded_sampling_is_reproducible_whatever_the_batch() -> None:
    model = TinyPagedLM(seed=9)
    prompts = make_prompts(6, 5, 30, seed=9)
    params = SamplingParams(temperature=1.0, seed=1234, max_tokens=20)
    alone = make_llm(model).generate(prompts[0], params)[0]
    batched = make_llm(model, async_scheduling=False).generate(prompts, params)[0]
    assert alone.new_token_ids == batched.new_token_ids
    other_seed = make_llm(model).generate(prompts[0], SamplingParams(temperature=1.0, seed=99, max_tokens=20))[0]
    assert other_seed.new_token_ids != alone.new_token_ids


def test_n_choices_share_the_prompt_blocks_and_differ_by_seed() -> None:
    model = TinyPagedLM(seed=10)
    prompt = make_prompts(1, 41, 41, seed=10)[0]
    llm = make_llm(model, async_scheduling=False)
    before = model.forward_tokens
    outs = llm.generate(prompt, SamplingParams(temperature=1.0, seed=5, n=4, max_tokens=10, ignore_eos=True))
    computed = model.forward_tokens - before
    # the prompt is computed once; the other 3 choices recompute only its last partial block (1 token here)
    assert computed == 41 + 3 * 1 + 4 * 9
    assert [o.index for o in outs] == [0, 1, 2, 3]
    assert len({o.new_token_ids for o in outs}) > 1
    assert all(o.cached_tokens == 40 for o in outs[1:])
    greedy = llm.generate(prompt, SamplingParams(temperature=0.0, n=3, max_tokens=10))
    assert len({o.new_token_ids for o in greedy}) == 1
    assert list(greedy[0].new_token_ids) == greedy_by_recompute(model, prompt, 10)


def test_stop_tokens_and_eos_end_with_reason_stop_and_are_not_output() -> None:
    model = TinyPagedLM(seed=11)
    prompt = make_prompts(1, 12, 12, seed=11)[0]
    free = greedy_by_recompute(model, prompt, 12, eos=None)
    stop_at = free[5]
    first = free.index(stop_at)
    out = make_llm(model).generate(prompt, SamplingParams(temperature=0.0, max_tokens=12,
                                                          stop_token_ids=(stop_at,)))[0]
    assert list(out.new_token_ids) == free[:first]
    assert out.finish_reason == "stop" and out.stop_token_id == stop_at
    assert EOS not in out.new_token_ids


def test_max_model_len_finishes_with_length() -> None:
    model = TinyPagedLM(seed=12)
    prompt = make_prompts(1, 20, 20, seed=12)[0]
    out = make_llm(model, max_model_len=26).generate(prompt, SamplingParams(temperature=0.0, max_tokens=50,
                                                                            ignore_eos=True))[0]
    assert len(out.new_token_ids) == 6 and out.finish_reason == "length"


def test_a_bad_prompt_in_a_batch_queues_nothing() -> None:
    model = TinyPagedLM(seed=13)
    llm = make_llm(model)
    with pytest.raises(ValueError, match=r"prompt 1: prompt token ids must be ints in \[0, 97\)"):
        llm.generate([[1, 2, 3], [1, 500]], GREEDY)
    assert not llm.engine.has_unfinished_requests()
    assert list(llm.generate([1, 2, 3], GREEDY)[0].new_token_ids) == greedy_by_recompute(model, [1, 2, 3], 24)
