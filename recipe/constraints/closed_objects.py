"""Close the objects of a tool's argument schema: `additionalProperties: false` where the schema leaves it open.

A schema that does not say `additionalProperties` allows any further key, and a small model asked for a
forced call then writes key after key and never closes the call. Closing an object keeps only outputs
the original schema accepts (a subset, never a superset), so the constraint stays sound. It is applied
only where both hold:

* the position is monotone: a smaller subschema there makes the whole schema smaller. That rules out
  `not`, `oneOf` (an instance matching two branches is invalid; closing one would make it valid), `if`,
  and the keywords that intersect subschemas on one instance (`then`/`else`, `dependentSchemas`, an `allOf`
  of several branches, a `$ref` with sibling keywords), where closing one part would forbid the other's
  keys. A schema with any of these anywhere (or `unevaluated*`, dynamic references) is returned unchanged,
  since a `$ref` could reach any of its definitions from such a position;
* the object can stay satisfiable: every `required` key is among its `properties`, `minProperties` does not
  exceed them, and no `patternProperties` or `propertyNames` decide about further keys.
"""

from __future__ import annotations

from typing import Any

_NON_MONOTONE = frozenset({"not", "oneOf", "if", "then", "else", "dependentSchemas", "dependencies",
                           "unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef"})
_ANNOTATIONS = frozenset({"$ref", "title", "description", "default", "examples", "$comment", "deprecated",
                          "readOnly", "writeOnly"})
_SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions")
_SUBSCHEMA_LISTS = ("anyOf", "prefixItems", "allOf")
_SUBSCHEMAS = ("items", "additionalItems", "contains", "additionalProperties")


def close_objects(schema: Any) -> Any:
    """A copy of `schema` with its open objects closed (see the module docstring); `schema` itself is unchanged.
    Returns `schema` as given where closing could not be shown to keep it a subset."""
    if _has_non_monotone(schema):
        return schema
    return _close(schema)


def _has_non_monotone(s: Any) -> bool:
    if isinstance(s, list):
        return any(_has_non_monotone(v) for v in s)
    if not isinstance(s, dict):
        return False
    if _NON_MONOTONE.intersection(s):
        return True
    all_of = s.get("allOf")
    if isinstance(all_of, list) and len(all_of) > 1:
        return True
    if "$ref" in s and not set(s) <= _ANNOTATIONS:
        return True
    return any(_has_non_monotone(v) for v in s.values())


def _closable(s: dict[str, Any]) -> bool:
    t = s.get("type")
    if not (t == "object" or (isinstance(t, list) and "object" in t) or "properties" in s):
        return False
    if any(k in s for k in ("additionalProperties", "patternProperties", "propertyNames", "$ref")):
        return False
    props = s.get("properties", {})
    required = s.get("required", [])
    if not isinstance(props, dict) or not isinstance(required, list):
        return False
    fits = all(isinstance(k, str) and k in props for k in required)
    least = s.get("minProperties", 0)
    return fits and isinstance(least, int) and least <= len(props)


def _close(s: Any) -> Any:
    if not isinstance(s, dict):
        return s
    out = dict(s)
    for key in _SUBSCHEMA_MAPS:
        if isinstance(s.get(key), dict):
            out[key] = {k: _close(v) for k, v in s[key].items()}
    for key in _SUBSCHEMA_LISTS:
        if isinstance(s.get(key), list):
            out[key] = [_close(v) for v in s[key]]
    for key in _SUBSCHEMAS:
        if isinstance(s.get(key), dict):
            out[key] = _close(s[key])
    if _closable(s):
        out["additionalProperties"] = False
    return out
