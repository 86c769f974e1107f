"""Tool-call markup as an llguidance Lark grammar, with each tool's arguments constrained by its schema.

Formats (the codecs' output markup):

* `dsml_v4`  — `<｜DSML｜tool_calls>` / `<｜DSML｜invoke name="…">` / `<｜DSML｜parameter name="…" string="…">`
* `dsml_v41` — the same with a space after the marker and block name `calls` (`<｜DSML｜ calls>`)
* `chatml`   — `<tool_call>{"name": …, "arguments": {…}}</tool_call>`

`required=True` (tool_choice required or a named tool): the prompt already opened the DSML block
(`"\n\n<｜DSML｜tool_calls>\n"`), so the output is one or more invokes and the block's close; for ChatML one
or more `<tool_call>` elements. `required=False` (auto): free text, optionally followed by one block.
`thinking=True`: the output may start with reasoning closed by `</think>`.

DSML parameters follow the schema's property order, required ones mandatory, no unknown names (a subset
of what the schema allows, never a superset). A parameter takes `string="true"` with raw text only when
its schema accepts every string (or is an enum of strings, then exactly those); otherwise
`string="false"` with JSON constrained by the property schema. The `｜DSML｜` marker is emitted as its
added-token id, and free text may not spell it.

A tool may carry a `grammar` (`{"syntax": "lark" | "regex", "definition", "parameter"}`: a Responses custom
tool's format, `recipe.constraints.custom_tool_grammar`): its parameter's raw text (DSML `string="true"`) is
the client's grammar embedded as a namespaced sub-grammar, the marker forbidden inside it; in ChatML the
grammar, written as one regular expression, is the JSON string's `pattern`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from recipe.constraints.custom_tool_grammar import ToolGrammar, as_regex, embed, read_tool_grammar
from recipe.constraints.kinds import ConstraintError
from recipe.constraints.normalize import normalize
from recipe.tokenizer import Tokenizer

ToolFormat = Literal["dsml_v4", "dsml_v41", "chatml"]
DSML = "｜DSML｜"
THINK_END = "</think>"
# Namespaced tools (Responses `namespace`) are named `ns::name` by the codec, as the reference names them.
_NAME_RE = re.compile(r"^[a-zA-Z0-9_.:-]{1,257}$")
_STRING_ONLY_ANNOTATIONS = {"type", "title", "description", "default", "examples", "$comment"}


@dataclass(frozen=True)
class ToolSpec:
    name: str
    parameters: dict[str, Any]
    strict: bool = False
    grammar: ToolGrammar | None = None


def parse_tools(tools: Any) -> list[ToolSpec]:
    """Chat-style (`{"type":"function","function":{…}}`) or flat (`{"name", "parameters"}`) tool list."""
    if isinstance(tools, str):
        try:
            tools = json.loads(tools)
        except json.JSONDecodeError as exc:
            raise ConstraintError(f"tool list is not JSON: {exc}") from None
    if not isinstance(tools, list) or not tools:
        raise ConstraintError("a tool_call constraint needs a non-empty list of tools")
    out: list[ToolSpec] = []
    for i, t in enumerate(tools):
        fn = t.get("function", t) if isinstance(t, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise ConstraintError(f"tools[{i}]: expected a function tool with a name")
        name = fn["name"]
        if not _NAME_RE.match(name):
            raise ConstraintError(f"tools[{i}]: invalid function name {name!r}")
        params = fn.get("parameters")
        if params is None:
            params = {"type": "object", "properties": {}}
        if not isinstance(params, dict):
            raise ConstraintError(f"tools[{i}] ({name}): parameters must be a JSON Schema object")
        grammar = read_tool_grammar(fn["grammar"], name) if fn.get("grammar") is not None else None
        if grammar is not None:
            prop = (params.get("properties") or {}).get(grammar.parameter)
            if not isinstance(prop, dict) or prop.get("type") != "string":
                raise ConstraintError(f"tools[{i}] ({name}): the grammar's parameter {grammar.parameter!r} "
                                      "must be a string property")
        out.append(ToolSpec(name, params, bool(fn.get("strict")), grammar))
    if len({t.name for t in out}) != len(out):
        raise ConstraintError("tool names must be unique")
    return out


def default_format(tokenizer: Tokenizer) -> ToolFormat:
    return "dsml_v4" if DSML in tokenizer.added_ids else "chatml"


def _lit(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


def _rx_escape(s: str) -> str:
    return re.sub(r"([\\.^$|?*+()\[\]{}/\"-])", r"\\\1", s)


class _Builder:
    def __init__(self, tokenizer: Tokenizer, fmt: ToolFormat, lenient: bool) -> None:
        self.tok = tokenizer
        self.fmt = fmt
        self.lenient = lenient
        self.rules: list[str] = []
        self.imports: set[str] = set()
        self.n = 0
        self.grammars = 0

    def special(self, spelling: str) -> str:
        if spelling not in self.tok.added_ids:
            raise ConstraintError(f"the tokenizer has no {spelling!r} token needed by the {self.fmt} tool format")
        return f"<[{self.tok.added_ids[spelling]}]>"

    def rule(self, body: str) -> str:
        self.n += 1
        name = f"r{self.n}"
        self.rules.append(f"{name}: {body}")
        return name

    def terminal(self, body: str) -> str:
        self.n += 1
        name = f"T{self.n}"
        self.rules.append(f"{name}: {body}")
        return name

    def json_of(self, schema: Any) -> str:
        s = normalize(schema).schema
        if isinstance(s, dict) and self.lenient:
            s = {**s, "x-guidance": {"lenient": True}}
        return "%json " + json.dumps(s, ensure_ascii=False)

    def no_text(self, forbidden: str, tail: str = "") -> str:
        """A lexeme of any text not containing `forbidden`, ending with `tail`."""
        return f"/(.|\\n)*{_rx_escape(tail)}/ & ~/(.|\\n)*{_rx_escape(forbidden)}(.|\\n)*/"

    # --- DSML -----------------------------------------------------------------------------------
    def dsml_param(self, key: str, schema: Any, grammar: ToolGrammar | None = None) -> str:
        d = self.special(DSML)
        sp = " " if self.fmt == "dsml_v41" else ""
        head = f'"<" {d} {_lit(sp + "parameter name=" + chr(34) + key + chr(34) + " string=")}'
        close = f'{d} {_lit(sp + "parameter>" + chr(10))}'
        if grammar is not None:  # raw text only, matching the client's grammar
            self.grammars += 1
            sub = embed(grammar, f"g{self.grammars}", DSML)
            self.rules.extend(sub.definitions)
            self.imports |= sub.imports
            return self.rule(f'{head} "\\"true\\">" {sub.start} "</" {close}')
        alts = [f'{head} "\\"false\\">" {self.json_of(schema)} "</" {close}']
        if isinstance(schema, dict):
            t = schema.get("type")
            if t == "string" and set(schema) <= _STRING_ONLY_ANNOTATIONS:
                raw = self.terminal(self.no_text(DSML, "</"))
                alts.append(f'{head} "\\"true\\">" {raw} {close}')
            elif isinstance(schema.get("enum"), list) and schema["enum"] and all(
                isinstance(v, str) for v in schema["enum"]
            ) and set(schema) <= _STRING_ONLY_ANNOTATIONS | {"enum"}:
                vals = " | ".join(_lit(v + "</") for v in schema["enum"] if DSML not in v)
                if vals:
                    alts.append(f'{head} "\\"true\\">" ({vals}) {close}')
        return self.rule(" | ".join(f"({a})" for a in alts))

    def dsml_invoke(self, tool: ToolSpec) -> str:
        d = self.special(DSML)
        sp = " " if self.fmt == "dsml_v41" else ""
        params = normalize(tool.parameters).schema
        if not isinstance(params, dict):
            raise ConstraintError(f"tool {tool.name}: parameters must be an object schema")
        props = params.get("properties") or {}
        required = set(params.get("required") or [])
        parts = []
        for key, sub in props.items():
            if '"' in key or DSML in key:
                raise ConstraintError(f"tool {tool.name}: parameter name {key!r} cannot be written in DSML")
            p = self.dsml_param(key, sub, tool.grammar if tool.grammar and tool.grammar.parameter == key else None)
            parts.append(p if key in required else f"{p}?")
        body = " ".join(parts)
        blank = ' "\\n"?' if self.fmt == "dsml_v41" else ""
        open_ = f'"<" {d} {_lit(sp + "invoke name=" + chr(34) + tool.name + chr(34) + ">" + chr(10))}'
        return self.rule(f'{open_}{blank} {body} "</" {d} {_lit(sp + "invoke>" + chr(10))}')

    def dsml(self, tools: list[ToolSpec], required: bool, thinking: bool, single: bool = False) -> str:
        d = self.special(DSML)
        block = "calls" if self.fmt == "dsml_v41" else "tool_calls"
        sp = " " if self.fmt == "dsml_v41" else ""
        invokes = " | ".join(self.dsml_invoke(t) for t in tools)
        inv = self.rule(invokes)
        close = f'"</" {d} {_lit(sp + block + ">")}'
        many = "" if single else "+"
        if required:
            body = f"{inv}{many} {close}"
        else:
            text = self.terminal(self.no_text(DSML))
            pre = self.terminal(self.no_text(DSML, "<"))
            opened = f'{d} {_lit(sp + block + ">" + chr(10))}'
            body = f"{text}? | {pre} {opened} {inv}{many} {close}"
        return self.start(body, thinking)

    # --- ChatML ---------------------------------------------------------------------------------
    def chatml(self, tools: list[ToolSpec], required: bool, thinking: bool, single: bool = False) -> str:
        branches = []
        for t in tools:
            branches.append({
                "type": "object",
                "properties": {"name": {"const": t.name}, "arguments": _with_pattern(t)},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            })
        call_json = self.json_of({"anyOf": branches} if len(branches) > 1 else branches[0])
        has_special = "<tool_call>" in self.tok.added_ids
        op = self.special("<tool_call>") if has_special else '"<tool_call>"'
        cl = self.special("</tool_call>") if "</tool_call>" in self.tok.added_ids else '"</tool_call>"'
        ws = self.terminal('/[ \\t\\n]{0,4}/')
        call = self.rule(f"{op} {ws} {call_json} {ws} {cl}")
        calls = call if single else self.rule(f"{call} ({ws} {call})*")
        if required:
            return self.start(calls, thinking)
        text = self.terminal(self.no_text("<tool_call>"))
        if has_special:
            return self.start(f"{text}? | {text}? {calls}", thinking)
        # text up to and including the first "<tool_call>" is one lexeme: the lexer is greedy
        pre = self.terminal('/(.|\\n)*<tool_call>/ & ~/(.|\\n)*<tool_call>(.|\\n)+/')
        first = self.rule(f"{pre} {ws} {call_json} {ws} {cl}")
        return self.start(f"{text}? | {first}" + ("" if single else f" ({ws} {call})*"), thinking)

    def start(self, body: str, thinking: bool) -> str:
        if thinking:
            reason = self.terminal(self.no_text(DSML))
            body = f"{reason}? {self.special(THINK_END)} ({body})"
        imports = "".join(f"%import common.{name}\n" for name in sorted(self.imports))
        return "start: " + body + "\n" + "\n".join(self.rules) + "\n" + imports


def _with_pattern(tool: ToolSpec) -> dict[str, Any]:
    """A tool's parameters with its grammar's parameter constrained by the grammar as one regex (ChatML)."""
    if tool.grammar is None:
        return tool.parameters
    props = dict(tool.parameters.get("properties") or {})
    props[tool.grammar.parameter] = {**props[tool.grammar.parameter], "pattern": as_regex(tool.grammar)}
    return {**tool.parameters, "properties": props}


def tool_call_lark(
    tools: Any,
    tokenizer: Tokenizer,
    *,
    fmt: ToolFormat | None = None,
    required: bool = False,
    thinking: bool = False,
    lenient: bool = False,
    single: bool = False,
) -> str:
    """The Lark grammar for a tool list (see the module docstring); `single` allows one call at most
    (a named tool choice, or parallel tool calls turned off), so the output ends after it."""
    specs = parse_tools(tools)
    f = fmt or default_format(tokenizer)
    b = _Builder(tokenizer, f, lenient)
    if f in ("dsml_v4", "dsml_v41"):
        return b.dsml(specs, required, thinking, single)
    if f == "chatml":
        return b.chatml(specs, required, thinking, single)
    raise ConstraintError(f"unknown tool-call format {f!r}; expected dsml_v4, dsml_v41 or chatml")
