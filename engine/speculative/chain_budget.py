"""Whether a chained drafter (the draft head, MTP) computes one more position: does position j + 1 pay for itself?

After position j every row has a survival s[r] (its calibrated confidences multiplied so far). Position j + 1
adds, in expectation, s[r] * c(j + 1) tokens for row r, where c(j + 1) is the calibration's acceptance rate at
that position (its confidence is unknown until the position is computed). It costs the drafter `draft_s`
(one pass over all rows) now, and each row that verifies it adds the step's marginal verification cost. Both
are paid at the step's expected rate R (tokens per second of drafting plus verification, as drafted so far):
the chain goes on iff sum over rows of max(0, s[r] * c(j + 1) - R * marginal) > R * draft_s. A row whose token
would not repay its verification is not counted (the length policy would not verify it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from recipe.engine.speculative.calibration import BinCalibration


@dataclass
class ChainBudget:
    step_time: Callable[[int], float]  # verification seconds of the step by the tokens it scores
    base_tokens: int  # tokens the step scores before any draft
    num_seqs: int  # sequences drafting: each emits a token whatever is drafted
    draft_s: float  # the drafter's seconds per chained position at this batch size
    expected: float = 0.0  # expected tokens of the drafts so far (sum of the survivals)
    positions: int = 0  # positions chained so far
    tokens: int = 0  # draft tokens counted so far (rows that repaid their verification)

    def more(self, survival: list[float], next_confidence: float) -> bool:
        """After a chained position whose rows now survive with `survival`: chain position j + 1 or not."""
        self.positions += 1
        self.expected += sum(survival)
        self.tokens += len(survival)
        verify = self.step_time(self.base_tokens + self.tokens)
        rate = (self.num_seqs + self.expected) / (verify + self.positions * self.draft_s)
        marginal = self.step_time(self.base_tokens + self.tokens + 1) - verify
        gain = sum(max(0.0, s * next_confidence - rate * marginal) for s in survival)
        return gain > rate * self.draft_s


def chain_on(chain: ChainBudget | None, min_survival: float, calibration: BinCalibration, survival: list[float],
             j: int) -> bool:
    """Whether a chained drafter (head, MTP) computes position j + 1 after position j left `survival`: the
    budget's verdict where "auto" prices drafting, else whether any row is still at `min_survival`."""
    if chain is not None:
        return chain.more(survival, calibration.expected(j + 1))
    return max(survival) >= min_survival
