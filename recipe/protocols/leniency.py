"""What Recipe accepts from real clients where the reference (deepseek-recipe 0.2.0) rejects or ignores it.

Each rule holds unless `ConversionOptions.strict_reference` is set, which keeps the reference's behaviour.
A body that no rule touches converts exactly as the reference converts it, in either mode.

| API | field | reference | Recipe by default |
| --- | --- | --- | --- |
| Chat | `messages[].role: "developer"` | 400 unknown variant | read as `system` (OpenAI's newer name for it) |
| Chat | `max_completion_tokens` | ignored | the completion limit (the smaller one when `max_tokens` is set too) |
| Chat, Responses | `tool_choice` `required` or a named function, thinking on | 400 "Thinking mode does not support this tool_choice" | thinking off for that request |
| Messages | `tool_choice: {"type": "tool"}`, thinking on | 400, as above | thinking off for that request |
| Messages | `tool_choice: {"type": "any"}` | read as `auto` | a tool call is required (thinking off) |
| Messages | `redacted_thinking` content blocks | 400 unknown variant | dropped: their data is another provider's encrypted reasoning |
| Messages | `output_config.format` (and the older `output_format`) of type `json_schema` | ignored | the output is constrained to the schema |
| Responses | `tools[]` of type `custom` other than `apply_patch` | 400 "Unsupported custom tool" | a tool with one raw-text parameter `input` and the client's description (the grammar, if any, appended to the parameter's); its call comes back as a `custom_tool_call` |
| Responses | a custom tool's `format` of type `grammar` (`syntax` `lark` or `regex`) | ignored | the call's input is constrained by the grammar; a grammar the constraint engine cannot embed, or a `format` other than `text` / `grammar`, is a 400 |
| all | a completion limit larger than the context left (`recipe.codec.resolve_max_tokens`, as `recipe serve` calls it) | 400 | lowered to the room left; a prompt that leaves no room is still a 400 |
"""

from __future__ import annotations

from typing import Any

from recipe.errors import conversion_error
from recipe.protocols.json_syntax import load_json


def relax_body(api: str, body: bytes | str | dict[str, Any]) -> Any:
    """The body (decoded) with the spellings only Recipe accepts rewritten into the reference's; the
    caller's objects are never changed (rewritten parts are copies). Bad JSON raises as the reference's
    decoder does. A body that is not a JSON object comes back as given, for the reader's own error."""
    obj = body if isinstance(body, dict) else load_json(body)
    if not isinstance(obj, dict):
        return body
    if not isinstance(obj.get("messages"), list):
        return obj
    if api == "chat":
        messages = [_developer_as_system(m) for m in obj["messages"]]
    elif api == "messages":
        messages = [_without_redacted_thinking(m) for m in obj["messages"]]
    else:
        return obj
    if all(a is b for a, b in zip(messages, obj["messages"], strict=True)):
        return obj
    return {**obj, "messages": messages}


def _developer_as_system(message: Any) -> Any:
    if isinstance(message, dict) and message.get("role") == "developer":
        return {**message, "role": "system"}
    return message


def _without_redacted_thinking(message: Any) -> Any:
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        return message
    blocks = message["content"]
    kept = [b for b in blocks if not (isinstance(b, dict) and b.get("type") == "redacted_thinking")]
    if len(kept) == len(blocks):
        return message
    # A turn of nothing but redacted reasoning keeps an empty text, so it stays a (closed) turn.
    return {**message, "content": kept or [{"type": "text", "text": ""}]}


CUSTOM_TOOL_SYNTAXES = ("lark", "regex")


def custom_tool_grammar(tool: dict[str, Any], index: int) -> dict[str, Any] | None:
    """A Responses custom tool's grammar as the tool-call constraint carries it (`{"syntax", "definition",
    "parameter"}`), or None for free text (`format` absent or of type `text`); a malformed `format` is a 400."""
    fmt = tool.get("format")
    path = f"tools[{index}].format"
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or fmt.get("type") not in ("text", "grammar"):
        raise conversion_error(f"Invalid '{path}': expected an object of type 'text' or 'grammar'.")
    if fmt["type"] == "text":
        return None
    syntax = fmt.get("syntax")
    if syntax not in CUSTOM_TOOL_SYNTAXES:
        raise conversion_error(f"Invalid '{path}.syntax': expected 'lark' or 'regex', got {syntax!r}.")
    definition = fmt.get("definition")
    if not isinstance(definition, str) or not definition.strip():
        raise conversion_error(f"Invalid '{path}.definition': the {syntax} grammar must be a non-empty string.")
    return {"syntax": syntax, "definition": definition, "parameter": "input"}


def custom_tool_parameters(grammar: dict[str, Any] | None) -> dict[str, Any]:
    """The parameters a custom tool other than `apply_patch` is declared with: its raw input as `input`."""
    description = "The tool's whole input as raw text, not JSON."
    if grammar is not None:
        description += f" It must match this {grammar['syntax']} grammar:\n{grammar['definition']}"
    return {
        "type": "object",
        "additionalProperties": False,
        "properties": {"input": {"type": "string", "description": description}},
        "required": ["input"],
    }


def thinking_for_forced_tools(thinking: bool, forced: bool, strict_reference: bool) -> bool:
    """Thinking for a request whose tool choice forces a call (`forced`): DeepSeek's thinking mode cannot
    start inside a tool call, so a forced call turns thinking off (the reference rejects the request)."""
    return thinking and (strict_reference or not forced)


def completion_limit(max_tokens: int | None, max_completion_tokens: int | None) -> int | None:
    """Chat's completion limit from `max_tokens` and OpenAI's newer `max_completion_tokens`."""
    if max_completion_tokens is None:
        return max_tokens
    return max_completion_tokens if max_tokens is None else min(max_tokens, max_completion_tokens)


def messages_output_schema(obj: dict[str, Any]) -> Any:
    """The JSON Schema of a Messages body's `output_config.format` (or the beta's top-level
    `output_format`) of type `json_schema`; None when neither is given."""
    config = obj.get("output_config")
    fmt = config.get("format") if isinstance(config, dict) else None
    if fmt is None:
        fmt = obj.get("output_format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        raise conversion_error("output_config.format: the supported format is {\"type\": \"json_schema\", \"schema\": {...}}")
    schema = fmt.get("schema")
    if not isinstance(schema, dict):
        raise conversion_error("output_config.format.schema: a JSON Schema object is required")
    return schema
