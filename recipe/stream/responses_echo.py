"""The request settings a Responses response object reports ("echo"), read from the request body.

Fields: `instructions`, `max_output_tokens`, `temperature` and `top_p` as requested (default 1.0),
`top_logprobs` (default 0), `user`, `reasoning: {effort, summary}`, `text: {format, verbosity}`,
`tool_choice` (default `auto`) and `tools` as declared with defaults filled in.
"""

from __future__ import annotations

from typing import Any


def default_echo() -> dict[str, Any]:
    """The echo of a request that specifies nothing."""
    return responses_echo({})


def _tool(tool: dict[str, Any]) -> dict[str, Any]:
    kind = tool.get("type")
    if kind == "function":
        return {
            "type": "function",
            "name": tool.get("name"),
            "description": tool.get("description"),
            "parameters": tool.get("parameters"),
            "strict": tool.get("strict"),
        }
    if kind in ("web_search", "web_search_preview"):
        return {
            "type": kind,
            "search_context_size": tool.get("search_context_size"),
            "user_location": tool.get("user_location"),
        }
    return dict(tool)


def _text_format(fmt: Any) -> dict[str, Any]:
    """`text.format` as the reference reports it: a JSON schema format with all its fields, others by type."""
    if not isinstance(fmt, dict) or not fmt:
        return {"type": "text"}
    if fmt.get("type") == "json_schema":
        return {
            "type": "json_schema",
            "name": fmt.get("name"),
            "schema": fmt.get("schema"),
            "description": fmt.get("description"),
            "strict": fmt.get("strict"),
        }
    return {"type": fmt.get("type")}


def responses_echo(body: dict[str, Any]) -> dict[str, Any]:
    """The echo fields of the Responses request `body` (a parsed JSON object)."""
    reasoning = body.get("reasoning") or {}
    text = body.get("text") or {}
    temperature = body.get("temperature")
    top_p = body.get("top_p")
    cache_key = body.get("prompt_cache_key")
    return {
        **({"prompt_cache_key": cache_key} if isinstance(cache_key, str) else {}),
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "temperature": float(temperature) if temperature is not None else 1.0,
        "top_p": float(top_p) if top_p is not None else 1.0,
        "top_logprobs": body.get("top_logprobs") or 0,
        "user": body.get("user"),
        "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")},
        "text": {"format": _text_format(text.get("format")), "verbosity": text.get("verbosity")},
        "tool_choice": body.get("tool_choice") if body.get("tool_choice") is not None else "auto",
        "tools": [_tool(t) for t in body.get("tools") or [] if isinstance(t, dict)],
    }
