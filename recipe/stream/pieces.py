"""Parsed output pieces: what the text parser hands the protocol event builders.

One piece becomes one protocol event (one chunk / delta). Pieces are produced in output order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ReasoningPiece:
    """A run of reasoning (thinking) text; `logprobs` are the Chat-shaped entries of its tokens."""

    text: str
    logprobs: tuple[dict[str, Any], ...] | None = None


@dataclass(frozen=True)
class ContentPiece:
    """A run of answer text; `logprobs` are the Chat-shaped entries of its tokens."""

    text: str
    logprobs: tuple[dict[str, Any], ...] | None = None


@dataclass(frozen=True)
class ToolCallStart:
    """A new tool call: `index` counts calls from 0, `call_id` is `call_<NN>_<24 alphanumerics>`."""

    index: int
    call_id: str
    name: str


@dataclass(frozen=True)
class ToolCallArguments:
    """A piece of the JSON argument text of call `index`."""

    index: int
    text: str


Piece = ReasoningPiece | ContentPiece | ToolCallStart | ToolCallArguments
