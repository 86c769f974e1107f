"""A Responses custom tool's grammar (`format: {"type": "grammar", "syntax": "lark" | "regex", "definition": …}`)
as part of the tool-call grammar: the raw text of the tool's input parameter must match it.

`embed(grammar, prefix, forbidden)` renames the client's Lark rules and terminals into a namespace (`prefix_…`
for rules, `PREFIX_…` for terminals), maps its `start` to `Embedded.start`, and brings `%import common.NAME`
in under llguidance's own `common` terminals (each imported once per grammar, `Embedded.imports`). With
`forbidden` (the DSML marker) every terminal that can hold the marker's first character is intersected with
"does not contain `forbidden` and does not end inside it", so no run of lexemes spells the marker (a subset
of the client's language: a lexeme ending in a proper prefix of the marker is refused too). Aliases
(`-> name`) are dropped: they name tree nodes, not text. `as_regex(grammar)` writes a grammar that does
not refer to itself as one regular expression, for a format whose argument is a JSON string (ChatML).

Refused with `ConstraintError` naming the feature (what cannot be embedded faithfully): `%ignore` (it would
apply to the whole tool-call markup), `%declare` / `%override` / `%extend`, imports from modules other than
`common`, templates, priorities, llguidance's own extensions (`%json`, `%regex`, `%lark`, `%llguidance`,
special tokens, `@grammar` references, lexeme attributes), and whatever llguidance refuses in the client's
text as sent.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from recipe.constraints.kinds import ConstraintError

Syntax = Literal["lark", "regex"]
SYNTAXES = ("lark", "regex")


@dataclass(frozen=True)
class ToolGrammar:
    """A custom tool's grammar: the raw text of `parameter` must match `definition`."""

    syntax: Syntax
    definition: str
    parameter: str = "input"


def read_tool_grammar(value: Any, tool: str) -> ToolGrammar:
    """The `grammar` entry of a tool in a tool-call constraint: `{"syntax", "definition", "parameter"?}`."""
    if not isinstance(value, dict):
        raise ConstraintError(f"tool {tool}: grammar must be an object with syntax and definition")
    syntax = value.get("syntax")
    definition = value.get("definition")
    parameter = value.get("parameter", "input")
    if syntax not in SYNTAXES:
        raise ConstraintError(f"tool {tool}: grammar syntax must be 'lark' or 'regex', got {syntax!r}")
    if not isinstance(definition, str) or not definition.strip():
        raise ConstraintError(f"tool {tool}: the {syntax} grammar definition must be a non-empty string")
    if not isinstance(parameter, str):
        raise ConstraintError(f"tool {tool}: grammar parameter must be a string")
    return ToolGrammar(syntax, definition, parameter)


# ----------------------------------------------------------------------------------------------------
# Lark text → statements → expression trees
# ----------------------------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"""(?P<comment>//[^\n]*)
    |(?P<nl>\r?\n)
    |(?P<ws>[ \t\f\r]+|\\\r?\n)
    |(?P<string>"(?:\\"|\\\\|[^"\n])*?"i?)
    |(?P<regex>/(?!/)(?:\\/|\\\\|[^/])*?/[imslux]*)
    |(?P<arrow>->)
    |(?P<dotdot>\.\.)
    |(?P<directive>%[A-Za-z_]+)
    |(?P<name>[_A-Za-z][_A-Za-z0-9]*)
    |(?P<number>[+-]?\d+(?:\.\d+)?)
    |(?P<punct>[:|()\[\]?*+~.,!{}&<>@#=])""",
    re.X,
)


@dataclass(frozen=True)
class _Tok:
    kind: str
    text: str


def _tokens(text: str) -> list[list[_Tok]]:
    """The grammar's logical lines (a line starting with `|` continues the one before), comments dropped."""
    lines: list[list[_Tok]] = [[]]
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ConstraintError(f"grammar: unexpected character {text[pos]!r} at offset {pos}")
        pos = m.end()
        kind = m.lastgroup or ""
        if kind == "nl":
            lines.append([])
        elif kind not in ("ws", "comment"):
            lines[-1].append(_Tok(kind, m.group()))
    joined: list[list[_Tok]] = []
    for line in lines:
        if not line:
            continue
        if line[0].text == "|" and joined:
            joined[-1].extend(line)
        else:
            joined.append(line)
    return joined


@dataclass(frozen=True)
class Lit:
    token: str  # as written, e.g. `"abc"i`


@dataclass(frozen=True)
class Range:
    low: str
    high: str


@dataclass(frozen=True)
class Re:
    token: str  # as written, e.g. `/a+/i`


@dataclass(frozen=True)
class Ref:
    name: str


@dataclass(frozen=True)
class Seq:
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Alt:
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Opt:
    item: Node


@dataclass(frozen=True)
class Rep:
    item: Node
    low: int
    high: int | None  # None: unbounded


Node = Lit | Range | Re | Ref | Seq | Alt | Opt | Rep


def _unsupported(what: str) -> ConstraintError:
    return ConstraintError(f"grammar: {what} cannot be embedded in the tool-call constraint")


class _Parser:
    """Expansions of one definition (Lark's `expansions` production)."""

    def __init__(self, toks: list[_Tok]) -> None:
        self.toks = toks
        self.i = 0

    def peek(self) -> _Tok | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self) -> _Tok:
        tok = self.peek()
        if tok is None:
            raise ConstraintError("grammar: a definition ends too early")
        self.i += 1
        return tok

    def expansions(self) -> Node:
        alts = [self.alias()]
        while (t := self.peek()) is not None and t.text == "|":
            self.i += 1
            alts.append(self.alias())
        return alts[0] if len(alts) == 1 else Alt(tuple(alts))

    def alias(self) -> Node:
        seq = self.expansion()
        if (t := self.peek()) is not None and t.kind == "arrow":
            self.i += 1
            if self.take().kind != "name":
                raise ConstraintError("grammar: `->` must be followed by an alias name")
        return seq

    def expansion(self) -> Node:
        items: list[Node] = []
        while (t := self.peek()) is not None and (t.kind in ("string", "regex", "name", "directive")
                                                  or t.text in ("(", "[", "<", "@", "~")):
            items.append(self.expr())
        return items[0] if len(items) == 1 else Seq(tuple(items))

    def expr(self) -> Node:
        atom = self.atom()
        t = self.peek()
        if t is None:
            return atom
        if t.text in ("?", "*", "+"):
            self.i += 1
            return Opt(atom) if t.text == "?" else Rep(atom, 0 if t.text == "*" else 1, None)
        if t.text == "~":
            self.i += 1
            low = self._count()
            high = low
            if (d := self.peek()) is not None and d.kind == "dotdot":
                self.i += 1
                high = self._count()
            if high < low:
                raise ConstraintError(f"grammar: repetition ~{low}..{high} has its bounds reversed")
            return Rep(atom, low, high)
        return atom

    def _count(self) -> int:
        t = self.take()
        if t.kind != "number" or not t.text.isdigit():
            raise ConstraintError(f"grammar: expected a repetition count, got {t.text!r}")
        return int(t.text)

    def atom(self) -> Node:
        t = self.take()
        if t.text in ("(", "["):
            inner = self.expansions()
            close = ")" if t.text == "(" else "]"
            if self.take().text != close:
                raise ConstraintError(f"grammar: expected {close!r}")
            return inner if t.text == "(" else Opt(inner)
        if t.kind == "string":
            if (d := self.peek()) is not None and d.kind == "dotdot":
                self.i += 1
                high = self.take()
                if high.kind != "string":
                    raise ConstraintError("grammar: a range `..` needs a string on both sides")
                return Range(t.text, high.text)
            return Lit(t.text)
        if t.kind == "regex":
            return Re(t.text)
        if t.kind == "name":
            if (d := self.peek()) is not None and d.text == "{":
                raise _unsupported(f"the template {t.text}{{…}}")
            return Ref(t.text)
        if t.kind == "directive":
            raise _unsupported(f"llguidance's {t.text} extension")
        if t.text == "<":
            raise _unsupported("a special token (<…>)")
        if t.text == "@":
            raise _unsupported("a grammar reference (@…)")
        raise ConstraintError(f"grammar: unexpected {t.text!r}")


@dataclass
class _Grammar:
    """The client's definitions: name → (is terminal, head prefix `?`/`!`, expansion)."""

    rules: dict[str, tuple[bool, str, Node]] = field(default_factory=dict)
    imports: dict[str, str] = field(default_factory=dict)  # local name -> common terminal


def is_terminal(name: str) -> bool:
    return name.lstrip("_")[:1].isupper()


def _parse(text: str) -> _Grammar:
    g = _Grammar()
    for line in _tokens(text):
        head = line[0]
        if head.kind == "directive":
            _directive(head.text, line[1:], g)
            continue
        i = 0
        flag = ""
        if head.text in ("?", "!"):
            flag, i = head.text, 1
        if i >= len(line) or line[i].kind != "name":
            raise ConstraintError(f"grammar: expected a definition, got {' '.join(t.text for t in line)[:80]!r}")
        name = line[i].text
        i += 1
        if i < len(line) and line[i].text == ".":
            raise _unsupported(f"the priority of {name} ({name}.N)")
        if i < len(line) and line[i].text == "[":
            raise _unsupported(f"the attributes of {name} ({name}[…])")
        if i < len(line) and line[i].text == "{":
            raise _unsupported(f"the template {name}{{…}}")
        if i >= len(line) or line[i].text != ":":
            raise ConstraintError(f"grammar: expected ':' after {name}")
        if name in g.rules or name in g.imports:
            raise ConstraintError(f"grammar: {name} is defined twice")
        p = _Parser(line[i + 1 :])
        body = p.expansions()
        if p.peek() is not None:
            raise ConstraintError(f"grammar: unexpected {p.peek().text!r} in the definition of {name}")  # type: ignore[union-attr]
        g.rules[name] = (is_terminal(name), flag, body)
    if "start" not in g.rules or g.rules["start"][0]:
        raise ConstraintError("grammar: no `start` rule")
    defined = set(g.rules) | set(g.imports)
    for name, (terminal, _, body) in g.rules.items():
        for ref in _refs(body):
            if ref not in defined:
                raise ConstraintError(f"grammar: {ref} is used in {name} but never defined")
            if terminal and not is_terminal(ref):
                raise ConstraintError(f"grammar: terminal {name} refers to the rule {ref}")
    return g


def _directive(name: str, rest: list[_Tok], g: _Grammar) -> None:
    if name != "%import":
        what = {"%ignore": "%ignore (it would apply to the whole tool-call markup)"}.get(name, name)
        raise _unsupported(what)
    words = [t.text for t in rest]
    if not words or not (words[0] == "common" or words[0].startswith("common")):
        raise _unsupported(f"%import from {''.join(words[:3]) or 'nowhere'} (only `common` is available)")
    # %import common.NAME [-> ALIAS] | %import common (A, B, ...)
    if len(words) >= 3 and words[1] == ".":
        target = words[2]
        alias = target
        if len(words) == 5 and words[3] == "->":
            alias = words[4]
        elif len(words) != 3:
            raise ConstraintError(f"grammar: cannot read %import {' '.join(words)}")
        pairs = [(alias, target)]
    elif len(words) >= 3 and words[1] == "(" and words[-1] == ")":
        names = [w for w in words[2:-1] if w != ","]
        pairs = [(n, n) for n in names]
    else:
        raise ConstraintError(f"grammar: cannot read %import {' '.join(words)}")
    for alias, target in pairs:
        if not is_terminal(target) or not is_terminal(alias):
            raise _unsupported(f"importing the rule {target} from common")
        if alias in g.imports or alias in g.rules:
            raise ConstraintError(f"grammar: {alias} is defined twice")
        g.imports[alias] = target


def _refs(node: Node) -> list[str]:
    if isinstance(node, Ref):
        return [node.name]
    if isinstance(node, (Seq, Alt)):
        return [r for item in node.items for r in _refs(item)]
    if isinstance(node, (Opt, Rep)):
        return _refs(node.item)
    return []


def _string_value(token: str) -> tuple[str, bool]:
    """A Lark string literal's text and whether it is case-insensitive (`"…"i`)."""
    ci = token.endswith("i")
    body = token[:-1] if ci else token
    try:
        value = ast.literal_eval(body)
    except (ValueError, SyntaxError):
        raise ConstraintError(f"grammar: cannot read the string {token}") from None
    if not isinstance(value, str):
        raise ConstraintError(f"grammar: cannot read the string {token}")
    return value, ci


# ----------------------------------------------------------------------------------------------------
# Embedding as a namespaced sub-grammar (DSML raw text)
# ----------------------------------------------------------------------------------------------------

# `common` terminals that hold only ASCII (so never the marker's first character)
_ASCII_COMMON = frozenset({
    "DIGIT", "HEXDIGIT", "INT", "SIGNED_INT", "DECIMAL", "_EXP", "FLOAT", "SIGNED_FLOAT", "NUMBER",
    "SIGNED_NUMBER", "LCASE_LETTER", "UCASE_LETTER", "LETTER", "WORD", "CNAME", "WS_INLINE", "WS", "CR", "LF",
    "NEWLINE",
})


@dataclass(frozen=True)
class Embedded:
    """Lark definitions to add to a grammar: `start` is the symbol the parameter's text matches."""

    start: str
    definitions: tuple[str, ...]
    imports: frozenset[str]  # `common` terminals to import once


def _rx_escape(s: str) -> str:
    return re.sub(r"([\\.^$|?*+()\[\]{}/\"-])", r"\\\1", s)


def forbid_regex(forbidden: str) -> str:
    """A Lark regex of the texts that contain `forbidden` or end inside it (a non-empty proper prefix)."""
    chars = [_rx_escape(c) for c in forbidden]
    tail = "(.|\\n)*"
    for c in reversed(chars[1:]):
        tail = f"({c}{tail})?"
    return f"/(.|\\n)*{chars[0]}{tail}/"


def _lark_regex_body(pattern: str) -> str:
    """`pattern` (a regex) written between Lark's `/…/`: slashes and line breaks escaped."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            out.append(pattern[i : i + 2])
            i += 2
            continue
        out.append({"/": "\\/", "\n": "\\n", "\r": "\\r"}.get(c, c))
        i += 1
    return "".join(out)


class _Embedder:
    def __init__(self, g: _Grammar, prefix: str, forbidden: str | None) -> None:
        self.g = g
        self.prefix = prefix
        self.forbidden = forbidden
        self.forbid = forbid_regex(forbidden) if forbidden else ""
        self.lines: list[str] = []
        self.lifted: dict[str, str] = {}
        self._spells: dict[str, bool] = {}

    def name(self, name: str) -> str:
        return f"{self.prefix.upper()}_{name}" if is_terminal(name) else f"{self.prefix.lower()}_{name}"

    def may_spell(self, node: Node, seen: frozenset[str] = frozenset()) -> bool:
        """Whether a terminal expression can hold the forbidden marker's first character."""
        if not self.forbidden:
            return False
        c = self.forbidden[0]
        if isinstance(node, Lit):
            value, ci = _string_value(node.token)
            return c in value or (ci and c.lower() in value.lower())
        if isinstance(node, Range):
            lo, _ = _string_value(node.low)
            hi, _ = _string_value(node.high)
            return len(lo) == 1 and len(hi) == 1 and lo <= c <= hi
        if isinstance(node, Re):
            return True
        if isinstance(node, Ref):
            if node.name in self.g.imports:
                return self.g.imports[node.name] not in _ASCII_COMMON
            if node.name in seen:
                return False
            if node.name not in self._spells:
                self._spells[node.name] = self.may_spell(self.g.rules[node.name][2], seen | {node.name})
            return self._spells[node.name]
        if isinstance(node, (Seq, Alt)):
            return any(self.may_spell(item, seen) for item in node.items)
        return self.may_spell(node.item, seen)

    def guarded(self, body: str, node: Node) -> str:
        return f"({body}) & ~{self.forbid}" if self.may_spell(node) else body

    def lift(self, token: str, node: Node) -> str:
        """An inline terminal of a rule, as a guarded named terminal when it may spell the marker."""
        if not self.may_spell(node):
            return token
        if token not in self.lifted:
            name = f"{self.prefix.upper()}__L{len(self.lifted)}"
            self.lifted[token] = name
            self.lines.append(f"{name}: {self.guarded(token, node)}")
        return self.lifted[token]

    def emit(self, node: Node, in_rule: bool) -> str:
        if isinstance(node, Lit):
            return self.lift(node.token, node) if in_rule else node.token
        if isinstance(node, Range):
            text = f"{node.low}..{node.high}"
            return self.lift(text, node) if in_rule else text
        if isinstance(node, Re):
            return self.lift(node.token, node) if in_rule else node.token
        if isinstance(node, Ref):
            return self.name(node.name)
        if isinstance(node, Seq):
            return " ".join(self.emit(i, in_rule) for i in node.items) if node.items else '""'
        if isinstance(node, Alt):
            return "(" + " | ".join(self.emit(i, in_rule) for i in node.items) + ")"
        if isinstance(node, Opt):
            return f"({self.emit(node.item, in_rule)})?"
        if node.high is None:
            return f"({self.emit(node.item, in_rule)}){'*' if node.low == 0 else '+'}" if node.low <= 1 else (
                f"({self.emit(node.item, in_rule)})~{node.low} ({self.emit(node.item, in_rule)})*")
        bound = f"~{node.low}" if node.low == node.high else f"~{node.low}..{node.high}"
        return f"({self.emit(node.item, in_rule)}){bound}"

    def run(self) -> Embedded:
        for alias, target in self.g.imports.items():
            self.lines.append(f"{self.name(alias)}: {self.guarded(target, Ref(alias))}")
        for name, (terminal, flag, body) in self.g.rules.items():
            if terminal:
                self.lines.append(f"{self.name(name)}: {self.guarded(self.emit(body, False), body)}")
            else:
                self.lines.append(f"{flag}{self.name(name)}: {self.emit(body, True)}")
        return Embedded(self.name("start"), tuple(self.lines), frozenset(self.g.imports.values()))


def _check_with_llguidance(grammar: ToolGrammar) -> None:
    """llguidance's verdict on the client's grammar as sent (its messages name the client's own rules)."""
    import llguidance as llg

    try:
        if grammar.syntax == "lark":
            text = llg.LLMatcher.grammar_from_lark(grammar.definition)
        else:
            text = llg.LLMatcher.grammar_from_regex(grammar.definition)
        error = llg.LLMatcher.validate_grammar(text)
    except (ValueError, RuntimeError, TypeError) as exc:
        error = str(exc)
    if error:
        first = error.strip().splitlines()[0] if error.strip() else error
        raise ConstraintError(f"the {grammar.syntax} grammar is refused by llguidance: {first}")


def embed(grammar: ToolGrammar, prefix: str, forbidden: str | None = None) -> Embedded:
    """The client's grammar as namespaced Lark definitions (see the module docstring)."""
    if not re.fullmatch(r"[a-z][a-z0-9]*", prefix):
        raise ValueError(f"prefix must be lowercase letters and digits, got {prefix!r}")
    if grammar.syntax == "regex":
        _check_with_llguidance(grammar)
        name = f"{prefix.upper()}_START"
        body = f"/{_lark_regex_body(grammar.definition)}/"
        line = f"{name}: ({body}) & ~{forbid_regex(forbidden)}" if forbidden else f"{name}: {body}"
        return Embedded(name, (line,), frozenset())
    g = _parse(grammar.definition)
    _check_with_llguidance(grammar)
    return _Embedder(g, prefix, forbidden).run()


# ----------------------------------------------------------------------------------------------------
# One regular expression (a JSON-string argument: ChatML)
# ----------------------------------------------------------------------------------------------------

_COMMON_REGEX = {
    "DIGIT": "[0-9]", "HEXDIGIT": "[a-fA-F0-9]", "INT": "[0-9]+", "SIGNED_INT": "[+-]?[0-9]+",
    "DECIMAL": "(?:[0-9]+\\.[0-9]*|\\.[0-9]+)", "LCASE_LETTER": "[a-z]", "UCASE_LETTER": "[A-Z]",
    "LETTER": "[A-Za-z]", "WORD": "[A-Za-z]+", "CNAME": "[_A-Za-z][_A-Za-z0-9]*", "WS_INLINE": "[ \\t]+",
    "WS": "[ \\t\\f\\r\\n]+", "CR": "\\r", "LF": "\\n", "NEWLINE": "(?:\\r?\\n)+",
    "ESCAPED_STRING": '"(?:\\\\.|[^"\\\\\\n])*"',
}


_RE_CONTROL = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\f": "\\f"}


def _re_literal(value: str, in_class: bool = False) -> str:
    """`value` matched literally, escaping only what the regex dialect (Rust `regex`) treats as special."""
    special = "\\^-[]" if in_class else "\\.^$|?*+()[]{}"
    return "".join(_RE_CONTROL.get(c) or (f"\\{c}" if c in special else c) for c in value)


def _regex_of(node: Node, g: _Grammar, stack: tuple[str, ...]) -> str:
    if isinstance(node, Lit):
        value, ci = _string_value(node.token)
        text = _re_literal(value)
        return f"(?i:{text})" if ci else text
    if isinstance(node, Range):
        lo, _ = _string_value(node.low)
        hi, _ = _string_value(node.high)
        if len(lo) != 1 or len(hi) != 1:
            raise ConstraintError("grammar: a range `..` needs one character on each side")
        return f"[{_re_literal(lo, True)}-{_re_literal(hi, True)}]"
    if isinstance(node, Re):
        end = node.token.rindex("/")
        body, flags = node.token[1:end], node.token[end + 1 :]
        body = body.replace("\\/", "/")
        return f"(?{flags}:{body})" if flags else f"(?:{body})"
    if isinstance(node, Ref):
        if node.name in g.imports:
            common = g.imports[node.name]
            if common not in _COMMON_REGEX:
                raise _unsupported(f"common.{common} in a regular expression")
            return f"(?:{_COMMON_REGEX[common]})"
        if node.name in stack:
            raise ConstraintError(
                f"grammar: {node.name} refers to itself, so the grammar is not one regular expression "
                "(which a JSON-string argument, the ChatML tool format, needs)")
        return f"(?:{_regex_of(g.rules[node.name][2], g, (*stack, node.name))})"
    if isinstance(node, Seq):
        return "".join(_regex_of(i, g, stack) for i in node.items)
    if isinstance(node, Alt):
        return "(?:" + "|".join(_regex_of(i, g, stack) for i in node.items) + ")"
    if isinstance(node, Opt):
        return f"(?:{_regex_of(node.item, g, stack)})?"
    inner = f"(?:{_regex_of(node.item, g, stack)})"
    if node.high is None:
        return inner + ("*" if node.low == 0 else "+" if node.low == 1 else f"{{{node.low},}}")
    return inner + (f"{{{node.low}}}" if node.low == node.high else f"{{{node.low},{node.high}}}")


def as_regex(grammar: ToolGrammar) -> str:
    """The grammar's language as one anchored regular expression (raises for recursive grammars)."""
    _check_with_llguidance(grammar)
    if grammar.syntax == "regex":
        return f"^(?:{grammar.definition})$"
    g = _parse(grammar.definition)
    return f"^(?:{_regex_of(g.rules['start'][2], g, ('start',))})$"


def grammar_entry(grammar: ToolGrammar) -> dict[str, Any]:
    """The JSON form `read_tool_grammar` reads."""
    return {"syntax": grammar.syntax, "definition": grammar.definition, "parameter": grammar.parameter}


__all__ = ["Embedded", "ToolGrammar", "as_regex", "embed", "forbid_regex", "grammar_entry", "read_tool_grammar"]
