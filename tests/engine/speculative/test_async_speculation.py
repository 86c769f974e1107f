"""Steps that draft nothing overlap the next step (`speculative_async`): same tokens as every step synchronous
and as no speculation, under batching, budgets, preemption, constraints, stop tokens, n > 1 and logprobs."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from recipe.engine import LLM, SamplingParams
from recipe.engine.sequence import Sequence
from recipe.engine.speculative import Draft
from spec_helpers import OracleDrafter, fixed_cost_model, make_llm, use_drafter
from test_constraints import ConstrainedOracle, Parity, allowed_at
from test_greedy_equality import repetitive_prompts
from tiny_paged_model import EOS, TinyPagedLM

MODEL = TinyPagedLM(seed=23)
LENGTH = 14  # the parity constraint's length before EOS


class PhasedDrafter:
    """A good drafter for `good_calls` proposals, then a hopeless one for `bad_calls`, and so on: "auto" pauses
    drafting in the bad phases (overlapped steps, a probe every few) and takes it up again in the good ones."""

    def __init__(self, good: Any, bad: Any, good_calls: int, bad_calls: int) -> None:
        self.good, self.bad, self.calls = good, bad, 0
        self.good_calls, self.cycle = good_calls, good_calls + bad_calls
        self.observed = 0  # verdicts on verified drafts (what calibrates a real drafter)

    def propose(self, seqs: list[Sequence], max_lens: list[int]) -> list[Draft]:
        self.calls += 1
        return (self.good if self.calls % self.cycle < self.good_calls else self.bad).propose(seqs, max_lens)

    def after_step(self, step: Any, result: Any) -> None:
        self.good.after_step(step, result)
        self.bad.after_step(step, result)

    def observe(self, draft: Draft, num_accepted: int) -> None:
        self.observed += 1


def counting_overlaps(llm: LLM) -> list[int]:
    """Wrap `engine.step`: the returned list counts the steps left in flight when `step()` returned."""
    engine, overlapped = llm.engine, [0]
    step = engine.step

    def step_and_count():  # type: ignore[no-untyped-def]
        outputs = step()
        overlapped[0] += bool(engine._inflight)
        return outputs

    engine.step = step_and_count  # type: ignore[method-assign]
    return overlapped


def generate(prompts: list[list[int]], params: Any, config: dict[str, Any], drafter: Any | None,
             **spec: Any) -> tuple[list[Any], Any, int]:
    llm = make_llm(MODEL, **config, **spec)
    if drafter is not None:
        use_drafter(llm, drafter)
    overlapped = counting_overlaps(llm)
    outs = llm.generate(prompts, params() if callable(params) else params)
    metrics = llm.engine.stats().speculative
    bm = llm.engine.block_manager
    bm.check_invariants()
    assert bm.num_free_blocks == bm.num_blocks  # every rolled-back and finished block came back
    llm.shutdown()
    return outs, metrics, overlapped[0]


@settings(max_examples=16, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), n_prompts=st.integers(1, 6), budget=st.sampled_from([5, 9, 64]),
       blocks=st.sampled_from([30, 256]), k=st.sampled_from(["auto", "auto", 2]),
       phases=st.sampled_from([(3, 3), (4, 12), (2, 30)]),
       constrained=st.booleans(), n=st.sampled_from([1, 2]), stop=st.booleans(), logprobs=st.booleans())
def test_overlapped_steps_give_the_tokens_of_synchronous_steps_and_of_no_speculation(
        seed: int, n_prompts: int, budget: int, blocks: int, k: int | str, phases: tuple[int, int], constrained: bool,
        n: int,
        stop: bool, logprobs: bool) -> None:
    prompts = repetitive_prompts(n_prompts, seed)
    stop_ids = (random.Random(seed).randrange(EOS),) if stop else ()

    def params() -> SamplingParams:  # a fresh constraint (its matchers) per engine
        return SamplingParams(temperature=0.0, max_tokens=20, n=n, stop_token_ids=stop_ids,
                              logprobs=2 if logprobs else None, constraint=Parity(LENGTH) if constrained else None)

    def drafter() -> PhasedDrafter:
        if constrained:
            return PhasedDrafter(ConstrainedOracle(MODEL, LENGTH, 0.0, seed), ConstrainedOracle(MODEL, LENGTH, 1.0, seed),
                                 *phases)
        return PhasedDrafter(OracleDrafter(MODEL, 0.0, seed), OracleDrafter(MODEL, 1.0, seed), *phases)

    config = {"max_num_batched_tokens": budget, "num_kv_blocks": blocks}
    expected, _, _ = generate(prompts, params, config, None)
    spec = {"speculative": "ngram", "num_speculative_tokens": k}
    on, _, _ = generate(prompts, params, config, drafter(), **spec)
    off, _, overlapped_off = generate(prompts, params, config, drafter(), speculative_async=False, **spec)
    assert overlapped_off == 0
    for a, b, c in zip(expected, on, off, strict=True):
        assert b.new_token_ids == a.new_token_ids == c.new_token_ids
        assert (b.finish_reason, b.stop_token_id) == (a.finish_reason, a.stop_token_id) == (c.finish_reason, c.stop_token_id)
        if logprobs:
            for x, y in zip(a.new_logprobs or (), b.new_logprobs or (), strict=True):
                assert y[0] == pytest.approx(x[0], abs=1e-9)  # type: ignore[index]
                assert [t for t, _ in y[1]] == [t for t, _ in x[1]]  # type: ignore[index]
        if constrained:
            assert all(t in allowed_at(i, LENGTH) for i, t in enumerate(b.new_token_ids))


def test_auto_overlaps_the_steps_it_does_not_draft_and_still_verifies_drafts() -> None:
    """Not vacuous: with a drafter that is good, then hopeless, then good, "auto" both verifies drafts and
    leaves steps in flight; with the switch off no step is ever left in flight."""
    prompts = repetitive_prompts(3, 7)
    params = SamplingParams(temperature=0.0, max_tokens=60, ignore_eos=True)
    config = {"max_num_batched_tokens": 64}
    # each verified position costs 30% of a step: auto drafts in the good phases (hit rate ~1) and pauses in the
    # hopeless ones (~0) whatever the load (a start-up profile under load once made it never pause)
    # a short hit window and no hysteresis: the pause follows the phases of 12 proposals closely
    spec = {"speculative": "ngram", "num_speculative_tokens": "auto", "speculative_cost_model": fixed_cost_model(0.3),
            "speculative_hit_window": 5, "speculative_pause_margin": 1.0}

    def drafter() -> PhasedDrafter:
        return PhasedDrafter(OracleDrafter(MODEL, 0.0, 7), OracleDrafter(MODEL, 1.0, 7), 3, 12)

    expected, _, _ = generate(prompts, params, config, None)
    phased = drafter()
    on, metrics, overlapped = generate(prompts, params, config, phased, **spec)
    assert phased.observed == metrics.drafts  # every verified draft's verdict reached the drafter
    off, metrics_off, overlapped_off = generate(prompts, params, config, drafter(), speculative_async=False, **spec)
    assert [o.new_token_ids for o in on] == [o.new_token_ids for o in expected] == [o.new_token_ids for o in off]
    assert metrics.accepted_tokens > 0 and metrics.zero_length > 0
    assert overlapped > 10 and overlapped_off == 0, overlapped
    assert metrics_off.accepted_tokens > 0
