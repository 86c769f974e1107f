"""The V4 step plan built from the runner's attention context: one span per sequence with the block table
of every cache kind (and, under `REPLAY_BOUNDS`, a replaying sequence's bounds; -1 padded: none). The
"batched" attention backend batches the decode rows; "reference" and "native" keep the per-sequence loop."""

from __future__ import annotations

from recipe.engine.context import get_context
from recipe.engine.layers.v4_kv import REPLAY_BOUNDS, V4Plan, V4Span


def plan_from_context() -> V4Plan:
    ctx = get_context()
    tables = ctx.kind_tables
    assert tables is not None, "a V4 step needs the block table of every cache kind"
    spans = []
    start = 0
    for i, (q, c) in enumerate(zip(ctx.query_lens, ctx.context_lens_list, strict=True)):
        kinds = {kind: t[i] for kind, t in tables.items() if kind != REPLAY_BOUNDS}
        bounds = tables.get(REPLAY_BOUNDS)
        window_from, compressed_until = (0, 0) if bounds is None else (int(bounds[i, 0]), int(bounds[i, 1]))
        spans.append(V4Span(start, start + q, c - q, kinds, max(0, window_from), max(0, compressed_until)))
        start += q
    return V4Plan(tuple(spans), ctx.block_size, batched=ctx.attention_backend == "batched")
