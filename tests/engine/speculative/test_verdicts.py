"""Verdicts on unverified draft positions (`speculative_unverified_verdicts`) and the first-hit window
(`speculative_hit_window`): exact verdicts, the same tokens, and "auto" reaching the best fixed k's length."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from recipe.engine import SamplingParams
from recipe.engine.sequence import Sequence
from recipe.engine.speculative import Draft
from recipe.engine.speculative.calibration import AcceptanceTable
from recipe.engine.speculative.hit_rate import HitRate
from recipe.engine.speculative.length_policy import survivals
from recipe.engine.speculative.verdicts import PendingVerdicts
from spec_helpers import OracleDrafter, fixed_cost_model, make_llm, use_drafter
from test_greedy_equality import repetitive_prompts
from tiny_paged_model import TinyPagedLM

MODEL = TinyPagedLM(seed=31)


@dataclass
class FakeSeq:
    """What `PendingVerdicts` reads of a sequence."""

    token_ids: list[int] = field(default_factory=list)
    num_pending: int = 0
    is_finished: bool = False


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 10_000), steps=st.integers(1, 30))
def test_pending_verdicts_are_the_match_length_once_the_tokens_are_known(seed: int, steps: int) -> None:
    """Tokens arrive a few at a time (sometimes with a step in flight); drafts guess them with errors. Every
    verdict is (the draft cut past its first mismatch, the match length), given only once its tokens are
    known, and every draft gets exactly one once its sequence finishes."""
    rng = random.Random(seed)
    truth = [rng.randrange(4) for _ in range(steps * 4 + 10)]
    seq = FakeSeq(truth[:3])
    pending = PendingVerdicts()
    made: list[tuple[int, list[int]]] = []
    got: list[tuple[list[int], int]] = []
    hits: list[bool] = []
    for _ in range(steps):
        if rng.random() < 0.7:
            start = len(seq.token_ids)
            ids = [t if rng.random() < 0.7 else (t + 1) % 4 for t in truth[start:start + rng.randrange(1, 7)]]
            pending.add(seq, Draft(ids, [0.5] * len(ids)))  # type: ignore[arg-type]
            made.append((start, ids))
        seq.num_pending = int(rng.random() < 0.3)  # a step in flight: nothing may be settled
        seq.token_ids = truth[:len(seq.token_ids) + rng.randrange(0, 5)]
        h, verdicts = pending.collect()
        if seq.num_pending:
            assert not h and not verdicts
        hits += h
        got += [(v.draft.token_ids, v.num_accepted) for v in verdicts]
    seq.num_pending, seq.is_finished = 0, True
    h, verdicts = pending.collect()
    hits += h
    got += [(v.draft.token_ids, v.num_accepted) for v in verdicts]
    assert not pending.pending
    want = []
    for start, ids in made:
        known = truth[start:len(seq.token_ids)]
        m = 0
        while m < min(len(ids), len(known)) and ids[m] == known[m]:
            m += 1
        want.append((ids[:min(m + 1, len(known), len(ids))], m))
    assert sorted(got) == sorted(want)
    assert sorted(hits) == sorted(ids[0] == truth[start] for start, ids in made if start < len(seq.token_ids))


class CalibratedOracle(OracleDrafter):
    """The target's greedy continuation, each token replaced by another with probability `corrupt` (so each
    position is accepted with probability about 1 - corrupt), with the n-gram drafter's counted confidences."""

    def __init__(self, model: TinyPagedLM, corrupt: float, seed: int = 0) -> None:
        super().__init__(model, corrupt, seed)
        self.table = AcceptanceTable(16)

    def propose(self, seqs: list[Sequence], max_lens: list[int]) -> list[Draft]:
        return [Draft(d.token_ids, self.table.confidences(0, len(d.token_ids)))
                for d in super().propose(seqs, max_lens)]

    def observe(self, draft: Draft, num_accepted: int) -> None:
        super().observe(draft, num_accepted)
        self.table.record(0, len(draft.token_ids), num_accepted)


def best_fixed_k(accept: float, share: float, max_k: int = 8) -> int:
    """The fixed draft length with the most expected tokens per step of cost 1 + share * tokens (one sequence)."""
    return max(range(max_k + 1), key=lambda k: (1 + sum(survivals([accept] * k))) / (1 + share * (1 + k)))


def auto_lengths(unverified: bool, seed: int, corrupt: float, share: float) -> tuple[list[int], Any]:
    llm = make_llm(MODEL, speculative="ngram", num_speculative_tokens="auto", max_num_batched_tokens=64,
                   speculative_cost_model=fixed_cost_model(share), speculative_unverified_verdicts=unverified)
    drafter = CalibratedOracle(MODEL, corrupt, seed)
    use_drafter(llm, drafter)
    chosen: list[int] = []
    draft = llm.engine.speculator.draft

    def draft_and_record(running: list[Sequence], may_draft: bool = True) -> None:
        draft(running, may_draft)
        chosen.extend(len(s.draft_ids) for s in running if s.draft_ids)

    llm.engine.speculator.draft = draft_and_record  # type: ignore[method-assign]
    outs = llm.generate(repetitive_prompts(1, seed), SamplingParams(temperature=0.0, max_tokens=240, ignore_eos=True))
    llm.shutdown()
    return chosen, outs


def test_auto_reaches_the_best_fixed_length_only_with_unverified_verdicts() -> None:
    """Acceptance 0.8 per position, a verified position costs 0.25 of a step: the best fixed k is 4. Counting
    verified positions only, the confidence of a position "auto" never verified stays at the prior (0.5),
    whose survival never pays: "auto" stops at 1 or 2 and stays there. With every proposal's verdict it learns the
    deeper positions and settles on the best fixed k's length (3 to 5: their rates differ by 1.2%)."""
    corrupt, share = 0.2, 0.25
    assert best_fixed_k(1 - corrupt, share) == 4
    for seed in (1, 2, 3):
        on, outs_on = auto_lengths(True, seed, corrupt, share)
        off, outs_off = auto_lengths(False, seed, corrupt, share)
        assert [o.new_token_ids for o in outs_on] == [o.new_token_ids for o in outs_off]
        late_on, late_off = on[len(on) // 2:], off[len(off) // 2:]
        assert 3 <= sum(late_on) / len(late_on) <= 5, (seed, late_on)
        assert sum(late_off) / len(late_off) <= 2, (seed, late_off)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), n_prompts=st.integers(1, 4), budget=st.sampled_from([7, 64]),
       temperature=st.sampled_from([0.0, 0.8]), corrupt=st.sampled_from([0.1, 0.5, 0.9]),
       share=st.sampled_from([0.0, 0.1, 0.5]), window=st.sampled_from([5, 32]))
def test_verdicts_and_window_change_no_token(seed: int, n_prompts: int, budget: int, temperature: float,
                                              corrupt: float, share: float, window: int) -> None:
    """Same tokens with unverified verdicts on and off, whatever the hit window, as without speculation
    (sampled requests are seeded: verification draws the tokens a plain step would)."""
    prompts = repetitive_prompts(n_prompts, seed)
    params = [SamplingParams(temperature=temperature, max_tokens=30, seed=seed + i) for i in range(n_prompts)]
    config = {"max_num_batched_tokens": budget}
    ref = make_llm(MODEL, **config)
    expected = [o.new_token_ids for o in ref.generate(prompts, params)]
    ref.shutdown()
    for unverified in (True, False):
        llm = make_llm(MODEL, speculative="ngram", num_speculative_tokens="auto", **config,
                       speculative_cost_model=fixed_cost_model(share), speculative_unverified_verdicts=unverified,
                       speculative_hit_window=window)
        drafter = CalibratedOracle(MODEL, corrupt, seed)
        use_drafter(llm, drafter)
        assert [o.new_token_ids for o in llm.generate(prompts, params)] == expected
        assert drafter.observed or not llm.engine.stats().speculative.drafts
        llm.engine.block_manager.check_invariants()
        llm.shutdown()


def test_a_longer_hit_window_spreads_less_and_still_pauses_a_hopeless_drafter() -> None:
    """First tokens hit 16% of the time: with a window of 5 (the old 0.2 weight) the rate spends over a third of
    its outcomes below 0.1, with 24 about an eighth (and the pause needs 0.06: 0.6 of break-even); a hopeless drafter's rate is below 0.12 after 7 misses."""
    def share_below(window: int, threshold: float) -> float:
        rng, rate, below = random.Random(0), HitRate(window), 0
        for _ in range(20_000):
            rate.add(rng.random() < 0.16)
            below += rate.rate < threshold
        return below / 20_000

    assert share_below(5, 0.1) > 0.3 and share_below(24, 0.1) < 0.15 and share_below(24, 0.06) < 0.03
    hopeless = HitRate(24)
    for _ in range(7):
        hopeless.add(False)
    assert hopeless.rate < 0.12


def test_auto_pauses_a_drafter_that_pays_less_often_than_before() -> None:
    """In the engine: first tokens hit about 20% of the time, a draft token costs 10% of a step: the defaults
    (window 24, pause below 0.6 of break-even) draft at most steps; the earlier policy (5, 1.0) paused far more
    often, for many steps at a time; each part alone pauses less than neither."""
    def paused(window: int, margin: float) -> int:
        llm = make_llm(MODEL, speculative="ngram", num_speculative_tokens="auto", max_num_batched_tokens=64,
                       speculative_cost_model=fixed_cost_model(0.11), speculative_hit_window=window,
                       speculative_pause_margin=margin)
        use_drafter(llm, CalibratedOracle(MODEL, 0.8, 5))
        llm.generate(repetitive_prompts(1, 5), SamplingParams(temperature=0.0, max_tokens=400, ignore_eos=True))
        metrics = llm.engine.stats().speculative
        llm.shutdown()
        return metrics.zero_length

    old, new = paused(5, 1.0), paused(24, 0.6)
    assert new * 3 < old, (new, old)
    assert paused(24, 1.0) < old and paused(5, 0.6) < old


@settings(max_examples=50, deadline=None)
@given(offline=st.floats(0.5, 0.95), online=st.floats(0.0, 0.3), seed=st.integers(0, 1000))
def test_a_capped_offline_calibration_follows_the_runs_own_verdicts(offline: float, online: float,
                                                                     seed: int) -> None:
    """Offline counts (1,000 verdicts per bin at `offline`) against a run whose drafts are accepted at `online`:
    after 100 of the run's verdicts, weighing the offline counts as 20 verdicts puts the confidence near the
    run's rate; counted in full they hold it near the offline rate. Same rate before any verdict either way."""
    from recipe.engine.speculative.calibration import BinCalibration

    counts = {f"0,{b}": [1000, round(1000 * offline)] for b in range(10)}
    capped, full = BinCalibration(2, counts, offline_weight=20), BinCalibration(2, counts)
    assert abs(capped.confidence(0, 0.55) - full.confidence(0, 0.55)) < 0.04  # the bin centre's prior weighs more
    rng = random.Random(seed)
    for _ in range(100):
        draft = Draft([1], [0.5], raw=[0.55])
        verdict = int(rng.random() < online)
        capped.observe(draft, verdict)
        full.observe(draft, verdict)
    observed = full.accepted[0][5] - round(1000 * offline)  # the run's accepted count
    run_rate = observed / 100
    gap = offline - run_rate
    assert capped.confidence(0, 0.55) - run_rate < 0.2 * gap + 0.02  # 20 offline against 100 of the run's
    assert full.confidence(0, 0.55) - run_rate > 0.8 * gap
