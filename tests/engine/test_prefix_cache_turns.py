"""A conversation's next turn finds its previous turn (prompt and output) in the prefix cache."""

from __future__ import annotations

import pytest
from recipe.engine import LLM, SamplingParams
from tiny_paged_model import TinyInfo, TinyPagedLM, greedy_by_recompute, make_prompts

BS = 4


def engine(seed: int, async_scheduling: bool) -> LLM:
    return LLM((TinyPagedLM(seed=seed), TinyInfo()), dtype="float64", num_threads=1, num_kv_blocks=64,
               block_size=BS, async_scheduling=async_scheduling)


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_turn_two_hits_turn_one_whole_prompt_and_output(async_scheduling: bool) -> None:
    """Turn 1 ends on a stop token, so every prompt and output token has KV; turn 2 reuses all of it."""
    model_seed = 40
    prompt = make_prompts(1, 10, 10, seed=40)[0]
    free_run = greedy_by_recompute(TinyPagedLM(seed=model_seed), prompt, 30, eos=None)
    # Stop at the first token that did not occur before it, after an output that makes prompt + output
    # a whole number of blocks (so the expected hit is exactly the whole of turn 1).
    cut = next(k for k in range(2, 30) if (len(prompt) + k) % BS == 0 and free_run[k] not in free_run[:k])
    llm = engine(model_seed, async_scheduling)
    turn1 = llm.generate(prompt, SamplingParams(temperature=0.0, max_tokens=40, stop_token_ids=(free_run[cut],)))[0]
    assert turn1.finish_reason == "stop" and list(turn1.new_token_ids) == free_run[:cut]
    history = prompt + list(turn1.new_token_ids)
    turn2 = llm.generate([*history, 5, 6, 7], SamplingParams(temperature=0.0, max_tokens=3))[0]
    assert turn2.cached_tokens == len(history)
    llm.engine.block_manager.check_invariants()


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_blocks_completed_in_the_final_step_are_cached_on_a_length_finish(async_scheduling: bool) -> None:
    """On "length" the last output token has no KV; every block before it is reused."""
    prompt = make_prompts(1, 9, 9, seed=41)[0]
    llm = engine(41, async_scheduling)
    turn1 = llm.generate(prompt, SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True))[0]
    assert turn1.finish_reason == "length"
    history = prompt + list(turn1.new_token_ids)  # 17 tokens, 16 of them with KV: 4 full blocks
    turn2 = llm.generate([*history, 1, 2], SamplingParams(temperature=0.0, max_tokens=2))[0]
    assert turn2.cached_tokens == 16
