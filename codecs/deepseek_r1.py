"""Prompt format of DeepSeek-R1 and its distills (DeepSeek-R1-Distill-Qwen-1.5B/7B/14B/32B, -Llama-8B/70B), as
their own chat template renders it, for conversations without tools.

`<｜begin▁of▁sentence｜>` then the system prompt as plain text (the last system message's content; the template has
no system marker), then per turn `<｜User｜>content` or `<｜Assistant｜>content<｜end▁of▁sentence｜>`, where an
assistant turn's text keeps only what follows its last `</think>` (the template drops earlier reasoning; a
message's `reasoning_content` is not rendered either); a `latest_reminder` message is plain text where it stands.
The generation prompt is `<｜Assistant｜><think>\\n`: the model's output starts inside its reasoning, which ends
at `</think>` (`STARTS_IN_THINKING`). Beyond the template: with thinking off, or when the answer is constrained
(a JSON or regex response format), the generation prompt closes an empty reasoning block
(`<｜Assistant｜><think>\\n\\n</think>\\n\\n`), so the output is the answer itself. A final assistant message with
`prefix` is continued: no end-of-sentence marker and no generation prompt (without content and with thinking on,
it continues inside `<think>\\n` and its `reasoning_content`).

Special ranges: the begin/end-of-sentence, User and Assistant markers, and the `<think>` / `</think>` the prompt
itself writes: the distills' vocabularies hold those two as added tokens (not flagged special), and their
tokenizers encode the template's text with them as single ids. Tools, tool calls and tool results raise
`ValueError`: the distills' tool markup is not supported here.
"""

from __future__ import annotations

from recipe.codecs.builder import PromptBuilder
from recipe.codecs.rendered import RenderedPrompt

from recipe.conversation import Conversation

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"
USER = "<｜User｜>"
ASSISTANT = "<｜Assistant｜>"
SPECIAL_TOKENS: tuple[str, ...] = (BOS, EOS, USER, ASSISTANT)
# Output markup read by the stream parser: the generation prompt opens the reasoning.
THINK_START: str | None = "<think>"
THINK_END: str | None = "</think>"
STARTS_IN_THINKING = True
TOOL_CALL_START: str | None = None
TOOL_CALL_END: str | None = None
GENERATION_PROMPT = "<think>\n"
# The generation prompt when the output must be the answer: an empty, closed reasoning block.
ANSWER_PROMPT = "<think>\n\n</think>\n\n"
JSON_OBJECT = "\n\nRespond with a single JSON object and nothing else."
JSON_SCHEMA = "\n\nRespond with JSON only, matching this JSON Schema:\n"
TOOLS_UNSUPPORTED = ("the DeepSeek-R1 prompt format (deepseek_r1) does not support tools: this model has no "
                     "tool-call format; send the request without tools, or with tool_choice \"none\"")
TOOL_TURNS_UNSUPPORTED = ("the DeepSeek-R1 prompt format (deepseek_r1) does not support tool calls or tool "
                          "results in the conversation")


def answer_text(content: str) -> str:
    """What the template keeps of an assistant message: the text after its last `</think>`."""
    return content.split("</think>")[-1] if "</think>" in content else content


def answers_directly(conv: Conversation) -> bool:
    """Whether the generation prompt skips the reasoning: thinking off, or a JSON/regex response format."""
    return not conv.thinking_mode or conv.response_format != "text"


def render(conv: Conversation) -> RenderedPrompt:
    """The R1 prompt of `conv`. Raises ValueError for tools, tool calls or tool results."""
    import json

    if conv.tools and conv.tool_choice != "none":
        raise ValueError(TOOLS_UNSUPPORTED)
    b = PromptBuilder()
    b.special(BOS)
    system = [m.content for m in conv.messages if m.role == "system"]
    extra = ""
    if conv.response_format == "json_object":
        extra = JSON_OBJECT
    elif conv.response_format == "json_schema":
        extra = JSON_SCHEMA + json.dumps(conv.response_schema, ensure_ascii=False)
    if system or extra:
        b.text((system[-1] if system else "") + extra)
    messages = conv.messages
    for i, m in enumerate(messages):
        if m.role == "tool" or m.tool_calls:
            raise ValueError(TOOL_TURNS_UNSUPPORTED)
        if m.role == "user":
            b.special(USER)
            b.text(m.content)
        elif m.role == "assistant":
            b.special(ASSISTANT)
            if m.prefix and i == len(messages) - 1:
                if not m.content and conv.thinking_mode:
                    b.special("<think>")
                    b.text("\n" + (m.reasoning_content or ""))
                else:
                    b.text(m.content)
                return b.build()
            b.text(answer_text(m.content))
            b.special(EOS)
        elif m.role == "latest_reminder":  # no marker of its own: plain text where it stands
            b.text(m.content)
        elif m.role != "system":
            raise ValueError(f"the deepseek_r1 prompt format has no {m.role!r} role")
    b.special(ASSISTANT)
    b.special("<think>")
    if answers_directly(conv):
        b.text("\n\n")
        b.special("</think>")
        b.text("\n\n")
    else:
        b.text("\n")
    return b.build()
