"""The V4 step plan built from the runner's attention context: one span per sequence with the block table
of every cache kind."""

from __future__ import annotations

from recipe.engine.context import get_context
from recipe.engine.layers.v4_kv import V4Plan, V4Span


def plan_from_context() -> V4Plan:
    ctx = get_context()
    tables = ctx.kind_tables
    assert tables is not None, "a V4 step needs the block table of every cache kind"
    spans = []
    start = 0
    for i, (q, c) in enumerate(zip(ctx.query_lens, ctx.context_lens_list, strict=True)):
        spans.append(V4Span(start, start + q, c - q, {kind: t[i] for kind, t in tables.items()}))
        start += q
    return V4Plan(tuple(spans), ctx.block_size)
