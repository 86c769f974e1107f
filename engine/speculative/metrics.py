"""Speculation counters, read through `LLMEngine.stats()`."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SpecMetrics:
    drafts: int = 0  # verified drafts (sequence-steps that speculated)
    draft_tokens: int = 0  # draft tokens verified
    accepted_tokens: int = 0  # of which accepted
    zero_length: int = 0  # sequence-steps eligible to speculate that chose k = 0
    drafter_s: float = 0.0  # time in the drafter and the length policy (scheduling thread)
    verify_s: float = 0.0  # time in steps that verified drafts (model forward + verification)
    length_histogram: dict[int, int] = field(default_factory=dict)  # chosen k -> sequence-steps

    @property
    def acceptance_rate(self) -> float:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else 0.0

    @property
    def mean_accepted_length(self) -> float:
        """Tokens emitted per speculating sequence-step: accepted drafts plus the target's own token."""
        return 1.0 + self.accepted_tokens / self.drafts if self.drafts else 0.0

    @property
    def mean_draft_length(self) -> float:
        n = sum(self.length_histogram.values())
        return sum(k * c for k, c in self.length_histogram.items()) / n if n else 0.0

    def snapshot(self) -> SpecMetrics:
        return SpecMetrics(self.drafts, self.draft_tokens, self.accepted_tokens, self.zero_length,
                           self.drafter_s, self.verify_s, dict(self.length_histogram))
