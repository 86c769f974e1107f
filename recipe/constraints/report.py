"""Per-schema report: which keywords the mask enforces exactly, which are only checked after generation
(with `jsonschema`), and which cannot be enforced or checked at all; plus output validation."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import jsonschema
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012, specification_with

from recipe.constraints.drafts import KEYWORDS, NOT_CARRIED
from recipe.constraints.normalize import ANNOTATIONS, Normalized

# Keywords the default backend (llguidance) enforces exactly whenever it compiles the schema strictly.
MASK_KEYWORDS = frozenset({
    "type", "enum", "const", "properties", "required", "additionalProperties", "patternProperties", "items",
    "prefixItems", "minItems", "maxItems", "minLength", "maxLength", "pattern", "minimum", "maximum",
    "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "anyOf", "allOf", "oneOf", "$ref", "format",
    "minProperties", "maxProperties",
})
# `format` values the default backend's mask asserts; any other is refused by a strict compile
# (`tests/constraints/test_limits.py` probes the backend for each)
MASK_FORMATS = frozenset({"date", "time", "date-time", "duration", "email", "hostname", "ipv4", "ipv6", "uri", "uuid"})
OBJECT_KEYS = ("generated in schema order: the order of `properties` (own, then `$ref`'d, `allOf`, then the "
               "matching `anyOf`/`oneOf` branch's), then keys the schema does not list; a valid document with "
               "its keys in another order is not what the mask produces")
# keywords of some JSON Schema draft; anything else (editor extensions, vendor keys) is an annotation
_KNOWN = KEYWORDS | ANNOTATIONS | NOT_CARRIED | {
    "$defs", "definitions", "$id", "id", "$schema", "$anchor", "$dynamicAnchor", "$recursiveAnchor", "dependencies",
    "additionalItems", "$vocabulary", "$comment", "contentSchema"}
# phrases of the backend's refusals that name a keyword without spelling it
_MESSAGE_KEYWORDS = (("patternProperty", "patternProperties"), ("regex", "pattern"), ("look-around", "pattern"),
                     ("integer range", "minimum"), ("integer range", "maximum"), ("sibling keys", "$ref"),
                     ("min/maxProperties", "minProperties"), ("min/maxProperties", "maxProperties"))
# older drafts' keywords and what `drafts.upgrade` writes them as: enforced wherever those are
_UPGRADED = {"dependencies": ("dependentRequired", "dependentSchemas"), "additionalItems": ("items", "prefixItems")}
_SCHEMA_MAPS = ("properties", "patternProperties", "dependentSchemas", "$defs", "definitions")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_SCHEMA_ONE = ("additionalProperties", "items", "contains", "propertyNames", "unevaluatedProperties",
               "unevaluatedItems", "not", "if", "then", "else", "contentSchema")


def schema_nodes(schema: Any) -> Iterator[dict[str, Any]]:
    """Every subschema object of a schema (schema positions only; names and values skipped)."""
    stack = [schema]
    while stack:
        s = stack.pop()
        if not isinstance(s, dict):
            continue
        yield s
        for k, v in s.items():
            if k in _SCHEMA_MAPS and isinstance(v, dict):
                stack.extend(v.values())
            elif k in _SCHEMA_LISTS and isinstance(v, list):
                stack.extend(v)
            elif k in _SCHEMA_ONE:
                stack.append(v)


def keywords(schema: Any) -> Iterator[str]:
    """Every keyword used anywhere in a schema (schema positions only; names and values skipped)."""
    for s in schema_nodes(schema):
        yield from s


def unchecked_formats(schema: Any, dialect: Any = None) -> list[str]:
    """The `format` values in `schema` that neither the mask (`MASK_FORMATS`) nor the post-check asserts
    (`jsonschema`'s format checker for the draft of `dialect`, default `schema`, has no checker for them:
    e.g. `uri-reference` without the optional `rfc3987` package)."""
    cls = jsonschema.validators.validator_for(schema if dialect is None else dialect,
                                              default=jsonschema.Draft202012Validator)
    checked = MASK_FORMATS | set(cls.FORMAT_CHECKER.checkers)
    return sorted({s["format"] for s in schema_nodes(schema) if isinstance(s.get("format"), str)} - checked)


@dataclass(frozen=True)
class SchemaReport:
    """`exact`: enforced by the mask; `post`: loosened in the mask, checked after generation;
    `unsupported`: neither (e.g. remote `$ref`). `enforced_exactly` is the whole schema's verdict."""

    enforced_exactly: bool
    exact: tuple[str, ...]
    post: tuple[str, ...]
    unsupported: tuple[str, ...]
    annotations: tuple[str, ...]
    rewritten: tuple[str, ...] = ()
    backend_message: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "enforced_exactly": self.enforced_exactly,
            "exact": list(self.exact),
            "post_checked": list(self.post),
            "unsupported": list(self.unsupported),
            "annotations": list(self.annotations),
            "rewritten_by_recipe": list(self.rewritten),
            "backend_message": self.backend_message,
            "object_keys": OBJECT_KEYS,
        }

    def refusal(self) -> str:
        """The strict-mode error text."""
        parts = []
        if self.post:
            parts.append("not enforceable by the token mask: " + ", ".join(self.post))
        if self.unsupported:
            parts.append("unsupported: " + ", ".join(self.unsupported))
        if self.details.get("unchecked_formats"):
            parts.append("neither the mask nor the post-check asserts the format " +
                         ", ".join(self.details["unchecked_formats"]))
        if self.backend_message and not parts:
            parts.append(self.backend_message)
        return "schema cannot be enforced exactly (" + "; ".join(parts) + "); use strict=False to constrain "\
            "what can be and validate the rest after generation"


def build_report(original: Any, norm: Normalized, strict_error: str | None) -> SchemaReport:
    """Classify the original schema's keywords given the normalisation and the strict compile's outcome."""
    used = sorted(set(keywords(original)))
    remaining = set(keywords(norm.schema))
    annotations = tuple(k for k in used if k in ANNOTATIONS or k not in _KNOWN or k == "id")
    msg = re.sub(r"min/max(\w+)", r"min\1 max\1", strict_error or "")
    named = (set(re.findall(r"[$A-Za-z]+", msg)) | {k for p, k in _MESSAGE_KEYWORDS if p in (strict_error or "")}) \
        & set(used)
    specific = named - {"type", "properties", "required", "items"}
    if specific:
        named = specific  # "min/maxProperties only supported when all keys listed in properties…" names both
    exact: list[str] = []
    post: list[str] = []
    unsupported: list[str] = []
    for k in used:
        if k in annotations:
            continue
        if k == "$ref" and norm.unresolved_refs:
            unsupported.append(k)
        elif k in norm.loosened:
            post.append(k)
        elif strict_error is None:
            exact.append(k)
        elif k in remaining and (k in named or k not in MASK_KEYWORDS):
            post.append(k)
        elif k in remaining or k in MASK_KEYWORDS or k in norm.rewritten or \
                any(u in remaining or u in norm.rewritten for u in _UPGRADED.get(k, ())):
            exact.append(k)
        else:
            post.append(k)
    unchecked = unchecked_formats(norm.schema, original) if "format" in post else []
    if unchecked:  # a post-check that asserts nothing is no check: say so
        post.remove("format")
        unsupported.append("format")
    if strict_error is not None and not post and not unsupported:
        # the backend refused for a reason no keyword name explains (e.g. oneOf overlap): be conservative
        post = [k for k in exact if k in remaining and k not in ("type", "properties", "required")] or exact
        exact = [k for k in exact if k not in post]
    return SchemaReport(
        enforced_exactly=strict_error is None and not unsupported and not norm.loosened,
        exact=tuple(exact),
        post=tuple(post),
        unsupported=tuple(unsupported),
        annotations=annotations,
        rewritten=tuple(sorted(norm.rewritten)),
        backend_message=strict_error or "",
        details={"unresolved_refs": list(norm.unresolved_refs), "recursive": norm.recursive,
                 "unchecked_formats": unchecked},
    )


def validate_output(schema: Any, text: str, resources: dict[str, Any] | None = None) -> list[str]:
    """Validate one generated text against `schema` with `jsonschema` (its `$schema` draft, else 2020-12;
    formats asserted). `resources`: URI → documents its `$ref`s may name (never fetched).

    Returns error messages; [] means valid.
    """
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        return [f"not JSON: {exc}"]
    return validate_value(schema, value, resources)


def _registry(resources: dict[str, Any] | None, default: Any) -> Registry:
    if not resources:
        return Registry()
    return Registry().with_resources(
        (uri, Resource.from_contents(doc, default_specification=default)) for uri, doc in resources.items())


def validate_value(schema: Any, value: Any, resources: dict[str, Any] | None = None) -> list[str]:
    try:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        spec = specification_with(cls.META_SCHEMA.get("$id") or cls.META_SCHEMA.get("id", ""), default=DRAFT202012)
        v = cls(schema, format_checker=cls.FORMAT_CHECKER, registry=_registry(resources, spec))
        errs = sorted(v.iter_errors(value), key=lambda e: list(e.absolute_path))
    except jsonschema.exceptions.SchemaError as exc:
        return [f"invalid schema: {exc.message}"]
    except (jsonschema.exceptions.RefResolutionError, Exception) as exc:  # unresolvable refs and the like
        return [f"cannot validate: {type(exc).__name__}: {exc}"]
    return [f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in errs]
