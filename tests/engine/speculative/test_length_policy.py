"""The draft-length policy maximises expected emitted tokens per second of step time (checked by brute force)."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st
from recipe.engine.speculative.cost_model import StepCost
from recipe.engine.speculative.length_policy import choose_lengths, survivals


def rate(conf: list[list[float]], lengths: tuple[int, ...] | list[int], cost: StepCost, base: int) -> float:
    expected = len(conf) + sum(sum(survivals(c)[:k]) for c, k in zip(conf, lengths, strict=True))
    return expected / cost.predict(len(conf), base + sum(lengths))


confidences = st.lists(st.lists(st.floats(0.0, 1.0), min_size=0, max_size=4), min_size=1, max_size=3)
costs = st.builds(StepCost, st.floats(0.001, 0.1), st.floats(0.0, 0.01), st.floats(0.0, 0.05))


@settings(max_examples=200, deadline=None)
@given(conf=confidences, cost=costs)
def test_chosen_lengths_are_optimal_among_all_prefix_choices(conf: list[list[float]], cost: StepCost) -> None:
    base = len(conf)
    got = choose_lengths(conf, lambda t: cost.predict(len(conf), t), base)
    assert all(0 <= k <= len(c) for k, c in zip(got, conf, strict=True))
    best = max(rate(conf, ks, cost, base) for ks in itertools.product(*(range(len(c) + 1) for c in conf)))
    assert rate(conf, got, cost, base) >= best * (1 - 1e-9)


def test_a_costly_step_speculates_less_and_some_sequences_take_zero() -> None:
    conf = [[0.95, 0.9, 0.9, 0.9], [0.3, 0.2, 0.2, 0.1], [0.9, 0.5, 0.2, 0.1]]
    flat = choose_lengths(conf, lambda t: 1.0, 3)
    assert flat == [4, 4, 4]  # free tokens: verify everything
    steep = choose_lengths(conf, lambda t: 0.01 + 0.01 * t, 3)
    assert steep[0] > 0 and steep[1] == 0  # the unlikely draft is not worth its tokens
    assert choose_lengths(conf, lambda t: 0.01 + 0.01 * t, 3, max_extra_tokens=1) == [1, 0, 0]


def test_cost_model_fits_saves_and_corrects(tmp_path) -> None:  # type: ignore[no-untyped-def]
    samples = [(b, t, 0.02 + 0.001 * b + 0.004 * t) for b in (1, 4, 8) for t in (b * 2, b * 5)]
    cost = StepCost.fit(samples)
    assert abs(cost.predict(4, 20) - (0.02 + 0.004 + 0.08)) < 1e-9
    cost.save(tmp_path / "cost.json")
    assert StepCost.load(tmp_path / "cost.json").predict(4, 20) == cost.predict(4, 20)
    for _ in range(200):
        cost.observe(4, 20, 2 * (0.02 + 0.004 + 0.08))  # the machine got twice as slow
    assert 1.9 < cost.correction < 2.01


def test_auto_pauses_a_drafter_whose_first_tokens_miss() -> None:
    """A confident drafter that is always wrong: "auto" verifies its drafts until the first-token hit rate
    falls below break-even, then drafts only on probe steps (every PROBE_EVERY-th); output unchanged."""
    from recipe.engine import SamplingParams
    from recipe.engine.speculative import Draft
    from recipe.engine.speculative.speculator import PROBE_EVERY
    from spec_helpers import make_llm, use_drafter
    from tiny_paged_model import VOCAB, TinyPagedLM

    model = TinyPagedLM(seed=3)

    class WrongDrafter:
        calls = 0

        def propose(self, seqs, max_lens):  # type: ignore[no-untyped-def]
            self.calls += 1
            return [Draft([(int(model.full_logits(list(s.token_ids))[-1].argmax()) + 1) % VOCAB] * n, [0.95] * n)
                    for s, n in zip(seqs, max_lens, strict=True)]

        def observe(self, draft, num_accepted):  # type: ignore[no-untyped-def]
            pass

    params = SamplingParams(temperature=0.0, max_tokens=80, ignore_eos=True)
    prompt = [[5, 9, 13, 2, 7]]
    expected = make_llm(model).generate(prompt, params)
    llm = make_llm(model, speculative="ngram", num_speculative_tokens="auto")
    drafter = WrongDrafter()
    use_drafter(llm, drafter)
    llm.engine.speculator.cost = StepCost(0.01, 0.0, 0.002)  # a draft token costs 0.2 of a step: break-even 0.2
    got = llm.generate(prompt, params)
    assert got[0].new_token_ids == expected[0].new_token_ids
    spec = llm.engine.speculator
    assert spec.first_hit_rate < 0.05
    assert spec.metrics.draft_tokens > 0 and spec.metrics.accepted_tokens == 0
    assert drafter.calls <= 8 + llm.engine.steps // PROBE_EVERY  # paused after 5 misses (0.5 * 0.8^5 < 0.2)
