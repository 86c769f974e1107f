"""Tool definitions and output constraints shared by the three APIs.

A protocol reads its own tool shapes into `ToolSpec`s, then `finish_tools` applies the common rules
in the reference's order: tool_choice filtering (`none` removes every tool, a named choice keeps
one), name pattern and length, uniqueness, parameter schema checks, strict-mode rules and the
normalisation of strict schemas, and the thinking-mode restriction on forced choices.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import orjson

from recipe.conversation import OutputConstraint, ToolDefinition
from recipe.errors import RequestError, conversion_error
from recipe.protocols.body_fields import unexpected, unit_variant
from recipe.protocols.fast_metaschema import definitely_valid

_NAME_RE = re.compile(r"[a-zA-Z0-9_-]+")
_ABSENT = object()


def compact_json(value: Any) -> str:
    """JSON without spaces, keys in order, non-ASCII raw: the reference's constraint spelling."""
    try:
        return orjson.dumps(value).decode("utf-8")
    except TypeError:  # integers beyond 64 bits
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True)
class ToolSpec:
    """A function tool as a protocol declared it; `parameters` may be `ABSENT`."""

    name: str
    description: str | None
    parameters: Any
    strict: bool | None
    name_path: str  # e.g. "tools[0].function.name", for the pattern/length messages


ABSENT = _ABSENT


def check_name(name: str, path: str) -> None:
    if not name:
        raise conversion_error(
            f"Invalid '{path}': empty string. Expected a string with minimum length 1, but got an empty string instead."
        )
    if not _NAME_RE.fullmatch(name):
        raise conversion_error(
            f"Invalid '{path}': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'."
        )
    if len(name) > 128:
        raise conversion_error(
            f"Invalid '{path}': string too long. Expected a string with maximum length 128, but got a string with length {len(name)} instead."
        )


def _schema_repr(value: Any) -> str:
    return compact_json(value)


def _resolve_pointer(root: Any, ref: str) -> bool:
    if not ref.startswith("#"):
        return True  # external references are not resolved by the reference either
    pointer = ref[1:]
    node = root
    if pointer == "":
        return True
    for raw in pointer.split("/")[1:]:
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False
    return True


def _first_bad_ref(root: Any, node: Any) -> str | None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and not _resolve_pointer(root, ref):
            return ref[1:] if ref.startswith("#") else ref
        for v in node.values():
            bad = _first_bad_ref(root, v)
            if bad is not None:
                return bad
    elif isinstance(node, list):
        for v in node:
            bad = _first_bad_ref(root, v)
            if bad is not None:
                return bad
    return None


def _type_names(expected: Any) -> str:
    if isinstance(expected, list):
        return "types " + ", ".join(f'"{t}"' for t in sorted(expected))
    return f'type "{expected}"'


def _meta_message(error: Any) -> str:
    """A metaschema violation worded like the reference's validator (Rust `jsonschema`)."""
    inst = compact_json(error.instance)
    kw = error.validator
    v = error.validator_value
    if kw == "type":
        return f"{inst} is not of {_type_names(v)}"
    if kw == "anyOf":
        return f"{inst} is not valid under any of the schemas listed in the 'anyOf' keyword"
    if kw == "minimum":
        return f"{inst} is less than the minimum of {compact_json(v)}"
    if kw == "format":
        return f'{inst} is not a "{v}"'
    if kw == "uniqueItems":
        return f"{inst} has non-unique elements"
    if kw == "enum":
        return f"{inst} is not one of {compact_json(v)}"
    if kw == "minItems":
        return f"{inst} has less than {v} item{'s' if v != 1 else ''}"
    return str(error.message)


@lru_cache(maxsize=1)
def _metaschema_validator() -> Any:
    from jsonschema import Draft202012Validator

    return Draft202012Validator(Draft202012Validator.META_SCHEMA, format_checker=Draft202012Validator.FORMAT_CHECKER)


# The memo keeps its keys: bounded by count *and* key size (1,024 x 16 KiB), so distinct megabyte-sized
# schemas from hostile clients cannot pile up (unbounded by bytes, 4,096 of them could hold gigabytes).
SCHEMA_MEMO_ENTRIES = 1024
SCHEMA_MEMO_MAX_CHARS = 16 * 1024


def _schema_problem(schema_json: str) -> str | None:
    if len(schema_json) > SCHEMA_MEMO_MAX_CHARS:
        return _check_schema(schema_json)
    return _memo_schema_problem(schema_json)


def _check_schema(schema_json: str) -> str | None:
    schema = orjson.loads(schema_json)
    if not isinstance(schema, (dict, bool)):
        return f'{_schema_repr(schema)} is not of types "boolean", "object"'
    if not definitely_valid(schema, schema_json):  # compiled pre-check; the Python validator words any message
        for error in _metaschema_validator().iter_errors(schema):
            return _meta_message(error)
    # a `$ref` key is spelled `"$ref"` in the compact text (`$` is never escaped): without it, no walk
    bad = _first_bad_ref(schema, schema) if '"$ref"' in schema_json else None
    if bad is not None:
        return f"Pointer '{bad}' does not exist"
    return None


_memo_schema_problem = lru_cache(maxsize=SCHEMA_MEMO_ENTRIES)(_check_schema)


def validate_schema_document(schema: Any, prefix: str) -> None:
    """The checks of compiling `schema` as a JSON Schema (draft 2020-12 metaschema, `$ref`s resolvable).

    Results are cached by the schema's JSON text (bounded LRU): agents send the same tools with every
    request. A schema not seen before is pre-checked by a compiled validator (`fast_metaschema`); only
    one that fails there goes through Python `jsonschema`, which words the reference's message.
    """
    problem = _schema_problem(compact_json(schema))
    if problem is not None:
        raise conversion_error(f"{prefix}{problem}")


# ----------------------------------------------------------------------------------------------------
# Strict schemas: read as the reference's typed schema (dropping unsupported keywords), then checked.
# ----------------------------------------------------------------------------------------------------

_TYPES = ("object", "string", "number", "integer", "boolean", "array", "null")
_LIST_TYPES = ("string", "number", "integer", "boolean", "null")
_FORMATS = ("email", "hostname", "ipv4", "ipv6", "uuid")
_NUMERIC_KEYS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")


class _SchemaShapeError(Exception):
    pass


def _shape(msg: str) -> _SchemaShapeError:
    return _SchemaShapeError(msg)


def _desc(node: dict[str, Any], out: dict[str, Any]) -> None:
    if "description" in node and node["description"] is not None:
        d = node["description"]
        if not isinstance(d, str):
            raise _shape(f"invalid type: {unexpected(d)}, expected a string")
        out["description"] = d


def _read_strict(node: Any) -> dict[str, Any]:
    """Pass 1: the typed reading (serde) of a strict schema node. Raises `_SchemaShapeError`."""
    if not isinstance(node, dict):
        raise _shape("one of `type`, `anyOf`, `$ref` field is required")
    if "type" in node:
        t = node["type"]
        if isinstance(t, list):
            for item in t:
                try:
                    unit_variant(item, _LIST_TYPES)
                except RequestError as exc:
                    raise _shape(f"field `type`: {exc.message.removeprefix('invalid request body: ')}") from None
            out: dict[str, Any] = {"type": t}
            _desc(node, out)
            return out
        if not isinstance(t, str):
            raise _shape(f"invalid type: {unexpected(t)}, expected variant identifier")
        if t not in _TYPES:
            listed = ", ".join(f"`{v}`" for v in _TYPES)
            raise _shape(f"unknown variant `{t}`, expected one of {listed}")
        out = {"type": t}
        if t == "string":
            _desc(node, out)
            if node.get("pattern") is not None:
                p = node["pattern"]
                if not isinstance(p, str):
                    raise _shape(f"invalid type: {unexpected(p)}, expected a string")
                out["pattern"] = p
            if node.get("format") is not None:
                f = node["format"]
                if not isinstance(f, str):
                    raise _shape(f"invalid type: {unexpected(f)}, expected variant identifier")
                if f not in _FORMATS:
                    listed = ", ".join(f"`{v}`" for v in _FORMATS)
                    raise _shape(f"unknown variant `{f}`, expected one of {listed}")
                out["format"] = f
            if node.get("enum") is not None:
                e = node["enum"]
                if not isinstance(e, list):
                    raise _shape(f"invalid type: {unexpected(e)}, expected a sequence")
                for item in e:
                    if not isinstance(item, str):
                        raise _shape(f"invalid type: {unexpected(item)}, expected a string")
                out["enum"] = e
        elif t in ("integer", "number"):
            _desc(node, out)
            for key in _NUMERIC_KEYS:
                v = node.get(key)
                if v is None:
                    continue
                if t == "integer":
                    if isinstance(v, bool) or not isinstance(v, int):
                        raise _shape(f"invalid type: {unexpected(v)}, expected i64")
                elif isinstance(v, bool) or not isinstance(v, (int, float)):
                    raise _shape(f"invalid type: {unexpected(v)}, expected f64")
                out[key] = v
        elif t == "array":
            if "items" not in node:
                raise _shape("missing field `items`")
            out["items"] = _read_strict(node["items"])
            _desc(node, out)
        elif t == "object":
            props = node.get("properties")
            read_props: dict[str, Any] | None = None
            if props is not None:
                if not isinstance(props, dict):
                    raise _shape(f"invalid type: {unexpected(props)}, expected a map")
                read_props = {k: _read_strict(v) for k, v in props.items()}
            ap = node.get("additionalProperties")
            if ap is not None and not isinstance(ap, bool):
                raise _shape(f"invalid type: {unexpected(ap)}, expected a boolean")
            req = node.get("required")
            if req is not None:
                if not isinstance(req, list):
                    raise _shape(f"invalid type: {unexpected(req)}, expected a sequence")
                for r in req:
                    if not isinstance(r, str):
                        raise _shape(f"invalid type: {unexpected(r)}, expected a string")
            out["properties"] = read_props
            out["additionalProperties"] = ap
            out["required"] = req
            _desc(node, out)
        else:
            _desc(node, out)
        return out
    if "anyOf" in node:
        branches = node["anyOf"]
        if not isinstance(branches, list):
            raise _shape(f"field `anyOf`: invalid type: {unexpected(branches)}, expected a sequence")
        out = {"anyOf": [_read_branch(b) for b in branches]}
        _desc(node, out)
        return out
    if "$ref" in node:
        ref = node["$ref"]
        if not isinstance(ref, str):
            raise _shape(f"invalid type: {unexpected(ref)}, expected a string")
        return {"$ref": ref}
    raise _shape("one of `type`, `anyOf`, `$ref` field is required")


def _read_branch(node: Any) -> dict[str, Any]:
    """An `anyOf` branch: serde reports its errors under `field `anyOf``."""
    try:
        if not isinstance(node, dict):
            raise _shape(f"invalid type: {unexpected(node)}, expected internally tagged enum JsonSchemaType")
        return _read_strict(node)
    except _SchemaShapeError as exc:
        raise _shape(f"field `anyOf`: {exc}") from None


def _check_strict(node: dict[str, Any], top: bool) -> dict[str, Any]:
    """Pass 2: strict-mode rules on a read node; returns the normalised schema."""
    if "anyOf" in node:
        out: dict[str, Any] = {"anyOf": [_check_strict(b, False) for b in node["anyOf"]]}
        if "description" in node:
            out["description"] = node["description"]
        return out
    t = node.get("type")
    if t == "array":
        out = {"type": "array", "items": _check_strict(node["items"], False)}
        if "description" in node:
            out["description"] = node["description"]
        return out
    if t != "object":
        return node
    props = node["properties"]
    if node["additionalProperties"] is True:
        raise conversion_error("additionalProperties should not be true")
    if props is None or (not props and not top):
        if not top:
            raise conversion_error("An object with no properties is not allowed.")
        props = {}
    req = node["required"]
    if req is not None:
        seen: set[str] = set()
        for r in req:
            if r in seen:
                raise conversion_error(f"Duplicate required property '{r}'")
            seen.add(r)
            if r not in props:
                raise conversion_error(f"Required property '{r}' not found in object")
        if len(seen) != len(props):
            raise conversion_error("Required properties must match all properties in the object")
    out = {
        "type": "object",
        "properties": {k: _check_strict(v, False) for k, v in props.items()},  # type: ignore[dict-item]
        "additionalProperties": False,
        "required": list(props),
    }
    if "description" in node:
        out["description"] = node["description"]
    return out


def normalize_strict_schema(schema: Any, *, for_tool: bool) -> Any:
    """The schema a strict tool (`for_tool`) or strict json_schema response format is enforced with.

    Both must be objects at the top; a tool's top-level object may have no properties.
    """
    prefix = "Invalid tool parameters schema : " if for_tool else "Invalid json schema: "
    try:
        read = _read_strict(schema)
    except _SchemaShapeError as exc:
        raise conversion_error(f"{prefix}{exc}") from None
    if read.get("type") != "object":
        what = "function parameters schema" if for_tool else "json schema"
        raise conversion_error(f"The top level of the {what} must be an object.")
    return _check_strict(read, top=for_tool)


def _check_parameters(spec: ToolSpec) -> Any:
    """The (possibly normalised) parameters of a tool that survived tool_choice filtering."""
    params = spec.parameters
    if params is ABSENT:
        params = {}
    prefix = f"Invalid schema for function '{spec.name}': "
    if spec.parameters is not ABSENT:
        if spec.strict:
            return normalize_strict_schema(params, for_tool=True)
        validate_schema_document(params, prefix)
        if not (isinstance(params, dict) and params.get("type") == "object"):
            got = params.get("type") if isinstance(params, dict) else None
            raise conversion_error(
                f"{prefix}schema must be a JSON Schema of 'type: \"object\"', got 'type: {compact_json(got)}'."
            )
    if spec.strict:  # absent parameters: the empty object, normalised
        return {"type": "object", "properties": {}, "additionalProperties": False, "required": []}
    return params


@dataclass(frozen=True)
class ToolSelection:
    tools: tuple[ToolDefinition, ...]
    choice: str  # "auto" | "required" (after filtering; "none" leaves no tools)
    strict: bool


def finish_tools(
    specs: list[ToolSpec],
    choice: str | None,
    named: str | None,
    thinking: bool,
    *,
    names_checked: bool = False,
) -> ToolSelection:
    """Apply tool_choice (`auto`/`none`/`required`, or `named` with choice `named`) and validate.

    Returns the active tools (empty when none remain) and the effective choice. `names_checked`:
    the protocol already checked names while reading its tools (Messages, Responses: even for
    tool_choice `none`).
    """
    if not names_checked:
        for spec in specs:
            if not spec.name:
                check_name(spec.name, spec.name_path)
    if choice == "none":
        return ToolSelection((), "none", False)
    if not specs:
        return ToolSelection((), "auto", False)
    if not names_checked:
        for spec in specs:
            check_name(spec.name, spec.name_path)
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise conversion_error("Tool names must be unique.")
    params = [_check_parameters(s) for s in specs]
    stricts = [bool(s.strict) for s in specs]
    if any(stricts) and not all(stricts):
        raise conversion_error("Cannot use strict tool with non-strict tool in the same request")
    effective = "auto"
    active = list(zip(specs, params, strict=True))
    if choice == "named":
        active = [(s, p) for s, p in active if s.name == named]
        if not active:
            raise conversion_error(
                f"Invalid value for 'tool_call': no function named '{named}' was specified in the 'tools' parameter."
            )
        effective = "required"
    elif choice == "required":
        effective = "required"
    if effective == "required" and thinking:
        raise conversion_error("Thinking mode does not support this tool_choice")
    tools = tuple(ToolDefinition(name=s.name, description=s.description, parameters=p, strict=s.strict) for s, p in active)
    return ToolSelection(tools, effective, all(stricts))


def tool_constraint(tools: tuple[ToolDefinition, ...], choice: str) -> OutputConstraint:
    """The constraint of active tools: a compact JSON array of Chat-style function tools."""
    listed = [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.parameters, "strict": t.strict},
        }
        for t in tools
    ]
    return OutputConstraint("tool_call_required" if choice == "required" else "tool_call", compact_json(listed))
