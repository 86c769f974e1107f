"""The engine's side of speculative decoding: draft before scheduling, settle after verification.

Before each step `may_draft` says whether the step may draft at all (when not, it needs no result of the
step in flight, and the engine overlaps them), then `draft` gives every running sequence that is decoding
(its last token known, no step in flight) a `draft_ids` list; the scheduler charges 1 + len(draft_ids)
tokens and the model runner scores all of them in one step (a prefill span over the paged KV). After the step `settle` rolls back what was
rejected: `num_computed_tokens` drops to the accepted length and blocks past it return to the pool.
Draft tokens never enter `token_ids` unless accepted, so the prefix cache never registers them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from recipe.engine.sequence import Sequence, SequenceStatus
from recipe.engine.speculative.chain_budget import ChainBudget
from recipe.engine.speculative.constrained_drafts import admissible_prefix, can_speculate
from recipe.engine.speculative.cost_model import StepCost
from recipe.engine.speculative.draft_cost import DraftCost
from recipe.engine.speculative.drafter import Draft, Drafter
from recipe.engine.speculative.hit_rate import HitRate
from recipe.engine.speculative.length_policy import choose_lengths
from recipe.engine.speculative.metrics import SpecMetrics
from recipe.engine.speculative.verdicts import PendingVerdicts
from recipe.engine.step import PreparedStep, StepResult

AUTO_MAX_DRAFT = 8  # the longest draft "auto" considers
PROBE_EVERY = 8  # "auto" with drafting paused still drafts every PROBE_EVERY-th step, to keep measuring it


class Speculator:
    def __init__(self, drafter: Drafter, num_speculative_tokens: int | str, *, block_manager: Any,
                 max_model_len: int, max_num_batched_tokens: int, vocab_size: int,
                 cost: StepCost | None = None, unverified_verdicts: bool = True, hit_window: int = 24,
                 pause_margin: float = 0.6, price_drafting: bool = True) -> None:
        self.drafter = drafter
        self.cost = cost
        self.use_length(num_speculative_tokens)
        self.block_manager = block_manager
        self.max_model_len = max_model_len
        self.max_num_batched_tokens = max_num_batched_tokens
        self.vocab_size = vocab_size
        self.metrics = SpecMetrics()
        self._drafts: dict[int, Draft] = {}
        # "auto": the drafter's own seconds per drafted position (running average), part of a draft token's cost
        self.draft_cost = DraftCost()
        # "auto" prices the drafter's time per batch size: a chained drafter stops where its next position no
        # longer pays for itself (chain_budget.py), and the length policy's rate counts the drafting time spent;
        # False: the chain runs while any row is above the first token's break-even survival and the policy
        # prices verification only (the earlier policy)
        self.price_drafting = price_drafting
        self.count_drafter_time = True  # False: drafter time is no cost (tests whose oracle drafters are slow)
        # "auto": running rate at which a draft's first token equals the token the target then emitted, counted
        # whether or not the draft was verified; below the first token's break-even survival, drafting pauses
        self.first_hits = HitRate(hit_window)
        # hysteresis: drafting pauses once the hit rate falls below `pause_margin` times break-even, and resumes
        # once it is back at break-even (a paused drafter is measured on probe steps only, so a pause that noise
        # started lasts many steps)
        self.pause_margin = pause_margin
        self._pausing = False
        # every proposal until the tokens it guessed are emitted: first-token hits, and (`unverified_verdicts`)
        # the drafter's verdicts on all its positions, verified or not; off: the drafter hears only what
        # verification settled (the verified prefix)
        self.verdicts = PendingVerdicts()
        self.unverified_verdicts = unverified_verdicts
        self._auto_steps = 0
        self._paused = False  # `may_draft`'s verdict: "auto" drafts for no sequence this step
        self._min_survival = 0.0  # "auto": the break-even survival of one more draft token this step

    def after_step(self, step: PreparedStep, result: StepResult) -> None:
        """The drafter's look at the step that just ran (model thread)."""
        self.drafter.after_step(step, result)

    @property
    def first_hit_rate(self) -> float:
        return self.first_hits.rate

    def use_length(self, num_speculative_tokens: int | str) -> None:
        """Switch between a fixed draft length and "auto" (the drafter's calibration is kept)."""
        self.fixed = None if num_speculative_tokens == "auto" else int(num_speculative_tokens)
        assert self.fixed is not None or self.cost is not None, "auto draft lengths need a step cost model"
        self.max_draft = AUTO_MAX_DRAFT if self.fixed is None else self.fixed

    @staticmethod
    def decoding(seq: Sequence) -> bool:
        """Running, its last token known and the only one without KV: ready to speculate."""
        return (seq.status == SequenceStatus.RUNNING and seq.num_pending == 0
                and seq.num_computed_tokens == len(seq.token_ids) - 1 and can_speculate(seq.matcher))

    @staticmethod
    def in_decode(seq: Sequence) -> bool:
        """Running and past its prompt: it decodes next, whether or not its last token is known yet."""
        return seq.status == SequenceStatus.RUNNING and seq.num_computed_tokens >= len(seq) - 1

    def _base_tokens(self, running: list[Sequence], decodes: Callable[[Sequence], bool]) -> int:
        """The tokens the step scores before any draft: one per sequence that `decodes`, and the others'
        uncomputed tokens up to the step's budget."""
        others = sum(len(s) - s.num_computed_tokens for s in running if not decodes(s))
        return sum(1 for s in running if decodes(s)) + min(others, self.max_num_batched_tokens)

    def may_draft(self, running: list[Sequence]) -> bool:
        """Whether the next step may draft at all; call once per engine step, before `draft`.

        False when no running sequence decodes, or when "auto" has paused drafting (the first draft token's hit
        rate fell below `pause_margin` times its break-even survival and has not yet come back to it; every
        PROBE_EVERY-th step still drafts): then no sequence drafts
        whatever its tokens, so the step needs no result of the step in flight and may overlap it.
        """
        self._paused = False
        decoding = [s for s in running if self.in_decode(s)]
        if not decoding:
            return False
        if self.fixed is not None:
            return True
        assert self.cost is not None
        n, base = len(running), self._base_tokens(running, self.in_decode)
        # a token whose survival is below its marginal cost over the step's is never chosen: not drafted
        step = self.cost.predict(n, base)
        self._min_survival = (self.cost.predict(n, base + 1) - step + self._draft_s(len(decoding))) / step
        self._auto_steps += 1
        self._pausing = self.first_hit_rate < self._min_survival * (1.0 if self._pausing else self.pause_margin)
        self._paused = self._pausing and bool(self._auto_steps % PROBE_EVERY)
        return not self._paused

    def draft(self, running: list[Sequence], may_draft: bool = True) -> None:
        """Set `draft_ids` on each running sequence (empty where it does not speculate this step).

        `may_draft`: `may_draft(running)`'s verdict for this step; a sequence drafts only once its last token
        is known (no step of it in flight)."""
        start = time.perf_counter()
        self._drafts = {}
        for seq in running:
            seq.draft_ids = []
        if self._paused:
            paused = sum(1 for s in running if self.in_decode(s))
            self.metrics.zero_length += paused
            self.metrics.length_histogram[0] = self.metrics.length_histogram.get(0, 0) + paused
        seqs = [s for s in running if self.decoding(s)] if may_draft else []
        if not seqs:
            self.metrics.drafter_s += time.perf_counter() - start
            return
        room = [min(self.max_draft, s.params.max_tokens - s.num_output_tokens - 1,
                    self.max_model_len - len(s) - 1) for s in seqs]
        n, base = len(running), self._base_tokens(running, self.decoding)
        min_survival = self._min_survival if self.fixed is None else 0.0
        if hasattr(self.drafter, "min_survival"):
            self.drafter.min_survival = min_survival
        if hasattr(self.drafter, "chain"):
            self.drafter.chain = self._chain_budget(n, base, len(seqs))
        proposing = time.perf_counter()
        drafts = self.drafter.propose(seqs, room)
        spent = time.perf_counter() - proposing
        positions = max((len(d.token_ids) for d in drafts), default=0)
        if not self.count_drafter_time:
            spent = 0.0
        elif positions:
            self.draft_cost.observe(len(seqs), positions, spent)
        for i, seq in enumerate(seqs):
            d = drafts[i].cut(max(room[i], 0))
            if seq.matcher is not None and d.token_ids:
                d = d.cut(admissible_prefix(seq.matcher, d.token_ids, self.vocab_size))
            drafts[i] = d
        if self.fixed is not None:
            lengths = [len(d.token_ids) for d in drafts]
        else:
            assert self.cost is not None
            # the drafter's time is spent by now, whatever is verified: it weighs on whether to draft (the pause),
            # how far the head chains, and (`price_drafting`) on the rate the verified drafts must raise
            cost = self.cost
            lengths = choose_lengths([d.confidences for d in drafts], lambda t: cost.predict(n, t), base,
                                     self.max_num_batched_tokens - base,
                                     spent=spent if self.price_drafting else 0.0)
        for seq, d, k in zip(seqs, drafts, lengths, strict=True):
            self.verdicts.add(seq, d)
            self.metrics.length_histogram[k] = self.metrics.length_histogram.get(k, 0) + 1
            if k == 0:
                self.metrics.zero_length += 1
                continue
            seq.draft_ids = d.token_ids[:k]
            self._drafts[seq.seq_id] = d.cut(k)
        self.metrics.drafter_s += time.perf_counter() - start

    def _draft_s(self, rows: int) -> float:
        """The drafter's seconds per chained position at `rows` rows (`price_drafting` off: over all sizes)."""
        return self.draft_cost.per_position(rows) if self.price_drafting else self.draft_cost.overall

    def _chain_budget(self, num_seqs: int, base: int, rows: int) -> ChainBudget | None:
        """"auto" with `price_drafting`: what stops a chained drafter this step (None: `min_survival` does)."""
        if self.fixed is not None or not self.price_drafting:
            return None
        cost = self.cost
        assert cost is not None
        # the rate counts the drafting sequences' tokens, as the length policy's does
        return ChainBudget(lambda t: cost.predict(num_seqs, t), base, rows, self._draft_s(rows))

    def collect_verdicts(self) -> None:
        """After a step's tokens are emitted: fold the first draft tokens now known, verified or not, into
        `first_hit_rate`; with `unverified_verdicts`, give the drafter the verdicts of the proposals now settled."""
        hits, verdicts = self.verdicts.collect()
        for hit in hits:
            self.first_hits.add(hit)
        if self.unverified_verdicts:
            for v in verdicts:
                self.drafter.observe(v.draft, v.num_accepted)

    def settle(self, seq: Sequence, start: int, num_drafted: int, num_accepted: int) -> None:
        """After a verify step of `num_drafted` drafts: keep the KV of the accepted ones, free the rest."""
        assert 0 <= num_accepted <= num_drafted
        m = self.metrics
        m.drafts += 1
        m.draft_tokens += num_drafted
        m.accepted_tokens += num_accepted
        draft = self._drafts.pop(seq.seq_id, None)
        if draft is not None and not self.unverified_verdicts:
            self.drafter.observe(draft.cut(num_drafted), num_accepted)
        if seq.status != SequenceStatus.RUNNING or seq.num_computed_tokens == 0:
            return  # finished or preempted meanwhile: its blocks are gone already
        seq.num_computed_tokens = start + 1 + num_accepted
        self.block_manager.truncate(seq, seq.num_computed_tokens)

    def observe_step(self, num_seqs: int, num_tokens: int, seconds: float, verify: bool = True,
                     decoding: bool = False) -> None:
        """A step's measured time (`verify`: it verified drafts; `decoding`: every sequence in it decodes, no
        prompt chunk): a verify step's goes to the metrics; the cost model learns from the steps of decoding
        sequences where it learns per cell (`StepCost.learn_cells`), else from every verify step."""
        if verify:
            self.metrics.verify_s += seconds
        cost = self.cost
        if cost is not None and (decoding if cost.learn_cells else verify):
            cost.observe(num_seqs, num_tokens, seconds)
