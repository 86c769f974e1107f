"""Chat Completions chunks (`chat.completion.chunk`) built from parsed pieces.

Reasoning is sent as `delta.reasoning_content` (DeepSeek's own field, which the reference and the
DeepSeek API use; the `openai` SDK keeps it as an extra field). Clients of vLLM-style servers read
`delta.reasoning`; set `reasoning_field="reasoning"` or `"both"` on the processor to emit that spelling
as well. On input, conversion accepts either spelling on assistant history.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from recipe.stream.pieces import ContentPiece, Piece, ReasoningPiece, ToolCallArguments, ToolCallStart
from recipe.stream.sse import Event, JsonTemplate, done_event
from recipe.stream.usage import Usage

ReasoningField = Literal["reasoning_content", "reasoning", "both"]


_SLOT = "\ue0f0slot\ue0f0"


class ChatEventBuilder:
    """Builds the chunks of one choice; `index` is the choice index (n > 1)."""

    # Render per-token deltas from byte templates (tests switch it off to prove it changes nothing).
    use_templates: ClassVar[bool] = True

    def __init__(
        self,
        *,
        response_id: str,
        model: str,
        created: int,
        thinking: bool,
        include_usage: bool,
        index: int = 0,
        reasoning_field: ReasoningField = "reasoning_content",
    ) -> None:
        self.response_id = response_id
        self.model = model
        self.created = created
        self.thinking = thinking
        self.include_usage = include_usage
        self.index = index
        self.reasoning_field = reasoning_field
        self._fingerprint: str | None = None
        self._templates: dict[str, JsonTemplate] = {}
        self._argument_templates: dict[int, JsonTemplate] = {}  # by call index
        # one placeholder per template: the "both" spelling writes the reasoning twice
        self._templated = self.use_templates and reasoning_field != "both"

    @property
    def system_fingerprint(self) -> str | None:
        return self._fingerprint

    @system_fingerprint.setter
    def system_fingerprint(self, value: str | None) -> None:
        self._fingerprint = value
        self._templates.clear()
        self._argument_templates.clear()

    def _template(self, kind: str) -> JsonTemplate:
        """Bytes template of a content (`kind="content"`) or reasoning delta chunk without logprobs."""
        tpl = self._templates.get(kind)
        if tpl is None:
            delta: dict[str, Any]
            if kind == "content":
                delta = {"content": _SLOT}
                if self.thinking:
                    self._reasoning(delta, None)
            else:
                delta = {"content": None}
                self._reasoning(delta, _SLOT)
            tpl = self._templates[kind] = JsonTemplate(self._chunk(delta).data, [_SLOT], None)
        return tpl

    def _reasoning(self, delta: dict[str, Any], value: str | None) -> None:
        if self.reasoning_field in ("reasoning_content", "both"):
            delta["reasoning_content"] = value
        if self.reasoning_field in ("reasoning", "both"):
            delta["reasoning"] = value

    def _chunk(
        self, delta: dict[str, Any], logprobs: Any = None, finish_reason: str | None = None,
        usage: dict[str, Any] | None = None, final: bool = False,
    ) -> Event:
        data: dict[str, Any] = {
            "id": self.response_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": self.system_fingerprint,
            "choices": [{"index": self.index, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}],
        }
        if final:
            data["usage"] = usage
        elif self.include_usage:
            data["usage"] = None
        return Event(None, data)

    def start(self, in_reasoning: bool = True) -> list[Event]:
        """The role chunk; with thinking on, `in_reasoning` says whether output starts in the reasoning
        (a continued answer starts with `content: ""` instead)."""
        delta: dict[str, Any] = {"role": "assistant"}
        if self.thinking and in_reasoning:
            delta["content"] = None
            self._reasoning(delta, "")
        elif self.thinking:
            delta["content"] = ""
            self._reasoning(delta, None)
        else:
            delta["content"] = ""
        return [self._chunk(delta)]

    def text_event(self, is_reasoning: bool, text: str) -> Event:
        """The chunk of a reasoning or answer delta without logprobs (`piece` of that piece)."""
        if self._templated:
            kind = "reasoning" if is_reasoning else "content"
            tpl = self._templates.get(kind)
            if tpl is None:
                tpl = self._template(kind)
            return Event(None, None, False, None, tpl.render1(text))
        return self.piece(ReasoningPiece(text) if is_reasoning else ContentPiece(text))

    def arguments_event(self, index: int, text: str) -> Event:
        """The chunk of an argument delta of call `index` (`piece` of it), from its byte template."""
        if not self._templated:
            return self._chunk({"tool_calls": [{"index": index, "function": {"arguments": text}}]})
        tpl = self._argument_templates.get(index)
        if tpl is None:
            delta = {"tool_calls": [{"index": index, "function": {"arguments": _SLOT}}]}
            tpl = self._argument_templates[index] = JsonTemplate(self._chunk(delta).data, [_SLOT], None)
        return Event(None, None, False, None, tpl.render1(text))

    def piece(self, piece: Piece) -> Event:
        kind = type(piece)
        if (kind is ContentPiece or kind is ReasoningPiece) and self._templated and piece.logprobs is None:  # type: ignore[union-attr]
            tpl = self._templates.get("content" if kind is ContentPiece else "reasoning")
            if tpl is None:
                tpl = self._template("content" if kind is ContentPiece else "reasoning")
            return Event(None, None, False, None, tpl.render1(piece.text))  # type: ignore[union-attr]
        if type(piece) is ContentPiece:
            delta: dict[str, Any]
            if not self.thinking:
                delta = {"content": piece.text}
            elif self.reasoning_field == "reasoning_content":
                delta = {"content": piece.text, "reasoning_content": None}
            else:
                delta = {"content": piece.text}
                self._reasoning(delta, None)
            lp = {"content": list(piece.logprobs)} if piece.logprobs is not None else None
            return self._chunk(delta, lp)
        if type(piece) is ReasoningPiece:
            delta = {"content": None}
            self._reasoning(delta, piece.text)
            lp = {"reasoning_content": list(piece.logprobs)} if piece.logprobs is not None else None
            return self._chunk(delta, lp)
        if isinstance(piece, ToolCallStart):
            call = {
                "index": piece.index,
                "id": piece.call_id,
                "type": "function",
                "function": {"name": piece.name, "arguments": ""},
            }
            return self._chunk({"tool_calls": [call]})
        assert isinstance(piece, ToolCallArguments)
        return self.arguments_event(piece.index, piece.text)

    def finish(self, finish_reason: str, usage: Usage, *, done: bool = True) -> list[Event]:
        delta: dict[str, Any] = {"content": ""}
        if self.thinking:
            self._reasoning(delta, None)
        events = [self._chunk(delta, None, finish_reason, usage.chat(), final=True)]
        if done:
            events.append(done_event())
        return events

    def error(self, message: str) -> list[Event]:
        """vLLM-style mid-stream error then `[DONE]`; the `openai` SDK raises `APIError` on it."""
        body = {"error": {"message": message, "type": "server_error", "param": None, "code": None}}
        return [Event(None, body), done_event()]


def chat_finish_reason(backend_reason: str, has_tool_calls: bool) -> str:
    if backend_reason == "length":
        return "length"
    if backend_reason == "content_filter":
        return "content_filter"
    return "tool_calls" if has_tool_calls else "stop"
