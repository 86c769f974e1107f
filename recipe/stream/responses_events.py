"""OpenAI Responses stream events built from parsed pieces.

`response.created` and `response.in_progress` carry the response object (status `in_progress`); each
output item (reasoning `rs_<id>_<i>`, message `msg_<id>_<i>`, function call `fc_<id>_<i>`) goes
`output_item.added` → (`content_part.added` → deltas → `…done` → `content_part.done`) → `output_item.done`;
the last event is `response.completed` or `response.incomplete`. `sequence_number` counts from 0.
A message followed by tool calls is marked `phase: "commentary"` when it is done.

A call of a tool the request declared as `custom` is a `custom_tool_call` item (`ctc_<id>_<i>`) whose `input`
is the raw text, as the reference reports it: the `input` argument when that is a string, otherwise the
whole argument text; `response.custom_tool_call_input.delta` events carry it as it forms.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

from recipe.stream.custom_input import CustomInput
from recipe.stream.pieces import ContentPiece, Piece, ReasoningPiece, ToolCallArguments, ToolCallStart
from recipe.stream.responses_echo import default_echo
from recipe.stream.sse import Event, JsonTemplate
from recipe.stream.usage import Usage

_SLOTS = ("\ue0f0delta\ue0f0", "\ue0f0item\ue0f0", "\ue0f0index\ue0f0", "\ue0f0seq\ue0f0")
_DELTA_TEMPLATES: dict[str, JsonTemplate] = {}


class ResponsesEventBuilder:
    # Render per-token deltas from byte templates (tests switch it off to prove it changes nothing).
    use_templates: ClassVar[bool] = True
    def __init__(
        self, *, response_id: str, model: str, created: int | None = None, echo: dict[str, Any] | None = None
    ) -> None:
        self.response_id = response_id
        self.model = model
        self.created = created
        self.echo = echo if echo is not None else default_echo()
        self._seq = 0
        self._output: list[dict[str, Any]] = []
        self._item: dict[str, Any] | None = None
        self._text: list[str] = []
        self._logprobs: list[dict[str, Any]] = []
        # (open item, its delta template, whether it is reasoning, the event name)
        self._item_template: tuple[Any, JsonTemplate, bool, str] | None = None
        self._arguments_template: tuple[int, JsonTemplate] | None = None  # (output index, its template)
        self._custom_names = frozenset(
            t.get("name") for t in self.echo.get("tools") or () if isinstance(t, dict) and t.get("type") == "custom")
        self._custom: CustomInput | None = None  # the open custom tool call's input

    # ---- helpers ------------------------------------------------------------------------------

    def _templated(self, name: str, delta: str, item_id: str, output_index: int) -> Event:
        """A text/reasoning delta event rendered from its byte template (same bytes as `_ev_sorted`)."""
        tpl = _DELTA_TEMPLATES.get(name)
        if tpl is None:
            fields: dict[str, Any] = {"type": name, "content_index": 0, "delta": _SLOTS[0], "item_id": _SLOTS[1]}
            if name == "response.output_text.delta":
                fields["logprobs"] = []
            fields.update(output_index=_SLOTS[2], sequence_number=_SLOTS[3])
            tpl = _DELTA_TEMPLATES[name] = JsonTemplate(fields, _SLOTS, name)
        seq = self._seq
        self._seq += 1
        return Event(name, None, False, None, tpl.render(delta, item_id, output_index, seq))

    def text_event(self, is_reasoning: bool, text: str) -> list[Event]:
        """`piece` of a reasoning or answer text piece without logprobs; while its item is open, from a
        template with the item's id and index filled in (the same bytes)."""
        cached = self._item_template
        item = self._item
        if cached is not None and cached[0] is item and cached[2] is is_reasoning:  # the open item's template
            self._text.append(text)
            seq = self._seq
            self._seq = seq + 1
            return [Event(cached[3], None, False, None, cached[1].render2(text, seq))]
        if item is None or item["type"] != ("reasoning" if is_reasoning else "message") or not self.use_templates:
            return self.piece(ReasoningPiece(text) if is_reasoning else ContentPiece(text))
        if cached is None or cached[0] is not item:
            idx = len(self._output)
            name = "response.reasoning_text.delta" if is_reasoning else "response.output_text.delta"
            item_id = f"rs_{self.response_id}_{idx}" if is_reasoning else item["id"]
            fields: dict[str, Any] = {"type": name, "content_index": 0, "delta": _SLOTS[0], "item_id": item_id}
            if not is_reasoning:
                fields["logprobs"] = []
            fields.update(output_index=idx, sequence_number=_SLOTS[3])
            cached = self._item_template = (item, JsonTemplate(fields, (_SLOTS[0], _SLOTS[3]), name), is_reasoning, name)
        self._text.append(text)
        seq = self._seq
        self._seq += 1
        return [Event("response.reasoning_text.delta" if is_reasoning else "response.output_text.delta",
                      None, False, None, cached[1].render2(text, seq))]

    def arguments_events(self, text: str) -> list[Event]:
        """The events of argument text of the open call: a function call's delta, or a custom call's input."""
        custom = self._custom
        if custom is None:
            return [self.arguments_event(text)]
        delta = custom.feed(text)
        if not delta:
            return []
        return [self._ev("response.custom_tool_call_input.delta", {
            "delta": delta, "item_id": self._item["id"], "output_index": len(self._output)})]  # type: ignore[index]

    def arguments_event(self, text: str) -> Event:
        """The argument delta of the open function call item, from a template with the item's id and
        index filled in (`piece` of it: the same bytes)."""
        idx = len(self._output)
        if not self.use_templates:
            self._text.append(text)
            return self._ev("response.function_call_arguments.delta", {
                "delta": text, "item_id": f"fc_{self.response_id}_{idx}", "output_index": idx})
        cached = self._arguments_template
        if cached is None or cached[0] != idx:
            tpl = JsonTemplate({"type": "response.function_call_arguments.delta", "delta": _SLOTS[0],
                                "item_id": f"fc_{self.response_id}_{idx}", "output_index": idx,
                                "sequence_number": _SLOTS[3]}, (_SLOTS[0], _SLOTS[3]),
                               "response.function_call_arguments.delta")
            cached = self._arguments_template = (idx, tpl)
        self._text.append(text)
        seq = self._seq
        self._seq += 1
        return Event("response.function_call_arguments.delta", None, False, None, cached[1].render2(text, seq))

    def _ev(self, name: str, fields: dict[str, Any]) -> Event:
        data = {"type": name, **fields, "sequence_number": self._seq}
        self._seq += 1
        return Event(name, data)

    def _ev_sorted(self, name: str, fields: dict[str, Any]) -> Event:
        data: dict[str, Any] = {"type": name}
        fields = dict(fields, sequence_number=self._seq)
        for key in sorted(fields):
            data[key] = fields[key]
        self._seq += 1
        return Event(name, data)

    def response_object(
        self, status: str, *, output: list[dict[str, Any]], usage: dict[str, Any] | None,
        completed_at: int | None, incomplete_reason: str | None = None,
    ) -> dict[str, Any]:
        e = self.echo
        created = self.created if self.created is not None else int(time.time())
        return {
            "id": self.response_id,
            "object": "response",
            "created_at": created,
            "status": status,
            "background": False,
            "completed_at": completed_at,
            "content_filters": None,
            "error": None,
            "frequency_penalty": 0.0,
            "incomplete_details": {"reason": incomplete_reason} if incomplete_reason else None,
            "instructions": e["instructions"],
            "max_output_tokens": e["max_output_tokens"],
            "max_tool_calls": None,
            "model": self.model,
            "moderation": None,
            "output": output,
            "parallel_tool_calls": True,
            "presence_penalty": 0.0,
            "previous_response_id": None,
            "prompt_cache_key": e.get("prompt_cache_key"),
            "prompt_cache_retention": None,
            "reasoning": e["reasoning"],
            "safety_identifier": None,
            "service_tier": "default",
            "store": False,
            "temperature": e["temperature"],
            "text": e["text"],
            "tool_choice": e["tool_choice"],
            "tools": e["tools"],
            "top_logprobs": e["top_logprobs"],
            "top_p": e["top_p"],
            "truncation": "disabled",
            "usage": usage,
            "user": e["user"],
            "metadata": {},
        }

    # ---- stream -------------------------------------------------------------------------------

    def start(self) -> list[Event]:
        if self.created is None:
            self.created = int(time.time())
        obj = self.response_object("in_progress", output=[], usage=None, completed_at=None)
        return [self._ev("response.created", {"response": obj}), self._ev("response.in_progress", {"response": obj})]

    def _close_item(self, status: str, commentary: bool = False) -> list[Event]:
        item = self._item
        if item is None:
            return []
        self._item = None
        idx = len(self._output)
        events: list[Event] = []
        text = "".join(self._text)
        part: dict[str, Any]
        done: dict[str, Any]
        if item["type"] == "reasoning":
            part = {"type": "reasoning_text", "text": text}
            events.append(self._ev_sorted("response.reasoning_text.done", {
                "content_index": 0, "item_id": item["id"], "output_index": idx, "text": text}))
            events.append(self._ev_sorted("response.content_part.done", {
                "content_index": 0, "item_id": item["id"], "output_index": idx, "part": part}))
            done = {"type": "reasoning", "id": item["id"], "status": status, "content": [part],
                    "summary": [], "encrypted_content": item["encrypted_content"]}
        elif item["type"] == "message":
            lps = list(self._logprobs)
            part = {"type": "output_text", "annotations": [], "logprobs": lps, "text": text}
            events.append(self._ev_sorted("response.output_text.done", {
                "content_index": 0, "item_id": item["id"], "logprobs": lps, "output_index": idx, "text": text}))
            events.append(self._ev_sorted("response.content_part.done", {
                "content_index": 0, "item_id": item["id"], "output_index": idx, "part": part}))
            done = {"type": "message", "id": item["id"], "status": status, "role": "assistant",
                    "phase": "commentary" if commentary else "final_answer", "content": [part]}
        elif item["type"] == "custom_tool_call":
            custom = self._custom
            assert custom is not None
            self._custom = None
            tail = custom.finish()
            if tail:
                events.append(self._ev("response.custom_tool_call_input.delta", {
                    "delta": tail, "item_id": item["id"], "output_index": idx}))
            value = custom.value()
            events.append(self._ev("response.custom_tool_call_input.done", {
                "input": value, "item_id": item["id"], "output_index": idx}))
            done = {"type": "custom_tool_call", "id": item["id"], "status": status, "call_id": item["call_id"],
                    "name": item["name"], "input": value}
        else:
            events.append(self._ev("response.function_call_arguments.done", {
                "arguments": text, "item_id": item["id"], "output_index": idx}))
            done = {"type": "function_call", "id": item["id"], "status": status, "call_id": item["call_id"],
                    "name": item["name"], "arguments": text}
        events.append(self._ev("response.output_item.done", {"item": done, "output_index": idx}))
        self._output.append(done)
        self._text = []
        self._logprobs = []
        return events

    def _open_item(self, item: dict[str, Any], part: dict[str, Any] | None) -> list[Event]:
        self._item = item
        idx = len(self._output)
        events = [self._ev("response.output_item.added", {"item": dict(item), "output_index": idx})]
        if part is not None:
            events.append(self._ev_sorted("response.content_part.added", {
                "content_index": 0, "item_id": item["id"], "output_index": idx, "part": part}))
        return events

    def piece(self, piece: Piece) -> list[Event]:
        item = self._item
        cur = item["type"] if item is not None else None
        if type(piece) is ContentPiece and cur == "message" and self.use_templates and not piece.logprobs:
            self._text.append(piece.text)
            return [self._templated("response.output_text.delta", piece.text, item["id"], len(self._output))]  # type: ignore[index]
        idx = len(self._output)
        rid = self.response_id
        if isinstance(piece, ReasoningPiece):
            events: list[Event] = []
            if cur != "reasoning":
                events += self._close_item("completed")
                idx = len(self._output)
                item = {"type": "reasoning", "id": f"rs_{rid}_{idx}", "status": "in_progress", "content": [],
                        "summary": [], "encrypted_content": f"{rid}-{idx}"}
                events += self._open_item(item, {"type": "reasoning_text", "text": ""})
            self._text.append(piece.text)
            if self.use_templates:
                events.append(self._templated("response.reasoning_text.delta", piece.text, f"rs_{rid}_{idx}", idx))
            else:
                events.append(self._ev_sorted("response.reasoning_text.delta", {
                    "content_index": 0, "delta": piece.text, "item_id": f"rs_{rid}_{idx}", "output_index": idx}))
            return events
        if isinstance(piece, ContentPiece):
            events = []
            if cur != "message":
                events += self._close_item("completed")
                idx = len(self._output)
                item = {"type": "message", "id": f"msg_{rid}_{idx}", "status": "in_progress", "role": "assistant",
                        "phase": "final_answer", "content": []}
                events += self._open_item(item, {"type": "output_text", "annotations": [], "logprobs": [], "text": ""})
            self._text.append(piece.text)
            if self.use_templates and not piece.logprobs:
                events.append(self._templated("response.output_text.delta", piece.text, f"msg_{rid}_{idx}", idx))
                return events
            lps = [_responses_logprob(e) for e in piece.logprobs] if piece.logprobs else []
            self._logprobs.extend(lps)
            events.append(self._ev_sorted("response.output_text.delta", {
                "content_index": 0, "delta": piece.text, "item_id": f"msg_{rid}_{idx}", "logprobs": lps,
                "output_index": idx}))
            return events
        if isinstance(piece, ToolCallStart):
            events = self._close_item("completed", commentary=True)
            idx = len(self._output)
            if piece.name in self._custom_names:
                self._custom = CustomInput()
                item = {"type": "custom_tool_call", "id": f"ctc_{rid}_{idx}", "status": "in_progress",
                        "call_id": piece.call_id, "name": piece.name, "input": ""}
            else:
                item = {"type": "function_call", "id": f"fc_{rid}_{idx}", "status": "in_progress",
                        "call_id": piece.call_id, "name": piece.name, "arguments": ""}
            return events + self._open_item(item, None)
        assert isinstance(piece, ToolCallArguments)
        return self.arguments_events(piece.text)

    def finish(self, backend_reason: str, usage: Usage) -> list[Event]:
        incomplete = None
        if backend_reason == "length":
            incomplete = "max_output_tokens"
        elif backend_reason == "content_filter":
            incomplete = "content_filter"
        events = self._close_item("incomplete" if incomplete else "completed")
        obj = self.response_object(
            "incomplete" if incomplete else "completed", output=list(self._output), usage=usage.responses(),
            completed_at=int(time.time()), incomplete_reason=incomplete,
        )
        name = "response.incomplete" if incomplete else "response.completed"
        events.append(self._ev(name, {"response": obj}))
        return events

    def error(self, message: str) -> list[Event]:
        """The Responses `error` event (the `openai` SDK yields it as an event of type `error`)."""
        return [self._ev("error", {"code": "server_error", "message": message, "param": None})]


def _responses_logprob(entry: dict[str, Any]) -> dict[str, Any]:
    return {
        "token": entry["token"],
        "logprob": entry["logprob"],
        "bytes": entry["bytes"],
        "top_logprobs": [dict(t) for t in entry.get("top_logprobs", [])],
    }
