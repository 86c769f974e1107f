"""DSML markup of historical tool calls (spec §2.5), in the V4 and V4.1 spellings."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from recipe.codecs.builder import PromptBuilder
from recipe.codecs.deepseek_template import DSML
from recipe.codecs.prompt_json import parse_arguments

from recipe.conversation import ToolCall


@dataclass(frozen=True)
class DsmlDialect:
    """Block names after the `｜DSML｜` marker and the JSON writer for non-string argument values."""

    calls: str
    invoke: str
    parameter: str
    dumps: Callable[[Any], str]
    blank_line_in_empty_invoke: bool

    @property
    def block_open(self) -> str:
        """What the model writes to open a tool-call block (after the content)."""
        return f"<{DSML}{self.calls}>"

    @property
    def block_close(self) -> str:
        return f"</{DSML}{self.calls}>"


def render_calls(b: PromptBuilder, calls: tuple[ToolCall, ...], d: DsmlDialect) -> None:
    """`"\\n\\n<｜DSML｜calls>\\n" + invokes + "</｜DSML｜calls>"`; every `｜DSML｜` is a special range.

    The block is assembled as the plain parts between its `｜DSML｜` markers and appended in one
    `PromptBuilder.joined` call (a marker spelled inside a name or value stays plain text).
    """
    blank_lines = d.blank_line_in_empty_invoke
    parts = ["\n\n<"]
    cur = d.calls + ">\n"
    for call in calls:
        parts.append(cur + "<")
        cur = f'{d.invoke} name="{call.name}">\n'
        args = parse_arguments(call.arguments)
        params: list[tuple[str, str, bool]]
        if args is None:
            params = [("arguments", call.arguments, True)]
        else:
            params = [(k, v, True) if isinstance(v, str) else (k, d.dumps(v), False) for k, v in args.items()]
        for i, (key, value, is_string) in enumerate(params):
            if blank_lines and i:
                cur += "\n"
            parts.append(cur + "<")
            parts.append(f'{d.parameter} name="{key}" string="{"true" if is_string else "false"}">{value}</')
            cur = d.parameter + ">" if blank_lines else d.parameter + ">\n"
        parts.append(cur + ("\n</" if blank_lines else "</"))
        cur = d.invoke + ">\n"
    parts.append(cur + "</")
    parts.append(d.calls + ">")
    b.joined(parts, DSML)


def render_block_opener(b: PromptBuilder, d: DsmlDialect) -> None:
    """The generation suffix for a required tool choice: `"\\n\\n<｜DSML｜calls>\\n"`."""
    b.text("\n\n<")
    b.special(DSML)
    b.text(d.calls + ">\n")
