"""`$ref` resolution for the mask: one self-contained draft 2020-12 schema, with no ids and no remote refs.

`bundle(schema, resources, out)` walks the schema positions of a document (any draft from 04 to 2020-12,
read by its `$schema`), resolves every `$ref` with `referencing` (JSON pointers, anchors, `$id`-relative
and fragment-carrying base URIs, documents supplied in `resources`; nothing is fetched) and:

* inlines the target when the reference is not recursive;
* otherwise points it at a generated root `$defs` entry (`#/$defs/recipe_N`), the target's own bundled
  copy; once a target has an entry every later reference to it uses the entry;
* writes the older drafts' keywords in their 2020-12 spelling (`drafts.upgrade`) and drops everything that
  is not a JSON Schema keyword (annotations, editor extensions), which no validator asserts;
* before 2019-09 a `$ref` overrides its sibling keywords (they are ignored, as the validator does).

When inlining grows the result past a budget (shared definitions copied over and over: more than 4× the
input plus 64 KiB, or 40,000 nodes), the walk restarts with every reference pointing at a `$defs` entry. The result is equivalent to the input.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urljoin

import jsonschema
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012, Specification, specification_with

from recipe.constraints.drafts import (
    KEYWORDS,
    NOT_CARRIED,
    SCHEMA_LISTS,
    SCHEMA_MAPS,
    SCHEMA_ONE,
    draft_of,
    upgrade,
)

DEFS_PREFIX = "recipe_"
_NODE_BUDGET = 40_000


class _TooLarge(Exception):
    pass


def spec_of(schema: Any) -> Specification[Any]:
    """The `referencing` specification of the draft the post-generation validator applies."""
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    meta = cls.META_SCHEMA.get("$id") or cls.META_SCHEMA.get("id") or ""
    return specification_with(meta, default=DRAFT202012)  # type: ignore[no-any-return]


class Bundler:
    """See the module docstring. `unresolved`: refs that named nothing available (left to the validator)."""

    def __init__(self, root: Any, resources: dict[str, Any], all_defs: bool = False) -> None:
        self.spec = spec_of(root)
        self.draft = draft_of(root)
        self.old = self.draft <= 7  # `$ref` overrides its siblings
        res = Resource.from_contents(root, default_specification=self.spec)
        registry: Registry = Registry().with_resources(
            (uri, Resource.from_contents(doc, default_specification=spec_of(doc) if isinstance(doc, dict)
                                         and "$schema" in doc else self.spec))
            for uri, doc in resources.items())
        self.registry = registry.with_resource(res.id() or "", res)
        self.resolver = self.registry.resolver(base_uri=res.id() or "")
        self.root = root
        self.all_defs = all_defs
        self.names: dict[str, str] = {}  # target key -> $defs name
        self.pending: list[tuple[str, Any, Any]] = []
        self.defs: dict[str, Any] = {}
        self.unresolved: list[str] = []
        self.dropped: set[str] = set()  # asserting keywords the result does not carry (mask looser there)
        self.inlined = False
        self.nodes = 0

    def run(self) -> Any:
        out = self._walk(self.root, self.resolver, ())
        while self.pending:
            key, contents, resolver = self.pending.pop()
            name = self.names[key]
            if name not in self.defs:
                self.defs[name] = None  # reserve: a self-reference inside resolves to the entry
                self.defs[name] = self._walk(contents, resolver, (key,), entered=True)
        if self.defs:
            if not isinstance(out, dict):
                out = {"allOf": [out]} if out is not True else {}
            out = {**out, "$defs": self.defs}
        return out

    def _walk(self, node: Any, resolver: Any, stack: tuple[str, ...], entered: bool = False) -> Any:
        """`entered`: `resolver` is already the node's own (a lookup's result), do not enter its `$id` again."""
        self.nodes += 1
        if self.nodes > _NODE_BUDGET and not self.all_defs:
            raise _TooLarge
        if not isinstance(node, dict):
            return node
        sub = Resource.from_contents(node, default_specification=self.spec)
        if node is not self.root and not entered and sub.id() is not None:
            resolver = resolver.in_subresource(sub)
        ref = node.get("$ref")
        node = upgrade(node, self.draft)
        result: dict[str, Any] = {}
        for k, v in node.items():
            if k not in KEYWORDS or k == "$ref":
                if k in NOT_CARRIED:
                    self.dropped.add(k)
                continue
            if k in SCHEMA_MAPS:
                result[k] = {pk: self._walk(pv, resolver, stack) for pk, pv in v.items()} if isinstance(v, dict) else v
            elif k in SCHEMA_LISTS:
                result[k] = [self._walk(x, resolver, stack) for x in v] if isinstance(v, list) else v
            elif k in SCHEMA_ONE:
                result[k] = self._walk(v, resolver, stack)
            else:
                result[k] = v
        if not isinstance(ref, str):
            return result
        target = self._ref(ref, resolver, stack)
        if target is None:  # left to the backend (it knows the metaschemas); `loosen` drops what it cannot read
            result["$ref"] = urljoin(resolver._base_uri, ref)  # absolute: the ids around it are gone
            return result
        if self.old or not result:
            return target
        # the target beside its siblings (unevaluated* must still see what it evaluates)
        result["allOf"] = [target, *result.get("allOf", [])]
        return result

    def _ref(self, ref: str, resolver: Any, stack: tuple[str, ...]) -> Any:
        try:
            resolved = resolver.lookup(ref)
        except (Unresolvable, Exception):  # remote or broken: left for the validator
            self.unresolved.append(ref)
            return None
        key = f"{resolved.resolver._base_uri}|{id(resolved.contents)}"
        if key in self.names or key in stack or self.all_defs:
            if key not in self.names:
                self.names[key] = f"{DEFS_PREFIX}{len(self.names)}"
                self.pending.append((key, resolved.contents, resolved.resolver))
            return {"$ref": f"#/$defs/{self.names[key]}"}
        self.inlined = True
        return self._walk(resolved.contents, resolved.resolver, (*stack, key), entered=True)



def bundle(schema: Any, resources: dict[str, Any] | None, all_defs: bool = False) -> Bundler:
    """Run the bundler (see the module docstring); `.run()`'s result is in `.result`.
    `all_defs`: every reference points at a `$defs` entry (nothing inlined)."""
    b = Bundler(schema, resources or {}, all_defs)
    try:
        b.result = b.run()  # type: ignore[attr-defined]
        size_in = len(json.dumps([schema, resources]))
        if not all_defs and len(json.dumps(b.result)) > 4 * size_in + 64 * 1024:  # type: ignore[attr-defined]
            raise _TooLarge
    except (_TooLarge, RecursionError):
        b = Bundler(schema, resources or {}, all_defs=True)
        b.result = b.run()  # type: ignore[attr-defined]
    return b


_MAX_DERIVED = 256


def merge_ref_siblings(schema: Any, merge: Any) -> tuple[Any, set[str]]:
    """Rewrite every `{"allOf": [{"$ref": "#/$defs/X"}, ...], <siblings>}` as a reference to a derived
    `$defs` entry holding `merge([X, siblings])` (llguidance refuses sibling keywords beside a recursive
    reference). Exact; memoised on (X, siblings), so recursion through the node reaches the same entry.
    Past `_MAX_DERIVED` entries the siblings are dropped instead: returns the keywords so loosened."""
    if not isinstance(schema, dict) or not isinstance(schema.get("$defs"), dict):
        return schema, set()
    defs: dict[str, Any] = dict(schema["$defs"])
    memo: dict[str, str] = {}
    loosened: set[str] = set()
    todo: list[str] = []

    def visit(node: Any) -> Any:
        if isinstance(node, list):
            return [visit(x) for x in node]
        if not isinstance(node, dict):
            return node
        node = {k: (visit(v) if k in SCHEMA_ONE or k in SCHEMA_LISTS else
                    {pk: visit(pv) for pk, pv in v.items()} if k in SCHEMA_MAPS and isinstance(v, dict) else v)
                for k, v in node.items()}
        refs = [x for x in node.get("allOf", []) if isinstance(x, dict) and set(x) == {"$ref"}
                and str(x["$ref"]).removeprefix("#/$defs/") in defs]
        if not refs:
            return node
        ref = refs[0]["$ref"]
        own = {k: v for k, v in node.items() if k != "allOf"}
        key = json.dumps(node, sort_keys=True)
        if key not in memo:
            if len(memo) >= _MAX_DERIVED:
                loosened.update(own)
                return {"allOf": node["allOf"]}
            name = f"{DEFS_PREFIX}{len(defs)}"
            memo[key] = name
            body = defs[ref.removeprefix("#/$defs/")]
            # the same order as an inlined target: own keywords, then the allOf members in order
            defs[name] = merge([own, *[body if x is refs[0] else x for x in node["allOf"]]])
            todo.append(name)
        return {"$ref": f"#/$defs/{memo[key]}"}

    root = visit({k: v for k, v in schema.items() if k != "$defs"})
    for name in list(defs):
        if name not in todo:
            defs[name] = visit(defs[name])
    while todo:
        name = todo.pop()
        defs[name] = visit(defs[name])
    return {**root, "$defs": defs}, loosened
