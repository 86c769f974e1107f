"""Anthropic Messages stream events built from parsed pieces.

`message_start` → content blocks (`thinking` with a closing `signature_delta`, `text`, `tool_use` with
`input_json_delta`) each `content_block_start` … `content_block_stop` → `message_delta` (stop reason,
stop sequence, full usage) → `message_stop`. A `ping` follows the first `content_block_start`. With
thinking on, the thinking block opens at the start even if the reasoning stays empty.
"""

from __future__ import annotations

from typing import Any, ClassVar

from recipe.stream.pieces import ContentPiece, Piece, ReasoningPiece, ToolCallArguments, ToolCallStart
from recipe.stream.sse import Event, JsonTemplate
from recipe.stream.usage import Usage


def _ev(name: str, data: dict[str, Any]) -> Event:
    return Event(name, data)


_SLOTS = ("\ue0f0index\ue0f0", "\ue0f0text\ue0f0")


def _delta_template(kind: str, field: str) -> JsonTemplate:
    return JsonTemplate({"type": "content_block_delta", "index": _SLOTS[0], "delta": {"type": kind, field: _SLOTS[1]}},
                        _SLOTS, "content_block_delta")


_TEXT = _delta_template("text_delta", "text")
_THINKING = _delta_template("thinking_delta", "thinking")
_INPUT_JSON = _delta_template("input_json_delta", "partial_json")


class MessagesEventBuilder:
    # Render per-token deltas from byte templates (tests switch it off to prove it changes nothing).
    use_templates: ClassVar[bool] = True
    def __init__(self, *, response_id: str, model: str, thinking: bool, signature: str | None = None) -> None:
        self.response_id = response_id
        self.model = model
        self.thinking = thinking
        self.signature = signature if signature is not None else response_id
        self._index = -1
        self._open: str | None = None  # type of the open block
        self._pinged = False

    def _start_block(self, block: dict[str, Any]) -> list[Event]:
        self._index += 1
        self._open = block["type"]
        events = [_ev("content_block_start", {"type": "content_block_start", "index": self._index, "content_block": block})]
        if not self._pinged:
            self._pinged = True
            events.append(_ev("ping", {"type": "ping"}))
        return events

    def _stop_block(self) -> list[Event]:
        if self._open is None:
            return []
        events: list[Event] = []
        if self._open == "thinking":
            events.append(self._delta({"type": "signature_delta", "signature": self.signature}))
        events.append(_ev("content_block_stop", {"type": "content_block_stop", "index": self._index}))
        self._open = None
        return events

    def _text_delta(self, template: JsonTemplate, text: str) -> Event:
        return Event("content_block_delta", None, False, None, template.render2(self._index, text))

    def _delta(self, delta: dict[str, Any]) -> Event:
        return _ev("content_block_delta", {"type": "content_block_delta", "index": self._index, "delta": delta})

    def start(self, usage: Usage) -> list[Event]:
        message: dict[str, Any] = {
            "id": self.response_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage.messages(output_tokens=0),
        }
        events = [_ev("message_start", {"type": "message_start", "message": message})]
        if self.thinking:
            events += self._start_block({"type": "thinking", "thinking": "", "signature": ""})
        return events

    def text_event(self, is_reasoning: bool, text: str) -> list[Event]:
        """`piece` of a reasoning or answer text piece without logprobs (templated while its block is open)."""
        if self.use_templates and self._open == ("thinking" if is_reasoning else "text"):
            return [Event("content_block_delta", None, False, None, (_THINKING if is_reasoning else _TEXT).render2(self._index, text))]
        return self.piece(ReasoningPiece(text) if is_reasoning else ContentPiece(text))

    def arguments_event(self, text: str) -> Event:
        """The `input_json_delta` of the open tool-use block (`piece` of it), from its byte template."""
        if not self.use_templates:
            return self._delta({"type": "input_json_delta", "partial_json": text})
        return Event("content_block_delta", None, False, None, _INPUT_JSON.render2(self._index, text))

    def piece(self, piece: Piece) -> list[Event]:
        kind = type(piece)
        if kind is ContentPiece and self._open == "text" and self.use_templates:
            return [Event("content_block_delta", None, False, None, _TEXT.render2(self._index, piece.text))]  # type: ignore[union-attr]
        if isinstance(piece, ReasoningPiece):
            events: list[Event] = []
            if self._open != "thinking":
                events += self._stop_block()
                events += self._start_block({"type": "thinking", "thinking": "", "signature": ""})
            events.append(self._text_delta(_THINKING, piece.text) if self.use_templates
                          else self._delta({"type": "thinking_delta", "thinking": piece.text}))
            return events
        if isinstance(piece, ContentPiece):
            events = []
            if self._open != "text":
                events += self._stop_block()
                events += self._start_block({"type": "text", "text": ""})
            events.append(self._text_delta(_TEXT, piece.text) if self.use_templates
                          else self._delta({"type": "text_delta", "text": piece.text}))
            return events
        if isinstance(piece, ToolCallStart):
            events = self._stop_block()
            events += self._start_block({"type": "tool_use", "id": piece.call_id, "name": piece.name, "input": {}})
            return events
        assert isinstance(piece, ToolCallArguments)
        return [self.arguments_event(piece.text)]

    def finish(self, stop_reason: str, stop_sequence: str | None, usage: Usage) -> list[Event]:
        events = self._stop_block()
        events.append(
            _ev(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
                    "usage": usage.messages(),
                },
            )
        )
        events.append(_ev("message_stop", {"type": "message_stop"}))
        return events

    def error(self, message: str) -> list[Event]:
        """Anthropic's mid-stream error; the `anthropic` SDK raises `APIStatusError` on it."""
        return [_ev("error", {"type": "error", "error": {"type": "api_error", "message": message}})]


def messages_stop_reason(backend_reason: str, has_tool_calls: bool, stop_sequence: str | None) -> str:
    if stop_sequence is not None:
        return "stop_sequence"
    if backend_reason == "length":
        return "max_tokens"
    if backend_reason == "content_filter":
        return "refusal"
    return "tool_use" if has_tool_calls else "end_turn"
