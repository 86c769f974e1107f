"""Schema normalisation: Recipe's layer above the backends.

Every rewrite keeps the set of valid instances the same (or, where noted, a subset: never a superset),
so a mask built from the result is never looser than the schema:

* local `$ref` (JSON pointers, `$anchor`, `$id`-relative) inlined; recursive refs are left to the backend;
* `allOf` merged into one schema where the keywords combine exactly (types intersected, bounds tightened,
  `required` united, `enum`/`const` intersected, `properties` merged);
* `dependentRequired`, `dependentSchemas`, `if`/`then`/`else`, `not` and `oneOf` rewritten into
  `anyOf`/`allOf` of schemas the backends enforce, using an exact negation for the keywords it covers;
* `unevaluatedProperties`/`unevaluatedItems` replaced by `additionalProperties`/`items` once no applicator
  is left beside them (anyOf/oneOf are distributed first: a subset, never a superset);
* bounds checked: contradictory min/max becomes `false`.

`normalize(schema)` returns a `Normalized` with the schema and the names of the keywords it rewrote away.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from referencing import Registry, Resource
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from recipe.constraints.bundle import bundle, merge_ref_siblings
from recipe.constraints.disjoint import pairwise_disjoint
from recipe.constraints.kinds import ConstraintError
from recipe.constraints.loosen import prepare

ANNOTATIONS = frozenset({
    "title", "description", "default", "examples", "$comment", "$schema", "$id", "$anchor", "deprecated",
    "readOnly", "writeOnly", "contentEncoding", "contentMediaType", "contentSchema", "$vocabulary", "$defs",
    "definitions", "$dynamicAnchor",
})
APPLICATORS = ("allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas", "$ref", "$dynamicRef")
_TYPES = ("null", "boolean", "object", "array", "number", "string", "integer")
_MAX_BRANCHES = 64
_MAX_DISJOINT = 128  # oneOf branches checked pairwise for disjointness


@dataclass
class Normalized:
    schema: Any
    rewritten: set[str] = field(default_factory=set)
    unresolved_refs: list[str] = field(default_factory=list)
    recursive: bool = False
    negations: bool = True
    keep_defs: bool = False
    loosened: set[str] = field(default_factory=set)  # keywords the result enforces less strictly
    defs: dict[str, Any] = field(default_factory=dict, repr=False)  # the bundled `$defs`, for `disjoint` proofs


class Rewrites:
    """Off switches of the rewrites added after the differential soundness sweep; each is exact, and its test
    compares masks and verdicts with the switch off."""

    # merge `patternProperties` with the other side's `properties`/`patternProperties` when neither is closed
    merge_pattern_properties: ClassVar[bool] = True
    # bundle `$ref`s into the draft 04/06/07 metaschemas from `jsonschema_specifications`
    metaschemas: ClassVar[bool] = True
    # negate any enum/const of scalars, strings included (`_negate_values`); off: only all-null, all-number
    # and all-boolean enums
    negate_mixed_enums: ClassVar[bool] = True
    # a `oneOf` whose branches are pairwise disjoint (`disjoint.pairwise_disjoint`) as their `anyOf`
    disjoint_one_of: ClassVar[bool] = True
    # `enum`/`const` beside other keywords as the enum of the values they accept (`_enum_filtered`)
    filter_enums: ClassVar[bool] = True


class _Recursive(Exception):
    pass


def normalize(schema: Any, resources: dict[str, Any] | None = None, *, negations: bool = True,
              all_defs: bool = False) -> Normalized:
    """Normalise a JSON Schema (drafts 04 to 2020-12, read by its `$schema`). Never raises for a
    well-formed schema.

    `resources` maps URIs to schema documents that `$ref` may point to (nothing is ever fetched).
    `negations=False` skips the rewrites that negate schemas (`if`/`then`/`else`, `not`, `oneOf`), whose
    results can be much larger than the input; those keywords are then left to the backend, which
    ignores or loosens them, and are listed in `loosened`. `all_defs`: every `$ref` becomes a reference to
    a generated `$defs` entry (none inlined), which keeps a schema of many shared definitions small.
    """
    if not isinstance(schema, dict | bool):
        raise ConstraintError("a JSON Schema must be an object or a boolean")
    out = Normalized(copy.deepcopy(schema))
    out.keep_defs = "$dynamicRef" in json.dumps(schema)  # dynamic anchors must stay resolvable
    if out.keep_defs:
        try:
            inlined = _Inliner(schema, out, resources or {}).run()
        except _Recursive:
            out.recursive = True
            return out  # recursive dynamic schemas go to the backend as written
    else:
        b = bundle(schema, with_metaschemas(schema, resources), all_defs)
        inlined = b.result  # type: ignore[attr-defined]
        out.unresolved_refs = b.unresolved
        out.loosened |= b.dropped
        out.recursive = bool(b.defs)
        if b.inlined or b.defs:
            out.rewritten.add("$ref")
    text = json.dumps(inlined)
    # a failed `not`/`if` evaluates nothing, but its negation would: no negation rewrites near unevaluated*
    out.negations = negations and "unevaluatedProperties" not in text and "unevaluatedItems" not in text
    if not negations:
        out.loosened |= {k for k in ("if", "then", "else", "not", "oneOf") if f'"{k}"' in text}
    defs = inlined.pop("$defs", None) if isinstance(inlined, dict) and not out.keep_defs else None
    out.defs = defs if isinstance(defs, dict) else {}
    try:
        out.schema = _simplify(inlined, out)
        if defs:
            simple = {k: _simplify(v, out) for k, v in defs.items()}
            if isinstance(out.schema, dict):
                out.schema, dropped = merge_ref_siblings({**out.schema, "$defs": simple}, merge_all)
                out.loosened |= dropped
    except RecursionError:
        out.schema = inlined if not defs else {**inlined, "$defs": defs}
    out.schema, loosened = prepare(out.schema)
    out.loosened |= loosened
    return out


# ---------------------------------------------------------------------------------------------- $ref

# drafts whose metaschemas are plain (no `$recursiveRef`/`$dynamicRef`): a `$ref` into one can be bundled
_PLAIN_METASCHEMAS = ("http://json-schema.org/draft-04/schema", "http://json-schema.org/draft-06/schema",
                      "http://json-schema.org/draft-07/schema")
_METASCHEMA_REF = re.compile(r'"\$ref": "(https?://json-schema\.org/draft-0[467]/schema)#?[^"]*"')


def with_metaschemas(schema: Any, resources: dict[str, Any] | None) -> dict[str, Any] | None:
    """`resources` plus the draft 04/06/07 metaschemas the schema's `$ref`s name (the copies `jsonschema` itself
    validates with, from `jsonschema_specifications`), so those references resolve instead of being left to the
    backend; a resource the caller supplies under the same URI wins."""
    if not Rewrites.metaschemas:
        return resources
    found = set(_METASCHEMA_REF.findall(json.dumps(schema))) & set(_PLAIN_METASCHEMAS)
    if not found:
        return resources
    from jsonschema_specifications import REGISTRY

    return {**{uri: REGISTRY.contents(uri) for uri in sorted(found)}, **(resources or {})}


class _Inliner:
    def __init__(self, root: Any, out: Normalized, resources: dict[str, Any]) -> None:
        self.out = out
        resource = Resource.from_contents(root, default_specification=DRAFT202012)
        registry: Registry = Registry().with_resources(
            (uri, Resource.from_contents(doc, default_specification=DRAFT202012)) for uri, doc in resources.items()
        )
        self.registry = registry.with_resource(resource.id() or "", resource)
        self.root_resolver = self.registry.resolver(base_uri=resource.id() or "")
        self.root = root

    def run(self) -> Any:
        return self._walk(self.root, self.root_resolver, ())

    def _walk(self, node: Any, resolver: Any, stack: tuple[str, ...]) -> Any:
        if isinstance(node, list):
            return [self._walk(x, resolver, stack) for x in node]
        if not isinstance(node, dict):
            return node
        if isinstance(node.get("$id"), str) and node is not self.root:
            resolver = resolver.in_subresource(Resource.from_contents(node, default_specification=DRAFT202012))
        result: dict[str, Any] = {}
        for k, v in node.items():
            if k in ("$defs", "definitions", "enum", "const", "examples", "default"):
                if k not in ("$defs", "definitions") or self.out.keep_defs:
                    result[k] = v
                continue
            if k == "$ref" and isinstance(v, str):
                continue
            if k in ("properties", "patternProperties", "dependentSchemas", "$defs"):
                result[k] = {pk: self._walk(pv, resolver, stack) for pk, pv in v.items()} if isinstance(v, dict) else v
            else:
                result[k] = self._walk(v, resolver, stack)
        ref = node.get("$ref")
        if isinstance(ref, str):
            try:
                resolved = resolver.lookup(ref)
            except (Unresolvable, Exception):  # remote or broken: left for the validator
                self.out.unresolved_refs.append(ref)
                result["$ref"] = ref
                return result
            key = f"{resolved.resolver._base_uri}|{id(resolved.contents)}"
            if key in stack:
                raise _Recursive
            target = self._walk(resolved.contents, resolved.resolver, (*stack, key))
            self.out.rewritten.add("$ref")
            if not result or all(k in ANNOTATIONS for k in result):
                return target
            # keep the target adjacent to its siblings (unevaluated* must still see what it evaluates)
            result["allOf"] = [target, *result.get("allOf", [])]
            return result
        return result


# ------------------------------------------------------------------------------------------ simplify


def _simplify(s: Any, out: Normalized) -> Any:
    if isinstance(s, bool) or not isinstance(s, dict):
        return s
    drop = ("$schema",) if out.keep_defs else ("$defs", "definitions", "$schema")
    s = {k: v for k, v in s.items() if k not in drop}
    for k in _COUNTS:
        v = s.get(k)
        if isinstance(v, float) and v.is_integer():
            s[k] = int(v)  # `2.0` is the count 2 (draft 2020-12); backends want integers
    for k in ("properties", "patternProperties", "dependentSchemas"):
        if isinstance(s.get(k), dict):
            s[k] = {pk: _simplify(pv, out) for pk, pv in s[k].items()}
    for k in ("additionalProperties", "items", "contains", "propertyNames", "unevaluatedProperties",
              "unevaluatedItems", "not", "if", "then", "else"):
        if k in s:
            s[k] = _simplify(s[k], out)
    for k in ("allOf", "anyOf", "oneOf", "prefixItems"):
        if isinstance(s.get(k), list):
            s[k] = [_simplify(x, out) for x in s[k]]

    if "contains" not in s:
        s.pop("minContains", None), s.pop("maxContains", None)
    conj: list[Any] = []
    if "dependentRequired" in s and isinstance(s["dependentRequired"], dict):
        for key, needs in s.pop("dependentRequired").items():
            conj.append({"anyOf": [{"properties": {key: False}}, {"required": list(needs)}]})
        out.rewritten.add("dependentRequired")
    if "dependentSchemas" in s and isinstance(s["dependentSchemas"], dict):
        for key, sub in s.pop("dependentSchemas").items():
            conj.append({"anyOf": [{"properties": {key: False}}, {"allOf": [{"required": [key]}, sub]}]})
        out.rewritten.add("dependentSchemas")
    if "if" in s and out.negations:
        neg = negate(s["if"], strings=not out.keep_defs)
        if neg is not None:
            cond, then, els = s.pop("if"), s.pop("then", True), s.pop("else", True)
            conj.append({"anyOf": [{"allOf": [cond, then]}, {"allOf": [neg, els]}]})
            out.rewritten.update(("if", "then", "else"))
    elif "if" in s and "then" not in s and "else" not in s:
        # `if` alone never fails an instance; it only adds annotations for unevaluated* (here or above)
        if "unevaluatedProperties" in s or "unevaluatedItems" in s:
            conj.append({"anyOf": [s.pop("if"), {}]})
            out.rewritten.add("if")
        elif out.negations:
            s.pop("if")
            out.rewritten.add("if")
    elif "if" not in s:
        s.pop("then", None), s.pop("else", None)
    if "not" in s and out.negations:
        neg = negate(s["not"], strings=not out.keep_defs)
        if neg is not None:
            del s["not"]
            conj.append(neg)
            out.rewritten.add("not")
    if isinstance(s.get("oneOf"), list) and s["oneOf"] and all(isinstance(b, bool) for b in s["oneOf"]):
        if s.pop("oneOf").count(True) != 1:
            return False  # exactly one branch must hold; booleans decide it for every instance
        out.rewritten.add("oneOf")
    if "propertyNames" in s:
        names = _names_as_shape(s["propertyNames"], s)
        if names is not None:
            s.pop("propertyNames")
            s.update(names)
            out.rewritten.add("propertyNames")
    if Rewrites.disjoint_one_of and isinstance(s.get("oneOf"), list) and 1 < len(s["oneOf"]) <= _MAX_DISJOINT \
            and pairwise_disjoint(s["oneOf"], out.defs):
        # no instance satisfies two branches: exactly one holding is any holding
        branches = s.pop("oneOf")
        if isinstance(s.get("anyOf"), list):
            conj.append({"anyOf": branches})
        else:
            s["anyOf"] = branches
        out.rewritten.add("oneOf")
    if isinstance(s.get("oneOf"), list) and len(s["oneOf"]) <= 8 and out.negations:
        branches = s["oneOf"]
        negs = [negate(b, strings=not out.keep_defs) for b in branches]
        if all(n is not None for n in negs):
            s.pop("oneOf")
            conj.append({"anyOf": [
                {"allOf": [b, *[negs[j] for j in range(len(branches)) if j != i]]} for i, b in enumerate(branches)
            ]})
            out.rewritten.add("oneOf")
    if isinstance(s.get("anyOf"), list):
        branches = [b for b in s["anyOf"] if b is not False]
        if not branches:
            return False
        s["anyOf"] = branches
    if isinstance(s.get("allOf"), list):
        conj.extend(s.pop("allOf"))
    if conj:
        s = merge_all([s, *[_simplify(c, out) for c in conj]])
        if s is False or s is True:
            return s
    if Rewrites.filter_enums and out.negations:
        s = _enum_filtered(s)
        if s is False:
            return s
    s = _distribute(s, out)
    if isinstance(s, dict):
        s = _unevaluated(s, out)
        s = _bounds(s)
    if isinstance(s, dict):
        s = _siblings_into_branches(s)
    return s


_MAX_PUSHED_BYTES = 64 * 1024


def _enum_filtered(s: dict[str, Any]) -> Any:
    """`enum`/`const` beside other keywords as the enum of the listed values those keywords accept (`jsonschema`
    decides, formats asserted as the post-check does), `false` when none: exact, and a value set the backend
    needs no intersection for (`enum: [""]` beside a negated pattern is otherwise an error there). Left as is
    when the other keywords hold a reference or unevaluated*, which need their context."""
    vals = s["enum"] if "enum" in s else [s["const"]] if "const" in s else None
    rest = {k: v for k, v in s.items() if k not in ("enum", "const") and k not in ANNOTATIONS}
    if not isinstance(vals, list) or not rest or len(vals) > 256:
        return s
    text = json.dumps(rest)
    if any(f'"{k}"' in text for k in ("$ref", "$dynamicRef", "unevaluatedProperties", "unevaluatedItems")):
        return s
    import jsonschema

    try:
        v = jsonschema.Draft202012Validator(rest, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
        keep = [x for x in vals if v.is_valid(x)]
    except Exception:  # a keyword value jsonschema cannot read: leave it to the backend and the post-check
        return s
    return {"enum": keep} if keep else False


def _siblings_into_branches(s: dict[str, Any]) -> Any:
    """S ∧ anyOf/oneOf(A, B) → anyOf/oneOf(S ∧ A, S ∧ B) when S has `properties` or a branch is a reference
    (exact): each branch is then one merged object, so its keys are generated in schema order (S's
    properties, then the branch's), and no reference keeps sibling keywords."""
    kinds = [k for k in ("anyOf", "oneOf") if isinstance(s.get(k), list) and s[k]]
    if len(kinds) != 1 or "allOf" in s or len(s) == 1:
        return s
    key = kinds[0]
    branches = s[key]
    refs = any(isinstance(b, dict) and "$ref" in b for b in branches)
    if "properties" not in s and not refs:
        return s
    rest = {k: v for k, v in s.items() if k != key}
    if len(branches) > 16 or len(json.dumps(rest)) * len(branches) > _MAX_PUSHED_BYTES:
        return s
    merged = [merge_all([rest, b]) for b in branches]
    if any(isinstance(m, dict) and not all(isinstance(x, dict) and set(x) == {"$ref"} for x in m.get("allOf", []))
           for m in merged):
        return s  # a branch that does not merge exactly: the backend intersects it as written
    # (a reference beside siblings becomes a derived `$defs` entry: `bundle.merge_ref_siblings`)
    if key == "anyOf":
        merged = [m for m in merged if m is not False]
        if not merged:
            return False
    return {key: merged}


def _names_as_shape(names: Any, s: dict[str, Any]) -> dict[str, Any] | None:
    """`propertyNames` as properties/patternProperties + additionalProperties: false, when exact."""
    if any(k in s for k in ("properties", "patternProperties", "additionalProperties", "unevaluatedProperties")):
        return None
    if names is True or names == {}:
        return {}
    if names is False:
        return {"additionalProperties": False}
    if not isinstance(names, dict):
        return None
    keys = set(names) - ANNOTATIONS - {"type"}
    if names.get("type", "string") != "string":
        return None
    if keys == {"const"} and isinstance(names["const"], str):
        return {"properties": {names["const"]: True}, "additionalProperties": False}
    if keys == {"enum"} and isinstance(names["enum"], list) and all(isinstance(x, str) for x in names["enum"]):
        return {"properties": dict.fromkeys(names["enum"], True), "additionalProperties": False}
    if keys == {"pattern"} and isinstance(names["pattern"], str):
        return {"patternProperties": {names["pattern"]: True}, "additionalProperties": False}
    if keys and keys <= {"minLength", "maxLength"}:
        lo, hi = names.get("minLength", 0), names.get("maxLength", "")
        if isinstance(lo, int) and (hi == "" or isinstance(hi, int)):
            return {"patternProperties": {f"^[\\s\\S]{{{lo},{hi}}}$": True}, "additionalProperties": False}
    return None


def _distribute(s: Any, out: Normalized, budget: int = _MAX_BRANCHES) -> Any:
    """S ∧ (A ∨ B) → (S ∧ A) ∨ (S ∧ B) when S holds unevaluated*, so each branch can resolve them.

    Exact for instances matching one branch; an instance matching several may lose annotations from the
    others and be rejected (a subset, never a superset).
    """
    if not isinstance(s, dict) or not ("unevaluatedProperties" in s or "unevaluatedItems" in s):
        return s
    branches: list[Any] | None = None
    rest = dict(s)
    if isinstance(s.get("anyOf"), list):
        branches = rest.pop("anyOf")
    elif isinstance(s.get("oneOf"), list) and 0 < len(s["oneOf"]) <= budget:
        # resolving unevaluated* needs the branches side by side: oneOf is loosened to anyOf, so the
        # report lists oneOf as post-checked (the output is validated afterwards)
        branches = rest.pop("oneOf")
        out.loosened.add("oneOf")
    elif isinstance(s.get("allOf"), list):
        for i, x in enumerate(s["allOf"]):
            if isinstance(x, dict) and set(x) == {"anyOf"} and isinstance(x["anyOf"], list):
                branches = x["anyOf"]
                others = s["allOf"][:i] + s["allOf"][i + 1 :]
                if others:
                    rest["allOf"] = others
                else:
                    rest.pop("allOf")
                break
    if branches is None or not branches or len(branches) > budget:
        return s
    new = []
    for b in branches:
        m = merge_all([rest, b])
        if isinstance(m, dict):
            m = _distribute(m, out, budget // len(branches))
            if isinstance(m, dict):
                m = _unevaluated(m, out)
        new.append(m)
    return {"anyOf": new}


def _unevaluated(s: dict[str, Any], out: Normalized) -> Any:
    if any(k in s for k in APPLICATORS):
        return s
    if "unevaluatedProperties" in s:
        u = s.pop("unevaluatedProperties")
        if "additionalProperties" not in s:
            s["additionalProperties"] = u
        out.rewritten.add("unevaluatedProperties")
    if "unevaluatedItems" in s and "contains" not in s:
        u = s.pop("unevaluatedItems")
        if "items" not in s:
            s["items"] = u
        out.rewritten.add("unevaluatedItems")
    return s


def _bounds(s: dict[str, Any]) -> Any:
    for lo, hi in (("minLength", "maxLength"), ("minItems", "maxItems"), ("minProperties", "maxProperties")):
        if _num(s.get(lo)) and _num(s.get(hi)) and s[lo] > s[hi] and _only_type(s) in _TYPE_OF[lo]:
            return False
    return s


_COUNTS = ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties", "minContains",
           "maxContains")
_TYPE_OF = {"minLength": ("string",), "minItems": ("array",), "minProperties": ("object",)}


def _only_type(s: dict[str, Any]) -> str | None:
    t = s.get("type")
    return t if isinstance(t, str) else None


def _num(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


# --------------------------------------------------------------------------------------------- merge


def _json_key(v: Any) -> str:
    def canon(x: Any) -> Any:
        if isinstance(x, bool) or x is None or isinstance(x, str):
            return x
        if isinstance(x, int | float):
            return ("n", float(x)) if math.isfinite(float(x)) and float(x) == int(x) else ("n", x)
        if isinstance(x, list):
            return [canon(y) for y in x]
        if isinstance(x, dict):
            return {k: canon(y) for k, y in sorted(x.items())}
        return x

    return json.dumps(canon(v), sort_keys=True, default=str)


def _types(t: Any) -> set[str] | None:
    if t is None:
        return None
    ts = {t} if isinstance(t, str) else set(t)
    return ts


def _intersect_types(a: Any, b: Any) -> list[str]:
    ta, tb = _types(a) or set(_TYPES), _types(b) or set(_TYPES)
    res = ta & tb
    if "number" in ta and "integer" in tb:
        res.add("integer")
    if "integer" in ta and "number" in tb:
        res.add("integer")
    return [t for t in _TYPES if t in res]


_OBJECT_CLOSERS = ("additionalProperties", "unevaluatedProperties")
_ARRAY_SHAPE = ("prefixItems", "items", "unevaluatedItems", "contains")


def _merge_pair(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any] | Literal[False] | None:
    """Exact merge of two schemas' keywords, or None when they do not combine exactly."""
    if "$ref" in a or "$ref" in b:
        return None  # a reference to a `$defs` entry stays a reference (it may be recursive)
    # additionalProperties/unevaluatedProperties depend on the sibling `properties`/`patternProperties`: only
    # merge when the other side names no keys; `patternProperties` alone applies to every matching key whether
    # or not `properties` lists it, so two open sides merge exactly (patterns united, a shared one intersected)
    a_closed = any(k in a for k in _OBJECT_CLOSERS)
    b_closed = any(k in b for k in _OBJECT_CLOSERS)
    a_names = a_closed or "properties" in a or "patternProperties" in a
    b_names = b_closed or "properties" in b or "patternProperties" in b
    # `a` (the parent) with only unevaluatedProperties sees what `b` evaluates: merging keeps that exact
    a_uneval_only = "unevaluatedProperties" in a and "additionalProperties" not in a
    b_open = "additionalProperties" not in b and "unevaluatedProperties" not in b
    if not (a_uneval_only and b_open) and ((a_closed and b_names) or (b_closed and a_names)):
        return None
    if not Rewrites.merge_pattern_properties and "patternProperties" in a and ("properties" in b or "patternProperties" in b):
        return None
    if not Rewrites.merge_pattern_properties and "patternProperties" in b and ("properties" in a or "patternProperties" in a):
        return None
    both_arrays = any(k in a for k in _ARRAY_SHAPE) and any(k in b for k in _ARRAY_SHAPE)
    tuples = (isinstance(a.get("prefixItems"), list) and isinstance(b.get("prefixItems"), list)
              and not {"items", "contains"} & (set(a) | set(b)) and "unevaluatedItems" not in b)
    if both_arrays and not tuples and (
        not (set(a) & set(b) & set(_ARRAY_SHAPE)) <= {"items"} or "prefixItems" in a or "prefixItems" in b
    ):
        return None
    if ("unevaluatedProperties" in b or "unevaluatedItems" in b) and any(k in a for k in APPLICATORS):
        return None
    m = dict(a)
    for k, v in b.items():
        if k in ("enum", "const") and ("enum" in m or "const" in m):
            have = m.pop("enum") if "enum" in m else [m["const"]]
            m.pop("const", None)
            if "enum" in m or not isinstance(have, list):
                return None
            new = v if k == "enum" else [v]
            if not isinstance(new, list):
                return None
            keys_new = {_json_key(x) for x in new}
            both = [x for x in have if _json_key(x) in keys_new]
            if not both:
                return False
            m["enum"] = both
            continue
        if k not in m:
            m[k] = v
            continue
        cur = m[k]
        if k in ANNOTATIONS:
            continue
        if k == "type":
            m[k] = _intersect_types(cur, v)
            if not m[k]:
                return False
        elif k == "required":
            m[k] = list(dict.fromkeys([*cur, *v]))
        elif k in ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties", "minContains"):
            m[k] = max(cur, v)
        elif k in ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties", "maxContains"):
            m[k] = min(cur, v)
        elif k == "properties":
            props = dict(cur)
            for pk, pv in v.items():
                props[pk] = merge_all([props[pk], pv]) if pk in props else pv
            m[k] = props
        elif k == "patternProperties" and isinstance(cur, dict) and isinstance(v, dict):
            pats = dict(cur)
            for pk, pv in v.items():
                pats[pk] = merge_all([pats[pk], pv]) if pk in pats else pv
            m[k] = pats
        elif k == "prefixItems" and isinstance(cur, list) and isinstance(v, list):
            # position i must satisfy both tuples' schemas; the longer tuple's extra positions carry over
            n = max(len(cur), len(v))
            m[k] = [merge_all([*cur[i : i + 1], *v[i : i + 1]]) for i in range(n)]
        elif k == "items" and isinstance(cur, dict | bool) and isinstance(v, dict | bool):
            m[k] = merge_all([cur, v])
        elif k == "anyOf":
            m["allOf"] = [*m.get("allOf", []), {"anyOf": v}]
        elif k == "multipleOf" and isinstance(cur, int) and isinstance(v, int):
            m[k] = cur * v // math.gcd(cur, v)
        elif _json_key(cur) != _json_key(v):
            return None
    return m


def merge_all(schemas: list[Any]) -> Any:
    """allOf of `schemas`, merged into one schema where exact; the rest kept in an `allOf`."""
    acc: dict[str, Any] = {}
    rest: list[Any] = []
    for s in schemas:
        if s is True or (isinstance(s, dict) and not s):
            continue
        if s is False:
            return False
        if not isinstance(s, dict):
            rest.append(s)
            continue
        inner = s.get("allOf")
        if isinstance(inner, list) and len(s) == 1:
            merged_inner = merge_all(inner)
            if merged_inner is False:
                return False
            s = merged_inner if isinstance(merged_inner, dict) else {"allOf": [merged_inner]}
            if not s:
                continue
        m = _merge_pair(acc, s)
        if m is False:
            return False
        if m is None:
            rest.append(s)
        else:
            acc = m
    if rest:
        acc = dict(acc)
        acc["allOf"] = [*acc.get("allOf", []), *rest]
    return acc


# -------------------------------------------------------------------------------------------- negate


def _negate_values(vals: list[Any]) -> list[Any] | None:
    """The values outside an enum, type by type: the missing null/booleans, the open intervals between the
    listed numbers, the strings off the listed ones (`string_complement.not_in`); None when the enum lists an
    object or array (their complement has no spelling without `not`)."""
    from recipe.constraints.string_complement import not_in

    if any(isinstance(x, dict | list) for x in vals):
        return None
    whole = ["object", "array"]  # types none of whose values is listed
    parts: list[Any] = []
    if not any(x is None for x in vals):
        whole.append("null")
    bools = [x for x in vals if isinstance(x, bool)]
    if not bools:
        whole.append("boolean")
    parts += [{"const": b} for b in (True, False) if bools and b not in bools]
    nums = sorted({float(x) for x in vals if _num(x)})
    if not nums:
        whole.append("number")
    else:
        parts.append({"type": "number", "exclusiveMaximum": nums[0]})
        parts += [{"type": "number", "exclusiveMinimum": a, "exclusiveMaximum": b} for a, b in itertools.pairwise(nums)]
        parts.append({"type": "number", "exclusiveMinimum": nums[-1]})
    strs = [x for x in vals if isinstance(x, str)]
    if not strs:
        whole.append("string")
    else:
        rx = not_in(strs)
        if rx is None:
            return None
        parts.append({"type": "string", "pattern": rx})
    return [{"type": whole}, *parts]


def _complement_types(ts: set[str]) -> list[str] | None:
    if "integer" in ts and "number" not in ts:
        return None  # "a number that is not an integer" has no JSON Schema spelling without `not`
    return [t for t in ("null", "boolean", "object", "array", "number", "string") if t not in ts and not (
        t == "number" and "number" in ts)]


def negate(s: Any, *, strings: bool = True) -> Any | None:
    """A schema valid exactly where `s` is invalid, or None when the keywords have no exact negation.
    `strings=False`: no negation of string enums (schemas with `$dynamicRef`, whose `$id`s the negation's
    merge would reorder)."""
    if s is True:
        return False
    if s is False:
        return True
    if not isinstance(s, dict):
        return None
    parts: list[Any] = []
    for k, v in s.items():
        if k in ANNOTATIONS:
            continue
        n = _negate_keyword(k, v, s, strings)
        if n is None:
            return None
        parts.extend(n)
    if not parts:
        return False
    return parts[0] if len(parts) == 1 else {"anyOf": parts}


def _negate_keyword(k: str, v: Any, s: dict[str, Any], strings: bool) -> list[Any] | None:
    if k == "type":
        comp = _complement_types(_types(v) or set())
        if comp is None:
            return None
        return [{"type": comp}] if comp else []
    if k == "required" and isinstance(v, list):
        return [{"type": "object", "required": [], "properties": {p: False}} for p in v]
    if k == "properties" and isinstance(v, dict):
        res = []
        for p, sub in v.items():
            n = negate(sub, strings=strings)
            if n is None:
                return None
            if n is not False:
                res.append({"type": "object", "required": [p], "properties": {p: n}})
        return res
    bounds = {
        "minimum": ("number", "exclusiveMaximum"), "maximum": ("number", "exclusiveMinimum"),
        "exclusiveMinimum": ("number", "maximum"), "exclusiveMaximum": ("number", "minimum"),
    }
    if k in bounds and _num(v):
        t, opp = bounds[k]
        return [{"type": t, opp: v}]
    counts = {
        "minLength": ("string", "maxLength", -1), "maxLength": ("string", "minLength", 1),
        "minItems": ("array", "maxItems", -1), "maxItems": ("array", "minItems", 1),
    }
    if k in counts and isinstance(v, int) and not isinstance(v, bool):
        t, opp, d = counts[k]
        if v + d < 0:
            return []
        return [{"type": t, opp: v + d}]
    if k in ("enum", "const"):
        vals = v if k == "enum" else [v]
        if not isinstance(vals, list):
            return None
        if not vals:
            return [True]
        if Rewrites.negate_mixed_enums and strings:
            return _negate_values(vals)
        if all(x is None for x in vals):
            return [{"type": ["boolean", "object", "array", "number", "string"]}]
        if all(_num(x) for x in vals):
            pts = sorted({float(x) for x in vals})
            gaps: list[Any] = [{"type": "number", "exclusiveMaximum": pts[0]}]
            gaps += [{"type": "number", "exclusiveMinimum": a, "exclusiveMaximum": b} for a, b in itertools.pairwise(pts)]
            gaps.append({"type": "number", "exclusiveMinimum": pts[-1]})
            return [{"type": ["null", "boolean", "object", "array", "string"]}, *gaps]
        if all(isinstance(x, bool) for x in vals):
            missing = [b for b in (True, False) if b not in vals]
            return [{"type": ["null", "object", "array", "number", "string"]}, *[{"const": b} for b in missing]]
        return None
    if k == "anyOf" and isinstance(v, list):
        ns = [negate(x, strings=strings) for x in v]
        if any(n is None for n in ns):
            return None
        return [merge_all(ns)]
    if k == "allOf" and isinstance(v, list):
        ns = [negate(x, strings=strings) for x in v]
        if any(n is None for n in ns):
            return None
        return [{"anyOf": ns}] if ns else []
    if k == "not":
        return [v]
    if k == "items" and isinstance(v, bool) and "prefixItems" not in s:
        return [] if v else [{"type": "array", "minItems": 1}]
    return None
