"""A minimal DFA over bytes for the regexes of llguidance's JSON string formats and simple anchored patterns.

`string_dfa(regex)` parses the Rust-regex subset those regexes use (literals, escapes of punctuation,
classes with ranges, `(...)`, `(?:...)`, `(?P<name>...)`, `|`, `* + ? {n} {n,} {n,m}`), builds the
subset-construction DFA and minimises it, so two prefixes reach the same state exactly when the same
suffixes complete them (the same residual language). It answers only for regexes whose every byte is
printable ASCII other than `"` and `\\`: inside a JSON string llguidance's `JsonQuote` leaves such bytes
as they are, so the string's text is the regex's language byte for byte. Anything else raises
`Unsupported` (the caller then reuses nothing).

`pattern_dfa(pattern)` does the same for a JSON Schema `pattern` of the form `^X$` (llguidance anchors it;
`\\d` and `\\w` are ASCII there, as in llguidance's `regex_to_lark(pattern, "dw")`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

_PRINTABLE = frozenset(range(0x20, 0x7F)) - {0x22, 0x5C}  # bytes that stand for themselves in a JSON string
_LITERAL_ESCAPES = frozenset(".-[]?#^$()*+{}|/\\&~ ")  # `\x` meaning the character x
_DIGIT = frozenset(range(0x30, 0x3A))
_WORD = _DIGIT | frozenset(range(0x41, 0x5B)) | frozenset(range(0x61, 0x7B)) | {0x5F}
_MAX_STATES = 4096


class Unsupported(ValueError):
    """The regex is outside the subset, or its language has bytes a JSON string would escape."""


# --------------------------------------------------------------------------------------- parser → NFA
# NFA: states are ints; `eps[s]` epsilon targets, `edges[s]` (byteset, target) pairs


class _Nfa:
    def __init__(self) -> None:
        self.eps: list[list[int]] = []
        self.edges: list[list[tuple[frozenset[int], int]]] = []

    def state(self) -> int:
        self.eps.append([])
        self.edges.append([])
        if len(self.eps) > 200_000:
            raise Unsupported("regex too large")
        return len(self.eps) - 1


# AST nodes: ("set", bytes) | ("cat", [nodes]) | ("alt", [nodes]) | ("rep", node, lo, hi or None) | ("empty",)


class _Parser:
    def __init__(self, text: str, *, ascii_classes: bool) -> None:
        self.s = text
        self.i = 0
        self.ascii_classes = ascii_classes

    def peek(self) -> str | None:
        return self.s[self.i] if self.i < len(self.s) else None

    def take(self) -> str:
        if self.i >= len(self.s):
            raise Unsupported("unexpected end of regex")
        c = self.s[self.i]
        self.i += 1
        return c

    def parse(self) -> tuple:
        node = self.alt()
        if self.i != len(self.s):
            raise Unsupported(f"unexpected {self.s[self.i]!r} at {self.i}")
        return node

    def alt(self) -> tuple:
        branches = [self.cat()]
        while self.peek() == "|":
            self.i += 1
            branches.append(self.cat())
        return branches[0] if len(branches) == 1 else ("alt", branches)

    def cat(self) -> tuple:
        items = []
        while self.peek() not in (None, "|", ")"):
            items.append(self.repeat(self.atom()))
        return ("cat", items) if items else ("empty",)

    def repeat(self, node: tuple) -> tuple:
        while True:
            c = self.peek()
            if c == "*":
                lo, hi = 0, None
            elif c == "+":
                lo, hi = 1, None
            elif c == "?":
                lo, hi = 0, 1
            elif c == "{":
                end = self.s.find("}", self.i)
                body = self.s[self.i + 1 : end] if end > 0 else ""
                parts = body.split(",")
                if not body or len(parts) > 2 or not all(p.isdigit() for p in parts if p) or not parts[0]:
                    raise Unsupported(f"bad repetition at {self.i}")
                lo = int(parts[0])
                hi = lo if len(parts) == 1 else (int(parts[1]) if parts[1] else None)
                if hi is not None and (hi < lo or hi > 1000):
                    raise Unsupported("repetition bound")
                self.i = end
            else:
                return node
            self.i += 1
            if self.peek() in ("?", "+"):
                raise Unsupported("lazy or possessive repetition")
            node = ("rep", node, lo, hi)

    def atom(self) -> tuple:
        c = self.take()
        if c == "(":
            if self.s.startswith("?:", self.i):
                self.i += 2
            elif self.s.startswith("?P<", self.i):
                end = self.s.find(">", self.i)
                if end < 0:
                    raise Unsupported("unterminated group name")
                self.i = end + 1
            elif self.peek() == "?":
                raise Unsupported("group flags")
            node = self.alt()
            if self.take() != ")":
                raise Unsupported("unbalanced parenthesis")
            return node
        if c == "[":
            return ("set", self.char_class())
        if c == "\\":
            return ("set", self.escape(in_class=False))
        if c in ".^$":
            raise Unsupported(f"{c!r} outside a class")
        if c in "*+?{)":
            raise Unsupported(f"unexpected {c!r}")
        return ("set", _char(c))

    def escape(self, *, in_class: bool) -> frozenset[int]:
        c = self.take()
        if c in _LITERAL_ESCAPES:
            return frozenset(c.encode())
        if self.ascii_classes and c == "d":
            return _DIGIT
        if self.ascii_classes and c == "w":
            return _WORD
        raise Unsupported(f"escape \\{c}")

    def char_class(self) -> frozenset[int]:
        if self.peek() == "^":
            raise Unsupported("negated class")  # its complement holds bytes a JSON string escapes
        out: set[int] = set()
        first = True
        while True:
            c = self.take()
            if c == "]" and not first:
                return frozenset(out)
            first = False
            if c == "[":
                raise Unsupported("nested class")
            lo_set = self.escape(in_class=True) if c == "\\" else _char(c)
            if self.peek() == "-" and self.s[self.i + 1 : self.i + 2] not in ("]", ""):
                self.i += 1
                d = self.take()
                hi_set = self.escape(in_class=True) if d == "\\" else _char(d)
                if len(lo_set) != 1 or len(hi_set) != 1:
                    raise Unsupported("range over a class")
                a, b = min(lo_set), min(hi_set)
                if b < a:
                    raise Unsupported("reversed range")
                out.update(range(a, b + 1))
            else:
                out.update(lo_set)


def _char(c: str) -> frozenset[int]:
    b = c.encode()
    if len(b) != 1:
        raise Unsupported("non-ASCII character")
    return frozenset(b)


def _build(nfa: _Nfa, node: tuple, start: int, end: int) -> None:
    kind = node[0]
    if kind == "empty":
        nfa.eps[start].append(end)
    elif kind == "set":
        nfa.edges[start].append((node[1], end))
    elif kind == "cat":
        cur = start
        for i, item in enumerate(node[1]):
            nxt = end if i == len(node[1]) - 1 else nfa.state()
            _build(nfa, item, cur, nxt)
            cur = nxt
    elif kind == "alt":
        for branch in node[1]:
            _build(nfa, branch, start, end)
    else:  # rep
        _, inner, lo, hi = node
        cur = start
        for _ in range(lo):
            nxt = nfa.state()
            _build(nfa, inner, cur, nxt)
            cur = nxt
        if hi is None:
            loop = nfa.state()
            nfa.eps[cur].append(loop)
            body_end = nfa.state()
            _build(nfa, inner, loop, body_end)
            nfa.eps[body_end].append(loop)
            nfa.eps[loop].append(end)
        else:
            nfa.eps[cur].append(end)
            for _ in range(hi - lo):
                nxt = nfa.state()
                _build(nfa, inner, cur, nxt)
                nfa.eps[nxt].append(end)
                cur = nxt


# --------------------------------------------------------------------------------------- DFA


@dataclass(frozen=True, eq=False)
class ByteDfa:
    """Minimal DFA: `step(q, byte)` is the next state or -1 (no completion left). State 0 is the start;
    every other state can still reach an accepting one. `classes[b]` groups bytes the DFA treats alike.
    Compared and hashed by identity (`string_dfa` and `pattern_dfa` return one object per regex)."""

    classes: bytes
    table: tuple[tuple[int, ...], ...]  # [state][class] -> state or -1
    accepting: frozenset[int]

    def step(self, q: int, b: int) -> int:
        return self.table[q][self.classes[b]] if q >= 0 else -1

    def run(self, q: int, data: bytes) -> int:
        table, classes = self.table, self.classes
        for b in data:
            if q < 0:
                return -1
            q = table[q][classes[b]]
        return q

    @property
    def size(self) -> int:
        return len(self.table)


def _dfa(node: tuple) -> ByteDfa:
    nfa = _Nfa()
    start, end = nfa.state(), nfa.state()
    _build(nfa, node, start, end)
    sets = {s for edges in nfa.edges for s, _ in edges}
    alphabet = frozenset().union(*sets) if sets else frozenset()
    if not alphabet <= _PRINTABLE:
        raise Unsupported("bytes a JSON string would escape")
    # byte classes: bytes in exactly the same sets behave alike; class 0 is "in no set"
    signature: dict[tuple[int, ...], int] = {(): 0}
    classes = bytearray(256)
    ordered = sorted(sets, key=lambda s: sorted(s))
    for b in range(256):
        sig = tuple(i for i, s in enumerate(ordered) if b in s)
        classes[b] = signature.setdefault(sig, len(signature))
    n_classes = len(signature)
    rep = [0] * n_classes
    for b in range(255, -1, -1):
        rep[classes[b]] = b

    def closure(states: frozenset[int]) -> frozenset[int]:
        seen = set(states)
        stack = list(states)
        while stack:
            for t in nfa.eps[stack.pop()]:
                if t not in seen:
                    seen.add(t)
                    stack.append(t)
        return frozenset(seen)

    first = closure(frozenset({start}))
    index = {first: 0}
    order = [first]
    rows: list[list[int]] = []
    while len(rows) < len(order):
        cur = order[len(rows)]
        row = []
        for c in range(n_classes):
            b = rep[c]
            nxt = frozenset(t for s in cur for bs, t in nfa.edges[s] if b in bs)
            if not nxt:
                row.append(-1)
                continue
            nxt = closure(nxt)
            if nxt not in index:
                if len(order) >= _MAX_STATES:
                    raise Unsupported("too many DFA states")
                index[nxt] = len(order)
                order.append(nxt)
            row.append(index[nxt])
        rows.append(row)
    accepting = {i for i, s in enumerate(order) if end in s}
    return _minimise(bytes(classes), rows, accepting)


def _minimise(classes: bytes, rows: list[list[int]], accepting: set[int]) -> ByteDfa:
    n = len(rows)
    # drop states that cannot reach acceptance (they behave as -1)
    back: list[set[int]] = [set() for _ in range(n)]
    for q, row in enumerate(rows):
        for t in row:
            if t >= 0:
                back[t].add(q)
    live = set(accepting)
    stack = list(accepting)
    while stack:
        for p in back[stack.pop()]:
            if p not in live:
                live.add(p)
                stack.append(p)
    if 0 not in live:
        raise Unsupported("empty language")
    rows = [[t if t in live else -1 for t in row] for row in rows]
    # Moore refinement over the live states
    block: dict[int, int] = {q: int(q in accepting) for q in live}
    while True:
        sig = {q: (block[q], tuple(block[t] if t >= 0 else -1 for t in rows[q])) for q in live}
        ids: dict[object, int] = {}
        new = {q: ids.setdefault(sig[q], len(ids)) for q in sorted(live)}
        if len(ids) == len(set(block.values())):
            block = new
            break
        block = new
    # renumber with the start state as 0, in BFS order
    order = {block[0]: 0}
    queue = [0]
    rep_of: dict[int, int] = {block[0]: 0}
    while queue:
        q = queue.pop(0)
        for t in rows[q]:
            if t >= 0 and block[t] not in order:
                order[block[t]] = len(order)
                rep_of[block[t]] = t
                queue.append(t)
    table: list[tuple[int, ...]] = [()] * len(order)
    for b, num in order.items():
        q = rep_of[b]
        table[num] = tuple(order[block[t]] if t >= 0 else -1 for t in rows[q])
    acc = frozenset(order[block[q]] for q in accepting if q in live)
    return ByteDfa(classes, tuple(table), acc)


@functools.lru_cache(maxsize=256)
def string_dfa(regex: str) -> ByteDfa:
    """The minimal DFA of `regex` (Rust syntax subset above); raises `Unsupported`."""
    return _dfa(_Parser(regex, ascii_classes=False).parse())


@functools.lru_cache(maxsize=256)
def pattern_dfa(pattern: str) -> ByteDfa:
    """The minimal DFA of a JSON Schema `pattern` `^X$` as llguidance reads it; raises `Unsupported`."""
    if not (pattern.startswith("^") and pattern.endswith("$")) or len(pattern) < 2:
        raise Unsupported("pattern not anchored at both ends")
    inner = pattern[1:-1]
    if inner.endswith("\\") and (len(inner) - len(inner.rstrip("\\"))) % 2 == 1:
        raise Unsupported("escaped final $")
    node = _Parser(inner, ascii_classes=True).parse()
    if node[0] == "alt":
        raise Unsupported("top-level alternation binds the anchors")
    return _dfa(node)
