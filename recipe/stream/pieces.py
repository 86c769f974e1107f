"""Parsed output pieces: what the text parser hands the protocol event builders.

One piece becomes one protocol event (one chunk / delta). Pieces are produced in output order.
They are created once per token on the hot path, so they are slotted dataclasses rather than frozen
ones (frozen construction costs about three times as much); treat them as immutable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class ReasoningPiece:
    """A run of reasoning (thinking) text; `logprobs` are the Chat-shaped entries of its tokens."""

    text: str
    logprobs: tuple[dict[str, Any], ...] | None = None


@dataclass(slots=True)
class ContentPiece:
    """A run of answer text; `logprobs` are the Chat-shaped entries of its tokens."""

    text: str
    logprobs: tuple[dict[str, Any], ...] | None = None


@dataclass(slots=True)
class ToolCallStart:
    """A new tool call: `index` counts calls from 0, `call_id` is `call_<NN>_<24 alphanumerics>`."""

    index: int
    call_id: str
    name: str


@dataclass(slots=True)
class ToolCallArguments:
    """A piece of the JSON argument text of call `index`."""

    index: int
    text: str


Piece = ReasoningPiece | ContentPiece | ToolCallStart | ToolCallArguments
