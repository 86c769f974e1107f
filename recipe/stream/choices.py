"""`n > 1` Chat Completions: one `StreamProcessor` per choice (`choice_index=i`, `emit_done=False`),
their chunks interleaved by the caller, then one `[DONE]`; `merge_choices` builds the complete body."""

from __future__ import annotations

from typing import Any

from recipe.stream.processor import StreamProcessor
from recipe.stream.sse import Event, done_event


def merge_choices(processors: list[StreamProcessor]) -> dict[str, Any]:
    """The complete Chat body of several choices: choices in index order, completion tokens summed."""
    if not processors:
        raise ValueError("merge_choices needs at least one processor")
    bodies = [p.response() for p in processors]
    merged = dict(bodies[0])
    merged["choices"] = sorted((c for b in bodies for c in b["choices"]), key=lambda c: c["index"])
    usage = dict(bodies[0]["usage"] or {})
    if usage:
        completion = sum((b["usage"] or {}).get("completion_tokens", 0) for b in bodies)
        usage["completion_tokens"] = completion
        usage["total_tokens"] = usage["prompt_tokens"] + completion
        reasoning = [b["usage"].get("completion_tokens_details") for b in bodies if b["usage"]]
        if all(r is not None for r in reasoning):
            usage["completion_tokens_details"] = {
                "reasoning_tokens": sum(r["reasoning_tokens"] for r in reasoning if r is not None)
            }
        merged["usage"] = usage
    return merged


def final_done() -> Event:
    """The single `data: [DONE]` frame that ends a multi-choice stream."""
    return done_event()
