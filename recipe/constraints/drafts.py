"""JSON Schema drafts 04 to 2019-09 written in the draft 2020-12 spelling the mask compiler reads.

`draft_of(schema)` reads `$schema` (no `$schema`: 2020-12, as the post-generation validator assumes).
`upgrade(node, draft)` rewrites one schema object's keywords, exactly:

* tuple `items: [...]` + `additionalItems` (≤ 2019-09) → `prefixItems` + `items`;
* `dependencies` (≤ 07) → `dependentRequired` (name lists) and `dependentSchemas` (schemas);
* boolean `exclusiveMinimum`/`exclusiveMaximum` (04) → the numeric form;
* a `format` a later draft defined (`uuid` and `duration` before 2019-09, `date` and `time` in 04/06) is
  dropped: in this draft it is an unknown format, which asserts nothing (nor does `jsonschema` check it).

`KEYWORDS` are the draft 2020-12 keywords that constrain instances; anything else in a schema object
(titles, descriptions, editor extensions such as `markdownDescription`) asserts nothing and is dropped.
"""

from __future__ import annotations

from typing import Any

import jsonschema

DRAFT_ORDER = {"draft-03": 3, "draft-04": 4, "draft-06": 6, "draft-07": 7, "2019-09": 2019, "2020-12": 2020}

SCHEMA_MAPS = frozenset({"properties", "patternProperties", "dependentSchemas"})
SCHEMA_LISTS = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
SCHEMA_ONE = frozenset({"additionalProperties", "items", "contains", "propertyNames", "unevaluatedProperties",
                        "unevaluatedItems", "not", "if", "then", "else"})
ASSERTIONS = frozenset({
    "type", "enum", "const", "multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum",
    "maxLength", "minLength", "pattern", "maxItems", "minItems", "uniqueItems", "maxContains", "minContains",
    "maxProperties", "minProperties", "required", "dependentRequired", "format",
})
KEYWORDS = SCHEMA_MAPS | SCHEMA_LISTS | SCHEMA_ONE | ASSERTIONS | {"$ref"}
# format names a draft does not define among those the mask asserts (draft 03 had its own `date` and `time`)
_LATER_FORMATS = {3: frozenset({"duration", "uuid"}), 4: frozenset({"date", "time", "duration", "uuid"}),
                  6: frozenset({"date", "time", "duration", "uuid"}), 7: frozenset({"duration", "uuid"})}
# keywords of some draft that assert something but that the bundled form cannot carry
NOT_CARRIED = frozenset({"$recursiveRef", "$dynamicRef", "disallow", "extends", "divisibleBy"})


def draft_of(schema: Any) -> int:
    """The draft the post-generation validator (`jsonschema.validators.validator_for`) applies."""
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    uri = cls.META_SCHEMA.get("$schema", "")
    for name, n in DRAFT_ORDER.items():
        if name in uri:
            return n
    return 2020


def upgrade(node: dict[str, Any], draft: int) -> dict[str, Any]:
    """One schema object in 2020-12 spelling (see the module docstring); `node` is not modified."""
    if draft >= 2020:
        return node
    out = dict(node)
    items = out.get("items")
    if isinstance(items, list):
        out["prefixItems"] = items
        out.pop("items")
        extra = out.pop("additionalItems", None)
        if extra is not None:
            out["items"] = extra
    else:
        out.pop("additionalItems", None)  # without tuple items it constrains nothing
    if draft <= 7 and isinstance(out.get("dependencies"), dict):
        deps = out.pop("dependencies")
        names = {k: v for k, v in deps.items() if isinstance(v, list)}
        schemas = {k: v for k, v in deps.items() if isinstance(v, dict | bool)}
        if names:
            out["dependentRequired"] = {**out.get("dependentRequired", {}), **names}
        if schemas:
            out["dependentSchemas"] = {**out.get("dependentSchemas", {}), **schemas}
    for excl, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(out.get(excl), bool) and out.pop(excl) and bound in out:
            out[excl] = out.pop(bound)
    if out.get("format") in _LATER_FORMATS.get(draft, ()):
        out.pop("format")
    return out
