"""Proof that no instance satisfies two schemas at once, so a `oneOf` of pairwise disjoint branches is exactly
their `anyOf` (which the backend enforces; its `oneOf` it only approximates).

`disjoint(a, b, defs)` is conservative: True only when one of these holds, else False (unknown):

* the types the two admit do not meet (`type`, or the types of their `const`/`enum` values; `anyOf` the union of
  its branches', `allOf` the intersection of its members');
* both list their values (`const`/`enum`) and no value is in both;
* they meet only on objects, and some property is required by both whose schemas are disjoint (a
  discriminator: `{"kind": {"const": "a"}}` against `{"kind": {"const": "b"}}`), or is required by one and
  forbidden by the other (`properties: {p: false}`, or `additionalProperties: false` without `p` listed and
  without `patternProperties`).

`$ref`s into `defs` (the bundled root `$defs`) are followed a few levels deep.
"""

from __future__ import annotations

import json
import math
from typing import Any

_ALL = frozenset({"null", "boolean", "object", "array", "number", "string"})
_DEPTH = 6


def _resolve(s: Any, defs: dict[str, Any], depth: int) -> Any:
    while isinstance(s, dict) and isinstance(s.get("$ref"), str) and depth > 0:
        name = s["$ref"].removeprefix("#/$defs/")
        if name not in defs or len(s) != 1:
            return s
        s, depth = defs[name], depth - 1
    return s


def value_type(v: Any) -> str:
    """The JSON type of a decoded value ("integer" counted as "number")."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int | float):
        return "number"
    if isinstance(v, str):
        return "string"
    return "array" if isinstance(v, list) else "object"


def _values(s: Any) -> list[Any] | None:
    if not isinstance(s, dict):
        return None
    if "const" in s:
        return [s["const"]]
    return s["enum"] if isinstance(s.get("enum"), list) else None


def types_of(s: Any, defs: dict[str, Any], depth: int = _DEPTH) -> frozenset[str]:
    """A superset of the JSON types `s` admits ("integer" counted as "number")."""
    s = _resolve(s, defs, depth)
    if s is False:
        return frozenset()
    if not isinstance(s, dict) or depth <= 0:
        return _ALL
    out = set(_ALL)
    t = s.get("type")
    if isinstance(t, str | list):
        ts = {t} if isinstance(t, str) else set(t)
        out &= {"number" if x == "integer" else x for x in ts if isinstance(x, str)}
    vals = _values(s)
    if vals is not None:
        out &= {value_type(v) for v in vals}
    for k in ("anyOf", "oneOf"):
        if isinstance(s.get(k), list) and s[k]:
            out &= set().union(*[types_of(b, defs, depth - 1) for b in s[k]])
    for m in s.get("allOf") or []:
        out &= types_of(m, defs, depth - 1)
    if "$ref" in s and len(s) > 1:
        out &= types_of({"$ref": s["$ref"]}, defs, depth - 1)
    return frozenset(out)


def _key(v: Any) -> str:
    """Equal exactly when JSON Schema calls the values equal (1 and 1.0 are; true and 1 are not)."""
    def canon(x: Any) -> Any:
        if isinstance(x, bool) or x is None or isinstance(x, str):
            return x
        if isinstance(x, int | float):
            return ["n", int(x)] if isinstance(x, int) or (math.isfinite(x) and x.is_integer()) else ["n", x]
        if isinstance(x, list):
            return [canon(y) for y in x]
        if isinstance(x, dict):
            return {k: canon(y) for k, y in x.items()}
        return x

    return json.dumps(canon(v), sort_keys=True)


def _props(s: dict[str, Any], defs: dict[str, Any], depth: int) -> tuple[set[str], dict[str, Any], bool]:
    """(required names, property schemas, closed: keys outside `properties` forbidden), from `s` and its allOf."""
    req = set(s.get("required") or []) if isinstance(s.get("required"), list) else set()
    props = dict(s.get("properties") or {}) if isinstance(s.get("properties"), dict) else {}
    closed = s.get("additionalProperties") is False and not s.get("patternProperties")
    for m in s.get("allOf") or []:
        m = _resolve(m, defs, depth)
        if isinstance(m, dict):
            r, p, _ = _props(m, defs, depth - 1) if depth > 0 else (set(), {}, False)
            req |= r
            for k, v in p.items():
                props.setdefault(k, v)  # one member's schema is enough to prove a discriminator
    return req, props, closed


def _forbids(props: dict[str, Any], closed: bool, name: str) -> bool:
    return props.get(name) is False or (closed and name not in props)


def disjoint(a: Any, b: Any, defs: dict[str, Any], depth: int = _DEPTH) -> bool:
    """True when no instance satisfies both `a` and `b` (see the module docstring); False when unknown."""
    if depth <= 0:
        return False
    a, b = _resolve(a, defs, depth), _resolve(b, defs, depth)
    if a is False or b is False:
        return True
    if not isinstance(a, dict) or not isinstance(b, dict):
        return False
    common = types_of(a, defs, depth) & types_of(b, defs, depth)
    if not common:
        return True
    va, vb = _values(a), _values(b)
    if va is not None and vb is not None and not {_key(x) for x in va} & {_key(x) for x in vb}:
        return True
    if common != {"object"}:
        return False
    ra, pa, ca = _props(a, defs, depth)
    rb, pb, cb = _props(b, defs, depth)
    for name in ra & rb:
        if name in pa and name in pb and disjoint(pa[name], pb[name], defs, depth - 1):
            return True
    return any(_forbids(pb, cb, n) for n in ra) or any(_forbids(pa, ca, n) for n in rb)


def pairwise_disjoint(branches: list[Any], defs: dict[str, Any]) -> bool:
    return all(disjoint(branches[i], branches[j], defs) for i in range(len(branches))
               for j in range(i + 1, len(branches)))
