"""Overlapping `patternProperties` at the top of a schema, as an llguidance Lark grammar.

llguidance requires the patterns to be disjoint. Recipe splits the key space into disjoint regions instead
(keys matching exactly a subset T of the patterns, via regex intersection `&` and complement `~`, which
llguidance lexemes support); a member in region T must satisfy every schema in T (allOf), a key matching
no pattern takes `additionalProperties`. Keys are plain JSON strings without escapes (a key that needs an
escape is refused: a subset, never a superset). Applies only when the object keywords are
patternProperties (2–4 patterns) and additionalProperties; otherwise None.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

from recipe.constraints.contains_grammar import _TYPES, WS, _json
from recipe.constraints.normalize import merge_all

_OBJECT_KEYS = {"patternProperties", "additionalProperties"}
_BLOCKING = {"properties", "required", "minProperties", "maxProperties", "propertyNames", "unevaluatedProperties",
             "dependentRequired", "dependentSchemas", "allOf", "anyOf", "oneOf", "not", "if", "$ref", "$dynamicRef"}
_UNSUPPORTED_REGEX = re.compile(r"\(\?|\\[1-9bBpPk]|/")
_KEY = r'"[^"\\\x00-\x1f]*"'


def _match(pattern: str) -> str | None:
    """A lexeme regex for a JSON key whose content matches `pattern` (JSON Schema: unanchored search)."""
    if _UNSUPPORTED_REGEX.search(pattern):
        return None
    body = pattern
    head = ".*"
    tail = ".*"
    if body.startswith("^"):
        body, head = body[1:], ""
    if body.endswith("$") and not body.endswith("\\$"):
        body, tail = body[:-1], ""
    if "^" in body.replace("[^", "") or "$" in body.replace("\\$", ""):
        return None
    return f'/"{head}({body}){tail}"/'


def pattern_properties_lark(schema: Any, *, lenient: bool) -> str | None:
    if not isinstance(schema, dict) or set(schema) & _BLOCKING:
        return None
    pats = schema.get("patternProperties")
    if not isinstance(pats, dict) or not 2 <= len(pats) <= 4:
        return None
    matches = {p: _match(p) for p in pats}
    if any(m is None for m in matches.values()):
        return None
    types = schema.get("type")
    tset = set(_TYPES) if types is None else ({types} if isinstance(types, str) else set(types))
    rest = {k: v for k, v in schema.items() if k not in _OBJECT_KEYS}
    additional = schema.get("additionalProperties", True)
    rules = [f"WS: {WS}", 'SEP: /[ \\t\\n\\r]{0,48},[ \\t\\n\\r]{0,48}/', 'COLON: /[ \\t\\n\\r]{0,48}:[ \\t\\n\\r]{0,48}/']
    members: list[str] = []
    names = list(pats)
    for n in range(len(names) + 1):
        for subset in itertools.combinations(names, n):
            inside = [matches[p] for p in subset]
            outside = [f"~{matches[p]}" for p in names if p not in subset]
            value = merge_all([pats[p] for p in subset]) if subset else additional
            if value is False:
                continue
            k = len(members)
            lexeme = " & ".join([f"/{_KEY}/", *inside, *outside])  # type: ignore[list-item]
            rules.append(f"KEY{k}: {lexeme}")
            rules.append(f"m{k}: KEY{k} COLON {_json(value, lenient)}")
            members.append(f"m{k}")
    alts = []
    others = [t for t in [*_TYPES, "integer"] if t in tset and t != "object"]
    if others:
        other = merge_all([rest, {"type": others}])
        if other is not False:
            alts.append(_json(other, lenient))
    if "object" in tset:
        if members:
            rules.append("member: " + " | ".join(members))
            alts.append('"{" WS? (member (SEP member)*)? WS? "}"')
        else:
            alts.append('"{" WS? "}"')
    if not alts:
        return None
    return "start: " + " | ".join(f"({a})" for a in alts) + "\n" + "\n".join(rules) + "\n"
