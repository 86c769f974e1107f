"""The standard requests the checks share. Each is sent at most once per run (the session caches it)."""

from __future__ import annotations

from typing import Any

from recipe.conformance.session import Exchange, Session

PROMPT = "Write one short sentence about the sea."
MAX_TOKENS = 24
WEATHER_TOOL_PARAMS: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "City name", "maxLength": 24}},
    "required": ["city"],
    "additionalProperties": False,
}
CITY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 24}, "country": {"type": "string", "maxLength": 24}},
    "required": ["city", "country"],
    "additionalProperties": False,
}
TOOL_PROMPT = "What is the weather in Paris? Use the tool."
JSON_PROMPT = "Name a large city and its country. Answer in JSON."


def chat_body(s: Session, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": s.model,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "seed": 1,
    }
    body.update(extra)
    return body


def messages_body(s: Session, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": s.model,
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "messages": [{"role": "user", "content": PROMPT}],
    }
    body.update(extra)
    return body


def responses_body(s: Session, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": s.model, "input": PROMPT, "max_output_tokens": MAX_TOKENS, "temperature": 0}
    body.update(extra)
    return body


def chat_tools() -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {"name": "get_weather", "description": "Current weather of a city", "parameters": WEATHER_TOOL_PARAMS},
        }
    ]


# Chat Completions ------------------------------------------------------------------------------


def chat_basic(s: Session) -> Exchange:
    return s.post("chat", chat_body(s), cache_key="chat.basic")


def chat_stream(s: Session) -> Exchange:
    return s.post("chat", chat_body(s, stream=True), cache_key="chat.stream")


def chat_stream_usage(s: Session) -> Exchange:
    body = chat_body(s, stream=True, stream_options={"include_usage": True})
    return s.post("chat", body, cache_key="chat.stream.usage")


def chat_named_tool(s: Session, stream: bool = False) -> Exchange:
    body = chat_body(
        s,
        messages=[{"role": "user", "content": TOOL_PROMPT}],
        tools=chat_tools(),
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=64,
        stream=stream,
    )
    body.pop("seed")
    return s.post("chat", body, cache_key=f"chat.tool.named.{stream}")


def chat_json_schema(s: Session) -> Exchange:
    body = chat_body(
        s,
        messages=[{"role": "user", "content": JSON_PROMPT}],
        response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": CITY_SCHEMA, "strict": True}},
        max_tokens=96,
    )
    return s.post("chat", body, cache_key="chat.json_schema")


# Messages --------------------------------------------------------------------------------------


def messages_basic(s: Session) -> Exchange:
    return s.post("messages", messages_body(s), cache_key="messages.basic")


def messages_stream(s: Session) -> Exchange:
    return s.post("messages", messages_body(s, stream=True), cache_key="messages.stream")


def messages_tool(s: Session, stream: bool = False) -> Exchange:
    body = messages_body(
        s,
        messages=[{"role": "user", "content": TOOL_PROMPT}],
        tools=[{"name": "get_weather", "description": "Current weather of a city", "input_schema": WEATHER_TOOL_PARAMS}],
        tool_choice={"type": "tool", "name": "get_weather"},
        thinking={"type": "disabled"},
        max_tokens=64,
        stream=stream,
    )
    return s.post("messages", body, cache_key=f"messages.tool.{stream}")


# Responses -------------------------------------------------------------------------------------


def responses_basic(s: Session) -> Exchange:
    return s.post("responses", responses_body(s), cache_key="responses.basic")


def responses_stream(s: Session) -> Exchange:
    return s.post("responses", responses_body(s, stream=True), cache_key="responses.stream")


def responses_tool(s: Session, stream: bool = False) -> Exchange:
    body = responses_body(
        s,
        input=TOOL_PROMPT,
        tools=[{"type": "function", "name": "get_weather", "description": "Current weather of a city",
                "parameters": WEATHER_TOOL_PARAMS, "strict": True}],
        tool_choice={"type": "function", "name": "get_weather"},
        reasoning={"effort": "none"},
        max_output_tokens=64,
        stream=stream,
    )
    return s.post("responses", body, cache_key=f"responses.tool.{stream}")


# Shared extraction -----------------------------------------------------------------------------


def chat_content(ex: Exchange) -> str | None:
    data = ex.json()
    try:
        content = data["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return None
    return content if isinstance(content, str) else None


def messages_text(ex: Exchange) -> str | None:
    data = ex.json()
    if not isinstance(data, dict) or not isinstance(data.get("content"), list):
        return None
    return "".join(b.get("text", "") for b in data["content"] if isinstance(b, dict) and b.get("type") == "text")


def responses_text(ex: Exchange) -> str | None:
    data = ex.json()
    if not isinstance(data, dict) or not isinstance(data.get("output"), list):
        return None
    parts = []
    for item in data["output"]:
        if isinstance(item, dict) and item.get("type") == "message":
            for c in item.get("content") or []:
                if isinstance(c, dict) and c.get("type") == "output_text":
                    parts.append(c.get("text", ""))
    return "".join(parts)


def pick_stop(reference: str) -> str | None:
    """A stop string the deterministic output is known to contain, past its first characters."""
    words = [w.strip(".,;:!?\"'()") for w in reference.split()]
    for w in words[2:]:
        if len(w) >= 3 and reference.find(w) >= 3:
            return w
    return None
