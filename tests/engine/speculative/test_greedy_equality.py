"""Greedy output is token-identical with speculation on and off, whatever the batch, budget, pool and drafter."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from recipe.engine import SamplingParams
from spec_helpers import (
    OracleDrafter,
    cached_blocks_match_sequences,
    cached_kv_equals_recomputed,
    make_llm,
    use_drafter,
)
from tiny_paged_model import EOS, TinyPagedLM, make_prompts

MODEL = TinyPagedLM(seed=11)


def repetitive_prompts(n: int, seed: int) -> list[list[int]]:
    """Prompts that repeat pieces of themselves, so prompt lookup finds continuations."""
    rng = random.Random(seed)
    out = []
    for p in make_prompts(n, 2, 20, seed=seed):
        cut = rng.randrange(1, len(p) + 1)
        out.append(p + p[:cut] + p[rng.randrange(len(p)):])
    return out


@settings(max_examples=14, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), n_prompts=st.integers(1, 6), budget=st.sampled_from([5, 9, 64]),
       blocks=st.sampled_from([30, 256]), k=st.sampled_from([1, 2, 4, "auto"]),
       drafter=st.sampled_from(["ngram", "ngram-earlier", "ngram-by-n", "oracle-good", "oracle-bad"]), async_scheduling=st.booleans(),
       prefix_caching=st.booleans(), n=st.sampled_from([1, 2]), stop=st.booleans(), logprobs=st.booleans(),
       cost=st.sampled_from([("convex", True, True), ("convex", True, False), ("grid", False, True),
                             ("plane", True, True)]))
def test_greedy_output_is_identical_with_speculation_on_and_off(
        seed: int, n_prompts: int, budget: int, blocks: int, k: int | str, drafter: str, async_scheduling: bool,
        prefix_caching: bool, n: int, stop: bool, logprobs: bool, cost: tuple[str, bool, bool]) -> None:
    prompts = repetitive_prompts(n_prompts, seed)
    stop_ids = (random.Random(seed).randrange(EOS),) if stop else ()
    params = SamplingParams(temperature=0.0, max_tokens=20, n=n, stop_token_ids=stop_ids,
                            logprobs=2 if logprobs else None)
    config = {"max_num_batched_tokens": budget, "num_kv_blocks": blocks, "async_scheduling": async_scheduling,
              "enable_prefix_caching": prefix_caching}
    off = make_llm(MODEL, **config)
    expected = off.generate(prompts, params)
    off.shutdown()
    on = make_llm(MODEL, speculative="ngram", num_speculative_tokens=k,
                  speculative_ngram_extend=drafter != "ngram-earlier",
                  speculative_ngram_match_buckets=drafter != "ngram-by-n", speculative_cost_fit=cost[0],
                  speculative_cost_cells=cost[1], speculative_cost_cells_fit=cost[2], **config)
    if drafter.startswith("oracle"):
        use_drafter(on, OracleDrafter(MODEL, corrupt=0.1 if drafter == "oracle-good" else 0.6, seed=seed))
    got = on.generate(prompts, params)
    for a, b in zip(expected, got, strict=True):
        assert b.new_token_ids == a.new_token_ids
        assert (b.finish_reason, b.stop_token_id) == (a.finish_reason, a.stop_token_id)
        if logprobs:
            assert a.new_logprobs is not None and b.new_logprobs is not None
            for (lp_a, top_a), (lp_b, top_b) in zip(a.new_logprobs, b.new_logprobs, strict=True):  # type: ignore[misc]
                assert lp_b == pytest.approx(lp_a, abs=1e-9)
                assert [t for t, _ in top_b] == [t for t, _ in top_a]
    bm = on.engine.block_manager
    bm.check_invariants()
    assert bm.num_free_blocks == bm.num_blocks  # rolled-back blocks all came back
    if prefix_caching:
        cached_blocks_match_sequences(on, [list(p) + list(o.new_token_ids) for p in prompts for o in got])
    on.shutdown()


def test_speculation_accepts_drafts_and_takes_fewer_steps() -> None:
    """Not a vacuous equality: a good drafter is accepted, and the same output needs fewer model steps."""
    prompts = repetitive_prompts(3, 5)
    params = SamplingParams(temperature=0.0, max_tokens=30, ignore_eos=True)
    off = make_llm(MODEL, async_scheduling=False)
    expected = off.generate(prompts, params)
    on = make_llm(MODEL, speculative="ngram", num_speculative_tokens=4)
    use_drafter(on, OracleDrafter(MODEL, corrupt=0.0))
    got = on.generate(prompts, params)
    assert [o.new_token_ids for o in got] == [o.new_token_ids for o in expected]
    m = on.engine.stats().speculative
    assert m.acceptance_rate == 1.0 and m.mean_accepted_length > 4.5  # the last drafts are cut by max_tokens
    assert on.engine.steps < off.engine.steps / 2


def test_rejected_drafts_never_enter_the_prefix_cache() -> None:
    """A drafter that is mostly wrong writes draft KV into blocks; none of it may be registered."""
    prompts = repetitive_prompts(4, 9)
    model = TinyPagedLM(seed=11)
    on = make_llm(model, speculative="ngram", num_speculative_tokens=3)
    drafter = OracleDrafter(model, corrupt=0.5)
    use_drafter(on, drafter)
    step, checked = on.engine.step, []

    def step_then_check():  # type: ignore[no-untyped-def]
        outputs = step()
        for seq in on.engine.scheduler.running:  # registered blocks hold only computed KV of real tokens
            assert seq.num_hashed_blocks * 4 <= min(seq.num_computed_tokens, len(seq.token_ids)), seq
            checked.append(seq.num_hashed_blocks)
        return outputs

    on.engine.step = step_then_check  # type: ignore[method-assign]
    params = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    got = on.generate(prompts, params)
    assert any(a < len(d) for d, a in drafter.observed)  # rejections happened
    assert max(checked) > 3
    sequences = [p + list(o.new_token_ids) for p, o in zip(prompts, got, strict=True)]
    cached_blocks_match_sequences(on, sequences)
    assert cached_kv_equals_recomputed(on, model, sequences, seed=11) > 10
    again = on.generate(prompts, params)  # the cached prefixes serve a second round: same tokens
    assert [o.new_token_ids for o in again] == [o.new_token_ids for o in got]
    assert all(o.cached_tokens > 0 for o in again)


def test_speculation_off_by_default_and_bad_options_named() -> None:
    llm = make_llm(MODEL)
    assert llm.engine.speculator is None and llm.engine.stats().speculative is None
    for bad in ({"speculative": "eagle"}, {"speculative": "ngram", "num_speculative_tokens": 0},
                {"speculative": "ngram", "num_speculative_tokens": "many"}):
        with pytest.raises(ValueError, match="speculative"):
            make_llm(MODEL, **bad)
