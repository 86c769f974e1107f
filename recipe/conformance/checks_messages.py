"""Anthropic Messages checks: complete responses, SSE lifecycle, tools, thinking, count_tokens, SDK helper."""

from __future__ import annotations

from typing import Any

from recipe.conformance import probes
from recipe.conformance.check import (
    CheckSkipped,
    check,
    expect,
    expect_schema,
    json_events,
    ok_json,
    parse_json,
    skip_if_rejected,
)
from recipe.conformance.sdk import anthropic_client
from recipe.conformance.session import Exchange, Session

STOP_REASONS = {"end_turn", "max_tokens", "stop_sequence", "tool_use", "pause_turn", "refusal"}




@check("messages.basic.status", "messages", "required", "{model, max_tokens, messages:[user]}", "200 with a JSON body")
def basic_status(s: Session) -> None:
    ok_json(probes.messages_basic(s))


@check("messages.basic.schema", "messages", "required", "minimal request", "body valid against Message")
def basic_schema(s: Session) -> None:
    ex = probes.messages_basic(s)
    expect_schema("anthropic.Message", ok_json(ex), ex)


@check("messages.basic.shape", "messages", "required", "minimal request", "type message, role assistant, id msg_…, text blocks, stop_reason and stop_sequence keys present")
def basic_shape(s: Session) -> None:
    ex = probes.messages_basic(s)
    data = ok_json(ex)
    expect(data.get("type") == "message" and data.get("role") == "assistant", "type/role wrong", ex)
    expect(str(data.get("id", "")).startswith("msg_"), f"id {data.get('id')!r} lacks msg_", ex)
    expect(data.get("stop_reason") in STOP_REASONS, f"stop_reason {data.get('stop_reason')!r}", ex)
    expect("stop_sequence" in data, "stop_sequence key missing (the real API always sends it)", ex)
    expect(all(isinstance(b, dict) and b.get("type") in ("text", "thinking", "tool_use") for b in data.get("content", [])), "unexpected content block", ex)


@check("messages.basic.usage", "messages", "required", "minimal request", "usage has integer input_tokens, output_tokens, cache_creation_input_tokens, cache_read_input_tokens")
def basic_usage(s: Session) -> None:
    ex = probes.messages_basic(s)
    usage = ok_json(ex).get("usage") or {}
    for key in ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"):
        expect(isinstance(usage.get(key), int), f"usage.{key} missing or not an integer", ex)


@check("messages.system.string_and_blocks", "messages", "required", "system as a string and as text blocks with cache_control", "both 200")
def system_forms(s: Session) -> None:
    for system in ("Be brief.", [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]):
        ok_json(s.post("messages", probes.messages_body(s, system=system, max_tokens=4)))


@check("messages.max_tokens.stop_reason", "messages", "required", "max_tokens: 1", "stop_reason max_tokens")
def max_tokens(s: Session) -> None:
    ex = s.post("messages", probes.messages_body(s, max_tokens=1))
    data = ok_json(ex)
    expect(data.get("stop_reason") == "max_tokens", f"stop_reason {data.get('stop_reason')!r}", ex)


@check("messages.stop_sequence", "messages", "required", "stop_sequences: [a word the output contains]", "stop_reason stop_sequence, stop_sequence echoed, text cut before it")
def stop_sequence(s: Session) -> None:
    ref = probes.messages_text(probes.messages_basic(s)) or ""
    stop = probes.pick_stop(ref)
    if stop is None:
        raise CheckSkipped(f"the reference output is too short to pick a stop string from: {ref!r}")
    ex = s.post("messages", probes.messages_body(s, stop_sequences=[stop]))
    data = ok_json(ex)
    text = probes.messages_text(ex) or ""
    expect(stop not in text, f"stop sequence {stop!r} leaked", ex)
    if not ref.startswith(text):
        raise CheckSkipped("temperature-0 output is not reproducible on this server", ex.evidence())
    expect(data.get("stop_reason") == "stop_sequence", f"stop_reason {data.get('stop_reason')!r}", ex)
    expect(data.get("stop_sequence") == stop, f"stop_sequence {data.get('stop_sequence')!r} != {stop!r}", ex)


@check("messages.sampling_fields", "messages", "recommended", "temperature, top_p, top_k in the body (older clients)", "200")
def sampling_fields(s: Session) -> None:
    ok_json(s.post("messages", probes.messages_body(s, temperature=0.5, top_p=0.9, top_k=20, max_tokens=4)))


def _tool_use(s: Session) -> tuple[Exchange, dict[str, Any]]:
    ex = probes.messages_tool(s)
    skip_if_rejected(ex, "tools with tool_choice {type: tool}")
    data = ok_json(ex)
    blocks = [b for b in data.get("content", []) if isinstance(b, dict) and b.get("type") == "tool_use"]
    expect(blocks, "no tool_use block for a named tool_choice", ex)
    return ex, blocks[0]


@check("messages.tools.tool_use", "messages", "required", "tools + tool_choice {type: tool, name}", "a tool_use block {id toolu_…, name, input object}; stop_reason tool_use")
def tool_use(s: Session) -> None:
    ex, block = _tool_use(s)
    expect(block.get("name") == "get_weather", f"tool name {block.get('name')!r}", ex)
    expect(isinstance(block.get("input"), dict), "tool input is not an object", ex)
    expect(isinstance(block.get("id"), str) and block["id"], "tool_use block lacks an id", ex)
    expect((ex.json() or {}).get("stop_reason") == "tool_use", f"stop_reason {(ex.json() or {}).get('stop_reason')!r}, not tool_use", ex)


@check("messages.tools.id_prefix", "messages", "recommended", "tools + tool_choice {type: tool, name}", "the tool_use id starts with toolu_ like Anthropic's")
def tool_use_id_prefix(s: Session) -> None:
    ex, block = _tool_use(s)
    expect(str(block.get("id", "")).startswith("toolu_"), f"tool id {block.get('id')!r} lacks toolu_", ex)


@check("messages.tools.round_trip", "messages", "required", "history with tool_use and tool_result (string, blocks, is_error)", "200")
def tool_round_trip(s: Session) -> None:
    _, block = _tool_use(s)
    messages = [
        {"role": "user", "content": probes.TOOL_PROMPT},
        {"role": "assistant", "content": [block]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": block.get("id"), "content": [{"type": "text", "text": "18 C, clear"}], "is_error": False},
            {"type": "text", "text": "Thanks."},
        ]},
    ]
    body = probes.messages_body(s, messages=messages, thinking={"type": "disabled"}, max_tokens=8,
                                tools=[{"name": "get_weather", "input_schema": probes.WEATHER_TOOL_PARAMS}])
    ok_json(s.post("messages", body))


@check("messages.thinking.block", "messages", "recommended", "thinking: {type: enabled, budget_tokens: 1024}", "a thinking block with a signature comes first")
def thinking(s: Session) -> None:
    ex = s.post("messages", probes.messages_body(s, thinking={"type": "enabled", "budget_tokens": 1024}, max_tokens=64))
    skip_if_rejected(ex, "thinking")
    blocks = ok_json(ex).get("content", [])
    if not any(b.get("type") == "thinking" for b in blocks):
        raise CheckSkipped("the server returned no thinking block (not a reasoning model)", ex.evidence())
    expect(blocks[0].get("type") == "thinking", "thinking is not the first block", ex)
    expect(isinstance(blocks[0].get("signature"), str), "thinking block lacks a signature", ex)


@check("messages.stream.event_lines", "messages", "required", "stream: true", "every event has an event: line equal to data.type")
def event_lines(s: Session) -> None:
    ex = probes.messages_stream(s)
    for name, data in json_events(ex):
        expect(name == data.get("type"), f"event: {name!r} but data.type {data.get('type')!r}", ex)


@check("messages.stream.event_schema", "messages", "required", "stream: true", "every event valid against RawMessageStreamEvent")
def event_schema(s: Session) -> None:
    ex = probes.messages_stream(s)
    for _, data in json_events(ex):
        expect_schema("anthropic.RawMessageStreamEvent", data, ex, f"event {data.get('type')}")


@check("messages.stream.order", "messages", "required", "stream: true", "message_start → (block_start → delta* → block_stop)+ → message_delta → message_stop")
def order(s: Session) -> None:
    ex = probes.messages_stream(s)
    types = [d.get("type") for _, d in json_events(ex) if d.get("type") != "ping"]
    expect(types and types[0] == "message_start", f"first event is {types[:1]}", ex)
    expect(types[-2:] == ["message_delta", "message_stop"], f"stream ends with {types[-2:]}", ex)
    open_block = False
    for t in types[1:-2]:
        if t == "content_block_start":
            expect(not open_block, "a block starts before the previous one stopped", ex)
            open_block = True
        elif t == "content_block_delta":
            expect(open_block, "a delta outside a block", ex)
        elif t == "content_block_stop":
            expect(open_block, "a block stops that never started", ex)
            open_block = False
        else:
            expect(False, f"unexpected event {t!r} between message_start and message_delta", ex)
    expect(not open_block, "a block never stopped", ex)


@check("messages.stream.message_start", "messages", "required", "stream: true", "message_start.message has content [], stop_reason null, usage.input_tokens")
def message_start(s: Session) -> None:
    ex = probes.messages_stream(s)
    first = json_events(ex)[0][1]
    msg = first.get("message") or {}
    expect(msg.get("content") == [], "message_start content is not []", ex)
    expect(msg.get("stop_reason") is None, "message_start stop_reason is not null", ex)
    expect(isinstance((msg.get("usage") or {}).get("input_tokens"), int), "message_start usage.input_tokens missing", ex)


@check("messages.stream.block_indices", "messages", "required", "stream: true", "block indices start at 0, increase by one, and deltas refer to the open block")
def block_indices(s: Session) -> None:
    ex = probes.messages_stream(s)
    expected, current = 0, None
    for _, d in json_events(ex):
        t = d.get("type")
        if t == "content_block_start":
            expect(d.get("index") == expected, f"block index {d.get('index')} where {expected} was due", ex)
            current, expected = expected, expected + 1
        elif t in ("content_block_delta", "content_block_stop"):
            expect(d.get("index") == current, f"{t} index {d.get('index')} but block {current} is open", ex)


@check("messages.stream.text_deltas", "messages", "required", "stream: true", "text blocks start as {type: text, text: ''} and grow by text_delta")
def text_deltas(s: Session) -> None:
    ex = probes.messages_stream(s)
    text = ""
    for _, d in json_events(ex):
        if d.get("type") == "content_block_start" and (d.get("content_block") or {}).get("type") == "text":
            expect(d["content_block"].get("text") == "", "text block does not start empty", ex)
        if d.get("type") == "content_block_delta" and (d.get("delta") or {}).get("type") == "text_delta":
            text += d["delta"].get("text", "")
    expect(text, "no text_delta carried any text", ex)


@check("messages.stream.matches_non_stream", "messages", "recommended", "the same temperature-0 request with and without stream", "the streamed text equals the non-stream text")
def stream_matches(s: Session) -> None:
    ex = probes.messages_stream(s)
    text = "".join((d.get("delta") or {}).get("text", "") for _, d in json_events(ex) if d.get("type") == "content_block_delta")
    expect(text == probes.messages_text(probes.messages_basic(s)), "streamed text differs from the non-stream text", ex, streamed=text)


@check("messages.stream.message_delta_usage", "messages", "required", "stream: true", "message_delta has delta.stop_reason and usage.output_tokens")
def message_delta_usage(s: Session) -> None:
    ex = probes.messages_stream(s)
    deltas = [d for _, d in json_events(ex) if d.get("type") == "message_delta"]
    expect(len(deltas) == 1, f"{len(deltas)} message_delta events", ex)
    md = deltas[0]
    expect((md.get("delta") or {}).get("stop_reason") in STOP_REASONS, "message_delta lacks a stop_reason", ex)
    expect(isinstance((md.get("usage") or {}).get("output_tokens"), int), "message_delta lacks usage.output_tokens", ex)


@check("messages.stream.stop_no_leak", "messages", "required", "stream with stop_sequences", "the stop sequence never reaches a text_delta; stop_reason stop_sequence")
def stream_stop(s: Session) -> None:
    ref = probes.messages_text(probes.messages_basic(s)) or ""
    stop = probes.pick_stop(ref)
    if stop is None:
        raise CheckSkipped("the reference output is too short to pick a stop string from")
    ex = s.post("messages", probes.messages_body(s, stream=True, stop_sequences=[stop]))
    events = json_events(ex)
    text = "".join((d.get("delta") or {}).get("text", "") for _, d in events if d.get("type") == "content_block_delta")
    expect(stop not in text, f"stop sequence {stop!r} leaked into the stream", ex)
    if ref.startswith(text):
        md = [d for _, d in events if d.get("type") == "message_delta"]
        expect(md and (md[0].get("delta") or {}).get("stop_reason") == "stop_sequence", "stop_reason is not stop_sequence", ex)
        expect(text == ref[: ref.find(stop)], "stream is not the reference cut at the stop (partial stop leaked?)", ex, streamed=text)


@check("messages.stream.tool_use", "messages", "required", "streamed named tool_use", "tool_use block starts with input {}; input_json_delta fragments concatenate to a JSON object")
def stream_tool_use(s: Session) -> None:
    ex = probes.messages_tool(s, stream=True)
    skip_if_rejected(ex, "tools with tool_choice {type: tool}")
    events = json_events(ex)
    starts = [d for _, d in events if d.get("type") == "content_block_start" and (d.get("content_block") or {}).get("type") == "tool_use"]
    expect(starts, "no tool_use block in the stream", ex)
    block = starts[0]["content_block"]
    expect(block.get("input") == {} and block.get("name") == "get_weather" and block.get("id"), "tool_use start lacks id/name or input {}", ex)
    idx = starts[0].get("index")
    partial = "".join(
        (d.get("delta") or {}).get("partial_json", "")
        for _, d in events
        if d.get("type") == "content_block_delta" and d.get("index") == idx
    )
    expect(partial, "no non-empty input_json_delta", ex)
    expect(isinstance(parse_json(partial, ex, "concatenated partial_json"), dict), "partial_json is not an object", ex)


def _sdk_final_message(s: Session) -> Any:
    def make() -> Any:
        client = anthropic_client(s)
        body = probes.messages_body(s)
        try:
            with client.messages.stream(
                model=body["model"], max_tokens=body["max_tokens"], messages=body["messages"], extra_body={"temperature": 0}
            ) as stream:
                for _ in stream:
                    pass
                return stream.get_final_message()
        except Exception as exc:
            return exc

    return s.memo("anthropic.messages.stream", make)


@check("messages.sdk.stream_final_message", "messages", "required", "anthropic SDK messages.stream() + get_final_message()", "no error; a final message with content blocks and a stop_reason")
def sdk_final(s: Session) -> None:
    final = _sdk_final_message(s)
    expect(not isinstance(final, Exception), f"anthropic SDK stream helper raised {type(final).__name__}: {final}")
    expect(final.stop_reason in STOP_REASONS, f"SDK final stop_reason {final.stop_reason!r}")
    expect(isinstance(final.usage.output_tokens, int), "SDK final message has no usage.output_tokens")


@check("messages.sdk.matches_non_stream", "messages", "recommended", "anthropic SDK stream and a non-stream request at temperature 0", "same text and stop_reason")
def sdk_matches(s: Session) -> None:
    final = _sdk_final_message(s)
    if isinstance(final, Exception):
        raise CheckSkipped(f"the SDK stream itself failed ({type(final).__name__}); see messages.sdk.stream_final_message")
    text = "".join(b.text for b in final.content if b.type == "text")
    ref = ok_json(probes.messages_basic(s))
    expect(text == probes.messages_text(probes.messages_basic(s)), "SDK final text differs from the non-stream text", None, sdk=text)
    expect(final.stop_reason == ref.get("stop_reason"), f"SDK stop_reason {final.stop_reason!r} vs {ref.get('stop_reason')!r}")


@check("messages.count_tokens", "messages", "required", "POST /v1/messages/count_tokens without max_tokens", "200 {input_tokens: int}")
def count_tokens(s: Session) -> None:
    body = probes.messages_body(s)
    body.pop("max_tokens")
    body.pop("temperature")
    ex = s.post("messages", body, path="/v1/messages/count_tokens", cache_key="messages.count_tokens")
    data = ok_json(ex)
    expect_schema("anthropic.MessageTokensCount", data, ex)


@check("messages.count_tokens.matches_usage", "messages", "recommended", "count_tokens and create with the same messages", "input_tokens equal to input + cache tokens of the create")
def count_matches(s: Session) -> None:
    ex = s.post("messages", {k: v for k, v in probes.messages_body(s).items() if k not in ("max_tokens", "temperature")},
                path="/v1/messages/count_tokens", cache_key="messages.count_tokens")
    n = ok_json(ex).get("input_tokens")
    usage = ok_json(probes.messages_basic(s)).get("usage") or {}
    total = sum(usage.get(k) or 0 for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"))
    expect(n == total, f"count_tokens {n} != input + cache tokens {total} of the same request", ex)
