"""Fixed strings and shared pieces of the DeepSeek V4 / V4.1 prompt templates (spec §2.1, §2.6, §2.8, §3.1)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from recipe.codecs.builder import PromptBuilder
from recipe.codecs.placeholders import image_placeholders

from recipe.conversation import Message, ToolCall, ToolDefinition

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"
USER = "<｜User｜>"
ASSISTANT = "<｜Assistant｜>"
SYSTEM = "<｜System｜>"
LATEST_REMINDER = "<｜latest_reminder｜>"
THINK_START = "<think>"
THINK_END = "</think>"
DSML = "｜DSML｜"
IMAGE = "<｜image｜>"
GROUNDING_TOKENS = (
    "<｜ref｜>",
    "<｜/ref｜>",
    "<｜box｜>",
    "<｜/box｜>",
    "<｜point｜>",
    "<｜/point｜>",
    "<｜polygon｜>",
    "<｜/polygon｜>",
)

TOOL_RESULT_OPEN = "<tool_result>"
TOOL_RESULT_CLOSE = "</tool_result>"

_TOOLS_HEAD = (
    "\n\n## Tools\n\nYou have access to a set of tools to help answer the user's question. "
    'You can invoke tools by writing a "<{D}{calls}>" block like the following:\n\n'
    "<{D}{calls}>\n"
    '<{D}{invoke} name="$TOOL_NAME">\n'
    '<{D}{parameter} name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</{D}{parameter}>\n'
    "...\n"
    "</{D}{invoke}>\n"
    '<{D}{invoke} name="$TOOL_NAME2">\n'
    "...\n"
    "</{D}{invoke}>\n"
    "</{D}{calls}>\n\n"
    'String parameters should be specified as is and set `string="true"`. For all other types '
    '(numbers, booleans, arrays, objects), pass the value in JSON format and set `string="false"`.\n\n'
    "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside "
    "<think>...</think> BEFORE any tool calls or final response.\n\n"
    "Otherwise, output directly after </think> with tool calls or final response.\n\n"
    "### Available Tool Schemas\n\n"
)
TOOLS_TAIL = (
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n"
)
UPDATED_TOOLS = "\n\n### Updated Tool Schemas\n\n"
SCHEMA_FORMAT = "\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n"

_HEAD_SPECIALS = re.compile("(" + "|".join(map(re.escape, (DSML, THINK_START, THINK_END))) + ")")
_GROUNDING = re.compile("(" + "|".join(map(re.escape, GROUNDING_TOKENS)) + ")")

Pieces = tuple[tuple[bool, str], ...]


def tools_head(calls: str, invoke: str, parameter: str) -> Pieces:
    """The tools instruction as (is_special, text) pieces: every `｜DSML｜`, `<think>`, `</think>` is special."""
    text = _TOOLS_HEAD.format(D=DSML, calls=calls, invoke=invoke, parameter=parameter)
    return tuple((i % 2 == 1, part) for i, part in enumerate(_HEAD_SPECIALS.split(text)) if part)


def emit_pieces(b: PromptBuilder, pieces: Pieces) -> None:
    b.pieces(pieces)


def tool_line(tool: ToolDefinition, dumps: Callable[[Any], str]) -> str:
    """One line of the tool list: `{"name": …, "description": …, "parameters": …}`."""
    return (
        '{"name": '
        + dumps(tool.name)
        + ', "description": '
        + dumps(tool.description or "")
        + ', "parameters": '
        + dumps(tool.parameters)
        + "}"
    )


def tool_lines(tools: Sequence[ToolDefinition], dumps: Callable[[Any], str]) -> list[str]:
    return [tool_line(t, dumps) for t in tools if not t.defer_loading]


def content_with_images(b: PromptBuilder, m: Message) -> None:
    """A message's plain content with the placeholders of its images as special ranges.

    The placeholders are those at `m.image_offsets` (set by request conversion), else the first
    `len(m.image_sources)` spellings of the placeholder; every other spelling stays plain text.
    """
    content, sources = m.content, m.image_sources
    if not sources:
        b.text(content)
        return
    b.images(sources)
    start = 0
    for at in image_placeholders(m, IMAGE):
        b.text(content[start:at])
        b.special(IMAGE)
        start = at + len(IMAGE)
    b.text(content[start:])


def assistant_text(b: PromptBuilder, text: str) -> None:
    """Assistant content or reasoning: grounding-token spellings are special, everything else plain."""
    if "<｜" not in text:
        b.text(text)
        return
    for i, part in enumerate(_GROUNDING.split(text)):
        if i % 2:
            b.special(part)
        else:
            b.text(part)


def calls_sorted_by_id(calls: Sequence[ToolCall]) -> tuple[ToolCall, ...]:
    """V4's order of one turn's calls: by call id compared as strings (code points), stable for equal ids."""
    return tuple(sorted(calls, key=_call_id))


def _call_id(call: ToolCall) -> str:
    return call.id


def tool_results_in_call_order(results: Sequence[Message], calls: Sequence[ToolCall] | None) -> list[Message]:
    """A run of tool messages sorted (stably) into the order of the rendered `calls` they answer.

    The key of a result is the position of the first call with its id; a result that answers no call
    (possible only in a directly built conversation: request conversion rejects it) takes the first
    call's key, as the reference's V4.1 renderer does. (Its V4 renderer places such results otherwise.)
    """
    if len(results) < 2 or not calls:
        return list(results)
    index: dict[str, int] = {}
    for i, call in enumerate(calls):
        index.setdefault(call.id, i)
    return sorted(results, key=lambda m: index.get(m.tool_call_id or "", 0))


def tool_results(b: PromptBuilder, results: Sequence[Message]) -> None:
    """`<tool_result>…</tool_result>` blocks joined with blank lines."""
    for i, m in enumerate(results):
        b.text("\n\n" + TOOL_RESULT_OPEN if i else TOOL_RESULT_OPEN)
        content_with_images(b, m)
        b.text(TOOL_RESULT_CLOSE)
