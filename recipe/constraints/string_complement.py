"""A regex for "any string except these": the complement of a finite set of strings, for negating a string
`enum`/`const` (so `if: {properties: {kind: {const: "a"}}}` has an exact negation, see `normalize.negate`).

`not_in(strings)` walks the set's trie: a string is outside the set when, after some member's prefix, it ends
at a node that is not a member, or takes a character no child of that node starts with (anything may follow).
The regex is anchored, in the syntax both the backend (Rust `regex`) and Python's `re` read.
"""

from __future__ import annotations

from typing import Any

MAX_CHARS = 16384  # the regex's length; past it the negation is left undone (None)
_ANY = r"[\s\S]"


def _escape(c: str) -> str:
    return "\\" + c if c.isascii() and not c.isalnum() and c not in " _" else c


def _escape_in_class(c: str) -> str:
    return "\\" + c if c in "\\]^-[&~" or (c.isascii() and not c.isalnum() and c != " ") else c


def _trie(strings: list[str]) -> dict[str, Any]:
    root: dict[str, Any] = {}
    for s in strings:
        node = root
        for c in s:
            node = node.setdefault(c, {})
        node[""] = True  # member marker: "" is never a character key
    return root


def not_in(strings: list[str]) -> str | None:
    """An anchored regex matching exactly the strings not in `strings`; None past `MAX_CHARS`.

    Flat (one alternation, no nesting: backends cap regex nesting depth): one alternative per trie node and
    way out, the node's prefix written out in each."""
    root = _trie(sorted(set(strings)))
    alts: list[str] = []
    size = 0
    stack: list[tuple[str, dict[str, Any]]] = [("", root)]
    while stack:
        prefix, node = stack.pop()
        kids = sorted(k for k in node if k != "")
        if "" not in node:
            alts.append(prefix)
        if kids:
            alts.append(prefix + "[^" + "".join(_escape_in_class(c) for c in kids) + "]" + _ANY + "*")
            stack.extend((prefix + _escape(c), node[c]) for c in reversed(kids))
        else:
            alts.append(prefix + _ANY + "+")
        size += len(alts[-1])
        if size > MAX_CHARS:
            return None
    return "^(?:" + "|".join(alts) + ")$"
