"""A draft under an output constraint: each position checked against the mask as if generated."""

from __future__ import annotations

from typing import Any

import numpy as np


def admissible_prefix(matcher: Any, tokens: list[int], vocab_size: int) -> int:
    """How many leading `tokens` the matcher allows, one after another, as if the model generated them.

    A disallowed token ends the draft there, and so does one that would terminate the constraint (the
    sequence ends on it: nothing after it can be kept). The matcher is rolled back to where it was.
    """
    mask = np.zeros((vocab_size + 31) // 32, dtype=np.int32)
    n = 0
    for t in tokens:
        matcher.fill_bitmask(mask)
        if not (int(mask[t >> 5]) >> (t & 31)) & 1 or matcher.accept(t) is False:
            break
        if matcher.is_terminated():
            matcher.rollback(1)
            break
        n += 1
    matcher.rollback(n)
    return n


def can_speculate(matcher: Any) -> bool:
    """A constrained sequence drafts only if its matcher can be rolled back and is still live."""
    return matcher is None or (hasattr(matcher, "rollback") and not matcher.is_terminated())
