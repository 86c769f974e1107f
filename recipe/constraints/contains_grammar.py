"""`contains` / `minContains` / `maxContains` at the top of a schema, as an llguidance Lark grammar.

No backend enforces `contains` in a JSON-Schema mask; an array whose items are counted is a plain context-free
language, so Recipe writes it out: items matching the `contains` schema (M) and items that do not (N, the
exact negation, needed only for an upper bound) or any item (X) when only a lower bound applies. Each part
is an embedded `%json` schema. Non-array values take a separate `%json` branch. Applies when the array keywords
beside `contains` are at most `items` (no prefixItems, min/maxItems, unevaluatedItems); otherwise None.
"""

from __future__ import annotations

import json
from typing import Any

from recipe.constraints.normalize import merge_all, negate

_ARRAY_KEYS = {"contains", "minContains", "maxContains", "items"}
_BLOCKING = {"prefixItems", "minItems", "maxItems", "unevaluatedItems", "allOf", "anyOf", "oneOf", "not", "if",
             "$ref", "$dynamicRef"}
_TYPES = ["null", "boolean", "object", "array", "number", "string"]
_MAX_ENUMERATED = 8
WS = r"/[ \t\n\r]{1,48}/"


def _json(schema: Any, lenient: bool) -> str:
    from recipe.constraints.llguidance_backend import WHITESPACE

    if schema is True:
        schema = {}
    options: dict[str, Any] = {"whitespace_pattern": WHITESPACE}
    if lenient:
        options["lenient"] = True
    return "%json " + json.dumps({**schema, "x-guidance": options}, ensure_ascii=False)


def contains_lark(schema: Any, *, lenient: bool) -> str | None:
    """The grammar, or None when the schema has no top-level `contains` this translation covers."""
    if not isinstance(schema, dict) or "contains" not in schema or set(schema) & _BLOCKING:
        return None
    if "uniqueItems" in schema and schema["uniqueItems"] is not False:
        return None
    lo = schema.get("minContains", 1)
    hi = schema.get("maxContains")
    if not isinstance(lo, int) or (hi is not None and not isinstance(hi, int)):
        return None
    types = schema.get("type")
    tset = set(_TYPES) if types is None else ({types} if isinstance(types, str) else set(types))
    rest = {k: v for k, v in schema.items() if k not in _ARRAY_KEYS and k != "uniqueItems"}
    items = schema.get("items", True)
    contains = schema["contains"]
    rules: list[str] = [f"WS: {WS}", 'SEP: /[ \\t\\n\\r]{0,48},[ \\t\\n\\r]{0,48}/']
    alts: list[str] = []
    others = [t for t in [*_TYPES, "integer"] if t in tset and t != "array"]
    if others:
        other = merge_all([rest, {"type": others}])
        if other is not False:
            alts.append(_json(other, lenient))
    if "array" in tset and (hi is None or lo <= hi):
        m = merge_all([items, contains]) if items is not True else contains
        x = items
        if hi is None:
            seq = None if m is False else _at_least(lo)
        else:
            neg = negate(contains)
            if neg is None or hi - lo > _MAX_ENUMERATED or hi > 4 * _MAX_ENUMERATED:
                return None
            n = merge_all([items, neg]) if items is not True else neg
            seq = _between(lo, hi, m is not False, n is not False)
            rules.append(f"n_item: {_json(n, lenient)}" if n is not False else "")
        if seq is not None:
            rules.append(f"x_item: {_json(x, lenient)}" if x is not False else "")
            if m is not False:
                rules.append(f"m_item: {_json(m, lenient)}")
            body = seq if x is not False or hi is not None else None
            if body is not None:
                rules.append(f"body: {body}")
                alts.append('"[" WS? body? WS? "]"' if _allows_empty(lo) else '"[" WS? body WS? "]"')
    if not alts:
        return None
    return "start: " + " | ".join(f"({a})" for a in alts) + "\n" + "\n".join(r for r in rules if r) + "\n"


def _allows_empty(lo: int) -> bool:
    return lo == 0


def _at_least(k: int) -> str:
    """Comma-separated items with at least k matches (M) among free items (X)."""
    if k <= 0:
        return "x_item (SEP x_item)*"
    xs = "(x_item SEP)*"
    return f"{xs} m_item" + f" (SEP {xs} m_item)" * (k - 1) + " (SEP x_item)*"


def _between(lo: int, hi: int, has_m: bool, has_n: bool) -> str:
    """Items with between lo and hi matches (M) and non-matches (N) elsewhere."""
    alts = []
    ns = "(n_item SEP)*"
    for k in range(lo, hi + 1):
        if k == 0:
            if has_n:
                alts.append("n_item (SEP n_item)*")
            continue
        if not has_m:
            continue
        tail = " (SEP n_item)*" if has_n else ""
        pre = ns if has_n else ""
        alts.append(f"{pre} m_item" + f" (SEP {pre} m_item)" * (k - 1) + tail)
    return " | ".join(f"({a})" for a in alts) if alts else '"\\u0000"'
