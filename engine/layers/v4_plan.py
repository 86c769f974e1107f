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
    stacked = {kind: t for kind, t in tables.items() if kind != REPLAY_BOUNDS}
    rows = {kind: t.unbind(0) for kind, t in stacked.items()}  # one call per kind, not one per sequence
    bounds = tables.get(REPLAY_BOUNDS)
    replay = None if bounds is None else bounds.tolist()
    spans = []
    start = 0
    for i, (q, c) in enumerate(zip(ctx.query_lens, ctx.context_lens_list, strict=True)):
        window_from, compressed_until = (0, 0) if replay is None else replay[i]
        spans.append(V4Span(start, start + q, c - q, {kind: r[i] for kind, r in rows.items()}, max(0, window_from),
                            max(0, compressed_until)))
        start += q
    return V4Plan(tuple(spans), ctx.block_size, batched=ctx.attention_backend == "batched", tables=stacked)
