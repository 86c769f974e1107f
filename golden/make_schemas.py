"""Regenerate `schemas/*.schema.json` from the reference extracts, fixing their known defects.

The OpenAI extracts come from the official OpenAPI document and the Anthropic ones from the official
SDK's types (see shared/reference/schemas/README.md). A pure JSON-Schema validator needs these fixes:

1. OpenAPI 3.0 `nullable: true` → `anyOf: [<schema>, {"type": "null"}]`.
2. `$recursiveAnchor` / `$recursiveRef` (2019-09) → a plain `$ref` to the recursive definition.
3. `Response.user` and `Response.usage` may be null (the spec's own examples send null), and
   `ResponseUsage.input_tokens_details.cache_write_tokens` is optional (newer than most servers).
4. Anthropic: the `ping` event joins `RawMessageStreamEvent`; `request_too_large` joins the error types;
   every file gets the draft 2020-12 `$schema`.

Usage: python golden/make_schemas.py [REFERENCE_SCHEMAS_DIR]   (default ../shared/reference/schemas)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "schemas"
DRAFT = "https://json-schema.org/draft/2020-12/schema"
FILES = [
    "openai.CreateChatCompletionRequest",
    "openai.CreateChatCompletionResponse",
    "openai.CreateChatCompletionStreamResponse",
    "openai.ChatCompletionStreamOptions",
    "openai.CreateResponse",
    "openai.Response",
    "openai.ResponseStreamEvent",
    "openai.ResponseErrorEvent",
    "openai.ResponseUsage",
    "openai.ErrorResponse",
    "openai.Error",
    "openai.ListModelsResponse",
    "openai.Model",
    "anthropic.Message",
    "anthropic.RawMessageStreamEvent",
    "anthropic.MessageCreateParams",
    "anthropic.MessageCountTokensParams",
    "anthropic.MessageTokensCount",
    "anthropic.ModelInfo",
    "anthropic.ErrorResponse",
]


def _nullable(node: Any) -> Any:
    if isinstance(node, list):
        return [_nullable(x) for x in node]
    if not isinstance(node, dict):
        return node
    node = {k: _nullable(v) for k, v in node.items()}
    if node.pop("nullable", False):
        meta = {k: node.pop(k) for k in ("description", "title", "default", "example", "deprecated") if k in node}
        return {**meta, "anyOf": [node, {"type": "null"}]}
    return node


def _recursive(node: Any, target: str) -> Any:
    if isinstance(node, list):
        return [_recursive(x, target) for x in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for k, v in node.items():
        if k == "$recursiveAnchor":
            continue
        if k == "$recursiveRef":
            out["$ref"] = target
            continue
        out[k] = _recursive(v, target)
    return out


def _recursive_owner(defs: dict[str, Any]) -> str | None:
    for name, schema in defs.items():
        if isinstance(schema, dict) and schema.get("$recursiveAnchor"):
            return name
    return None


def _allow_null(schema: dict[str, Any], prop: str) -> None:
    props = schema.get("properties", {})
    if prop in props:
        props[prop] = {"anyOf": [props[prop], {"type": "null"}]}


def fix(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    schema = _nullable(schema)
    defs = schema.get("$defs", {})
    owner = _recursive_owner(defs)
    if owner:
        schema = _recursive(schema, f"#/$defs/{owner}")
        defs = schema["$defs"]
    # Response.user / Response.usage may be null. The Response object is an allOf of parts.
    for part in _response_parts(schema, defs, name):
        _allow_null(part, "user")
        _allow_null(part, "usage")
    usage = defs.get("ResponseUsage") or (schema if name == "openai.ResponseUsage" else None)
    if usage:
        details = usage.get("properties", {}).get("input_tokens_details", {})
        if "required" in details:
            details["required"] = [r for r in details["required"] if r != "cache_write_tokens"]
    if name == "anthropic.RawMessageStreamEvent":
        defs["PingEvent"] = {
            "type": "object",
            "properties": {"type": {"const": "ping"}},
            "required": ["type"],
            "title": "PingEvent",
        }
        schema["anyOf"] = [*schema["anyOf"], {"$ref": "#/$defs/PingEvent"}]
    if "InvalidRequestErrorObject" in defs and "RequestTooLargeErrorObject" not in defs:
        clone = json.loads(json.dumps(defs["InvalidRequestErrorObject"]))
        clone["properties"]["type"]["const"] = "request_too_large"
        clone["title"] = "RequestTooLargeErrorObject"
        defs["RequestTooLargeErrorObject"] = clone
        for d in _walk(schema):
            refs = d.get("anyOf")
            if isinstance(refs, list) and {"$ref": "#/$defs/InvalidRequestErrorObject"} in refs:
                refs.append({"$ref": "#/$defs/RequestTooLargeErrorObject"})
    for d in _walk(schema):
        enum = d.get("enum")
        if enum and "invalid_request_error" in enum and "request_too_large" not in enum:
            d["enum"] = [*enum, "request_too_large"]
    schema.setdefault("$schema", DRAFT)
    return schema


def _walk(node: Any) -> list[dict[str, Any]]:
    """Every dict inside `node`, depth first."""
    out: list[dict[str, Any]] = []
    stack = [node]
    while stack:
        cur = stack.pop()
        if isinstance(cur, dict):
            out.append(cur)
            stack.extend(cur.values())
        elif isinstance(cur, list):
            stack.extend(cur)
    return out


def _response_parts(schema: dict[str, Any], defs: dict[str, Any], name: str) -> list[dict[str, Any]]:
    resp = schema if name == "openai.Response" else defs.get("Response")
    if not isinstance(resp, dict):
        return []
    parts = [resp]
    for sub in resp.get("allOf", []):
        if "$ref" in sub:
            target = defs.get(sub["$ref"].rsplit("/", 1)[-1])
            if isinstance(target, dict):
                parts.append(target)
        else:
            parts.append(sub)
    return parts


def main() -> None:
    src = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT.parent / "shared" / "reference" / "schemas"
    for name in FILES:
        schema = json.loads((src / f"{name}.schema.json").read_text(encoding="utf-8"))
        fixed = fix(name, schema)
        (OUT / f"{name}.schema.json").write_text(json.dumps(fixed, ensure_ascii=False, sort_keys=False) + "\n", encoding="utf-8")
        print("wrote", name)


if __name__ == "__main__":
    main()
