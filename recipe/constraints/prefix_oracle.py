"""Where a JSON text stops being the start of any valid instance: the first character a rule proves dead.

A prefix `t[:i]` is *viable* for a schema when some instance the schema accepts has a JSON text that starts
with it (any whitespace, escapes and key order; no duplicate keys). For an invalid text t, f(t) is the
length of its longest viable prefix: the mask must block t at or before character f(t) (its first invalid
character). f is undecidable in general; `PrefixOracle.first_dead(t)` returns an index U where one of the
rules below proves `t[:U+1]` not viable, so f(t) <= U (U = len(t): the text cannot end there), or None.

Every rule reads only *mandatory conjuncts*: schemas that every value at the current path must satisfy in
any valid instance. The root is one; from a conjunct, `properties[k]`, each matching `patternProperties`
entry, else `additionalProperties`; `prefixItems[j]` / `items` (tuple `items` and `additionalItems` read in
2020-12 spelling); a `$ref` target (alone up to draft 07, whose `$ref` hides its siblings); each `allOf`
branch. Keywords that choose (`anyOf`, `oneOf`, `if`, `not`, `dependent*`) are ignored, and so is a
subschema with its own `$id` (another base URI) and a `$ref` that does not resolve: a rule can miss a dead
prefix, never invent one. The rules:

* value start: the character's JSON type (`"`, `{`, `[`, t/f, n, `-` or digit) is outside a conjunct's
  `type` or the types of its `enum`/`const` values, or the conjunct is `false`;
* a complete value (a string's closing quote, `}`, `]`, a literal's last letter, the character after a
  number, or the end of the text) that a conjunct rejects (`jsonschema`, the validator and format checker
  the oracle uses);
* inside a string value: a character beyond a conjunct's `maxLength`; text (with no backslash) that no
  `enum`/`const` string's JSON spelling starts with; decoded text that no extension can make match a
  conjunct's `pattern` (the `regex` package's partial matching, which reads patterns as `re` does);
* an object key under `additionalProperties: false` whose text so far (no backslash) starts no `properties`
  name's spelling and can match no `patternProperties` pattern; a key beyond `maxProperties`;
* an array item beyond `maxItems`, or beyond a tuple that admits no more items.

A backslash inside a string is never dead except beyond `maxLength` (an escape may spell any character).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jsonschema
import regex

from recipe.constraints.disjoint import value_type
from recipe.constraints.drafts import draft_of, upgrade

_KIND = {'"': "string", "{": "object", "[": "array", "t": "boolean", "f": "boolean", "n": "null"}
_JSON_TYPES = frozenset({"string", "object", "array", "boolean", "null", "number", "integer"})
_REGEX_TIMEOUT_S = 0.05
_NUMBER = re.compile(r"-?(0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?")


class _Dead(Exception):
    def __init__(self, at: int, rule: str) -> None:
        self.at, self.rule = at, rule


@dataclass(frozen=True)
class Dead:
    """`t[:at+1]` is not viable (`at == len(t)`: t cannot end); `rule` names the rule that proved it."""

    at: int
    rule: str


def _kind_allowed(kind: str, types: set[str]) -> bool:
    return kind in types or (kind == "number" and "integer" in types)


@functools.lru_cache(maxsize=1024)
def _partial(pattern: str) -> Any:
    """The pattern compiled by `regex` where `re` reads it too (else None: no claim)."""
    try:
        re.compile(pattern)
        return regex.compile(pattern)
    except (re.error, regex.error, TypeError, ValueError, OverflowError, RecursionError):
        return None


def _can_match(pattern: str, text: str) -> bool:
    """Some extension of `text` contains a match of `pattern` (True when unsure)."""
    rx = _partial(pattern)
    if rx is None:
        return True
    try:
        return rx.search(text, partial=True, timeout=_REGEX_TIMEOUT_S) is not None
    except (TimeoutError, regex.error, RecursionError):
        return True


Conjunct = tuple[Any, Any]  # (schema, its referencing resolver)


class PrefixOracle:
    """`first_dead(text)` for one schema (see the module docstring)."""

    def __init__(self, schema: Any) -> None:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        self._validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
        self._draft = draft_of(schema)
        self._id_key = "$id" if self._draft >= 6 else "id"
        self._root: list[Conjunct] = self._expand([(schema, self._validator._resolver)], top=True)

    # -------------------------------------------------------------------------------- conjuncts

    def _expand(self, nodes: list[Conjunct], *, top: bool = False) -> list[Conjunct]:
        out: list[Conjunct] = []
        seen: set[tuple[int, str]] = set()
        stack = [(n, r, top) for n, r in reversed(nodes)]
        while stack and len(out) < 64:
            node, res, is_top = stack.pop()
            if node is False:
                out.append((False, res))
                continue
            if not isinstance(node, dict):
                continue
            if not is_top and isinstance(node.get(self._id_key), str):
                continue  # another base URI: no claim
            mark = (id(node), str(getattr(res, "_base_uri", "")))
            if mark in seen:
                continue
            seen.add(mark)
            ref = node.get("$ref")
            if isinstance(ref, str):
                try:
                    got = res.lookup(ref)
                except Exception:  # unresolvable: no claim from it
                    got = None
                if got is not None:
                    stack.append((got.contents, got.resolver, False))
                if self._draft <= 7:
                    continue
            out.append((node, res))
            branches = node.get("allOf")
            if isinstance(branches, list):
                stack.extend((b, res, False) for b in reversed(branches))
        return out

    def _property(self, conj: list[Conjunct], key: str) -> list[Conjunct]:
        kids: list[Conjunct] = []
        for node, res in conj:
            if not isinstance(node, dict):
                continue
            matched = False
            props = node.get("properties")
            if isinstance(props, dict) and key in props:
                kids.append((props[key], res))
                matched = True
            pats = node.get("patternProperties")
            if isinstance(pats, dict):
                for p, sub in pats.items():
                    try:
                        hit = re.search(p, key) is not None
                    except (re.error, TypeError):
                        matched = True  # unknown: additionalProperties may not apply
                        continue
                    if hit:
                        kids.append((sub, res))
                        matched = True
            if not matched and "additionalProperties" in node:
                kids.append((node["additionalProperties"], res))
        return self._expand(kids)

    def _item(self, conj: list[Conjunct], j: int) -> list[Conjunct]:
        kids: list[Conjunct] = []
        for node, res in conj:
            if not isinstance(node, dict):
                continue
            up = upgrade(node, self._draft)
            prefix = up.get("prefixItems")
            if isinstance(prefix, list) and j < len(prefix):
                kids.append((prefix[j], res))
            elif "items" in up and not isinstance(up["items"], list):
                kids.append((up["items"], res))
        return self._expand(kids)

    # ------------------------------------------------------------------------------------ rules

    def _fails(self, conj: list[Conjunct], value: Any) -> bool:
        for node, res in conj:
            if node is False:
                return True
            if node is True:
                continue
            try:
                if not self._validator.evolve(schema=node, _resolver=res).is_valid(value):
                    return True
            except Exception:  # a schema the validator cannot apply: no claim
                continue
        return False

    def _start(self, conj: list[Conjunct], ch: str, at: int) -> None:
        kind = _KIND.get(ch, "number")
        for node, _ in conj:
            if node is False:
                raise _Dead(at, "false schema")
            t = node.get("type")
            types = {t} if isinstance(t, str) else set(t) if isinstance(t, list) else None
            if types is not None and types <= _JSON_TYPES and not _kind_allowed(kind, types):
                raise _Dead(at, "type")
            for key in ("enum", "const"):
                if key not in node:
                    continue
                vals = node[key] if key == "enum" else [node[key]]
                if isinstance(vals, list) and not _kind_allowed(kind, {value_type(v) for v in vals}):
                    raise _Dead(at, key)

    @staticmethod
    def _spellings(conj: list[Conjunct], kinds: tuple[type, ...]) -> list[list[str]]:
        """Per conjunct with an `enum`/`const`: the JSON spellings of its values of `kinds`."""
        out = []
        for node, _ in conj:
            for key in ("enum", "const"):
                if key in node:
                    vals = node[key] if key == "enum" else [node[key]]
                    if isinstance(vals, list):
                        out.append([json.dumps(v, ensure_ascii=False) for v in vals
                                    if isinstance(v, kinds)])
        return out

    # ---------------------------------------------------------------------------------- parsing

    def first_dead(self, text: str) -> Dead | None:
        """The first index some rule proves dead (see the module docstring), or None."""
        self._t = text
        try:
            end = self._value(0, self._root)
            if end != len(text) and not text[end].isspace():
                return Dead(end, "trailing text")
        except _Dead as d:
            return Dead(d.at, d.rule)
        except (IndexError, ValueError, RecursionError):
            return None  # not a JSON text the canonical serialiser writes: no claim
        return None

    def _value(self, i: int, conj: list[Conjunct]) -> int:
        t = self._t
        ch = t[i]
        self._start(conj, ch, i)
        parse = {'"': self._string, "{": self._object, "[": self._array}.get(ch)
        if parse is not None:
            end = parse(i, conj)
            if self._fails(conj, json.loads(t[i:end])):
                raise _Dead(end - 1, "value")  # the closing quote, brace or bracket
            return end
        for lit in ("true", "false", "null"):
            if t.startswith(lit, i):
                sp = self._spellings(conj, (bool, type(None)))
                for k in range(1, len(lit) + 1):
                    if any(not any(s.startswith(lit[:k]) for s in group) for group in sp):
                        raise _Dead(i + k - 1, "enum")
                if self._fails(conj, json.loads(lit)):
                    raise _Dead(i + len(lit) - 1, "value")
                return i + len(lit)
        m = _NUMBER.match(t, i)
        if m is None or m.end() == i or t[m.end():m.end() + 1] in (".", "e", "E"):
            raise ValueError("not JSON")  # (a `.` or exponent the pattern did not take: an unfinished number)
        if self._fails(conj, json.loads(m.group())):
            raise _Dead(m.end(), "value")  # the number is complete only at the character after it
        return m.end()

    def _string(self, i: int, conj: list[Conjunct]) -> int:
        """Index after the closing quote; the in-string rules at each character."""
        t = self._t
        max_len = _least(conj, "maxLength")
        patterns = [n["pattern"] for n, _ in conj if isinstance(n.get("pattern"), str)]
        spell = self._spellings(conj, (str,))
        chars, decoded, raw_plain, counting = 0, [], True, True
        k = i + 1
        while True:
            ch = t[k]
            if ch == '"':
                return k + 1
            chars += 1
            if counting and max_len is not None and chars > max_len:
                raise _Dead(k, "maxLength")
            if ch == "\\":
                raw_plain = False
                esc = t[k + 1]
                if esc == "u":
                    code = int(t[k + 2:k + 6], 16)
                    if 0xD800 <= code <= 0xDFFF:
                        counting = False  # a surrogate pair is one character: stop counting
                        patterns = []
                    decoded.append(chr(code))
                    last = k + 5
                else:
                    decoded.append(json.loads(f'"\\{esc}"'))
                    last = k + 1
            else:
                decoded.append(ch)
                last = k
                if raw_plain and spell:
                    so_far = t[i:k + 1]
                    if any(not any(s.startswith(so_far) for s in group) for group in spell):
                        raise _Dead(k, "enum")
            if patterns:
                s = "".join(decoded)
                for p in patterns:
                    if not _can_match(p, s):
                        raise _Dead(last, "pattern")
            k = last + 1

    def _object(self, i: int, conj: list[Conjunct]) -> int:
        t = self._t
        closed = [n for n, _ in conj if isinstance(n, dict) and n.get("additionalProperties") is False]

        def member(k: int, _: int) -> int:
            key_end = self._key(k, closed)
            if t[key_end] != ":":
                raise ValueError("not JSON")
            return self._value(key_end + 1, self._property(conj, json.loads(t[k:key_end])))

        return self._members(i, "}", _least(conj, "maxProperties"), "maxProperties", member)

    def _key(self, i: int, closed: list[dict[str, Any]]) -> int:
        t = self._t
        for node in closed:
            if not node.get("properties") and not node.get("patternProperties"):
                raise _Dead(i, "additionalProperties")  # no key at all: its opening quote is dead
        k = i + 1
        plain = True
        while True:
            ch = t[k]
            if ch == "\\":
                plain = False
                k += 6 if t[k + 1] == "u" else 2
                continue
            if plain and closed:
                so_far = t[i:k + 1]
                inner = so_far[1:-1] if ch == '"' else so_far[1:]
                for node in closed:
                    props, pats = _mapping(node, "properties"), _mapping(node, "patternProperties")
                    if any(json.dumps(p, ensure_ascii=False).startswith(so_far) for p in props):
                        continue
                    if ch == '"':
                        if any(_matches(p, inner) for p in pats):
                            continue
                    elif any(_can_match(p, inner) for p in pats):
                        continue
                    raise _Dead(k, "additionalProperties")
            if ch == '"':
                return k + 1
            k += 1

    def _array(self, i: int, conj: list[Conjunct]) -> int:
        limit = _least(conj, "maxItems")
        for n, _ in conj:
            up = upgrade(n, self._draft) if isinstance(n, dict) else {}
            if up.get("items") is False:
                tup = len(up["prefixItems"]) if isinstance(up.get("prefixItems"), list) else 0
                limit = tup if limit is None else min(limit, tup)
        return self._members(i, "]", limit, "maxItems", lambda k, j: self._value(k, self._item(conj, j)))

    def _members(self, i: int, close: str, limit: int | None, rule: str, member: Callable[[int, int], int]) -> int:
        """Index after the object or array at `i`; `member(k, j)` parses member j at k and returns its end.
        A member beyond `limit` is dead at its first character, or at the comma before it."""
        t = self._t
        k, j = i + 1, 0
        if t[k] == close:
            return k + 1
        while True:
            if limit is not None and j >= limit:
                raise _Dead(k if j == 0 else k - 1, rule)
            k = member(k, j)
            j += 1
            if t[k] == close:
                return k + 1
            if t[k] != ",":
                raise ValueError("not JSON")
            k += 1


def _mapping(node: dict[str, Any], key: str) -> dict[str, Any]:
    got = node.get(key)
    return got if isinstance(got, dict) else {}


def _least(conj: list[Conjunct], key: str) -> int | None:
    """The smallest integer `key` (maxLength, maxItems, ...) among the conjuncts, None when none sets one."""
    bounds = [n[key] for n, _ in conj if isinstance(n, dict) and isinstance(n.get(key), int)
              and not isinstance(n.get(key), bool)]
    return min(bounds, default=None)


def _matches(pattern: str, key: str) -> bool:
    try:
        return re.search(pattern, key) is not None
    except (re.error, TypeError):
        return True
