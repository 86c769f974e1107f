"""How many tool calls a constrained output may hold: one for a named tool choice (a function or a
Responses custom tool) or when the request
turns parallel calls off (Chat/Responses `parallel_tool_calls: false`, Responses `max_tool_calls: 1`,
Messages `disable_parallel_tool_use`), otherwise any number. The codec keeps none of these fields (the
reference ignores them), so the server reads them from the body."""

from __future__ import annotations

from typing import Any

import orjson


def single_tool_call(api: str, body: bytes | dict[str, Any]) -> bool:
    if not isinstance(body, dict):
        try:
            body = orjson.loads(body)
        except orjson.JSONDecodeError:
            return False
        if not isinstance(body, dict):
            return False
    choice = body.get("tool_choice")
    if api == "messages":
        if not isinstance(choice, dict):
            return False
        return choice.get("type") == "tool" or bool(choice.get("disable_parallel_tool_use"))
    named = isinstance(choice, dict) and choice.get("type") in ("function", "custom")
    return named or body.get("parallel_tool_calls") is False or (api == "responses" and body.get("max_tool_calls") == 1)
