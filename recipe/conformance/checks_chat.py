"""Chat Completions checks on complete (non-stream) responses."""

from __future__ import annotations

from typing import Any

import jsonschema
import orjson

from recipe.conformance import probes
from recipe.conformance.check import (
    CheckSkipped,
    check,
    expect,
    expect_schema,
    expect_status,
    ok_json,
    parse_json,
    skip_if_rejected,
)
from recipe.conformance.session import Exchange, Session


def _choice(ex: Exchange) -> dict[str, Any]:
    data = ok_json(ex)
    choices: Any = data.get("choices")
    expect(isinstance(choices, list) and choices and isinstance(choices[0], dict), "no choices[0]", ex)
    first: dict[str, Any] = choices[0]
    return first


@check("chat.basic.status", "chat", "required", "minimal {model, messages:[user]}", "200 with a JSON body")
def basic_status(s: Session) -> None:
    ok_json(probes.chat_basic(s))


@check("chat.basic.schema", "chat", "required", "minimal request", "body valid against CreateChatCompletionResponse")
def basic_schema(s: Session) -> None:
    ex = probes.chat_basic(s)
    expect_schema("openai.CreateChatCompletionResponse", ok_json(ex), ex)


@check("chat.basic.identity", "chat", "recommended", "minimal request", "object chat.completion, id chatcmpl-…, model echoes the request")
def basic_identity(s: Session) -> None:
    ex = probes.chat_basic(s)
    data = ok_json(ex)
    expect(data.get("object") == "chat.completion", f"object is {data.get('object')!r}", ex)
    expect(str(data.get("id", "")).startswith("chatcmpl-"), f"id {data.get('id')!r} lacks chatcmpl-", ex)
    expect(data.get("model") == s.model, f"model {data.get('model')!r} != {s.model!r}", ex)


@check("chat.basic.message", "chat", "required", "minimal request", "choices[0].message has role assistant and string content; finish_reason set")
def basic_message(s: Session) -> None:
    ex = probes.chat_basic(s)
    choice = _choice(ex)
    msg = choice.get("message") or {}
    expect(msg.get("role") == "assistant", f"role {msg.get('role')!r}", ex)
    expect(isinstance(msg.get("content"), str), "content is not a string", ex)
    expect(choice.get("finish_reason") in ("stop", "length"), f"finish_reason {choice.get('finish_reason')!r}", ex)
    expect("logprobs" in choice, "choices[0].logprobs key missing", ex)


@check("chat.usage.totals", "chat", "required", "minimal request", "usage.total_tokens = prompt + completion; cached ≤ prompt")
def usage_totals(s: Session) -> None:
    ex = probes.chat_basic(s)
    usage: Any = ok_json(ex).get("usage")
    expect(isinstance(usage, dict), "usage missing", ex)
    p, c, t = usage.get("prompt_tokens"), usage.get("completion_tokens"), usage.get("total_tokens")
    expect(all(isinstance(x, int) for x in (p, c, t)), "usage counts are not integers", ex)
    expect(t == p + c, f"total_tokens {t} != {p} + {c}", ex)
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0) or 0
    expect(0 <= cached <= p, f"cached_tokens {cached} outside [0, {p}]", ex)


@check("chat.max_tokens.length", "chat", "required", "max_tokens: 1", "finish_reason length, completion_tokens ≤ 1")
def max_tokens_length(s: Session) -> None:
    ex = s.post("chat", probes.chat_body(s, max_tokens=1), cache_key="chat.max1")
    choice = _choice(ex)
    expect(choice.get("finish_reason") == "length", f"finish_reason {choice.get('finish_reason')!r}", ex)
    usage = (ex.json() or {}).get("usage") or {}
    expect(usage.get("completion_tokens", 0) <= 1, f"completion_tokens {usage.get('completion_tokens')}", ex)


@check("chat.stop.no_leak", "chat", "required", "stop: [a word the temperature-0 output contains]", "text ends before the stop string; finish_reason stop")
def stop_no_leak(s: Session) -> None:
    ref = probes.chat_content(probes.chat_basic(s)) or ""
    stop = probes.pick_stop(ref)
    if stop is None:
        raise CheckSkipped(f"the reference output is too short to pick a stop string from: {ref!r}")
    ex = s.post("chat", probes.chat_body(s, stop=[stop]), cache_key="chat.stop")
    choice = _choice(ex)
    text = probes.chat_content(ex) or ""
    expect(stop not in text, f"stop string {stop!r} leaked into the content", ex, stop=stop)
    if choice.get("finish_reason") != "stop" or not ref.startswith(text):
        raise CheckSkipped("temperature-0 output is not reproducible on this server, so the stop was not reached", ex.evidence())
    expect(text == ref[: ref.find(stop)], "content is not the reference cut at the stop string", ex, stop=stop, reference=ref)


@check("chat.stop.single_string", "chat", "recommended", "stop as one string, not a list", "accepted with the same meaning")
def stop_single(s: Session) -> None:
    ref = probes.chat_content(probes.chat_basic(s)) or ""
    stop = probes.pick_stop(ref)
    if stop is None:
        raise CheckSkipped("reference output too short")
    ex = s.post("chat", probes.chat_body(s, stop=stop))
    expect_status(ex, 200)
    expect(stop not in (probes.chat_content(ex) or ""), "stop string leaked", ex)


@check("chat.n.choices", "chat", "recommended", "n: 2", "two choices with index 0 and 1 (or a clear 400)")
def n_choices(s: Session) -> None:
    ex = s.post("chat", probes.chat_body(s, n=2, temperature=0.7, max_tokens=8))
    if ex.status == 400:
        expect_schema("openai.ErrorResponse", ex.json(), ex, "400 body")
        return
    data = ok_json(ex)
    idx = sorted(c.get("index") for c in data.get("choices", []))
    expect(idx == [0, 1], f"choice indices {idx}", ex)


@check("chat.seed.deterministic", "chat", "recommended", "the same temperature-0 seeded request twice", "identical content")
def seed_deterministic(s: Session) -> None:
    a = probes.chat_content(probes.chat_basic(s))
    ex = s.post("chat", probes.chat_body(s))
    expect(probes.chat_content(ex) == a, "two identical temperature-0 requests gave different content", ex, first=a)


@check("chat.logprobs.shape", "chat", "recommended", "logprobs: true, top_logprobs: 2", "choices[0].logprobs.content[] with token, logprob, bytes, top_logprobs[2]")
def logprobs_shape(s: Session) -> None:
    ex = s.post("chat", probes.chat_body(s, logprobs=True, top_logprobs=2, max_tokens=4))
    skip_if_rejected(ex, "logprobs")
    choice = _choice(ex)
    lp = choice.get("logprobs") or {}
    items: Any = lp.get("content")
    expect(isinstance(items, list) and items, "logprobs.content missing or empty", ex)
    for it in items:
        expect(isinstance(it.get("token"), str) and isinstance(it.get("logprob"), (int, float)), "logprob item lacks token/logprob", ex)
        expect(it.get("logprob") <= 0, f"logprob {it.get('logprob')} > 0", ex)
        expect(len(it.get("top_logprobs") or []) == 2, "top_logprobs does not have 2 entries", ex)


def _tool_call(s: Session) -> tuple[Exchange, dict[str, Any]]:
    ex = probes.chat_named_tool(s)
    skip_if_rejected(ex, "tools with a named tool_choice")
    choice = _choice(ex)
    calls: Any = (choice.get("message") or {}).get("tool_calls")
    expect(isinstance(calls, list) and calls, "no tool_calls for a named tool_choice", ex)
    return ex, calls[0]


@check("chat.tools.named_call", "chat", "required", "tools:[get_weather], tool_choice names it", "a tool call {id, type function, function{name, arguments}}; finish_reason tool_calls")
def tools_named(s: Session) -> None:
    ex, call = _tool_call(s)
    expect(call.get("type") == "function" and isinstance(call.get("id"), str) and call["id"], "tool call lacks id/type", ex)
    expect((call.get("function") or {}).get("name") == "get_weather", "tool call names another function", ex)
    expect(_choice(ex).get("finish_reason") == "tool_calls", f"finish_reason {_choice(ex).get('finish_reason')!r}", ex)


@check("chat.tools.arguments_json", "chat", "required", "named tool call", "function.arguments is a JSON string of an object valid against the tool's parameters")
def tools_arguments(s: Session) -> None:
    ex, call = _tool_call(s)
    args = (call.get("function") or {}).get("arguments")
    expect(isinstance(args, str), "arguments is not a string", ex)
    parsed = parse_json(args, ex, "arguments")
    expect(isinstance(parsed, dict), "arguments are not a JSON object", ex)
    errors = list(jsonschema.Draft202012Validator(probes.WEATHER_TOOL_PARAMS).iter_errors(parsed))
    expect(not errors, f"arguments violate the parameters schema: {errors[0].message if errors else ''}", ex)


@check("chat.tools.none", "chat", "recommended", "tools with tool_choice: none", "no tool_calls")
def tools_none(s: Session) -> None:
    ex = s.post("chat", probes.chat_body(s, messages=[{"role": "user", "content": probes.TOOL_PROMPT}], tools=probes.chat_tools(), tool_choice="none", max_tokens=16))
    skip_if_rejected(ex, "tools")
    expect(not (_choice(ex).get("message") or {}).get("tool_calls"), "tool_calls returned with tool_choice none", ex)


@check("chat.tools.round_trip", "chat", "required", "history with an assistant tool call and its tool result", "200 with an assistant answer")
def tools_round_trip(s: Session) -> None:
    _, call = _tool_call(s)
    messages = [
        {"role": "user", "content": probes.TOOL_PROMPT},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call.get("id"), "content": "{\"temperature_c\": 18, \"sky\": \"clear\"}"},
    ]
    ex = s.post("chat", probes.chat_body(s, messages=messages, tools=probes.chat_tools(), max_tokens=16))
    msg = _choice(ex).get("message") or {}
    expect(isinstance(msg.get("content"), str) or msg.get("tool_calls"), "no answer after the tool result", ex)


@check("chat.response_format.json_schema", "chat", "required", "response_format json_schema (strict)", "content parses as JSON valid against the schema")
def json_schema(s: Session) -> None:
    ex = probes.chat_json_schema(s)
    skip_if_rejected(ex, "response_format json_schema")
    text = probes.chat_content(ex)
    expect(isinstance(text, str), "no content", ex)
    doc = parse_json(text, ex, "content")
    errors = list(jsonschema.Draft202012Validator(probes.CITY_SCHEMA).iter_errors(doc))
    expect(not errors, f"content violates the schema: {errors[0].message if errors else ''}", ex)


@check("chat.response_format.json_object", "chat", "recommended", "response_format json_object", "content is a JSON object")
def json_object(s: Session) -> None:
    ex = s.post("chat", probes.chat_body(s, messages=[{"role": "user", "content": probes.JSON_PROMPT}], response_format={"type": "json_object"}, max_tokens=96))
    skip_if_rejected(ex, "response_format json_object")
    text = probes.chat_content(ex) or ""
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError:
        doc = None
    expect(isinstance(doc, dict), f"content is not a JSON object: {text[:200]!r}", ex)


@check("chat.content_parts", "chat", "required", "user content as [{type: text, text}]", "accepted like string content")
def content_parts(s: Session) -> None:
    ex = s.post("chat", probes.chat_body(s, messages=[{"role": "user", "content": [{"type": "text", "text": probes.PROMPT}]}], max_tokens=4))
    _choice(ex)


@check("chat.system_message", "chat", "required", "a system message before the user message", "200")
def system_message(s: Session) -> None:
    ex = s.post("chat", probes.chat_body(s, messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": probes.PROMPT}], max_tokens=4))
    _choice(ex)
