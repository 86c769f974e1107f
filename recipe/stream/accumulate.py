"""Accumulate protocol events into the complete (non-stream) response of each API.

`StreamProcessor.response()` is defined as this accumulation of the events it emitted, so a complete
response and the stream of the same output can never disagree.
"""

from __future__ import annotations

from typing import Any

import orjson

from recipe.stream.sse import Event


def accumulate_chat(events: list[Event], *, created: int) -> dict[str, Any]:
    """The `chat.completion` body of a chunk stream (one or more choices, by `index`)."""
    head: dict[str, Any] = {}
    choices: dict[int, dict[str, Any]] = {}
    usage: dict[str, Any] | None = None
    for ev in events:
        if ev.done or "choices" not in ev.data:
            continue
        data = ev.data
        if not head:
            head = {"id": data["id"], "model": data["model"]}
        head["system_fingerprint"] = data["system_fingerprint"]
        if data.get("usage") is not None:
            usage = data["usage"]
        for ch in data["choices"]:
            st = choices.setdefault(ch["index"], {"content": [], "reasoning": None, "calls": {}, "lp": None,
                                                    "finish": None, "reasoning_key": None})
            delta = ch["delta"]
            if delta.get("content") is not None:
                st["content"].append(delta["content"])
            for key in ("reasoning_content", "reasoning"):
                # the message has reasoning once a delta carried a reasoning string (even "")
                value = delta.get(key)
                if value is not None and st["reasoning_key"] in (None, key):
                    st["reasoning_key"] = key
                    if st["reasoning"] is None:
                        st["reasoning"] = []
                    st["reasoning"].append(value)
            for call in delta.get("tool_calls") or []:
                c = st["calls"].setdefault(call["index"], {"index": call["index"], "id": None, "type": "function",
                                                            "function": {"name": "", "arguments": ""}})
                if "id" in call:
                    c["id"] = call["id"]
                    c["function"]["name"] = call["function"]["name"]
                c["function"]["arguments"] += call["function"].get("arguments", "")
            if ch.get("logprobs") is not None:
                if st["lp"] is None:
                    st["lp"] = {}
                for key, entries in ch["logprobs"].items():
                    st["lp"].setdefault(key, []).extend(entries or [])
            if ch.get("finish_reason") is not None:
                st["finish"] = ch["finish_reason"]
    out_choices = []
    for index in sorted(choices):
        st = choices[index]
        message: dict[str, Any] = {"role": "assistant", "content": "".join(st["content"])}
        if st["reasoning"] is not None:
            message[st["reasoning_key"]] = "".join(st["reasoning"])
        if st["calls"]:
            message["tool_calls"] = [st["calls"][i] for i in sorted(st["calls"])]
        lp = st["lp"]
        if lp is not None:  # `content` first, then `reasoning_content`, as the reference orders them
            lp = {k: lp[k] for k in sorted(lp, key=lambda k: k != "content")}
        out_choices.append({"index": index, "message": message, "logprobs": lp, "finish_reason": st["finish"]})
    return {
        "id": head.get("id"),
        "object": "chat.completion",
        "created": created,
        "model": head.get("model"),
        "choices": out_choices,
        "usage": usage,
        "system_fingerprint": head.get("system_fingerprint"),
    }


def _parse_tool_input(text: str) -> Any:
    try:
        value = orjson.loads(text) if text else {}
    except orjson.JSONDecodeError:
        return {}
    return value


def accumulate_messages(events: list[Event]) -> dict[str, Any]:
    """The Messages body of an event stream (tool inputs parsed; unparseable partial input → `{}`)."""
    message: dict[str, Any] = {}
    blocks: list[dict[str, Any]] = []
    partial: dict[int, list[str]] = {}
    for ev in events:
        data = ev.data
        kind = data.get("type")
        if kind == "message_start":
            message = dict(data["message"])
        elif kind == "content_block_start":
            blocks.append(dict(data["content_block"]))
        elif kind == "content_block_delta":
            block = blocks[data["index"]]
            delta = data["delta"]
            dk = delta["type"]
            if dk == "text_delta":
                block["text"] += delta["text"]
            elif dk == "thinking_delta":
                block["thinking"] += delta["thinking"]
            elif dk == "signature_delta":
                block["signature"] += delta["signature"]
            elif dk == "input_json_delta":
                partial.setdefault(data["index"], []).append(delta["partial_json"])
        elif kind == "content_block_stop":
            i = data["index"]
            if blocks[i]["type"] == "tool_use":
                blocks[i]["input"] = _parse_tool_input("".join(partial.get(i, [])))
        elif kind == "message_delta":
            message["stop_reason"] = data["delta"]["stop_reason"]
            message["stop_sequence"] = data["delta"]["stop_sequence"]
            message["usage"] = data["usage"]
    message["content"] = blocks
    return message


def accumulate_responses(events: list[Event]) -> dict[str, Any]:
    """The Responses body: the terminal event's response object (built from the done items)."""
    final: dict[str, Any] | None = None
    latest: dict[str, Any] | None = None
    for ev in events:
        data = ev.data
        if data.get("type") in ("response.completed", "response.incomplete", "response.failed"):
            final = data["response"]
        elif "response" in data:
            latest = data["response"]
    body = final if final is not None else latest or {}
    return orjson.loads(orjson.dumps(body))  # a copy: callers may add fields without touching the events
