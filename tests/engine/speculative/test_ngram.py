"""Prompt lookup proposes what followed the latest earlier occurrence of the longest recurring suffix."""

from __future__ import annotations

import numpy as np
from recipe.engine.sampling_params import SamplingParams
from recipe.engine.sequence import Sequence
from recipe.engine.speculative.ngram import NgramDrafter, lookup


def test_lookup_prefers_the_longest_suffix_then_the_latest_match() -> None:
    ids = np.array([5, 6, 7, 8, 1, 6, 7, 9, 2, 5, 6, 7])
    assert lookup(ids, 3, 1, 4) == ([8, 1, 6], 3)  # "5 6 7" recurs: continue after it
    ids = np.array([1, 6, 7, 9, 2, 6, 7, 4, 6, 7])
    assert lookup(ids, 2, 1, 4) == ([4, 6], 2)  # "6 7" twice: the latest earlier one
    assert lookup(np.array([1, 2, 3]), 4, 1, 4) == ([], 0)
    assert lookup(np.array([3, 3]), 4, 1, 4) == ([3], 1)


def test_confidences_are_calibrated_on_verified_drafts() -> None:
    seq = Sequence("r", 0, [4, 5, 6, 4, 5, 6, 4, 5], SamplingParams())
    drafter = NgramDrafter(max_draft=4)
    first = drafter.propose([seq], [4])[0]
    assert first.token_ids == [6, 4, 5] and first.confidences == [0.5] * 3  # the prior; cut by the end
    for _ in range(20):
        drafter.observe(first, 1)  # position 0 always accepted, position 1 never
    again = drafter.propose([seq], [4])[0]
    assert again.confidences[0] > 0.9 and again.confidences[1] < 0.1
    assert drafter.propose([seq], [0])[0].token_ids == []
