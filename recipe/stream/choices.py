"""`n > 1` Chat Completions: one `StreamProcessor` per choice (`choice_index=i`, `emit_done=False`),
their chunks interleaved by the caller, then one `[DONE]`; `merge_choices` builds the complete body."""

from __future__ import annotations

from collections.abc import Sequence
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
    usage = merge_usage([b["usage"] for b in bodies])
    if usage:
        merged["usage"] = usage
    return merged


def merge_usage(usages: Sequence[dict[str, Any] | None]) -> dict[str, Any]:
    """The Chat usage of several choices of one request: the prompt counts once, completion tokens (and
    reasoning tokens, when every choice reports them) add up. {} when the first choice has no usage."""
    usage = dict(usages[0] or {}) if usages else {}
    if usage:
        completion = sum((u or {}).get("completion_tokens", 0) for u in usages)
        usage["completion_tokens"] = completion
        usage["total_tokens"] = usage["prompt_tokens"] + completion
        reasoning = [u.get("completion_tokens_details") for u in usages if u]
        if all(r is not None for r in reasoning):
            usage["completion_tokens_details"] = {
                "reasoning_tokens": sum(r["reasoning_tokens"] for r in reasoning if r is not None)
            }
    return usage


def final_done() -> Event:
    """The single `data: [DONE]` frame that ends a multi-choice stream."""
    return done_event()
