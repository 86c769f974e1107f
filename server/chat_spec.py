"""OpenAI-spec fields of Chat Completions that DeepSeek's own wire format omits, filled in on the way out.

The stream processor reproduces DeepSeek's Chat shapes exactly; the OpenAI specification (and strict typed
clients built from it) also requires `message.refusal` and, in a `logprobs` object, both `content` and
`refusal` (null when absent). Existing keys are never changed.
"""

from __future__ import annotations

from typing import Any


def _logprobs(lp: Any) -> Any:
    if isinstance(lp, dict) and ("content" not in lp or "refusal" not in lp):
        return {"content": None, "refusal": None, **lp}
    return lp


def complete_chunk(data: dict[str, Any]) -> dict[str, Any]:
    """A chunk with spec-required keys added (a copy only when something is missing)."""
    choices = data.get("choices")
    if not choices or not any(isinstance(c.get("logprobs"), dict) for c in choices):
        return data
    return {**data, "choices": [{**c, "logprobs": _logprobs(c.get("logprobs"))} for c in choices]}


def complete_body(body: dict[str, Any]) -> dict[str, Any]:
    """A complete Chat body with spec-required keys added."""
    choices = []
    for c in body.get("choices") or []:
        message = c.get("message")
        if isinstance(message, dict) and "refusal" not in message:
            message = {**message, "refusal": None}
        choices.append({**c, "message": message, "logprobs": _logprobs(c.get("logprobs"))})
    return {**body, "choices": choices}
