"""Prompt lookup proposes what followed the latest earlier occurrence of the longest recurring suffix, and says
how far back that occurrence matches (the calibration's key)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from recipe.engine.sampling_params import SamplingParams
from recipe.engine.sequence import Sequence
from recipe.engine.speculative.ngram import MATCH_CAP, NgramDrafter, lookup, match_bucket


def test_lookup_prefers_the_longest_suffix_then_the_latest_match() -> None:
    ids = np.array([5, 6, 7, 8, 1, 6, 7, 9, 2, 5, 6, 7])
    assert lookup(ids, 3, 1, 4) == ([8, 1, 6], 3, 3)  # "5 6 7" recurs: continue after it
    ids = np.array([1, 6, 7, 9, 2, 6, 7, 4, 6, 7])
    assert lookup(ids, 2, 1, 4) == ([4, 6], 2, 2)  # "6 7" twice: the latest earlier one
    assert lookup(np.array([1, 2, 3]), 4, 1, 4) == ([], 0, 0)
    assert lookup(np.array([3, 3]), 4, 1, 4) == ([3, 3, 3, 3], 1, 1)  # the run of 3s goes on
    assert lookup(np.array([3, 3]), 4, 1, 4, extend=False) == ([3], 1, 1)  # the earlier lookup: cut at the end
    ids = np.array([1, 2, 9, 9, 9, 1, 2, 5, 1, 2])
    assert lookup(ids, 2, 1, 4) == ([5, 1], 2, 2)  # "1 2": the latest occurrence, then its own continuation
    assert lookup(ids, 4, 1, 4) == ([5, 1, 2, 5], 2, 2)  # a longer draft: the same first tokens, "5 1 2" repeating
    assert lookup(ids, 2, 1, 4, extend=False) == ([5, 1], 2, 2)
    assert lookup(ids, 4, 1, 4, extend=False) == ([9, 9, 9, 1], 2, 2)  # the earlier lookup: an older occurrence
    copy = np.array([7, *range(10, 30), 8, *range(10, 30)])  # a copy of 20 tokens: matched beyond the 4-gram
    assert lookup(copy, 2, 1, 4) == ([8, 10], 4, 20)


def reference_lookup(tokens: list[int], max_len: int, min_ngram: int, max_ngram: int) -> tuple[list[int], int, int]:
    """The definition, by brute force: the longest recurring suffix's latest earlier occurrence, continued as if
    the draft were already part of the sequence, and the longest suffix (up to MATCH_CAP) ending there."""
    size = len(tokens)
    for n in range(min(max_ngram, size - 1), min_ngram - 1, -1):
        starts = [i for i in range(size - n) if tokens[i:i + n] == tokens[size - n:]]
        if starts:
            seq = list(tokens)
            for i in range(max_len):
                seq.append(seq[starts[-1] + n + i])
            end = starts[-1] + n
            matched = max(m for m in range(min(end, MATCH_CAP) + 1) if tokens[end - m:end] == tokens[size - m:])
            return seq[size:], n, matched
    return [], 0, 0


token_lists = st.lists(st.integers(0, 3), min_size=1, max_size=40) | st.lists(st.integers(0, 1), min_size=1,
                                                                              max_size=90)


@settings(max_examples=300, deadline=None)
@given(tokens=token_lists, max_len=st.integers(1, 10), min_ngram=st.integers(1, 3), extra=st.integers(0, 3))
def test_lookup_continues_the_latest_occurrence_through_its_own_draft(tokens: list[int], max_len: int,
                                                                     min_ngram: int, extra: int) -> None:
    got = lookup(np.array(tokens), max_len, min_ngram, min_ngram + extra)
    assert got == reference_lookup(tokens, max_len, min_ngram, min_ngram + extra)


@settings(max_examples=300, deadline=None)
@given(tokens=token_lists, max_len=st.integers(1, 10))
def test_a_longer_draft_limit_never_changes_the_first_tokens(tokens: list[int], max_len: int) -> None:
    """What lets "auto" (limit 8) draft what a fixed k would, and more: draft(limit)[:k] == draft(limit k)."""
    long, n, matched = lookup(np.array(tokens), max_len, 1, 4)
    for k in range(1, max_len + 1):
        assert lookup(np.array(tokens), k, 1, 4) == (long[:k], n, matched)


def test_confidences_are_calibrated_on_verified_drafts() -> None:
    seq = Sequence("r", 0, [4, 5, 6, 4, 5, 6, 4, 5], SamplingParams())
    drafter = NgramDrafter(max_draft=4)
    first = drafter.propose([seq], [4])[0]
    assert first.token_ids == [6, 4, 5, 6] and first.confidences == [0.5] * 4  # the prior
    for _ in range(20):
        drafter.observe(first, 1)  # position 0 always accepted, position 1 never
    again = drafter.propose([seq], [4])[0]
    assert again.confidences[0] > 0.9 and again.confidences[1] < 0.1
    assert drafter.propose([seq], [0])[0].token_ids == []


def test_match_buckets_key_the_calibration() -> None:
    assert [match_bucket(n, n) for n in (1, 2, 3, 4)] == [1, 2, 3, 4]
    assert [match_bucket(4, m) for m in (7, 8, 15, 16, 31, 32, 40)] == [4, 8, 8, 16, 16, 32, 32]
    copy = [7, *range(10, 30), 8, *range(10, 30)]
    drafter = NgramDrafter(max_draft=4)
    seq = Sequence("r", 0, copy, SamplingParams())
    assert drafter.propose([seq], [4])[0].key == 16
    drafter.match_buckets = False  # the earlier key: the matched n alone
    assert drafter.propose([seq], [4])[0].key == 4
