"""Constraint masks: the bitmask is applied before sampling, the matcher advanced after, termination stops."""

from __future__ import annotations

import numpy as np
import pytest
from recipe.engine import LLM, SamplingParams
from tiny_paged_model import EOS, TinyInfo, TinyPagedLM, make_prompts

ALLOWED = frozenset(range(10, 20))


class DigitsMatcher:
    """Allows `length` tokens from ALLOWED, then (if `end_with_eos`) only EOS; terminated at the end."""

    def __init__(self, length: int, end_with_eos: bool) -> None:
        self.length, self.end_with_eos = length, end_with_eos
        self.accepted: list[int] = []
        self.done = False

    def fill_bitmask(self, out: np.ndarray) -> None:
        assert out.dtype == np.int32 and out.shape == ((TinyInfo.vocab_size + 31) // 32,)
        out[:] = 0
        allowed = ALLOWED if len(self.accepted) < self.length else {EOS}
        for t in allowed:
            out[t // 32] |= np.int32(np.uint32(1 << (t % 32)).view(np.int32))

    def accept(self, token_id: int) -> bool:
        ok = token_id in (ALLOWED if len(self.accepted) < self.length else {EOS})
        assert ok, f"the engine sampled {token_id}, which the mask forbids"
        self.accepted.append(token_id)
        self.done = (len(self.accepted) == self.length and not self.end_with_eos) or token_id == EOS
        return ok

    def rollback(self, n: int) -> None:
        del self.accepted[len(self.accepted) - n:]
        self.done = False

    def can_terminate(self) -> bool:
        return len(self.accepted) >= self.length

    def is_terminated(self) -> bool:
        return self.done


class Digits:
    def __init__(self, length: int, end_with_eos: bool) -> None:
        self.length, self.end_with_eos = length, end_with_eos
        self.matchers: list[DigitsMatcher] = []

    def matcher(self) -> DigitsMatcher:
        m = DigitsMatcher(self.length, self.end_with_eos)
        self.matchers.append(m)
        return m


@pytest.mark.parametrize("async_scheduling", [False, True])
@pytest.mark.parametrize("end_with_eos", [False, True])
def test_constrained_outputs_follow_the_matcher_and_stop(async_scheduling: bool, end_with_eos: bool) -> None:
    model = TinyPagedLM(seed=20)
    prompts = make_prompts(5, 3, 30, seed=20)
    llm = LLM((model, TinyInfo()), dtype="float64", num_threads=1, num_kv_blocks=128, block_size=4,
              async_scheduling=async_scheduling)
    constraint = Digits(length=6, end_with_eos=end_with_eos)
    params = [SamplingParams(temperature=1.0, seed=i, max_tokens=40, constraint=constraint, n=2) for i in range(4)]
    params.append(SamplingParams(temperature=0.0, max_tokens=12))  # an unconstrained neighbour
    outs = llm.generate(prompts, params)
    for out in outs[:-1]:
        assert len(out.new_token_ids) == 6 and set(out.new_token_ids) <= ALLOWED
        assert out.finish_reason == "stop"
        assert out.stop_token_id == (EOS if end_with_eos else None)
    assert len(constraint.matchers) == 8  # one matcher per sequence
    assert not set(outs[-1].new_token_ids) <= ALLOWED
    assert llm.engine.block_manager.num_free_blocks == 128


def test_constraint_changes_greedy_choice_only_where_needed() -> None:
    model = TinyPagedLM(seed=21)
    prompt = make_prompts(1, 10, 10, seed=21)[0]
    llm = LLM((model, TinyInfo()), dtype="float64", num_threads=1, num_kv_blocks=64, block_size=4)
    free = llm.generate(prompt, SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True))[0]
    masked = llm.generate(prompt, SamplingParams(temperature=0.0, max_tokens=4, constraint=Digits(4, False)))[0]
    assert set(masked.new_token_ids) <= ALLOWED
    assert free.new_token_ids != masked.new_token_ids or set(free.new_token_ids) <= ALLOWED
