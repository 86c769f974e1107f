"""Backend updates: what an inference backend feeds a `StreamProcessor`, in order.

`Ready` (optional, first) carries prompt usage; `TextUpdate` carries decoded text and the number of
tokens it accounts for; `TokenUpdate` carries raw token ids (decoded by the processor) with one
optional `TokenLogprob` per id; `Finish` ends the output with the backend's reason.

They are compiled with the stream modules (recipe.compiled_stream), where the processor reads their fields
directly; `__reduce__` keeps them picklable there (a compiled frozen class cannot be rebuilt field by field).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

FinishReason = Literal["stop", "length", "content_filter"]


@dataclass(frozen=True)
class Ready:
    """The prompt was accepted: `prompt_tokens` in total, `cached_tokens` of them served from cache."""

    prompt_tokens: int = 0
    cached_tokens: int = 0
    system_fingerprint: str | None = None

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (Ready, (self.prompt_tokens, self.cached_tokens, self.system_fingerprint))


@dataclass(frozen=True)
class TextUpdate:
    """Decoded output text; `token_count` is how many completion tokens it accounts for."""

    text: str
    token_count: int = 0

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (TextUpdate, (self.text, self.token_count))


@dataclass(frozen=True)
class TokenLogprob:
    """The log probability of one sampled token and its top alternatives `(token_id, logprob)`."""

    logprob: float
    top: tuple[tuple[int, float], ...] | list[tuple[int, float]] = field(default_factory=tuple)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (TokenLogprob, (self.logprob, self.top))


@dataclass(frozen=True)
class TokenUpdate:
    """Output token ids; `logprobs`, when given, holds exactly one `TokenLogprob` per id."""

    token_ids: tuple[int, ...] | list[int]
    logprobs: tuple[TokenLogprob, ...] | list[TokenLogprob] | None = None

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (TokenUpdate, (self.token_ids, self.logprobs))


@dataclass(frozen=True)
class Finish:
    """The backend stopped: `stop` (EOS or stop token), `length` (max tokens) or `content_filter`."""

    reason: FinishReason = "stop"

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (Finish, (self.reason,))


BackendUpdate = Ready | TextUpdate | TokenUpdate | Finish


class StreamInputError(ValueError):
    """The backend fed the processor something it cannot accept (after finish, bad logprobs, bad UTF-8)."""
