"""Object keys in schema order: the order in which a JSON-Schema mask generates them.

Recipe's masks generate an object's keys in the order the schema lists them in `properties` (after merging:
the node's own `properties`, then its `$ref` target's, then `allOf` branches', then the matching
`anyOf`/`oneOf`/`if`-`then`-`else` branches'); keys the schema does not list (`patternProperties`,
`additionalProperties`) follow. A valid document whose keys come in another order is not what the mask
produces. `in_schema_order(value, schema)` re-orders a document's keys that way, recursively, so that a
published example can be checked token by token against the mask.
"""

from __future__ import annotations

import re
from typing import Any

import jsonschema
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012, specification_with

_OLD_DRAFTS = ("draft-03", "draft-04", "draft-06", "draft-07")
_MAX_DEPTH = 64


class _Orderer:
    def __init__(self, schema: Any, resources: dict[str, Any] | None) -> None:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        meta_id = cls.META_SCHEMA.get("$id") or cls.META_SCHEMA.get("id", "")
        self.spec = specification_with(meta_id, default=DRAFT202012)
        self.ref_only = any(d in meta_id for d in _OLD_DRAFTS)  # `$ref` siblings are ignored before 2019-09
        root = Resource.from_contents(schema, default_specification=self.spec)
        registry: Registry = Registry().with_resources(
            (uri, Resource.from_contents(doc, default_specification=self.spec))
            for uri, doc in (resources or {}).items())
        self.registry = registry.with_resource(root.id() or "", root)
        self.validator = cls(schema, registry=self.registry)
        self.root = (schema, self.registry.resolver(base_uri=root.id() or ""))

    def _valid(self, node: Any, resolver: Any, value: Any) -> bool:
        try:
            return bool(self.validator.evolve(schema=node, _resolver=resolver).is_valid(value))
        except Exception:  # a branch that cannot be checked is assumed to apply
            return True

    def expand(self, node: Any, resolver: Any, value: Any, depth: int = 0) -> list[tuple[dict[str, Any], Any]]:
        """The schema objects that apply to `value` at this position, in merge order."""
        if not isinstance(node, dict) or depth > _MAX_DEPTH:
            return []
        if "$id" in node or "id" in node:
            resolver = resolver.in_subresource(Resource.from_contents(node, default_specification=self.spec))
        out = [] if (self.ref_only and "$ref" in node) else [(node, resolver)]
        ref = node.get("$ref")
        if isinstance(ref, str):
            try:
                r = resolver.lookup(ref)
                out += self.expand(r.contents, r.resolver, value, depth + 1)
            except Exception:  # unresolvable: nothing known about its keys
                pass
            if self.ref_only:
                return out
        for sub in node.get("allOf") or []:
            out += self.expand(sub, resolver, value, depth + 1)
        for key in ("anyOf", "oneOf"):
            for sub in node.get(key) or []:
                if self._valid(sub, resolver, value):
                    out += self.expand(sub, resolver, value, depth + 1)
        if "if" in node:
            branch = node.get("then") if self._valid(node["if"], resolver, value) else node.get("else")
            out += self.expand(branch, resolver, value, depth + 1)
        deps = node.get("dependentSchemas") or node.get("dependencies")
        if isinstance(deps, dict) and isinstance(value, dict):
            for k, sub in deps.items():
                if k in value and isinstance(sub, dict):
                    out += self.expand(sub, resolver, value, depth + 1)
        return out

    def order(self, value: Any, nodes: list[tuple[Any, Any]], depth: int = 0) -> Any:
        if depth > _MAX_DEPTH:
            return value
        applied = [x for n, r in nodes for x in self.expand(n, r, value)]
        if isinstance(value, dict):
            listed: list[str] = []
            for n, _ in applied:
                props = n.get("properties")
                if isinstance(props, dict):
                    listed += [k for k in props if k in value and k not in listed]
            keys = listed + [k for k in value if k not in listed]
            return {k: self.order(value[k], self._children_of_key(applied, k), depth + 1) for k in keys}
        if isinstance(value, list):
            return [self.order(x, self._children_of_item(applied, i), depth + 1) for i, x in enumerate(value)]
        return value

    @staticmethod
    def _children_of_key(applied: list[tuple[dict[str, Any], Any]], key: str) -> list[tuple[Any, Any]]:
        out = []
        for n, r in applied:
            props: dict[str, Any] = n["properties"] if isinstance(n.get("properties"), dict) else {}
            if key in props:
                out.append((props[key], r))
                continue
            pats: dict[str, Any] = n["patternProperties"] if isinstance(n.get("patternProperties"), dict) else {}
            hits = [(s, r) for p, s in pats.items() if _search(p, key)]
            out += hits
            if not hits and isinstance(n.get("additionalProperties"), dict):
                out.append((n["additionalProperties"], r))
        return out

    @staticmethod
    def _children_of_item(applied: list[tuple[dict[str, Any], Any]], i: int) -> list[tuple[Any, Any]]:
        out = []
        for n, r in applied:
            prefix = n.get("prefixItems")
            items = n.get("items")
            if isinstance(items, list):  # draft ≤ 2019-09 tuple form
                prefix, items = items, n.get("additionalItems")
            if isinstance(prefix, list) and i < len(prefix):
                out.append((prefix[i], r))
            elif isinstance(items, dict):
                out.append((items, r))
        return out


def _search(pattern: str, key: str) -> bool:
    try:
        return re.search(pattern, key) is not None
    except re.error:
        return False


def in_schema_order(value: Any, schema: Any, resources: dict[str, Any] | None = None) -> Any:
    """`value` with every object's keys in the order the schema's mask generates them (see module doc)."""
    if not isinstance(schema, dict):
        return value
    o = _Orderer(schema, resources)
    return o.order(value, [o.root])
