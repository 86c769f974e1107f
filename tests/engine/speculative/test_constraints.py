"""Speculation under an output constraint: drafts checked against the mask as if generated, the matcher
rolled back to the accepted length after verification, and no refused token ever emitted."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from recipe.engine import SamplingParams
from recipe.engine.sampler import Sampler, SamplingRow
from recipe.engine.sequence import Sequence
from recipe.engine.speculative import Draft
from recipe.engine.speculative.constrained_drafts import admissible_prefix
from recipe.engine.speculative.verification import verify
from spec_helpers import flat_cost_model, make_llm, use_drafter
from tiny_paged_model import EOS, VOCAB, TinyPagedLM, make_prompts

MODEL = TinyPagedLM(seed=31)


def allowed_at(i: int, length: int) -> set[int]:
    """Token i of the output: below 60 with the parity of i, for `length` tokens; then EOS."""
    return {t for t in range(60) if t % 2 == i % 2} if i < length else {EOS}


class ParityMatcher:
    def __init__(self, length: int, refuse_sevens: bool = False) -> None:
        self.length, self.refuse_sevens = length, refuse_sevens
        self.accepted: list[int] = []
        self.refused: list[int] = []
        self.rollbacks: list[int] = []

    def fill_bitmask(self, out: np.ndarray) -> None:
        out[:] = 0
        if self.is_terminated():
            return
        for t in allowed_at(len(self.accepted), self.length):
            out[t // 32] |= np.int32(np.uint32(1 << (t % 32)).view(np.int32))

    def accept(self, token_id: int) -> bool:
        if (self.is_terminated() or token_id not in allowed_at(len(self.accepted), self.length)
                or (self.refuse_sevens and token_id % 7 == 0)):
            self.refused.append(token_id)
            return False
        self.accepted.append(token_id)
        return True

    def rollback(self, n: int) -> None:
        assert 0 <= n <= len(self.accepted)
        self.rollbacks.append(n)
        del self.accepted[len(self.accepted) - n:]

    def is_terminated(self) -> bool:
        return bool(self.accepted) and self.accepted[-1] == EOS


class Parity:
    def __init__(self, length: int, refuse_sevens: bool = False) -> None:
        self.length, self.refuse_sevens = length, refuse_sevens
        self.matchers: list[ParityMatcher] = []

    def matcher(self) -> ParityMatcher:
        self.matchers.append(ParityMatcher(self.length, self.refuse_sevens))
        return self.matchers[-1]


class ConstrainedOracle:
    """Proposes the target's constrained greedy continuation (tokens the matcher accepts); with probability
    `corrupt` a token is swapped for another accepted one (rejected by the target) or, past the draft's first
    token, for any token (a forbidden one is cut before verification). The first token is always one the matcher
    accepts, so every step that drafts verifies at least one draft token."""

    def __init__(self, model: TinyPagedLM, length: int, corrupt: float, seed: int,
                 refuse_sevens: bool = False) -> None:
        self.model, self.length, self.corrupt, self.rng = model, length, corrupt, random.Random(seed)
        self.refuse_sevens = refuse_sevens

    def propose(self, seqs: list[Sequence], max_lens: list[int]) -> list[Draft]:
        out = []
        for seq, n in zip(seqs, max_lens, strict=True):
            ids, draft = list(seq.token_ids), []
            for j in range(max(n, 0)):
                allowed = sorted(t for t in allowed_at(len(ids) - seq.num_prompt_tokens, self.length)
                                 if not (self.refuse_sevens and t % 7 == 0))
                logits = self.model.full_logits(ids)[-1]
                tok = allowed[int(logits[allowed].argmax())]
                if self.rng.random() < self.corrupt:
                    tok = self.rng.choice(allowed if j == 0 or self.rng.random() < 0.5 else range(VOCAB))
                draft.append(tok)
                ids.append(tok)
            out.append(Draft(draft, [0.9] * len(draft)))
        return out

    def after_step(self, step: Any, result: Any) -> None:
        pass  # reads only the sequences' tokens

    def observe(self, draft: Draft, num_accepted: int) -> None:
        pass


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), temperature=st.sampled_from([0.0, 1.0]), corrupt=st.sampled_from([0.2, 0.6]),
       refuse_sevens=st.booleans(), k=st.sampled_from([3, "auto"]))
def test_constrained_output_is_the_same_with_speculation_and_obeys_the_matcher(
        seed: int, temperature: float, corrupt: float, refuse_sevens: bool, k: int | str) -> None:
    metrics, _, outputs = run_constrained(seed, temperature, corrupt, refuse_sevens, k)
    # not vacuous: a sequence that lived past its first decode steps verified drafts (one that samples a refused
    # token at temperature 1 ends there, before any draft)
    if any(len(o.new_token_ids) >= 3 for o in outputs):
        assert metrics.draft_tokens > 0


def test_constrained_drafts_are_rejected_and_the_matcher_rolled_back() -> None:
    """The equality above is not vacuous: drafts are accepted and rejected, and the matcher rolls back."""
    metrics, matchers, _ = run_constrained(seed=1, temperature=0.0, corrupt=0.6, refuse_sevens=False, k=3)
    assert 0 < metrics.accepted_tokens < metrics.draft_tokens
    assert any(n > 0 for m in matchers for n in m.rollbacks)


def run_constrained(seed: int, temperature: float, corrupt: float, refuse_sevens: bool,
                    k: int | str) -> tuple[Any, list[ParityMatcher], list[Any]]:
    """Generate with and without speculation; check equality and that every output obeys its matcher."""
    prompts = make_prompts(3, 2, 15, seed=seed)
    length = 14

    def params(c: Parity) -> list[SamplingParams]:
        return [SamplingParams(temperature=temperature, seed=seed + i, max_tokens=20, constraint=c)
                for i in range(len(prompts))]

    off_c, on_c = Parity(length, refuse_sevens), Parity(length, refuse_sevens)
    expected = make_llm(MODEL).generate(prompts, params(off_c))
    llm = make_llm(MODEL, speculative="ngram", num_speculative_tokens=k, speculative_cost_model=flat_cost_model())
    use_drafter(llm, ConstrainedOracle(MODEL, length, corrupt, seed, refuse_sevens))
    got = llm.generate(prompts, params(on_c))
    assert [o.new_token_ids for o in got] == [o.new_token_ids for o in expected]
    assert [o.finish_reason for o in got] == [o.finish_reason for o in expected]
    for out, m in zip(got, on_c.matchers, strict=True):
        # rolled back to exactly what was emitted (plus the EOS that ended it)
        assert m.accepted[: len(out.new_token_ids)] == list(out.new_token_ids)
        assert m.accepted[len(out.new_token_ids):] in ([], [EOS])
        assert all(t in allowed_at(i, length) for i, t in enumerate(out.new_token_ids))
        if refuse_sevens:
            assert not any(t % 7 == 0 for t in out.new_token_ids)
    return llm.engine.stats().speculative, on_c.matchers, got


def test_rejected_drafts_roll_the_matcher_back_to_the_accepted_length() -> None:
    m = ParityMatcher(length=10)
    drafts = [4, 7, 8]  # all allowed (even, odd, even)
    logits = torch.full((4, VOCAB), -5.0)
    logits[0, 4] = 5.0  # position 0 agrees with the draft
    logits[1, 9] = 5.0  # position 1 prefers 9 over the drafted 7
    logits[2, 8] = logits[3, 1] = 5.0
    row = SamplingRow(SamplingParams(temperature=0.0), position=10)
    out = verify(Sampler(), logits, [row], [drafts], [m], VOCAB)[0]
    assert (out.emitted, out.num_accepted, out.dead_end) == ([4, 9], 1, False)
    assert m.rollbacks == [2] and m.accepted == [4, 9]  # walked 3 drafts, kept 1, then took the target's 9


class DeadEndAfter(ParityMatcher):
    """Allows `length` tokens, then nothing at all (not even EOS): a constraint with no way on."""

    def fill_bitmask(self, out: np.ndarray) -> None:
        super().fill_bitmask(out)
        if len(self.accepted) >= self.length:
            out[:] = 0


def test_an_empty_mask_mid_draft_ends_at_a_dead_end_after_the_accepted_drafts() -> None:
    m = DeadEndAfter(length=1)
    logits = torch.zeros((3, VOCAB))
    logits[0, 0] = 5.0  # the target agrees with draft token 0
    out = verify(Sampler(), logits, [SamplingRow(SamplingParams(temperature=0.0))], [[0, 1]], [m], VOCAB)[0]
    assert (out.emitted, out.num_accepted, out.dead_end) == ([0], 1, True)  # nothing after it is allowed
    assert m.accepted == [0]


def test_a_draft_is_cut_at_the_first_token_the_mask_forbids() -> None:
    m = ParityMatcher(length=10)
    m.accepted = [2]
    assert admissible_prefix(m, [3, 4, 6, 7], VOCAB) == 2  # 6 has the wrong parity at position 3
    assert m.accepted == [2] and m.rollbacks == [2]  # restored
    assert admissible_prefix(m, [4], VOCAB) == 0
    m = ParityMatcher(length=1)
    assert admissible_prefix(m, [0, EOS], VOCAB) == 1  # EOS would terminate: the draft stops before it
    assert m.accepted == []
