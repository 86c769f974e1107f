"""Pricing the drafter's own time: a chained drafter stops where its next position no longer pays for itself,
the length policy counts the drafting time spent, and the per-position cost is kept per batch size. Costs here
are fixed (no timing): the tests hold whatever the machine's load."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from recipe.engine import SamplingParams
from recipe.engine.speculative.calibration import BinCalibration
from recipe.engine.speculative.chain_budget import ChainBudget
from recipe.engine.speculative.cost_model import StepCost
from recipe.engine.speculative.draft_cost import DraftCost
from recipe.engine.speculative.draft_head import DraftHead
from recipe.engine.speculative.head_drafter import DraftHeadDrafter
from recipe.engine.speculative.length_policy import choose_lengths, survivals
from spec_helpers import fixed_cost_model, make_llm, use_drafter
from test_greedy_equality import repetitive_prompts
from tiny_paged_model import TinyPagedLM


def chained_positions(c: float, step: StepCost, draft_s: float, longest: int) -> int:
    """Positions one sequence chains when every position's confidence is `c` (and the calibration knows it)."""
    budget = ChainBudget(lambda t: step.predict(1, t), 1, 1, draft_s)
    survival = [1.0]
    for j in range(longest):
        survival = [survival[0] * c]
        if j + 1 == longest or not budget.more(survival, c):
            return j + 1
    raise AssertionError


def step_rate(c: float, step: StepCost, draft_s: float, n: int) -> float:
    """Expected tokens per second of a batch-1 step that drafts and verifies `n` positions of confidence `c`."""
    return (1 + sum(c ** (j + 1) for j in range(n))) / (step.predict(1, 1 + n) + n * draft_s)


@settings(max_examples=300, deadline=None)
@given(c=st.floats(0.0, 1.0), intercept=st.floats(0.005, 0.1), per_token=st.floats(0.0, 0.02),
       draft_s=st.floats(0.0, 0.02), longest=st.integers(1, 8))
def test_the_chain_stops_at_the_length_of_the_best_rate(c: float, intercept: float, per_token: float,
                                                        draft_s: float, longest: int) -> None:
    """One sequence, confidence c at every position, a linear step cost: the chain drafts the n (at least one,
    at most `longest`) that maximises expected tokens per second of drafting plus verification."""
    step = StepCost(intercept, 0.0, per_token)
    got = chained_positions(c, step, draft_s, longest)
    best = max(step_rate(c, step, draft_s, n) for n in range(1, longest + 1))
    assert step_rate(c, step, draft_s, got) >= best * (1 - 1e-9), (got, best)


def test_a_costly_drafter_chains_less_and_a_free_one_to_the_end() -> None:
    step = StepCost(0.04, 0.0, 0.0)  # verification free per token: only the drafter's time limits the chain
    assert chained_positions(0.8, step, 0.0, 8) == 8
    assert chained_positions(0.8, step, 0.004, 8) < 8
    assert chained_positions(0.8, step, 0.04, 8) == 1
    lengths = [chained_positions(0.8, step, d, 8) for d in (0.0, 0.001, 0.002, 0.004, 0.008, 0.02)]
    assert lengths == sorted(lengths, reverse=True)


def test_rows_that_cannot_repay_their_verification_do_not_extend_the_chain() -> None:
    step = StepCost(0.04, 0.0, 0.004)  # a verified token costs a tenth of a step
    strong = ChainBudget(lambda t: step.predict(2, t), 2, 2, 0.001)
    assert strong.more([0.9, 0.01], 0.9)
    weak = ChainBudget(lambda t: step.predict(2, t), 2, 2, 0.001)
    assert not weak.more([0.05, 0.05], 0.9)  # 0.045 each: below the 0.1-step marginal cost


def rate(conf: list[list[float]], lengths: tuple[int, ...] | list[int], cost: StepCost, base: int,
         spent: float) -> float:
    expected = len(conf) + sum(sum(survivals(c)[:k]) for c, k in zip(conf, lengths, strict=True))
    return expected / (spent + cost.predict(len(conf), base + sum(lengths)))


@settings(max_examples=200, deadline=None)
@given(conf=st.lists(st.lists(st.floats(0.0, 1.0), min_size=0, max_size=4), min_size=1, max_size=3),
       cost=st.builds(StepCost, st.floats(0.001, 0.1), st.floats(0.0, 0.01), st.floats(0.0, 0.05)),
       spent=st.floats(0.0, 0.2))
def test_chosen_lengths_maximise_the_rate_of_drafting_plus_verification(conf: list[list[float]], cost: StepCost,
                                                                        spent: float) -> None:
    got = choose_lengths(conf, lambda t: cost.predict(len(conf), t), len(conf), spent=spent)
    best = max(rate(conf, ks, cost, len(conf), spent) for ks in itertools.product(*(range(len(c) + 1) for c in conf)))
    assert rate(conf, got, cost, len(conf), spent) >= best * (1 - 1e-9)


def test_time_already_spent_drafting_makes_a_draft_worth_verifying() -> None:
    step = lambda t: 0.01 * t  # noqa: E731  (a draft token costs a whole step's time)
    assert choose_lengths([[0.6]], step, 1) == [0]  # 1.6 tokens / 0.02 s < 1 token / 0.01 s
    assert choose_lengths([[0.6]], step, 1, spent=0.02) == [1]  # 1.6 / 0.04 > 1 / 0.03


def test_draft_cost_is_kept_per_batch_size_and_borrowed_from_the_nearest() -> None:
    cost = DraftCost(weight=0.5)
    assert cost.per_position(1) == 0.0
    cost.observe(1, 4, 0.004)
    cost.observe(8, 2, 0.008)
    assert cost.per_position(1) == pytest.approx(0.001) and cost.per_position(8) == pytest.approx(0.004)
    assert cost.per_position(2) == pytest.approx(0.001) and cost.per_position(6) == pytest.approx(0.004)
    cost.observe(1, 1, 0.003)
    assert cost.per_position(1) == pytest.approx(0.002)  # halfway: weight 0.5
    assert cost.overall == pytest.approx(0.002625)  # every batch size: 0.0005, 0.00225, 0.002625


MODEL = TinyPagedLM(seed=41)


class CountingHead(torch.nn.Module):
    """The draft head, counting the chained positions it computes."""

    def __init__(self, head: DraftHead) -> None:
        super().__init__()
        self.inner, self.passes = head, 0
        self.vocab = head.vocab

    def forward(self, h: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        self.passes += 1
        return self.inner(h, e)


@pytest.mark.parametrize("price", [True, False])
def test_a_priced_drafter_chains_fewer_positions_and_changes_no_output(price: bool) -> None:
    """A draft head calibrated to 0.9 at every position whose positions cost 0.3 of a (flat) step each: priced, a
    chain stops after 5 positions (the sixth's 0.9^6 = 0.53 expected tokens are worth less than 0.3 s at the
    step's rate, 4.69 / 2.5 s); unpriced, it runs while a row survives above the first token's break-even, 0.3
    (to the 8 "auto" allows). Greedy outputs equal no speculation either way."""
    prompts = repetitive_prompts(3, 41)
    params = SamplingParams(temperature=0.0, max_tokens=24)
    expected = make_llm(MODEL).generate(prompts, params)
    llm = make_llm(MODEL, speculative="ngram", num_speculative_tokens="auto", num_kv_blocks=60,
                   speculative_cost_model=fixed_cost_model(0.0), speculative_price_drafting=price)
    torch.manual_seed(0)
    head = CountingHead(DraftHead(32, 64).double())
    calibration = BinCalibration(16, {f"{j},{b}": [10**9, 9 * 10**8] for j in range(16) for b in range(10)})
    drafter = DraftHeadDrafter(MODEL, head, calibration)  # type: ignore[arg-type]
    rooms: list[int] = []
    propose = drafter.propose
    drafter.propose = lambda seqs, max_lens: rooms.append(max(max_lens)) or propose(seqs, max_lens)  # type: ignore[method-assign]
    use_drafter(llm, drafter)
    spec = llm.engine.speculator
    spec.draft_cost.overall = 0.3  # seconds per chained position, every batch size
    spec.draft_cost.by_rows = dict.fromkeys(range(1, len(prompts) + 1), 0.3)
    got = llm.generate(prompts, params)
    assert [o.new_token_ids for o in got] == [o.new_token_ids for o in expected]
    assert len(rooms) > 3
    assert (drafter.chain is not None) == price
    if price:  # 5 positions; 4 where a sequence drafting nothing (at its last token) shares the step's rate
        assert sum(min(room, 4) for room in rooms) <= head.passes <= sum(min(room, 5) for room in rooms), rooms
    else:
        assert head.passes == sum(min(room, 8) for room in rooms), rooms
