"""Verdicts on every proposal, verified or not, read off the tokens the target then emitted.

Verification accepts draft token j iff it equals the token the target emits at that position, drawn with the
same seed key whether or not the position was verified (verification.py). So once a sequence's tokens past a
proposal's start are known, the proposal's verdict is known too, for all its positions: the length of its
prefix that equals them. That is the verdict verification would have given at any draft length, also for the
positions "auto" did not verify (k = 0, or a short k) and for proposals made while the step that emits their
tokens was in flight; calibrating on verified positions only would never learn about positions it rarely
verifies.

`PendingVerdicts` keeps each proposal (the sequence, where its first token goes, the draft) until its verdict
is settled: a mismatch within the known tokens, every position known, or the sequence finished.
"""

from __future__ import annotations

from dataclasses import dataclass

from recipe.engine.sequence import Sequence
from recipe.engine.speculative.drafter import Draft


@dataclass
class Pending:
    seq: Sequence
    start: int  # index in seq.token_ids of the draft's first token
    draft: Draft
    first_scored: bool = False


@dataclass
class Verdict:
    draft: Draft  # the proposal, cut to the positions whose verdict is known
    num_accepted: int  # its first `num_accepted` tokens equal the emitted ones (the next, if any, does not)


def matched_length(seq: Sequence, start: int, token_ids: list[int]) -> tuple[int, int]:
    """(how many of `token_ids` equal seq.token_ids[start:], how many of those positions are known)."""
    known = min(max(len(seq.token_ids) - start, 0), len(token_ids))
    m = 0
    while m < known and seq.token_ids[start + m] == token_ids[m]:
        m += 1
    return m, known


class PendingVerdicts:
    def __init__(self) -> None:
        self.pending: list[Pending] = []

    def add(self, seq: Sequence, draft: Draft) -> None:
        """A proposal for `seq`'s next positions (made now: its first token goes at len(token_ids))."""
        if draft.token_ids:
            self.pending.append(Pending(seq, len(seq.token_ids), draft))

    def collect(self) -> tuple[list[bool], list[Verdict]]:
        """(first-token hits newly known, verdicts newly settled). A proposal whose sequence has a step in
        flight waits: its tokens are not all emitted yet."""
        hits: list[bool] = []
        verdicts: list[Verdict] = []
        keep: list[Pending] = []
        for p in self.pending:
            seq = p.seq
            if seq.num_pending and not seq.is_finished:
                keep.append(p)
                continue
            m, known = matched_length(seq, p.start, p.draft.token_ids)
            if known and not p.first_scored:
                hits.append(m > 0)
                p.first_scored = True
            if m < known or known == len(p.draft.token_ids) or seq.is_finished:
                n = min(m + 1, known)  # the rejected position is known (m < known), or the draft ends at m
                verdicts.append(Verdict(p.draft.cut(n), m))
            else:
                keep.append(p)
        self.pending = keep
        return hits, verdicts
