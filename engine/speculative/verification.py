"""Verification: the target's scores of k+1 positions decide how much of a draft to keep.

Each position j of a row is sampled exactly as a plain decode step would sample it, with the row's
sampling parameters, its seed key (request seed, choice, position) and a history that includes the drafted
tokens before j. The draft's token j is accepted iff it equals that sample; the first mismatch emits the
target's sample instead, and full acceptance emits the sample at position k (the bonus token).

This is lossless for any sampling parameters: every emitted token is a draw from the target's
distribution given the tokens actually emitted before it. Greedy rows accept exactly the argmax. For
temperature > 0 it is rejection sampling with a point-mass proposal realised as a coupling: the draft
token is accepted with probability p(d) (the chance that the exponential race picks it), and a rejection
emits the race's winner, which is distributed as the residual p(x) / (1 - p(d)) for x != d. A seeded
request therefore gives the same tokens with speculation on or off (same keys, same noise).

Constraints: a row's mask at position j is the matcher's after accepting drafts 0..j-1 (walked forward);
after verification the matcher rolls back to the accepted length and accepts the emitted token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from recipe.engine.sampler import Sampler, SamplingRow


@dataclass
class VerifiedRow:
    emitted: list[int]  # accepted draft tokens, then the target's own token (absent at a dead end)
    logprobs: list[Any]  # one per emitted token (None entries when the row asked for none)
    num_accepted: int  # draft tokens accepted (their KV stays)
    terminated: bool  # the matcher terminated on the last emitted token
    dead_end: bool  # the constraint allowed nothing (or refused the target's token) after `emitted`


def position_rows(row: SamplingRow, draft: list[int]) -> list[SamplingRow]:
    """The sampling rows of positions 0..k: seed key and histories as if the drafts had been generated."""
    out = []
    for j in range(len(draft) + 1):
        out.append(SamplingRow(
            params=row.params, index=row.index, position=row.position + j,
            output_ids=None if row.output_ids is None else [*row.output_ids, *draft[:j]],
            context_ids=None if row.context_ids is None else [*row.context_ids, *draft[:j]],
        ))
    return out


def walk_masks(matcher: Any, draft: list[int], out: np.ndarray) -> tuple[int, int | None]:
    """Fill `out[j]` with the matcher's mask before draft token j (j = 0..k), accepting drafts as it goes.

    Returns (drafts accepted by the matcher, first position whose mask is empty or None). Stops at a
    refused draft or an empty mask; the caller rolls the walked tokens back.
    """
    walked = 0
    for j in range(len(draft) + 1):
        matcher.fill_bitmask(out[j])
        if not out[j].any():
            return walked, j
        if j == len(draft) or matcher.accept(draft[j]) is False:
            return walked, None
        walked += 1
    return walked, None


def verify(sampler: Sampler, logits: torch.Tensor, rows: list[SamplingRow], drafts: list[list[int]],
           matchers: list[Any], vocab_size: int) -> list[VerifiedRow]:
    """`logits` holds, row after row, the k_r + 1 positions of each row's draft (k_r = len(drafts[r]))."""
    expanded = [pr for row, d in zip(rows, drafts, strict=True) for pr in position_rows(row, d)]
    assert logits.shape[0] == len(expanded)
    offsets = np.cumsum([0] + [len(d) + 1 for d in drafts])
    live = [m if m is not None and not m.is_terminated() else None for m in matchers]
    bitmask = None
    walked = [0] * len(rows)
    empty_at: list[int | None] = [None] * len(rows)
    if any(m is not None for m in live):
        mask = np.full((len(expanded), (vocab_size + 31) // 32), -1, dtype=np.int32)
        for r, m in enumerate(live):
            if m is not None:
                lo, hi = offsets[r], offsets[r + 1]
                walked[r], empty_at[r] = walk_masks(m, drafts[r], mask[lo:hi])
                # positions past the walk are never reached: any mask that allows something will do
                mask[lo + walked[r] + 1:hi] = -1
                if empty_at[r] is not None:
                    mask[lo + empty_at[r]] = -1
        if vocab_size % 32:
            mask[:, -1] &= np.int32(np.uint32((1 << (vocab_size % 32)) - 1).view(np.int32))
        bitmask = torch.from_numpy(mask)
    sampled = sampler(logits, expanded, bitmask)
    out = []
    for r, draft in enumerate(drafts):
        lo = int(offsets[r])
        # constrained: only drafts the matcher accepted can be accepted, and only positions whose mask is
        # known can emit (position `walked` is the one after them; none where the mask was empty)
        limit = len(draft) if live[r] is None else walked[r]
        reach = len(draft) + 1 if live[r] is None else walked[r] + 1
        empty = empty_at[r]
        if empty is not None:
            reach = empty
        a = 0
        while a < min(limit, reach) and sampled.token_ids[lo + a] == draft[a]:
            a += 1
        emitted = list(draft[:a])
        final = sampled.token_ids[lo + a] if a < reach else None
        dead = final is None
        terminated = False
        m = live[r]
        if m is not None:
            m.rollback(walked[r] - a)
            if final is not None:
                if m.accept(final) is False:
                    dead = True
                else:
                    terminated = bool(m.is_terminated())
        if not dead:
            assert final is not None
            emitted.append(final)
        out.append(VerifiedRow(emitted, sampled.logprobs[lo:lo + len(emitted)], a, terminated, dead))
    return out
