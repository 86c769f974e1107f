"""OpenAI Responses checks: the response object, the SSE lifecycle, function calls, storage, SDK helper."""

from __future__ import annotations

from typing import Any

import jsonschema

from recipe.conformance import probes
from recipe.conformance.check import (
    CheckSkipped,
    check,
    expect,
    expect_schema,
    expect_status,
    json_events,
    ok_json,
    parse_json,
    skip_if_rejected,
)
from recipe.conformance.sdk import openai_client
from recipe.conformance.session import Exchange, Session

TERMINAL = {"response.completed", "response.incomplete", "response.failed"}
REQUIRED_KEYS = ("id", "object", "created_at", "status", "error", "incomplete_details", "instructions", "model",
                 "tools", "output", "parallel_tool_calls", "metadata", "tool_choice", "temperature", "top_p")




@check("responses.basic.status", "responses", "required", "{model, input: 'text'}", "200 with a JSON body")
def basic_status(s: Session) -> None:
    ok_json(probes.responses_basic(s))


@check("responses.basic.schema", "responses", "required", "minimal request", "body valid against Response")
def basic_schema(s: Session) -> None:
    ex = probes.responses_basic(s)
    expect_schema("openai.Response", ok_json(ex), ex)


@check("responses.basic.required_keys", "responses", "required", "minimal request", "object response, id resp_…, status completed/incomplete, every required key present")
def basic_keys(s: Session) -> None:
    ex = probes.responses_basic(s)
    data = ok_json(ex)
    missing = [k for k in REQUIRED_KEYS if k not in data]
    expect(not missing, f"missing keys {missing}", ex)
    expect(data.get("object") == "response", f"object {data.get('object')!r}", ex)
    expect(str(data.get("id", "")).startswith("resp_"), f"id {data.get('id')!r} lacks resp_", ex)
    expect(data.get("status") in ("completed", "incomplete"), f"status {data.get('status')!r}", ex)


@check("responses.basic.output_message", "responses", "required", "minimal request", "an output message item with output_text content (annotations and logprobs lists)")
def output_message(s: Session) -> None:
    ex = probes.responses_basic(s)
    items = [i for i in ok_json(ex).get("output", []) if isinstance(i, dict) and i.get("type") == "message"]
    expect(items, "no message item in output", ex)
    item = items[0]
    expect(item.get("role") == "assistant" and str(item.get("id", "")).startswith("msg_"), "message item lacks role assistant or id msg_…", ex)
    parts = item.get("content") or []
    expect(parts and all(p.get("type") == "output_text" and isinstance(p.get("annotations"), list) for p in parts), "content parts are not output_text with annotations", ex)


@check("responses.basic.usage", "responses", "required", "minimal request", "usage {input_tokens, input_tokens_details.cached_tokens, output_tokens, output_tokens_details.reasoning_tokens, total_tokens}")
def basic_usage(s: Session) -> None:
    ex = probes.responses_basic(s)
    u = ok_json(ex).get("usage") or {}
    expect(all(isinstance(u.get(k), int) for k in ("input_tokens", "output_tokens", "total_tokens")), "usage counts missing", ex)
    expect(u["total_tokens"] == u["input_tokens"] + u["output_tokens"], "total_tokens != input + output", ex)
    expect(isinstance((u.get("input_tokens_details") or {}).get("cached_tokens"), int), "input_tokens_details.cached_tokens missing", ex)
    expect(isinstance((u.get("output_tokens_details") or {}).get("reasoning_tokens"), int), "output_tokens_details.reasoning_tokens missing", ex)


@check("responses.input_items", "responses", "required", "input as items with system, developer, user and assistant roles", "200")
def input_items(s: Session) -> None:
    items = [
        {"role": "system", "content": "Be brief."},
        {"role": "developer", "content": "Answer in English."},
        {"role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Hello."}]},
        {"role": "user", "content": probes.PROMPT},
    ]
    ok_json(s.post("responses", probes.responses_body(s, input=items, max_output_tokens=4)))


@check("responses.max_output_tokens.incomplete", "responses", "required", "max_output_tokens: 1", "status incomplete, incomplete_details.reason max_output_tokens")
def incomplete(s: Session) -> None:
    ex = s.post("responses", probes.responses_body(s, max_output_tokens=1, reasoning={"effort": "none"}))
    data = ok_json(ex)
    expect(data.get("status") == "incomplete", f"status {data.get('status')!r}", ex)
    expect((data.get("incomplete_details") or {}).get("reason") == "max_output_tokens", f"incomplete_details {data.get('incomplete_details')!r}", ex)


def _function_call(s: Session) -> tuple[Exchange, dict[str, Any]]:
    ex = probes.responses_tool(s)
    skip_if_rejected(ex, "function tools with a named tool_choice")
    calls = [i for i in ok_json(ex).get("output", []) if isinstance(i, dict) and i.get("type") == "function_call"]
    expect(calls, "no function_call item for a named tool_choice", ex)
    return ex, calls[0]


@check("responses.tools.function_call", "responses", "required", "flat function tool + named tool_choice", "a function_call item {call_id, name, arguments JSON string, status completed}")
def function_call(s: Session) -> None:
    ex, call = _function_call(s)
    expect(call.get("name") == "get_weather" and call.get("call_id") and call.get("status") == "completed", "function_call lacks name/call_id/status", ex)
    args = parse_json(call.get("arguments"), ex, "arguments")
    errors = list(jsonschema.Draft202012Validator(probes.WEATHER_TOOL_PARAMS).iter_errors(args))
    expect(not errors, f"arguments violate the parameters: {errors[0].message if errors else ''}", ex)


@check("responses.tools.round_trip", "responses", "required", "follow-up with function_call and function_call_output items", "200 with an output")
def function_round_trip(s: Session) -> None:
    _, call = _function_call(s)
    items = [
        {"role": "user", "content": probes.TOOL_PROMPT},
        {"type": "function_call", "call_id": call["call_id"], "name": call["name"], "arguments": call.get("arguments", "{}")},
        {"type": "function_call_output", "call_id": call["call_id"], "output": "18 C, clear"},
    ]
    ok_json(s.post("responses", probes.responses_body(s, input=items, max_output_tokens=8, reasoning={"effort": "none"})))


@check("responses.json_schema", "responses", "required", "text.format json_schema (strict)", "output_text parses as JSON valid against the schema")
def json_schema(s: Session) -> None:
    body = probes.responses_body(
        s, input=probes.JSON_PROMPT, max_output_tokens=96, reasoning={"effort": "none"},
        text={"format": {"type": "json_schema", "name": "city", "schema": probes.CITY_SCHEMA, "strict": True}},
    )
    ex = s.post("responses", body)
    skip_if_rejected(ex, "text.format json_schema")
    ok_json(ex)
    doc = parse_json(probes.responses_text(ex), ex, "output_text")
    errors = list(jsonschema.Draft202012Validator(probes.CITY_SCHEMA).iter_errors(doc))
    expect(not errors, f"output violates the schema: {errors[0].message if errors else ''}", ex)


@check("responses.stream.event_lines", "responses", "required", "stream: true", "every event has an event: line equal to data.type")
def event_lines(s: Session) -> None:
    ex = probes.responses_stream(s)
    for name, d in json_events(ex):
        expect(name == d.get("type"), f"event: {name!r} but data.type {d.get('type')!r}", ex)


@check("responses.stream.event_schema", "responses", "required", "stream: true", "every event valid against ResponseStreamEvent")
def event_schema(s: Session) -> None:
    ex = probes.responses_stream(s)
    for _, d in json_events(ex):
        expect_schema("openai.ResponseStreamEvent", d, ex, f"event {d.get('type')}")


@check("responses.stream.sequence_numbers", "responses", "required", "stream: true", "sequence_number counts up by one from 0")
def sequence_numbers(s: Session) -> None:
    ex = probes.responses_stream(s)
    nums = [d.get("sequence_number") for _, d in json_events(ex)]
    expect(nums == list(range(len(nums))), f"sequence numbers {nums[:8]}…", ex)


@check("responses.stream.lifecycle", "responses", "required", "stream: true", "response.created (in_progress) first; a terminal event last; nothing after it")
def lifecycle(s: Session) -> None:
    ex = probes.responses_stream(s)
    types = [d.get("type") for _, d in json_events(ex)]
    expect(types[0] == "response.created", f"first event {types[0]!r}", ex)
    expect((json_events(ex)[0][1].get("response") or {}).get("status") == "in_progress", "created response is not in_progress", ex)
    expect(types[-1] in TERMINAL, f"last event {types[-1]!r}", ex)
    expect(sum(t in TERMINAL for t in types) == 1, "more than one terminal event", ex)


@check("responses.stream.text_order", "responses", "required", "stream: true", "output_item.added → content_part.added → output_text.delta* → output_text.done → content_part.done → output_item.done")
def text_order(s: Session) -> None:
    ex = probes.responses_stream(s)
    delta = "response.output_text.delta"
    seq: list[str] = []
    for _, d in json_events(ex):
        t = str(d.get("type"))
        if t.startswith("response.output_item.") and (d.get("item") or {}).get("type") != "message":
            continue
        relevant = t.startswith(("response.output_item.", "response.content_part.", "response.output_text."))
        if relevant and not (t == delta and seq and seq[-1] == delta):
            seq.append(t)
    wanted = ["response.output_item.added", "response.content_part.added", delta,
              "response.output_text.done", "response.content_part.done", "response.output_item.done"]
    expect(seq in (wanted, [w for w in wanted if w != delta]), f"message events in order {seq}", ex)


@check("responses.stream.text_done", "responses", "required", "stream: true", "output_text.done text equals the concatenated deltas")
def text_done(s: Session) -> None:
    ex = probes.responses_stream(s)
    events = [d for _, d in json_events(ex)]
    deltas = "".join(d.get("delta", "") for d in events if d.get("type") == "response.output_text.delta")
    done = [d.get("text") for d in events if d.get("type") == "response.output_text.done"]
    expect(done and done[0] == deltas, "output_text.done text differs from the deltas", ex)


@check("responses.stream.matches_non_stream", "responses", "recommended", "the same temperature-0 request with and without stream", "the streamed text equals the non-stream text")
def stream_matches(s: Session) -> None:
    ex = probes.responses_stream(s)
    deltas = "".join(d.get("delta", "") for _, d in json_events(ex) if d.get("type") == "response.output_text.delta")
    expect(deltas == probes.responses_text(probes.responses_basic(s)), "streamed text differs from the non-stream text", ex, streamed=deltas)


@check("responses.stream.identity", "responses", "required", "stream: true", "response.id stable across lifecycle events; output_item.done id equals added; completed output equals done items")
def identity(s: Session) -> None:
    ex = probes.responses_stream(s)
    events = [d for _, d in json_events(ex)]
    ids = {(d.get("response") or {}).get("id") for d in events if "response" in d}
    expect(len(ids) == 1, f"response ids {ids}", ex)
    added = {d.get("output_index"): (d.get("item") or {}).get("id") for d in events if d.get("type") == "response.output_item.added"}
    done = {d.get("output_index"): d.get("item") for d in events if d.get("type") == "response.output_item.done"}
    expect(added.keys() == done.keys() and all(added[k] == (done[k] or {}).get("id") for k in added), "output_item.done ids differ from added", ex)
    final = (events[-1].get("response") or {}).get("output")
    expect(final == [done[k] for k in sorted(done, key=lambda i: i if isinstance(i, int) else -1)], "terminal response output differs from the done items", ex)


@check("responses.stream.function_call", "responses", "required", "streamed named function call", "output_item.added(function_call, arguments '') → arguments.delta* → arguments.done {arguments, name} → output_item.done")
def stream_function_call(s: Session) -> None:
    ex = probes.responses_tool(s, stream=True)
    skip_if_rejected(ex, "function tools with a named tool_choice")
    events = [d for _, d in json_events(ex)]
    added = [d for d in events if d.get("type") == "response.output_item.added" and (d.get("item") or {}).get("type") == "function_call"]
    expect(added, "no function_call output_item.added", ex)
    expect(added[0]["item"].get("arguments") == "", "function_call item does not start with arguments ''", ex)
    idx = added[0].get("output_index")
    deltas = "".join(d.get("delta", "") for d in events if d.get("type") == "response.function_call_arguments.delta" and d.get("output_index") == idx)
    dones = [d for d in events if d.get("type") == "response.function_call_arguments.done" and d.get("output_index") == idx]
    expect(dones and dones[0].get("arguments") == deltas, "arguments.done differs from the deltas", ex)
    parse_json(deltas, ex, "streamed arguments")


def _sdk_terminal(s: Session) -> Any:
    """The response of the SDK stream's terminal event (get_final_response() when completed), or the exception."""

    def make() -> Any:
        client = openai_client(s)
        terminal: Any = None
        try:
            with client.responses.stream(model=s.model, input=probes.PROMPT, max_output_tokens=probes.MAX_TOKENS, temperature=0) as stream:
                for event in stream:
                    if event.type in TERMINAL:
                        terminal = event.response
                if terminal is not None and terminal.status == "completed":
                    terminal = stream.get_final_response()
        except Exception as exc:
            return exc
        return terminal

    return s.memo("openai.responses.stream", make)


@check("responses.sdk.stream_final", "responses", "required", "openai SDK responses.stream() to its terminal event (+ get_final_response() when completed)", "no error; a terminal response with output_text")
def sdk_stream(s: Session) -> None:
    terminal = _sdk_terminal(s)
    expect(not isinstance(terminal, Exception), f"openai SDK responses stream raised {type(terminal).__name__}: {terminal}")
    expect(terminal is not None, "the SDK saw no terminal event (response.completed / incomplete / failed)")
    expect(isinstance(terminal.output_text, str), "terminal response has no output_text")


@check("responses.sdk.matches_non_stream", "responses", "recommended", "openai SDK stream and a non-stream request at temperature 0", "the same output_text")
def sdk_matches(s: Session) -> None:
    terminal = _sdk_terminal(s)
    if isinstance(terminal, Exception) or terminal is None:
        raise CheckSkipped("the SDK stream itself failed; see responses.sdk.stream_final")
    ref = probes.responses_text(probes.responses_basic(s))
    expect(terminal.output_text == ref, "SDK output_text differs from the non-stream text", None, sdk=terminal.output_text, non_stream=ref)


@check("responses.store.previous_response_id", "responses", "recommended", "store: true, then GET /v1/responses/{id} and a follow-up with previous_response_id", "both 200")
def store_previous(s: Session) -> None:
    first = s.post("responses", probes.responses_body(s, store=True, max_output_tokens=4))
    rid = ok_json(first).get("id")
    got = s.get(f"/v1/responses/{rid}", api="responses")
    expect_status(got, 200)
    expect((got.json() or {}).get("id") == rid, "retrieved response has another id", got)
    nxt = s.post("responses", probes.responses_body(s, input="And another one.", previous_response_id=rid, max_output_tokens=4))
    ok_json(nxt)


@check("responses.store.unknown_previous", "responses", "recommended", "previous_response_id that does not exist", "400 or 404 in the OpenAI error shape")
def unknown_previous(s: Session) -> None:
    ex = s.post("responses", probes.responses_body(s, previous_response_id="resp_does_not_exist_0000", max_output_tokens=4))
    expect_status(ex, (400, 404))
    expect_schema("openai.ErrorResponse", ex.json(), ex, "error body")
