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


def _param(b: PromptBuilder, d: DsmlDialect, key: str, value: str, is_string: bool) -> None:
    b.text("<")
    b.special(DSML)
    b.text(f'{d.parameter} name="{key}" string="{"true" if is_string else "false"}">{value}</')
    b.special(DSML)
    b.text(d.parameter + ">")


def render_calls(b: PromptBuilder, calls: tuple[ToolCall, ...], d: DsmlDialect) -> None:
    """`"\\n\\n<｜DSML｜calls>\\n" + invokes + "</｜DSML｜calls>"`; every `｜DSML｜` is a special range."""
    b.text("\n\n<")
    b.special(DSML)
    b.text(d.calls + ">\n")
    for call in calls:
        b.text("<")
        b.special(DSML)
        b.text(f'{d.invoke} name="{call.name}">\n')
        args = parse_arguments(call.arguments)
        params: list[tuple[str, str, bool]]
        if args is None:
            params = [("arguments", call.arguments, True)]
        else:
            params = [(k, v, True) if isinstance(v, str) else (k, d.dumps(v), False) for k, v in args.items()]
        if d.blank_line_in_empty_invoke:
            for i, (key, value, is_string) in enumerate(params):
                if i:
                    b.text("\n")
                _param(b, d, key, value, is_string)
            b.text("\n</")
        else:
            for key, value, is_string in params:
                _param(b, d, key, value, is_string)
                b.text("\n")
            b.text("</")
        b.special(DSML)
        b.text(d.invoke + ">\n")
    b.text("</")
    b.special(DSML)
    b.text(d.calls + ">")


def render_block_opener(b: PromptBuilder, d: DsmlDialect) -> None:
    """The generation suffix for a required tool choice: `"\\n\\n<｜DSML｜calls>\\n"`."""
    b.text("\n\n<")
    b.special(DSML)
    b.text(d.calls + ">\n")
