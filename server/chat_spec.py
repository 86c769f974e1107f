"""OpenAI-spec fields of Chat Completions that DeepSeek's own wire format omits, filled in on the way out.

The stream processor reproduces DeepSeek's Chat shapes exactly; the OpenAI specification (and strict typed
clients built from it) also requires `message.refusal` and, in a `logprobs` object, both `content` and
`refusal` (null when absent). Existing keys are never changed.
"""

from __future__ import annotations

from typing import Any

from recipe.stream.choices import merge_usage


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


class ChatUsageFraming:
    """OpenAI's usage framing for a Chat stream, over DeepSeek's.

    DeepSeek puts `usage` on each choice's final chunk, asked or not. OpenAI sends usage only when
    `stream_options.include_usage` is set, then as one extra chunk with `choices: []` after every choice
    has finished and before `[DONE]`, with `"usage": null` on all other chunks. This rewrites the final
    chunks accordingly and emits that extra chunk (one per request, summed over `n` choices).
    """

    def __init__(self, include_usage: bool) -> None:
        self.include_usage = include_usage
        self.usages: list[dict[str, Any]] = []
        self.envelope: dict[str, Any] | None = None

    def chunk(self, data: dict[str, Any]) -> dict[str, Any]:
        """The chunk to send in place of `data` (spec-completed, usage moved out)."""
        data = complete_chunk(data)
        usage = data.get("usage")
        if isinstance(usage, dict) and data.get("choices"):
            self.usages.append(usage)
            self.envelope = data
        if isinstance(usage, dict) or (not self.include_usage and "usage" in data):
            data = {**data, "usage": None} if self.include_usage else {k: v for k, v in data.items() if k != "usage"}
        return data

    def usage_chunk(self) -> dict[str, Any] | None:
        """The final `choices: []` chunk (once), or None when usage was not asked for or is not known yet."""
        if not self.include_usage or not self.usages or self.envelope is None:
            return None
        chunk = {**self.envelope, "choices": [], "usage": merge_usage(self.usages)}
        self.usages = []
        return chunk
