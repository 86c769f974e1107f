"""Prompt-lookup drafting: continue the sequence the way it continued after an earlier occurrence of its
final n tokens (n from `max_ngram` down to `min_ngram`). No weights; good wherever output copies input.

Which occurrence: the latest, its continuation copied as if the draft were already part of the sequence (a
continuation that reaches the sequence's end goes on with the draft's own tokens: a repeating pattern repeats).
So a draft's first k tokens are the k-token draft: a longer limit never changes them. The earlier lookup
(`extend=False`) took the latest occurrence followed by a whole draft, else the earliest, so a longer limit
picked an older occurrence: on the bench's JSON outputs (SmolLM2, greedy) a draft of 8 then matched 0.90
tokens on average against 1.08 with the latest occurrence extended (first tokens 0.42 vs 0.45), which cost
"auto" (limit 8) against a fixed k=3.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from recipe.engine.sequence import Sequence
from recipe.engine.speculative.calibration import AcceptanceTable
from recipe.engine.speculative.drafter import Draft
from recipe.engine.step import PreparedStep, StepResult

MATCH_CAP = 32  # how far back `lookup` follows a match


def matched_length(tokens: np.ndarray, start: int, cap: int = MATCH_CAP) -> int:
    """How many tokens before `start` equal the sequence's last ones (at most `cap`)."""
    size = min(start, cap)
    earlier, last = tokens[start - size:start][::-1], tokens[len(tokens) - size:][::-1]
    differ = np.flatnonzero(earlier != last)
    return int(differ[0]) if differ.size else size


def lookup(tokens: np.ndarray, max_len: int, min_ngram: int, max_ngram: int,
           extend: bool = True) -> tuple[list[int], int, int]:
    """(continuation of at most `max_len` tokens, matched n, matched length), or ([], 0, 0) when no suffix
    recurs. The matched length follows the chosen occurrence further back than `max_ngram`, up to MATCH_CAP
    tokens: a draft that continues a long copy is likelier to be accepted than one after a chance 4-gram.

    `extend`: continue after the latest occurrence, through the draft's own tokens past the sequence's end
    (always `max_len` tokens); False: the latest occurrence followed by a whole draft, else the earliest."""
    size = len(tokens)
    for n in range(min(max_ngram, size - 1), min_ngram - 1, -1):
        windows = sliding_window_view(tokens[: size - 1], n)  # window i is followed by tokens[i + n]
        hits = np.flatnonzero((windows == tokens[size - n:]).all(axis=1))
        if hits.size:
            if extend:
                start = int(hits[-1]) + n
                draft = tokens[start:start + max_len].tolist()
                period = size - start  # past the end, the sequence goes on with the draft itself
                while len(draft) < max_len:
                    draft.append(draft[len(draft) - period])
                return draft, n, matched_length(tokens, start)
            full = hits[hits + n + max_len <= size]  # matches followed by a whole draft's worth of tokens
            start = int(full[-1] if full.size else hits[0]) + n
            return tokens[start:start + max_len].tolist(), n, matched_length(tokens, start)
    return [], 0, 0


def match_bucket(n: int, matched: int) -> int:
    """The calibration key: n, or for a match of 8 tokens or more its power of two (8, 16, 32)."""
    return n if matched < 8 else 1 << (min(matched, MATCH_CAP).bit_length() - 1)


class NgramDrafter:
    """Confidences are per (key, position) acceptance rates of its own verified proposals; the key is the
    match's `match_bucket` (`match_buckets`), or the matched n alone (False, the earlier key)."""

    def __init__(self, max_draft: int, min_ngram: int = 1, max_ngram: int = 4, extend: bool = True,
                 match_buckets: bool = True) -> None:
        assert 1 <= min_ngram <= max_ngram
        self.min_ngram, self.max_ngram, self.extend = min_ngram, max_ngram, extend
        self.match_buckets = match_buckets
        self.table = AcceptanceTable(max(max_draft, 16))  # any length `use_length` may switch to

    def propose(self, seqs: list[Sequence], max_lens: list[int]) -> list[Draft]:
        out = []
        for seq, max_len in zip(seqs, max_lens, strict=True):
            if max_len <= 0:
                out.append(Draft())
                continue
            ids, n, matched = lookup(np.asarray(seq.token_ids, dtype=np.int64), max_len, self.min_ngram,
                                     self.max_ngram, self.extend)
            key = match_bucket(n, matched) if self.match_buckets else n
            out.append(Draft(ids, self.table.confidences(key, len(ids)), key=key))
        return out

    def after_step(self, step: PreparedStep, result: StepResult) -> None:
        """Nothing: prompt lookup reads only the sequences' tokens."""

    def observe(self, draft: Draft, num_accepted: int) -> None:
        self.table.record(draft.key, len(draft.token_ids), num_accepted)
