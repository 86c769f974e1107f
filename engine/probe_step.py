"""A synthetic step for start-up profiles: `num_seqs` sequences that each run `query_len` positions after
`context` tokens, in the first free KV blocks (nothing is cached yet at start-up), every cache kind's block
table included for a model with several kinds (DeepSeek-V4). Its samples are kept by no one."""

from __future__ import annotations

from typing import Any

import numpy as np
from recipe.engine.kv_kinds import rows_per_block
from recipe.engine.sampler import SamplingRow
from recipe.engine.sampling_params import SamplingParams
from recipe.engine.step import PreparedStep

_PROBE_PARAMS = SamplingParams(temperature=0.0, max_tokens=1)


def probe_fits(runner: Any, num_seqs: int, query_len: int, context: int) -> bool:
    """Whether the KV pool (every kind's) holds the probe's blocks."""
    return all(num_seqs * per_seq <= count for per_seq, count in _blocks_per_seq(runner, query_len + context))


def probe_step(runner: Any, num_seqs: int, query_len: int, context: int, *, drafts: bool = True) -> PreparedStep:
    """A PreparedStep of `num_seqs` rows, each scoring `query_len` positions after `context` tokens: the last
    position sampled, the earlier ones as speculative drafts (`drafts`) or as a prefill chunk (not)."""
    assert probe_fits(runner, num_seqs, query_len, context)
    bs = runner.block_size
    per_seq = -(-(context + query_len) // bs)
    tables = np.arange(num_seqs * per_seq, dtype=np.int64).reshape(num_seqs, per_seq)
    pos = np.arange(context, context + query_len, dtype=np.int64)
    slots = np.concatenate([t[pos // bs] * bs + pos % bs for t in tables])
    n = num_seqs * query_len
    return PreparedStep(
        input_ids=np.zeros(n, dtype=np.int64), placeholders=[], positions=np.tile(pos, num_seqs),
        slot_mapping=slots, query_lens=[query_len] * num_seqs, context_lens=[context + query_len] * num_seqs,
        block_tables=tables, sample_rows=[(b + 1) * query_len - 1 for b in range(num_seqs)],
        sample_seq_ids=list(range(-num_seqs, 0)),
        rows=[SamplingRow(_PROBE_PARAMS, position=context + 1) for _ in range(num_seqs)],
        matchers=[None] * num_seqs, pending_history=[False] * num_seqs,
        kind_tables=_kind_tables(runner, num_seqs, context + query_len, tables),
        draft_ids=[[0] * (query_len - 1) if drafts else [] for _ in range(num_seqs)])


def _blocks_per_seq(runner: Any, num_tokens: int) -> list[tuple[int, int]]:
    """(blocks one sequence of `num_tokens` needs, blocks in the pool) for each cache kind."""
    window = -(-num_tokens // runner.block_size)
    kinds = runner.kinds
    if kinds is None:
        return [(window, runner.num_blocks)]
    out = []
    for s in kinds.specs:
        per = rows_per_block(s, runner.block_size)
        out.append((window if s.tokens_per_row == 1 else -(-(num_tokens // s.tokens_per_row) // per),
                    kinds.counts[s.name]))
    return out


def _kind_tables(runner: Any, num_seqs: int, num_tokens: int, window: np.ndarray) -> dict[str, np.ndarray] | None:
    kinds = runner.kinds
    if kinds is None:
        return None
    out = {}
    for spec, (per_seq, _count) in zip(kinds.specs, _blocks_per_seq(runner, num_tokens), strict=True):
        if spec.tokens_per_row == 1:
            out[spec.name] = window
        elif per_seq == 0:  # no complete compressed row yet: one empty (-1) entry, as the runner pads
            out[spec.name] = np.full((num_seqs, 1), -1, dtype=np.int64)
        else:
            out[spec.name] = np.arange(num_seqs * per_seq, dtype=np.int64).reshape(num_seqs, per_seq)
    return out
