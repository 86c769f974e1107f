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


class DeadEndMatcher:
    """Allows ALLOWED for `length` tokens, then nothing at all, without ever terminating.
    With `refuse_odd`, `accept` refuses odd tokens although the mask allowed them (an over-wide mask)."""

    def __init__(self, length: int, refuse_odd: bool) -> None:
        self.length, self.refuse_odd = length, refuse_odd
        self.accepted: list[int] = []
        self.refused: list[int] = []

    def fill_bitmask(self, out: np.ndarray) -> None:
        out[:] = 0
        if len(self.accepted) < self.length:
            for t in ALLOWED:
                out[t // 32] |= np.int32(np.uint32(1 << (t % 32)).view(np.int32))

    def accept(self, token_id: int) -> bool:
        if token_id not in ALLOWED or len(self.accepted) >= self.length or (self.refuse_odd and token_id % 2):
            self.refused.append(token_id)
            return False
        self.accepted.append(token_id)
        return True

    def is_terminated(self) -> bool:
        return False


class DeadEnd:
    def __init__(self, length: int, refuse_odd: bool = False) -> None:
        self.length, self.refuse_odd = length, refuse_odd
        self.matchers: list[DeadEndMatcher] = []

    def matcher(self) -> DeadEndMatcher:
        m = DeadEndMatcher(self.length, self.refuse_odd)
        self.matchers.append(m)
        return m


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_an_all_zero_mask_from_a_live_matcher_ends_the_choice_never_frees_it(async_scheduling: bool) -> None:
    model = TinyPagedLM(seed=22)
    prompts = make_prompts(3, 3, 20, seed=22)
    llm = LLM((model, TinyInfo()), dtype="float64", num_threads=1, num_kv_blocks=128, block_size=4,
              async_scheduling=async_scheduling)
    constraint = DeadEnd(length=4)
    outs = llm.generate(prompts, SamplingParams(temperature=1.0, seed=5, max_tokens=30, constraint=constraint))
    for out in outs:
        assert out.finish_reason == "dead_end"
        assert len(out.new_token_ids) == 4 and set(out.new_token_ids) <= ALLOWED
    assert all(m.refused == [] for m in constraint.matchers)  # nothing outside the mask was even sampled
    assert llm.engine.block_manager.num_free_blocks == 128


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_a_token_the_matcher_refuses_is_never_emitted(async_scheduling: bool) -> None:
    model = TinyPagedLM(seed=23)
    prompts = make_prompts(6, 3, 20, seed=23)
    llm = LLM((model, TinyInfo()), dtype="float64", num_threads=1, num_kv_blocks=128, block_size=4,
              async_scheduling=async_scheduling)
    constraint = DeadEnd(length=30, refuse_odd=True)
    outs = llm.generate(prompts, [SamplingParams(temperature=1.0, seed=i, max_tokens=30, constraint=constraint)
                                  for i in range(6)])
    for out, matcher in zip(outs, constraint.matchers, strict=True):
        assert list(out.new_token_ids) == matcher.accepted[: len(out.new_token_ids)]
        assert all(t % 2 == 0 for t in out.new_token_ids)
        if matcher.refused:
            assert out.finish_reason == "dead_end"
    assert sum(out.finish_reason == "dead_end" for out in outs) >= 3
