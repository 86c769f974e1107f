"""DeepSeek V4 prompt format (`DeepseekV4Pro`): spec §2.2, identical to the official deepseek-recipe 0.2.0.

Layout: BOS, then one unmarked system text (effort preamble + every system message, hoisted, + tools
section + response-format section), then the turns, then `<｜Assistant｜>` + `<think>`/`</think>`.
An assistant turn's tool calls are listed sorted by call id (compared as strings), and the results
that answer them follow in that order.
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
    THINK_END,
    THINK_START,
    TOOLS_TAIL,
    USER,
    assistant_text,
    calls_sorted_by_id,
    content_with_images,
    emit_pieces,
    tool_lines,
    tool_results,
    tool_results_in_call_order,
    tools_head,
)
from recipe.codecs.dsml import DsmlDialect, render_block_opener, render_calls
from recipe.codecs.prompt_json import dumps_v4
from recipe.codecs.rendered import RenderedPrompt

from recipe.conversation import Conversation, Message, ToolCall

SPECIAL_TOKENS: tuple[str, ...] = (
    BOS, EOS, USER, ASSISTANT, LATEST_REMINDER, THINK_START, THINK_END, DSML, IMAGE, *GROUNDING_TOKENS,
)  # fmt: skip

DIALECT = DsmlDialect(
    calls="tool_calls",
    invoke="invoke",
    parameter="parameter",
    dumps=dumps_v4,
    blank_line_in_empty_invoke=False,
)
# Output markup read by the stream parser.
TOOL_CALLS_START = f"<{DSML}tool_calls>"
TOOL_CALLS_END = f"</{DSML}tool_calls>"
INVOKE_START = f"<{DSML}invoke"
INVOKE_END = f"</{DSML}invoke>"
PARAMETER_START = f"<{DSML}parameter"
PARAMETER_END = f"</{DSML}parameter>"

PRE_HIGH = (
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root "
    "cause, rigorously stress-testing your logic against all potential paths, edge cases, and adversarial "
    "scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, considered "
    "alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n"
)
PRE_MAX = (
    "Reasoning Effort: Beyond maximum — exhaustive, relentless, and uncompromising.\n"
    "You MUST reason with the utmost depth and rigor, leaving absolutely nothing to chance: exhaustively "
    "decompose the problem into its most fundamental components, trace every causal chain to its root, and "
    "resolve the underlying cause rather than any surface symptom.\n"
    "Do not stop reasoning until you have independently verified the solution from multiple angles and are "
    "certain that no assumption remains unchecked and no error remains undiscovered.\n\n"
)
JSON_OBJECT_FORMAT = "\n\nYou are a helpful assistant designed to output JSON.\n## Response Format:\n\nReply with JSON object ONLY."
TOOLS_HEAD = tools_head("tool_calls", "invoke", "parameter")


def effort_preamble(conv: Conversation) -> str:
    if not conv.thinking_mode or conv.reasoning_effort == "low":
        return ""
    return PRE_MAX if conv.reasoning_effort == "max" else PRE_HIGH


def _system_text(b: PromptBuilder, conv: Conversation, systems: list[Message], tools_active: bool) -> None:
    b.template(effort_preamble(conv))
    first = True
    for m in systems:
        if not m.content:
            continue  # dropped with its images
        if not first:
            b.text("\n\n")
        first = False
        content_with_images(b, m)
    if tools_active:
        emit_pieces(b, TOOLS_HEAD)
        lines = tool_lines(conv.tools, dumps_v4)
        if lines:
            # The list with the tail's blank line, so both of its edges are safe cuts for reuse.
            b.repeated("\n".join(lines) + TOOLS_TAIL[:2])
            b.template(TOOLS_TAIL[2:])
        else:
            b.template(TOOLS_TAIL[1:])
    if conv.response_format == "json_object":
        b.template(JSON_OBJECT_FORMAT)
    elif conv.response_format == "json_schema":
        b.template(SCHEMA_FORMAT)
        b.repeated(dumps_v4(conv.response_schema))


def _think(b: PromptBuilder, m: Message, conv: Conversation, tools_active: bool) -> None:
    reasoning = m.reasoning_content
    if m.prefix and not m.content and conv.thinking_mode:
        # Continuing an open reasoning block: no closing tag.
        if reasoning is not None:
            b.special(THINK_START)
            assistant_text(b, reasoning)
        return
    if (tools_active or m.prefix) and reasoning is not None:
        b.special(THINK_START)
        assistant_text(b, reasoning)
    b.special(THINK_END)


def render(conv: Conversation) -> RenderedPrompt:
    """The V4 prompt of `conv` with its special ranges and image sources."""
    b = PromptBuilder()
    b.special(BOS)
    tools_active = bool(conv.tools) and conv.tool_choice != "none"
    messages = conv.messages
    _system_text(b, conv, [m for m in messages if m.role == "system"], tools_active)

    turns = [m for m in messages if m.role != "system"]
    prev_tool_results = False
    last_calls: tuple[ToolCall, ...] | None = None  # the previous assistant turn's calls, as rendered
    i, n = 0, len(turns)
    while i < n:
        m = turns[i]
        role = m.role
        if role == "user":
            # Consecutive user messages merge first; empty contents drop out of the join.
            j = i
            while j < n and turns[j].role == "user":
                j += 1
            if prev_tool_results:
                b.text("\n\n")
            else:
                b.special(USER)
            first = True
            for u in turns[i:j]:
                if u.content:
                    if not first:
                        b.text("\n\n")
                    first = False
                content_with_images(b, u)
            prev_tool_results = False
            i = j
            continue
        elif role == "tool":
            j = i
            while j < n and turns[j].role == "tool":
                j += 1
            b.special(USER)
            tool_results(b, tool_results_in_call_order(turns[i:j], last_calls))
            prev_tool_results = True
            i = j
            continue
        elif role == "latest_reminder":
            b.special(LATEST_REMINDER)
            b.text(m.content)
            prev_tool_results = False
        else:  # assistant
            b.special(ASSISTANT)
            _think(b, m, conv, tools_active)
            assistant_text(b, m.content)
            last_calls = None if m.tool_calls is None else calls_sorted_by_id(m.tool_calls)
            if last_calls is not None:  # an empty list renders an empty block on V4
                render_calls(b, last_calls, DIALECT)
            if not (m.prefix and i == n - 1):
                b.special(EOS)
            prev_tool_results = False
        i += 1

    if not (turns and turns[-1].role == "assistant" and turns[-1].prefix):
        b.special(ASSISTANT)
        b.special(THINK_START if conv.thinking_mode else THINK_END)
    if tools_active and conv.tool_choice == "required":
        render_block_opener(b, DIALECT)
    return b.build()
