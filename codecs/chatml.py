"""ChatML prompt format of SmolLM2-135M-Instruct (the demo model), tools in the Hermes/Qwen style.

`<|im_start|>role\\ncontent<|im_end|>\\n` per message, SmolLM2's default system prompt when the
conversation does not start with a system message, generation prompt `<|im_start|>assistant\\n`.
Tool-less conversations render exactly like the model's own GGUF chat template. Tools go into the
system message inside `<tools></tools>`; assistant tool calls are `<tool_call>{"name", "arguments"}</tool_call>`;
tool results are `<tool_response>` blocks in a user turn. Reasoning is not rendered (the model has none).
Only `<|im_start|>` and `<|im_end|>` are special ranges. The model reads no images: an image placeholder
(`<｜image｜>`, as V4.1-style conversion writes one per image) becomes the text `[Unsupported Image]`.
"""

from __future__ import annotations

import json
from typing import Any

from recipe.codecs.builder import PromptBuilder
from recipe.codecs.placeholders import image_placeholders
from recipe.codecs.prompt_json import parse_arguments
from recipe.codecs.rendered import RenderedPrompt

from recipe.conversation import Conversation, Message, ToolCall, ToolDefinition

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS: tuple[str, ...] = (IM_START, IM_END)
EOS = IM_END
# Output markup read by the stream parser; the model has no thinking tags.
THINK_START: str | None = None
THINK_END: str | None = None
TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"

IMAGE_PLACEHOLDER = "<｜image｜>"
UNSUPPORTED_IMAGE = "[Unsupported Image]"
DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
TOOLS_INTRO = (
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
TOOLS_OUTRO = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n'
    "</tool_call>"
)
TOOLS_REQUIRED = "\n\nYou must call at least one function."
JSON_OBJECT = "\n\nRespond with a single JSON object and nothing else."
JSON_SCHEMA = "\n\nRespond with JSON only, matching this JSON Schema:\n"


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _tool_json(tool: ToolDefinition) -> str:
    function: dict[str, Any] = {"name": tool.name}
    if tool.description:
        function["description"] = tool.description
    function["parameters"] = (
        tool.parameters if tool.parameters is not None else {"type": "object", "properties": {}}
    )
    return _dumps({"type": "function", "function": function})


def _call_json(call: ToolCall) -> str:
    args = parse_arguments(call.arguments)
    return _dumps({"name": call.name, "arguments": call.arguments if args is None else args})


def _system_additions(conv: Conversation) -> str:
    parts: list[str] = []
    tools = [t for t in conv.tools if not t.defer_loading] if conv.tool_choice != "none" else []
    if tools:
        parts.append(TOOLS_INTRO + "".join("\n" + _tool_json(t) for t in tools) + TOOLS_OUTRO)
        if conv.tool_choice == "required":
            parts.append(TOOLS_REQUIRED)
    if conv.response_format == "json_object":
        parts.append(JSON_OBJECT)
    elif conv.response_format == "json_schema":
        parts.append(JSON_SCHEMA + _dumps(conv.response_schema))
    return "".join(parts)


def _turn(b: PromptBuilder, role: str, content: str, close: bool = True) -> None:
    b.special(IM_START)
    b.text(role + "\n" + content)
    if close:
        b.special(IM_END)
        b.text("\n")


def _content(m: Message) -> str:
    """Message text with the placeholders of its images spelled `[Unsupported Image]`; a client's own
    spelling of the placeholder stays as it is."""
    if not m.image_sources:
        return m.content
    parts: list[str] = []
    start = 0
    for at in image_placeholders(m, IMAGE_PLACEHOLDER):
        parts.append(m.content[start:at])
        parts.append(UNSUPPORTED_IMAGE)
        start = at + len(IMAGE_PLACEHOLDER)
    parts.append(m.content[start:])
    return "".join(parts)


def _assistant_content(m: Message) -> str:
    calls = "\n".join(f"{TOOL_CALL_START}\n{_call_json(c)}\n{TOOL_CALL_END}" for c in m.tool_calls or ())
    if not calls:
        return m.content
    return f"{m.content}\n{calls}" if m.content else calls


def render(conv: Conversation) -> RenderedPrompt:
    """The ChatML prompt of `conv`: special ranges are the `<|im_start|>`/`<|im_end|>` markers only."""
    b = PromptBuilder()
    messages = conv.messages
    additions = _system_additions(conv)
    start = 0
    if messages and messages[0].role == "system":
        _turn(b, "system", _content(messages[0]) + additions)
        start = 1
    elif messages or additions:
        _turn(b, "system", DEFAULT_SYSTEM + additions)

    i, n = start, len(messages)
    while i < n:
        m = messages[i]
        if m.role == "tool":
            j = i
            while j < n and messages[j].role == "tool":
                j += 1
            body = "\n".join(f"<tool_response>\n{_content(t)}\n</tool_response>" for t in messages[i:j])
            _turn(b, "user", body)
            i = j
            continue
        if m.role == "assistant":
            last_prefix = m.prefix and i == n - 1
            _turn(b, "assistant", _assistant_content(m), close=not last_prefix)
        elif m.role == "latest_reminder":
            _turn(b, "system", m.content)
        else:
            _turn(b, m.role, _content(m))
        i += 1

    if not (messages and messages[-1].role == "assistant" and messages[-1].prefix):
        b.special(IM_START)
        b.text("assistant\n")
    return b.build()
