"""Offline measure of a draft head on teacher-forced text, counted where the engine drafts.

The engine drafts from the hidden state of the position whose logits gave a sequence's last token: the last
prompt position after prefill, then answer positions. `chained_acceptance` drafts from such positions exactly
as `DraftHeadDrafter.propose` does (h_t and x_{t+1} in, the head chained, the target's LM head picking each
token from the head's draft vocabulary) and counts a draft token as accepted while it equals the target's
greedy token there. The training
script calibrates with it, and the tests hold the engine's acceptance to it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from recipe.engine.context import AttentionContext, reset_context, set_context
from recipe.engine.speculative.draft_head import DraftHead, DraftProjection


@torch.inference_mode()
def hidden_states(runner: Any, ids: list[int]) -> torch.Tensor:
    """Final hidden states [L, H] (after the last norm) of every position: one prefill over KV blocks 0..,
    so only for an engine with nothing cached and nothing running."""
    bs, n = runner.block_size, len(ids)
    table = np.arange(-(-n // bs), dtype=np.int64)
    pos = np.arange(n, dtype=np.int64)
    set_context(AttentionContext(
        query_lens=[n], context_lens_list=[n], cu_seqlens_q=torch.tensor([0, n]),
        context_lens=torch.tensor([n]), slot_mapping=torch.from_numpy(table[pos // bs] * bs + pos % bs),
        block_tables=torch.from_numpy(table[None]), block_size=bs, attention_backend=runner.attention_backend))
    try:
        return runner.model.forward(torch.tensor(ids), torch.from_numpy(pos)).float()
    finally:
        reset_context()


def drafted_positions(prompt_len: int, total_len: int, depth: int, stride: int = 1) -> range:
    """Positions t the engine drafts from that have `depth` known tokens after t + 1.

    h_t with x_{t+1} = ids[t + 1] drafts ids[t + 2 ..]. Prompt positions, teacher-forced on the prompt's own
    tokens, are never drafted at (and are far easier: counting them gave 0.52 for a head that accepts 0.1-0.3).
    """
    return range(max(prompt_len - 1, 0), total_len - 1 - depth, stride)


@torch.inference_mode()
def chained_acceptance(head: DraftHead, model: Any, h: torch.Tensor, ids: list[int], greedy: torch.Tensor,
                       positions: range, depth: int, record: Any = None) -> list[list[int]]:
    """[tried, accepted] per draft position j < depth, chaining the head from each of `positions`; a draft
    ends at its first token that differs from the target's greedy token (`greedy[t]`: argmax of position
    t's logits). `record(j, p, accepted)` sees every tried token with the head's probability of it."""
    counts = [[0, 0] for _ in range(depth)]
    dtype = next(head.parameters()).dtype
    project = DraftProjection(model, head.vocab)
    for t in positions:
        hh, x = h[t:t + 1].to(dtype), torch.tensor([ids[t + 1]])
        for j in range(depth):
            hh = head(hh, model.embed_tokens(x).to(dtype))
            p, x = project(hh)
            ok = int(x) == int(greedy[t + 1 + j])
            if record is not None:
                record(j, float(p), ok)
            counts[j][0] += 1
            counts[j][1] += ok
            if not ok:
                break
    return counts
