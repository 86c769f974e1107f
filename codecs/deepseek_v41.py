"""DeepSeek V4.1 prompt format (`DeepseekV41Flash`): spec §2.3, identical to the official deepseek-recipe 0.2.0.

Layout: BOS, a leading `<｜System｜>` block (effort preamble + first system message + tools section +
response format), then the turns with later system messages in place, then the generation suffix.
"""

from __future__ import annotations

from recipe.codecs.builder import PromptBuilder
from recipe.codecs.deepseek_template import (
    ASSISTANT,
    BOS,
    DSML,
    EOS,
    GROUNDING_TOKENS,
    IMAGE,
    LATEST_REMINDER,
    SCHEMA_FORMAT,
    SYSTEM,
    THINK_END,
    THINK_START,
    TOOLS_TAIL,
    UPDATED_TOOLS,
    USER,
    assistant_text,
    content_with_images,
    emit_pieces,
    tool_lines,
    tool_results,
    tool_results_in_call_order,
    tools_head,
)
from recipe.codecs.dsml import DsmlDialect, render_block_opener, render_calls
from recipe.codecs.prompt_json import dumps_python
from recipe.codecs.rendered import RenderedPrompt

from recipe.conversation import Conversation, Message

SPECIAL_TOKENS: tuple[str, ...] = (
    BOS, EOS, SYSTEM, USER, ASSISTANT, LATEST_REMINDER, THINK_START, THINK_END, DSML, IMAGE, *GROUNDING_TOKENS,
)  # fmt: skip

DIALECT = DsmlDialect(
    calls=" calls",
    invoke=" invoke",
    parameter=" parameter",
    dumps=dumps_python,
    blank_line_in_empty_invoke=True,
)
# Output markup read by the stream parser.
TOOL_CALLS_START = f"<{DSML} calls>"
TOOL_CALLS_END = f"</{DSML} calls>"
INVOKE_START = f"<{DSML} invoke"
INVOKE_END = f"</{DSML} invoke>"
PARAMETER_START = f"<{DSML} parameter"
PARAMETER_END = f"</{DSML} parameter>"

_PREAMBLE = "Reasoning Effort: {} (range 1-100, the higher the value, the more thorough the reasoning)\n\n"
PRE_LOW = _PREAMBLE.format(50)
PRE_HIGH = _PREAMBLE.format(75)
PRE_MAX = _PREAMBLE.format(100)
JSON_OBJECT_FORMAT = SCHEMA_FORMAT + '{"type": "json_object"}'
TOOLS_HEAD = tools_head(" calls", " invoke", " parameter")


def effort_preamble(conv: Conversation) -> str:
    if not conv.thinking_mode:
        return ""
    effort = conv.reasoning_effort
    return PRE_LOW if effort == "low" else PRE_MAX if effort == "max" else PRE_HIGH


def _updated_tools(b: PromptBuilder, m: Message) -> None:
    if m.tools:
        b.template(UPDATED_TOOLS)
        b.repeated("\n".join(tool_lines(m.tools, dumps_python)))


def _system_block(b: PromptBuilder, conv: Conversation, tools_active: bool) -> None:
    messages = conv.messages
    first = messages[0] if messages and messages[0].role == "system" else None
    preamble = effort_preamble(conv)
    has_format = conv.response_format in ("json_object", "json_schema")
    rest = tools_active or has_format or (first is not None and bool(first.tools))
    if first is None and not rest and not (preamble and messages):
        return
    b.special(SYSTEM)
    b.template(preamble)
    if first is not None:
        content_with_images(b, first)
    if tools_active:
        emit_pieces(b, TOOLS_HEAD)
        lines = tool_lines(conv.tools, dumps_python)
        if lines:
            # The list with the tail's blank line, so both of its edges are safe cuts for reuse.
            b.repeated("\n".join(lines) + TOOLS_TAIL[:2])
            b.template(TOOLS_TAIL[2:])
        else:
            b.template(TOOLS_TAIL)
    if conv.response_format == "json_object":
        b.template(JSON_OBJECT_FORMAT)
    elif conv.response_format == "json_schema":
        b.template(SCHEMA_FORMAT)
        b.repeated(dumps_python(conv.response_schema))
    if first is not None:
        _updated_tools(b, first)


def _think(b: PromptBuilder, m: Message, conv: Conversation, tools_active: bool, index: int) -> None:
    # A prefix message keeps its reasoning only when a message or a tools/format system block precedes it.
    has_format = conv.response_format in ("json_object", "json_schema")
    if conv.thinking_mode and (tools_active or (m.prefix and (index > 0 or has_format))):
        b.special(THINK_START)
        assistant_text(b, m.reasoning_content or "")
        if m.prefix and not m.content:
            return  # continuing an open reasoning block
    b.special(THINK_END)


def render(conv: Conversation) -> RenderedPrompt:
    """The V4.1 prompt of `conv` with its special ranges and image sources."""
    b = PromptBuilder()
    b.special(BOS)
    tools_active = bool(conv.tools) and conv.tool_choice != "none"
    _system_block(b, conv, tools_active)

    turns = conv.messages
    start = 1 if turns and turns[0].role == "system" else 0
    prev = ""  # kind of the previous emitted item: "user", "reminder" or ""
    last_assistant: Message | None = None
    i, n = start, len(turns)
    while i < n:
        m = turns[i]
        role = m.role
        if role == "user":
            if prev == "user":
                b.text("\n\n")
            else:
                b.special(USER)
            content_with_images(b, m)
            prev = "user"
        elif role == "tool":
            j = i
            while j < n and turns[j].role == "tool":
                j += 1
            if prev == "user":
                b.text("\n\n")
            else:
                b.special(USER)
            tool_results(b, tool_results_in_call_order(turns[i:j], last_assistant.tool_calls if last_assistant else None))
            prev = "user"
            i = j
            continue
        elif role == "latest_reminder":
            if prev != "reminder":
                b.special(LATEST_REMINDER)
                b.text(m.content)
            prev = "reminder"
        elif role == "system":
            b.special(SYSTEM)
            content_with_images(b, m)
            _updated_tools(b, m)
            prev = ""
        else:  # assistant
            b.special(ASSISTANT)
            _think(b, m, conv, tools_active, i)
            assistant_text(b, m.content)
            if m.tool_calls:  # an empty list renders nothing on V4.1 (an empty block on V4)
                render_calls(b, m.tool_calls, DIALECT)
            if not m.prefix:
                b.special(EOS)
            last_assistant = m
            prev = ""
        i += 1

    if not (n > start and turns[-1].role == "assistant" and turns[-1].prefix):
        b.special(ASSISTANT)
        b.special(THINK_START if conv.thinking_mode else THINK_END)
    if tools_active and conv.tool_choice == "required":
        render_block_opener(b, DIALECT)
    return b.build()
