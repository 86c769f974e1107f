"""The drafter interface: what every proposer of draft tokens offers the engine."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from recipe.engine.sequence import Sequence
from recipe.engine.step import PreparedStep, StepResult


@dataclass
class Draft:
    """Proposed continuation of one sequence.

    `confidences[j]` estimates P(token j accepted | tokens before it accepted), calibrated by the drafter;
    the length policy multiplies them into survival probabilities. `probs` are the drafter's own
    distributions per position when it samples (None: a deterministic proposal, a point mass).
    """

    token_ids: list[int] = field(default_factory=list)
    confidences: list[float] = field(default_factory=list)
    key: int = 0  # which calibration bucket the confidences came from (drafter-specific)
    raw: list[float] = field(default_factory=list)  # the drafter's uncalibrated scores, if it has any

    def __post_init__(self) -> None:
        assert len(self.token_ids) == len(self.confidences), (self.token_ids, self.confidences)

    def cut(self, n: int) -> Draft:
        return Draft(self.token_ids[:n], self.confidences[:n], self.key, self.raw[:n])


class Drafter(Protocol):
    """Proposes up to `max_lens[i]` tokens for each sequence (fewer, or none, is always allowed).

    `after_step` runs on the model thread right after every step, before the next one starts (its time counts
    as the step's); `propose` runs on the scheduling thread with no step in flight for the sequences it drafts.
    """

    def propose(self, seqs: list[Sequence], max_lens: list[int]) -> list[Draft]: ...

    def after_step(self, step: PreparedStep, result: StepResult) -> None:
        """What the step computed that the drafter keeps (hidden states, its own KV rows); nothing for most."""
        ...

    def observe(self, draft: Draft, num_accepted: int) -> None:
        """Verification's verdict on a proposal: the first `num_accepted` of its tokens were accepted."""
        ...
