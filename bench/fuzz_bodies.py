"""Hostile request bodies for the three APIs: drawn from the OpenAPI request-body schemas (mostly valid,
sometimes violating one keyword), and mutations of the golden corpus' requests (valid and invalid ones):
fields deleted, retyped, enlarged, nested deep, unknown fields added, the JSON text itself broken.

Everything is drawn from one `random.Random`, so a seed reproduces a run (hypothesis drives it in the tests).
"""

from __future__ import annotations

import gzip
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
APIS = ("chat", "messages", "responses")
PATH_OF = {"chat": "/v1/chat/completions", "messages": "/v1/messages", "responses": "/v1/responses"}
SCHEMA_OF = {"chat": "ChatCompletionRequest", "messages": "MessagesRequest", "responses": "ResponsesRequest"}

_WEIRD_STRINGS = ["", " ", "\x00", "\u202e", "\ud7ff", "😀" * 50, "<｜end▁of▁sentence｜>", "<|im_end|>",
                  "</think>", "<｜DSML｜invoke>", "\r\n\r\n", "%s%n", "../../etc/passwd", "file:///etc/passwd",
                  "a" * 5000, "null", "{}", "[]", "-1", "1e309", "NaN", "true"]
_WEIRD_NUMBERS = [0, -1, 1, 2**31, 2**32, 2**63, 2**64, 2**70, -(2**63), 0.5, -0.0, 1e308, -1e308, 3.4e38, 1e-320]


@dataclass(frozen=True)
class FuzzCase:
    api: str
    path: str
    body: bytes  # the raw request body (not always JSON)
    how: str  # which generator made it


def load_seeds(limit: int | None = None) -> dict[str, list[dict[str, Any]]]:
    """The golden corpus' request bodies that are JSON objects, per API."""
    seeds: dict[str, list[dict[str, Any]]] = {api: [] for api in APIS}
    with gzip.open(ROOT / "golden" / "requests.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            try:
                body = json.loads(row["request"])
            except (json.JSONDecodeError, TypeError):
                continue
            if isinstance(body, dict) and row["api"] in seeds:
                seeds[row["api"]].append(body)
    if limit is not None:
        seeds = {k: v[:limit] for k, v in seeds.items()}
    return seeds


def random_json(rnd: random.Random, depth: int = 0) -> Any:
    """Any JSON value, shallow, weighted toward edge values."""
    kind = rnd.randrange(9 if depth < 3 else 6)
    if kind == 0:
        return None
    if kind == 1:
        return rnd.choice([True, False])
    if kind == 2:
        return rnd.choice(_WEIRD_NUMBERS) if rnd.random() < 0.5 else rnd.randint(-1000, 100000)
    if kind == 3:
        return rnd.uniform(-10, 10)
    if kind in (4, 5):
        return rnd.choice(_WEIRD_STRINGS) if rnd.random() < 0.5 else "".join(
            chr(rnd.choice([rnd.randint(32, 126), rnd.randint(0x80, 0x2FFF), rnd.randint(0, 31)])) for _ in range(rnd.randint(0, 40)))
    if kind == 6:
        return [random_json(rnd, depth + 1) for _ in range(rnd.randint(0, 4))]
    return {rnd.choice(["type", "text", "role", "content", "x", "", "name", "id"]): random_json(rnd, depth + 1)
            for _ in range(rnd.randint(0, 4))}


class SchemaDrawer:
    """Values for a JSON Schema (the pydantic-made subset: $ref, anyOf, type, enum, const, properties,
    required, items, numeric bounds); with probability `violate` per node, a value of the wrong kind."""

    def __init__(self, components: dict[str, Any], rnd: random.Random, violate: float = 0.03) -> None:
        self.components = components
        self.rnd = rnd
        self.violate = violate

    def draw(self, schema: Any, depth: int = 0) -> Any:
        rnd = self.rnd
        if not isinstance(schema, dict) or depth > 8:
            return random_json(rnd, 2)
        if rnd.random() < self.violate:
            return random_json(rnd, 1)
        if "$ref" in schema:
            return self.draw(self.components[schema["$ref"].rsplit("/", 1)[1]], depth + 1)
        if "anyOf" in schema:
            return self.draw(rnd.choice(schema["anyOf"]), depth + 1)
        if "const" in schema:
            return schema["const"]
        if "enum" in schema:
            return rnd.choice(schema["enum"])
        t = schema.get("type")
        if t == "object" or "properties" in schema:
            props = schema.get("properties", {})
            required = set(schema.get("required", ()))
            out = {k: self.draw(v, depth + 1) for k, v in props.items() if k in required or rnd.random() < 0.3}
            if rnd.random() < 0.1:
                out[rnd.choice(["extra", "x_unknown", "metadata", "user"])] = random_json(rnd, 1)
            return out
        if t == "array":
            return [self.draw(schema.get("items", {}), depth + 1) for _ in range(rnd.choice([0, 1, 1, 2, 3]))]
        if t == "integer":
            lo = schema.get("minimum", -5)
            hi = schema.get("exclusiveMaximum", 10**6) - 1
            return rnd.choice([lo, min(hi, lo + rnd.randint(0, 64)), hi])
        if t == "number":
            return rnd.choice([0.0, 0.5, 1.0, 2.0, -1.0, rnd.uniform(-3, 3)])
        if t == "boolean":
            return rnd.random() < 0.5
        if t == "string":
            return rnd.choice(["hello", "user", "", "auto", rnd.choice(_WEIRD_STRINGS)])
        if t == "null":
            return None
        return random_json(rnd, 2)  # an open schema: anything


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


def _get(value: Any, path: tuple[Any, ...]) -> Any:
    for p in path:
        value = value[p]
    return value


def mutate(body: dict[str, Any], rnd: random.Random) -> tuple[Any, str]:
    """One structural mutation of a copy of `body`: (new value, mutation name)."""
    body = json.loads(json.dumps(body))
    path = rnd.choice(_paths(body))
    parent_path, key = path[:-1], (path[-1] if path else None)
    parent: Any = _get(body, parent_path) if path else None
    op = rnd.choice(["delete", "retype", "retype", "unknown_key", "huge_list", "huge_string", "deep", "number",
                     "swap_types", "null"])
    if path == ():
        return (random_json(rnd) if op in ("retype", "null") else body), "root_" + op
    if op == "delete":
        if isinstance(parent, dict):
            del parent[key]
        else:
            parent.pop(key)
    elif op in ("retype", "swap_types"):
        parent[key] = random_json(rnd)
    elif op == "null":
        parent[key] = None
    elif op == "unknown_key":
        target = _get(body, path)
        if isinstance(target, dict):
            target[rnd.choice(["zz", "__proto__", "$ref", "constructor", ""])] = random_json(rnd)
        else:
            parent[key] = {"unexpected": target}
    elif op == "huge_list":
        parent[key] = [_get(body, path)] * rnd.choice([100, 2000])
    elif op == "huge_string":
        parent[key] = rnd.choice(["x", "é", "😀", "<｜User｜>"]) * rnd.choice([1000, 100_000])
    elif op == "deep":
        v: Any = _get(body, path)
        for _ in range(rnd.choice([50, 300, 1000])):
            v = rnd.choice([[v], {"a": v}])
        parent[key] = v
    elif op == "number":
        parent[key] = rnd.choice(_WEIRD_NUMBERS)
    return body, "mutate_" + op


def break_text(text: bytes, rnd: random.Random) -> tuple[bytes, str]:
    """The JSON text itself damaged: truncated, a byte flipped, invalid UTF-8, NaN, duplicate keys..."""
    op = rnd.choice(["truncate", "flip", "bad_utf8", "nan", "dup_key", "trailing", "empty", "bom"])
    if op == "truncate" and text:
        return text[: rnd.randrange(len(text))], op
    if op == "flip" and text:
        i = rnd.randrange(len(text))
        return text[:i] + bytes([rnd.randrange(256)]) + text[i + 1:], op
    if op == "bad_utf8":
        return text.replace(b'"', b'"\xff\xfe', 1), op
    if op == "nan":
        return text.replace(b"{", b'{"temperature": NaN, ', 1), op
    if op == "dup_key":
        return text.replace(b"{", b'{"model": 1, ', 1), op
    if op == "trailing":
        return text + b" garbage", op
    if op == "bom":
        return b"\xef\xbb\xbf" + text, op
    return b"", "empty"


class CaseMaker:
    """Draws fuzz cases for one API: 40% schema-drawn, 45% corpus mutations, 15% broken JSON text."""

    def __init__(self, components: dict[str, Any], seeds: dict[str, list[dict[str, Any]]],
                 served_model: str, max_tokens_cap: int | None = None) -> None:
        """`max_tokens_cap` (for a real engine): every generation that would be valid is at most this long;
        a missing length or one above the cap (but below 100,000) becomes 1..cap, other values stay as drawn."""
        self.components = components
        self.seeds = seeds
        self.model = served_model
        self.max_tokens_cap = max_tokens_cap
        self._api = "chat"

    def _fix_model(self, body: Any, rnd: random.Random) -> Any:
        if isinstance(body, dict) and "model" in body and rnd.random() < 0.8:
            body["model"] = self.model
        k = {"chat": "max_tokens", "messages": "max_tokens", "responses": "max_output_tokens"}[self._api]
        if (isinstance(body, dict) and rnd.random() < 0.8  # keep most generations short
                and (not isinstance(body.get(k), int) or body[k] > 64)):
            body[k] = rnd.randint(0, 64)
        cap = self.max_tokens_cap
        if cap is not None and isinstance(body, dict):
            v = body.get(k)
            if v is None or (isinstance(v, int) and not isinstance(v, bool) and cap < v < 100_000):
                body[k] = rnd.randint(1, cap)
        return body

    def case(self, api: str, rnd: random.Random) -> FuzzCase:
        self._api = api
        r = rnd.random()
        if r < 0.40:
            drawer = SchemaDrawer(self.components, rnd)
            body = self._fix_model(drawer.draw({"$ref": "#/components/schemas/" + SCHEMA_OF[api]}), rnd)
            how = "schema"
        else:
            body, how = mutate(rnd.choice(self.seeds[api]), rnd)
            body = self._fix_model(body, rnd)
        try:
            text = json.dumps(body, ensure_ascii=rnd.random() < 0.5).encode("utf-8", "surrogatepass")
        except (ValueError, RecursionError):
            text, how = b"[]", how + "+unencodable"
        if r >= 0.85:
            text, op = break_text(text, rnd)
            how = "text_" + op
        return FuzzCase(api, PATH_OF[api], text, how)


def _error_shape_problem(api: str, body: Any) -> str | None:
    if api == "messages":
        ok = (isinstance(body, dict) and body.get("type") == "error" and isinstance(body.get("error"), dict)
              and isinstance(body["error"].get("type"), str) and isinstance(body["error"].get("message"), str))
        return None if ok else "not Anthropic's error shape"
    ok = (isinstance(body, dict) and set(body) == {"error"} and isinstance(body["error"], dict)
          and {"message", "type", "param", "code"} <= set(body["error"]) and isinstance(body["error"]["message"], str))
    return None if ok else "not OpenAI's error shape"


# The last SSE event a finished stream may have (chat: its `data: [DONE]`).
_STREAM_ENDS = {
    "messages": {"message_stop", "error"},
    "responses": {"response.completed", "response.incomplete", "response.failed", "error"},
}


def _last_event(raw: bytes) -> str:
    at = raw.rfind(b"event: ")
    return "" if at < 0 else raw[at + 7:].split(b"\n", 1)[0].strip().decode("utf-8", "replace")


_OBJECT_OK = {
    "chat": lambda b: b.get("object") == "chat.completion" and isinstance(b.get("choices"), list),
    "messages": lambda b: b.get("type") == "message" and isinstance(b.get("content"), list),
    "responses": lambda b: b.get("object") == "response" and isinstance(b.get("output"), list),
}


def check_answer(api: str, status: int, content_type: str, raw: bytes) -> str | None:
    """None when the answer is the API's error shape or a valid response; else what is wrong."""
    if status >= 500:
        return f"status {status}"
    if b"Traceback" in raw or b'File "/' in raw:
        return "stack trace in the body"
    if status >= 400:
        try:
            return _error_shape_problem(api, json.loads(raw))
        except ValueError:
            return "error body is not JSON"
    if status != 200:
        return f"unexpected status {status}"
    if content_type.startswith("text/event-stream"):
        if api == "chat":
            ended = raw.rstrip().endswith(b"data: [DONE]")
        else:
            ended = _last_event(raw) in _STREAM_ENDS[api]
        return None if ended else "stream without its proper end"
    try:
        body = json.loads(raw)
    except ValueError:
        return "200 body is not JSON"
    return None if isinstance(body, dict) and _OBJECT_OK[api](body) else "200 body is not a response object"
